// CacheCatalog: what the block cache holds, how much, and what to evict.
//
// Design. Every stored block has an index record "b/<object_id>/<index>" with
// its length and a last-access sequence number; the catalog loads these at
// start (an index scan, never a walk of the cache tree) and keeps the total.
// Commit order is data first: the block file is renamed into place by the
// BlockStore *before* Stored() writes its record, so a crash leaves at worst
// an orphan file (adopted on its next hit), never a record without data.
//
// Access times are debounced: hits bump an in-memory sequence number and the
// dirty records are written in one batch every `flush_every` hits or on
// Flush(), never one write per read.
//
// Eviction runs on the disk executor when the total passes the high
// watermark and removes least-recently-used blocks until it is under the low
// watermark, skipping blocks being read or fetched right now (in_use). It
// removes the block file before the record. (A reader that already opened a
// block file keeps reading it after the unlink: POSIX semantics.) Open files
// are not pinned as a whole, so a file larger than the quota can stream.
//
// Thread-safety: all methods are safe from any thread. mu_ is a leaf lock,
// never held across store or index calls.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "daemon/core/block_store.h"
#include "daemon/core/executor.h"
#include "daemon/core/index.h"

namespace perch::core {

// What BlockReader tells about blocks as it uses them.
class BlockListener {
 public:
  virtual ~BlockListener() = default;
  virtual void Stored(const BlockKey& key, uint64_t length) = 0;
  virtual void Touched(const BlockKey& key, uint64_t length) = 0;
  virtual void Dropped(const BlockKey& key) = 0;
};

struct CatalogOptions {
  uint64_t capacity_bytes = 10ULL << 30;
  double high_watermark = 0.95;
  double low_watermark = 0.85;
  size_t flush_every = 1024;
};

class CacheCatalog : public BlockListener {
 public:
  // `in_use(key)` says whether a block is being read or written now.
  CacheCatalog(Index& index, BlockStore& store, Executor& disk, CatalogOptions options,
               std::function<bool(const BlockKey&)> in_use);

  // Reads the block records. REQUIRES: called once, before any other method.
  Status Load();

  void Stored(const BlockKey& key, uint64_t length) override;
  void Touched(const BlockKey& key, uint64_t length) override;
  void Dropped(const BlockKey& key) override;

  // Writes pending access times.
  Status Flush();
  // Evicts now if above the high watermark; returns the number of blocks evicted.
  size_t EvictIfNeeded();

  uint64_t cached_bytes() const { return cached_bytes_.load(); }
  uint64_t capacity_bytes() const { return options_.capacity_bytes; }
  uint64_t evictions() const { return evictions_.load(); }
  size_t blocks() const;

 private:
  struct Record {
    uint64_t length = 0;
    uint64_t seq = 0;
  };
  static std::string Key(const BlockKey& key);
  static std::string Encode(const Record& r);
  void MaybeScheduleEviction();
  // Removes `key`'s in-memory record; false if there was none. Takes mu_.
  bool Forget(const BlockKey& key);

  // Constant after construction.
  Index& index_;
  BlockStore& store_;
  Executor& disk_;
  const CatalogOptions options_;
  const std::function<bool(const BlockKey&)> in_use_;

  std::atomic<uint64_t> cached_bytes_{0};
  std::atomic<uint64_t> evictions_{0};
  std::atomic<bool> eviction_scheduled_{false};

  mutable std::mutex mu_;
  std::map<BlockKey, Record> records_;  // Protected by mu_
  std::set<BlockKey> dirty_;            // Protected by mu_
  uint64_t next_seq_ = 1;               // Protected by mu_
};

}  // namespace perch::core
