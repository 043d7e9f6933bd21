// BlockReader: serves byte ranges of immutable objects from the BlockStore,
// fetching missing blocks from the Origin.
//
// A range is cut into blocks of `block_size` (the last block of an object may
// be short). A block in the store is a hit, read on the caller's thread (a
// FUSE worker may block on local disk); the store is not probed for a block
// the listener says it cannot hold (BlockListener::MayContain). A missing or corrupt block is a
// miss: one fetch per block no matter how many readers want it (single-flight); when the bytes
// arrive they are handed to every waiter at once and written to the store on the disk executor,
// never on the net loop. A store that cannot write (full disk) does not fail the read: the bytes
// are served uncached and the failure is counted; the listener (the catalog) is told, makes room,
// and the write is tried once more. The warning is logged at most once a minute, with the count of
// those suppressed. A block whose server forbids keeping it (FetchedBytes::may_store:
// Cache-Control no-store or private) is handed to its waiters and never written: every
// read of it is a fetch.
//
// Thread-safety: Read is safe from any thread. Callbacks run on the thread
// that completed the last block: the caller's (all hits), the Origin's or the
// disk executor's; they must not block.
//
// Lock order: mu_ is never held across calls into the Origin, the store or a
// callback; it may be held across FetchScheduler::Cancel (whose lock is a
// leaf), so that a prefetch is withdrawn only while no reader waits for it.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "daemon/core/block_listener.h"
#include "daemon/core/block_store.h"
#include "daemon/core/defaults.h"
#include "daemon/core/executor.h"
#include "daemon/core/fetch_scheduler.h"
#include "daemon/core/metrics.h"
#include "daemon/core/mutex.h"
#include "daemon/core/origin.h"
#include "daemon/core/version_guard.h"
#include "daemon/core/warning_limiter.h"

namespace perch::core {

struct BlockReaderOptions {
  uint64_t block_size = kDefaultBlockSize;
  std::chrono::milliseconds prefetch_timeout{120000};  // deadline of a prefetch
  // Put before every flow this reader submits, so that mounts sharing one
  // scheduler have flows of their own (two federations' "/data" are two).
  std::string flow_prefix = "";
  // Fetched blocks are written to the store in batches, on the disk
  // executor: the first block of a batch waits this long for others, so that
  // a stream of small files costs one wake-up of a disk thread and one index
  // write per batch rather than per file (readers are served from memory
  // meanwhile). 0: every block is written at once.
  std::chrono::milliseconds write_behind{2};
};

// How urgent a fetch is, and whose (the scheduler's fairness unit; "" means
// the namespace of the path).
struct FetchClass {
  Priority priority = Priority::kDemand;
  std::string flow;
  // False for the cache's own reads (a digest check of a copy): its hits
  // are not a reader's, neither counted nor an access for eviction.
  bool counted = true;
};

struct BlockReaderStats {
  std::atomic<uint64_t> hits{0};              // parts of blocks served without a fetch
  std::atomic<uint64_t> misses{0};            // blocks fetched from the origin
  std::atomic<uint64_t> shared_fetches{0};    // misses that joined a fetch in flight
  std::atomic<uint64_t> bytes_from_cache{0};  // bytes of those parts (not of whole blocks)
  std::atomic<uint64_t> bytes_from_network{0};
  std::atomic<uint64_t> corrupt_blocks{0};      // dropped after a failed check, refetched
  std::atomic<uint64_t> store_errors{0};        // blocks served but not cached
  std::atomic<uint64_t> whole_files{0};         // complete objects handed out by WholeFile
  std::atomic<uint64_t> uncacheable_blocks{0};  // served, not kept: Cache-Control no-store/private
};

// Part of a block's bytes, shared with every other reader of that block (and
// with the write to the store): what a reply sends without copying it first.
struct SharedBytes {
  std::shared_ptr<const Bytes> bytes;
  size_t offset = 0, length = 0;
  std::string_view view() const { return std::string_view(*bytes).substr(offset, length); }
};

// One piece of a read: part of one block, either still in the cache's file
// (a hit: a reply moves the bytes from the file, splice or pread, without a
// copy of ours; the slice keeps the block in use until let go) or in memory
// (a fetched block shared with its other readers, a block not yet written,
// or a hit of a store that keeps no files).
class ReadPiece {
 public:
  ReadPiece() = default;
  explicit ReadPiece(BlockSlice slice) : part_(std::move(slice)) {}
  explicit ReadPiece(SharedBytes bytes) : part_(std::move(bytes)) {}
  // The piece's file and position in it, or null if the piece is in memory.
  const BlockSlice* slice() const { return std::get_if<BlockSlice>(&part_); }
  // The piece's bytes, or null if it is in a file.
  const SharedBytes* bytes() const { return std::get_if<SharedBytes>(&part_); }
  uint64_t length() const {
    const SharedBytes* b = bytes();
    return b != nullptr ? b->length : slice()->length();
  }

 private:
  std::variant<SharedBytes, BlockSlice> part_;
};

class BlockReader {
 public:
  // `listener` (may be null) hears of every stored, hit and dropped block.
  // `scheduler` (may be null: fetches start at once) orders and bounds every fetch.
  // `guard` (may be null) confirms an object's version before a block of it
  // is fetched (VersionGuard); a fetch it refuses fails with kStale.
  BlockReader(Origin& origin, BlockStore& store, Executor& disk, BlockReaderOptions options,
              BlockListener* listener = nullptr, FetchScheduler* scheduler = nullptr,
              VersionGuard* guard = nullptr);
  BlockReader(const BlockReader&) = delete;
  BlockReader& operator=(const BlockReader&) = delete;

  // Yields exactly `range` of object `path` at `version` (clipped to its
  // size). `object_id` names (federation, path, version) in the store.
  // Errors are the Origin's (kNotFound, kUnavailable, kDeadlineExceeded, ...).
  // Misses are fetched as `cls` (demand unless a warm says otherwise).
  void Read(const ObjectPath& path, const ObjectVersion& version, const std::string& object_id,
            ByteRange range, Deadline deadline, std::function<void(Result<Bytes>)> done,
            const FetchClass& cls = FetchClass());
  // Yields exactly `range` (clipped to the object's size) as pieces, one per
  // block it touches, in order (none for an empty range): a block the store
  // holds in a file is a slice of it (BlockStore::Slice), any other a part of
  // the block's bytes in memory (ReadPiece). Each block is asked of the store
  // once: a hit is served from what that gave, a miss (absent, or dropped
  // after failing its check) is fetched. If some block must be fetched and
  // `may_fetch` (may be null; called at most once, before any fetch, on the
  // caller's thread) answers an error, the read fails with that error and
  // fetches nothing; a read of hits only never asks.
  using PiecesDone = std::function<void(Result<std::vector<ReadPiece>>)>;
  void ReadPieces(const ObjectPath& path, const ObjectVersion& version,
                  const std::string& object_id, ByteRange range, Deadline deadline, PiecesDone done,
                  const std::function<Status()>& may_fetch = nullptr,
                  const FetchClass& cls = FetchClass());

  // Fetches block `block` into the store unless it is there or on its way;
  // nobody waits for it. A reader that later wants it joins the fetch (and
  // raises its priority).
  void Prefetch(const ObjectPath& path, const ObjectVersion& version, const std::string& object_id,
                uint64_t block, const FetchClass& cls);
  // Withdraws a prefetch of `key` that is still queued and that no reader
  // waits for; true if withdrawn.
  bool CancelPrefetch(const BlockKey& key);

  // The store's file of the complete object (BlockStore::WholeFile), for a
  // reader that reads it without us (FUSE passthrough): its blocks stay in
  // use until the file is let go. An open of it counts as a use of every
  // block (the evictor's LRU sees no read the kernel serves itself).
  // kNotFound unless every block is cached; kInvalidArgument for an object
  // shorter than a block (kept as a block file: never one file to read).
  // `fn` runs after every block the federation sent (on the thread that
  // completed the fetch). Set before the first read.
  void OnFederationAnswered(std::function<void()> fn) { federation_answered_ = std::move(fn); }

  Result<std::shared_ptr<const BlockFd>> WholeFile(const ObjectVersion& version,
                                                   const std::string& object_id);

  // True if every block of object `object_id` at `version` is in the store
  // (the catalog says so) or fetched and waiting for its write: a complete
  // object, nothing to fetch. False without a listener.
  bool AllCached(const ObjectVersion& version, const std::string& object_id);

  // Drops every block of object `object_id` at `version`, stored or waiting
  // for its write, so that the next read fetches it again: its bytes failed
  // the object's digest. A block a reply still uses leaves the store when
  // that use ends (BlockStore::Remove), but no read takes it from there.
  // Returns the number of blocks dropped.
  size_t DropObject(const ObjectVersion& version, const std::string& object_id);

  const BlockReaderStats& stats() const { return stats_; }
  // The same counts per namespace, as the Origin names it (Origin::NamespaceOf:
  // the namespace's path below the mount, "/" where it is not known or the
  // mount lies inside one), at most kMaxNamespaces of them (the rest count
  // under "/"). Never a directory inside a namespace: metrics are readable by
  // users a protected namespace refuses.
  const CounterFamily<ReadCounters>& namespace_stats() const { return by_namespace_; }
  static constexpr size_t kMaxNamespaces = 256;
  // Time from asking the Origin for a block to having it (failover included).
  const LatencyHistogram& fetch_latency() const { return fetch_latency_; }
  // The fetch scheduler's flow of `path` (its fair share): the first path
  // segment below the mount, "/" for files at the root. Not shown to users.
  static std::string FlowOf(const ObjectPath& path);

  // True while block `key` is being read from the store or fetched and
  // written, or the store says it is in use (a slice not yet let go, a file
  // the kernel reads): the evictor leaves it alone.
  bool InUse(const BlockKey& key);
  uint64_t block_size() const { return options_.block_size; }

  // Writes every fetched block still waiting for its batch, on the calling
  // thread (at shutdown, after the last fetch ended: a batch left to the
  // disk executor's timer would be dropped with it).
  void FlushWrites();

 private:
  // The whole block, shared by every reader waiting for it.
  using BlockCallback = std::function<void(Result<std::shared_ptr<const Bytes>>)>;
  template <typename Part, typename Out>
  struct Assembly;
  // Read and ReadPieces: Part is Bytes (copied out of the blocks, joined into
  // one Out) or ReadPiece (Out: the pieces).
  template <typename Part, typename Out>
  void ReadParts(const ObjectPath& path, const ObjectVersion& version, const std::string& object_id,
                 ByteRange range, Deadline deadline, std::function<void(Result<Out>)> done,
                 const std::function<Status()>& may_fetch, const FetchClass& cls);
  // Bytes [from, to) of block `key` from the store (a slice of its file where
  // Part is a ReadPiece and the store has one), or nullopt: a miss. A block
  // that fails its check or has the wrong length is dropped (a miss).
  template <typename Part>
  std::optional<Part> StoreHit(const BlockKey& key, uint64_t from, uint64_t to);
  Result<Bytes> StoreRead(const BlockKey& key, uint64_t from, uint64_t to);
  // The store answered block `key` with fewer or more bytes than it holds:
  // as good as corrupt (counted, removed, told).
  void DropWrongLength(const BlockKey& key);

  // A block failed its check (the store already removed it): count, log, forget.
  void NoteCorrupt(const BlockKey& key, const Status& why);
  void CountHit(const ObjectPath& path, uint64_t bytes);
  // `done` may be null (a prefetch). `part_len`: how much of the block the
  // reader wants (what a hit on a block already in memory counts).
  void Fetch(const ObjectPath& path, const ObjectVersion& version, const BlockKey& key,
             uint64_t block_len, uint64_t part_len, Deadline deadline, const FetchClass& cls,
             BlockCallback done);
  void Complete(const BlockKey& key, const ObjectPath& path, const ObjectVersion& version,
                ReadCounters& ns, Result<FetchedBytes> r);
  // A fetched block waiting for its batch (pending_writes_).
  struct PendingWrite {
    BlockKey key;
    std::shared_ptr<const Bytes> data;
    ObjectPath path;
    ObjectVersion version;
  };
  // Writes the blocks waiting now, then records them in one batch.
  void DrainWrites();
  // Whether `w`'s copy is still the one waiting for its write (not dropped).
  bool Unwritten(const PendingWrite& w) PERCH_REQUIRES(mu_);
  struct Inflight {
    std::vector<BlockCallback> waiters;
    Priority priority = Priority::kDemand;
    uint64_t ticket = 0;      // the scheduler's, once submitted
    uint64_t generation = 0;  // tells this fetch from a later one of the same block
  };

  // Constant after construction.
  Origin& origin_;
  BlockStore& store_;
  Executor& disk_;
  const BlockReaderOptions options_;
  std::function<void()> federation_answered_;  // set before the first read
  BlockListener* const listener_;
  FetchScheduler* const scheduler_;
  VersionGuard* const guard_;

  BlockReaderStats stats_;
  CounterFamily<ReadCounters> by_namespace_{kMaxNamespaces, "/"};
  LatencyHistogram fetch_latency_;
  WarningLimiter store_warnings_{std::chrono::seconds(60)};  // a full disk fails every block

  Mutex mu_;
  // Each block being fetched (or queued to be).
  std::map<BlockKey, Inflight> inflight_ PERCH_GUARDED_BY(mu_);
  uint64_t next_generation_ PERCH_GUARDED_BY(mu_) = 1;
  // Fetched blocks whose store write has not finished; a
  // reader arriving in that window is served from here, not refetched.
  std::map<BlockKey, std::shared_ptr<const Bytes>> unwritten_ PERCH_GUARDED_BY(mu_);
  // Those of them no drain has taken yet, in the order they came; a drain is
  // scheduled on the disk executor while this is not empty.
  std::vector<PendingWrite> pending_writes_ PERCH_GUARDED_BY(mu_);
  bool drain_scheduled_ PERCH_GUARDED_BY(mu_) = false;
  // Readers of each block now inside store_.Read.
  std::map<BlockKey, int> reading_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core
