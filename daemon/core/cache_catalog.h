// CacheCatalog: what the block cache holds, how much, and what to evict.
//
// Design. Every stored block has an index record "b/<object_id>/<index>" (the
// keys of every record: index_keys.h) with
// its length and a last-access sequence number; the catalog loads these at
// start (an index scan, so start stays fast) and keeps the total.
// Commit order is data first: the BlockStore has written the block (a pack
// record, or the block in its object file with its map entry) *before*
// Stored() writes its record, so a crash leaves at worst an orphan block,
// never a record without data.
//
// Reconcile() then walks the store once in the background (disk executor):
// blocks without a record (a crash between the write and the record, or an
// index that was lost to corruption) are adopted from their headers, as the
// oldest blocks, so that they count against the quota and can be evicted;
// records whose file is gone (a crash inside an eviction) are dropped; the
// store removes temp files of writes a killed process never finished. Files
// of recorded blocks are known by their names, not opened (issue 14: a walk
// of a million blocks read a million headers): a damaged one is found by
// the read that checks its header, dropped and fetched again.
//
// Quota. The effective capacity is the configured one capped to what the
// filesystem can hold: bytes cached + bytes free - a reserve (2 % of the
// filesystem, 8 MiB to 1 GiB, for the index and the filesystem's own
// overhead). UpdateCapacity() re-reads the free space (the daemon calls it
// every few seconds) and StoreFailed() does so at once when a write finds
// the disk full, then evicts on the calling (disk) thread to make room.
//
// Access times are debounced: hits bump an in-memory sequence number and the
// dirty records are written in one batch every `flush_every` hits or on
// Flush(), never one write per read.
//
// Each object with a stored block also has a record "o/<object_id>" (its
// path, size and ETag), written with its first block and deleted with its
// last, so that the control plane can list, pin and evict by path.
//
// Pins: "pin/<path>" records name prefixes whose blocks eviction never
// takes (explicit Evict of a pinned prefix keeps them too; unpin first).
//
// Eviction runs on the disk executor when the total passes the high
// watermark and removes blocks until it is under the low watermark, skipping
// pinned blocks and blocks being read or fetched right now (in_use). Which
// blocks: where jobs announced the order they read in (hints, through
// CatalogOptions::future_uses), those of objects no announced read needs
// first, least recently used first, then those needed farthest ahead (as
// Belady's MIN: a dataset larger than the cache read in a known order keeps
// what it reads soonest, instead of evicting it just before it is read);
// without announcements, least recently used first. It
// removes the block file before the record. (A reader that already opened a
// block file keeps reading it after the unlink: POSIX semantics.) Open files
// are not pinned as a whole, so a file larger than the quota can stream.
//
// Thread-safety: all methods are safe from any thread. mu_ is a leaf lock,
// never held across store or index calls.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/core/block_listener.h"
#include "daemon/core/block_store.h"
#include "daemon/core/catalog_entry.h"
#include "daemon/core/executor.h"
#include "daemon/core/index.h"
#include "daemon/core/index_keys.h"
#include "daemon/core/mutex.h"
#include "daemon/core/object_ids.h"
#include "daemon/core/warning_limiter.h"

namespace perch::core {

// Catalog path -> files ahead of its reader (CatalogOptions::future_uses),
// looked up by string_view.
struct PathHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using FutureUses = std::unordered_map<std::string, uint64_t, PathHash, std::equal_to<>>;

struct CatalogOptions {
  uint64_t capacity_bytes = 10ULL << 30;
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  size_t flush_every = 1024;
  // Size and free space of the cache's filesystem; null: the configured
  // capacity is never capped.
  std::function<Status(uint64_t* total, uint64_t* free)> disk_space;
  // Called on the disk executor once the start-up walk (Reconcile) is over and what it
  // held (a sorted copy of every record's key) is freed: the daemon hands free memory
  // back to the system then. Null: nothing.
  std::function<void()> after_walk;
  // The announced reads (hints) of every job: for a catalog path, how many
  // files ahead of its reader the next announced read of it is (0: next),
  // for at most a horizon of files per job; paths absent are needed by no
  // announced read. Called once per eviction pass, without the catalog's
  // lock. Null: least recently used first.
  std::function<FutureUses()> future_uses;
};

// One cached object, as ListCached shows it.
struct CachedObject {
  ObjectPath path;
  std::string object_id;
  uint64_t size = 0;          // the object's size
  uint64_t cached_bytes = 0;  // how much of it is in the store
  uint64_t blocks = 0;
  bool pinned = false;
};

// Where a walk of the catalog (ScrubPage) is: the next block to look at is
// block `index` of object `key`, or the first block of a later object.
struct ScrubCursor {
  std::optional<ObjectIds::Key> key;  // nullopt: from the start
  uint64_t index = 0;
  // The same object by its id, for keeping the cursor across restarts (a
  // hex id gives its key back; any other id starts over).
  std::string object_id;
};

// A block a walk of the catalog found (ScrubPage).
struct ScrubItem {
  BlockKey key;
  uint64_t length = 0;
  uint64_t object_size = 0;    // 0: the object is not described (adopted)
  uint64_t object_blocks = 0;  // blocks of the object in the catalog now
};

struct EvictResult {
  uint64_t objects = 0;  // objects with at least one block removed
  uint64_t blocks = 0;
  uint64_t bytes = 0;
  uint64_t pinned_objects = 0;  // under the prefix but pinned: kept
  uint64_t busy_blocks = 0;     // being read or fetched right now: kept
};

class CacheCatalog : public BlockListener {
 public:
  // `in_use(key)` says whether a block is being read or written now.
  CacheCatalog(Index& index, BlockStore& store, Executor& disk, CatalogOptions options,
               std::function<bool(const BlockKey&)> in_use);

  // Reads the block records. REQUIRES: called once, before any other method.
  Status Load();

  void Stored(const BlockKey& key, uint64_t length, const ObjectPath& path,
              const ObjectVersion& version) override;
  // One index write for all of them.
  void StoredMany(const std::vector<StoredBlock>& blocks) override;
  void Touched(const BlockKey& key, uint64_t length) override;
  void Dropped(const BlockKey& key) override;
  void StoreFailed(const BlockKey& key, uint64_t length, const Status& why) override;

  // Walks the store on the disk executor (see Design) and logs what it found,
  // once. REQUIRES: after Load().
  void Reconcile();
  // True once the walk of Reconcile() has finished.
  bool reconciled() const { return reconciled_.load(); }

  // Re-reads the filesystem's free space and caps the effective capacity
  // (see Design); schedules an eviction if that leaves the cache over it.
  void UpdateCapacity();

  // "" when the store is fine; else why it is degraded (a write failed in the
  // last five minutes), for health reports.
  std::string StoreProblem() const;
  // Block writes that failed since start.
  uint64_t store_errors() const { return store_errors_.load(); }

  // Writes pending access times.
  Status Flush();
  // Evicts now if above the high watermark (with `room` bytes more to come:
  // evicts down to the low watermark less `room`); returns the number of
  // blocks evicted.
  size_t EvictIfNeeded(uint64_t room = 0);

  // Pins `prefix` (persisted); pinning a pinned prefix is OK.
  Status Pin(const ObjectPath& prefix);
  // kNotFound if `prefix` is not pinned (a path below a pin is not a pin).
  Status Unpin(const ObjectPath& prefix);
  std::vector<ObjectPath> Pins() const;

  // Removes every cached block of the objects under `prefix`, except pinned
  // objects and blocks in use (counted in the result).
  Result<EvictResult> Evict(const ObjectPath& prefix);

  // Cached objects under `prefix` whose path sorts after `after` ("" = from
  // the start), in path order, at most `limit`.
  std::vector<CachedObject> List(const ObjectPath& prefix, const std::string& after,
                                 size_t limit) const;

  // A page of a walk over the blocks of every object under catalog path
  // `prefix` (the root: every object, the undescribed ones too), in object
  // id order and, within an object, block order: from `*cursor` on, at most
  // `max_blocks` blocks, looking at no more than `max_objects` objects, so
  // that the lock is held briefly however few objects are under `prefix`.
  // Appends them to `*out` and moves `*cursor` past them. False once the
  // walk has passed the last object.
  bool ScrubPage(const ObjectPath& prefix, ScrubCursor* cursor, size_t max_blocks,
                 size_t max_objects, std::vector<ScrubItem>* out) const;
  // The catalog path of object `object_id`; "" if none is recorded.
  std::string PathOf(const std::string& object_id) const;

  // True if block `key` is recorded as stored.
  bool Contains(const BlockKey& key) const override;
  // Until the start-up walk has finished a block file may lack its record
  // (it is adopted by the walk): true for every block then; afterwards
  // every block file the daemon wrote has a record, so Contains().
  bool MayContain(const BlockKey& key) const override;
  // Bytes of object `object_id` in the store (0 if none).
  uint64_t CachedBytes(const std::string& object_id) const;

  uint64_t cached_bytes() const { return cached_bytes_.load(); }
  uint64_t pinned_bytes() const;
  // The effective capacity: the configured one, capped to what the filesystem holds.
  uint64_t capacity_bytes() const { return capacity_.load(); }
  uint64_t configured_capacity_bytes() const { return options_.capacity_bytes; }
  uint64_t evictions() const { return evictions_.load(); }
  uint64_t evicted_bytes() const { return evicted_bytes_.load(); }
  size_t blocks() const;

 private:
  using Id = ObjectIds::Key;
  using Record = CatalogEntry::Block;
  // A block by its compact id (for the dirty set and the passes that list blocks).
  struct RecordKey {
    Id id;
    uint64_t index = 0;
    friend bool operator==(const RecordKey&, const RecordKey&) = default;
    friend auto operator<=>(const RecordKey&, const RecordKey&) = default;
  };
  using ObjectEntry = std::pair<const Id, CatalogEntry>;  // a node of objects_
  // Orders objects_' nodes by (path, id) and finds them by path.
  struct ByPath {
    using is_transparent = void;
    bool operator()(const ObjectEntry* a, const ObjectEntry* b) const {
      if (int c = a->second.path().compare(b->second.path()); c != 0) return c < 0;
      return a->first < b->first;
    }
    bool operator()(const ObjectEntry* a, std::string_view b) const { return a->second.path() < b; }
    bool operator()(std::string_view a, const ObjectEntry* b) const { return a < b->second.path(); }
  };
  // True if `path` is `prefix` or below it (ObjectPath::HasPrefix on a view).
  static bool Under(std::string_view path, const ObjectPath& prefix);
  static std::string BlockIndexKey(const BlockKey& key) {
    return index_keys::Block(key.object_id, key.index);
  }
  static std::string Encode(const Record& r);
  static std::string EncodeObject(const CatalogEntry& o);
  // The object of block `key`, null if the catalog has none.
  ObjectEntry* FindLocked(const BlockKey& key) PERCH_REQUIRES(mu_);
  const ObjectEntry* FindLocked(const BlockKey& key) const PERCH_REQUIRES(mu_);
  // The record of block `key`, null if none.
  const Record* FindBlockLocked(const BlockKey& key) const PERCH_REQUIRES(mu_);
  const Record* FindBlockLocked(const RecordKey& key) const PERCH_REQUIRES(mu_);
  BlockKey BlockKeyLocked(const RecordKey& key) const PERCH_REQUIRES(mu_);
  // The object of block `key`, added (its id interned, undescribed) if absent.
  ObjectEntry& ObjectForLocked(const BlockKey& key) PERCH_REQUIRES(mu_);
  // Adds block `key` (zeroed) if absent; second: whether it was added
  // (then counted in blocks_).
  std::pair<Record*, bool> AddBlockLocked(ObjectEntry& object, uint64_t index) PERCH_REQUIRES(mu_);
  // Builds by_path_ if it is not yet (the first List after a start).
  void IndexPathsLocked() const PERCH_REQUIRES(mu_);
  void MaybeScheduleEviction();
  // Removes `key`'s in-memory record and appends the index deletes it needs
  // (the block record; the object record with its last block) to `batch`.
  // False if there was no record. Takes mu_.
  bool Forget(const BlockKey& key, std::vector<Index::Write>* batch);
  // Removes `keys` (file first, then record), skipping blocks in use. Not under mu_.
  void RemoveBlocks(const std::vector<BlockKey>& keys, EvictResult* result);
  bool IsPinnedLocked(std::string_view path) const PERCH_REQUIRES(mu_);
  // Records block `key` found in the store without a record, as the oldest
  // block. False if it has a record by now.
  bool Adopt(const BlockKey& key, uint64_t length);
  void ReconcileNow();  // cache_catalog_reconcile.cc

  // Constant after construction.
  Index& index_;
  BlockStore& store_;
  Executor& disk_;
  const CatalogOptions options_;
  const std::function<bool(const BlockKey&)> in_use_;

  std::atomic<uint64_t> capacity_;  // effective; see UpdateCapacity
  std::atomic<bool> reconciled_{false};
  std::atomic<uint64_t> store_errors_{0};
  WarningLimiter index_warnings_{std::chrono::seconds(60)};
  std::atomic<uint64_t> cached_bytes_{0};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<uint64_t> evicted_bytes_{0};
  std::atomic<bool> eviction_scheduled_{false};
  std::atomic<int> eviction_retries_{0};  // passes in a row that freed nothing

  // Memory (issue 14): per cached small object one objects_ node (112
  // bytes with malloc's overhead: id, CatalogEntry with its block inline) and
  // one heap block with its path and ETag; ids are ObjectIds keys (no heap).
  // The path index (48 bytes an object) is built by the first List, not at
  // start. CacheCatalogTest.MemoryPerCachedObject... checks it.
  mutable Mutex mu_;
  ObjectIds ids_ PERCH_GUARDED_BY(mu_);
  std::map<Id, CatalogEntry> objects_ PERCH_GUARDED_BY(mu_);
  size_t blocks_ PERCH_GUARDED_BY(mu_) = 0;  // blocks of all objects_
  std::set<RecordKey> dirty_ PERCH_GUARDED_BY(mu_);
  // The described nodes of objects_ (map nodes do not move), in path order,
  // once by_path_built_; until then empty.
  mutable std::set<const ObjectEntry*, ByPath> by_path_ PERCH_GUARDED_BY(mu_);
  mutable bool by_path_built_ PERCH_GUARDED_BY(mu_) = false;
  std::set<ObjectPath> pins_ PERCH_GUARDED_BY(mu_);
  uint64_t next_seq_ PERCH_GUARDED_BY(mu_) = 1;
  std::string last_store_error_ PERCH_GUARDED_BY(mu_);
  Clock::time_point last_store_error_at_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core
