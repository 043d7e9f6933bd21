// OpenFileCache: the files a FileBlockStore keeps open, so that the next read
// of a block neither opens, stats nor checks its file again, and a block just
// written is read through the descriptor that wrote it (a cold small file is
// written once and read at once). At most `capacity` entries are held; the
// least recently used is let go first (a slice still being served keeps its
// descriptor until it is done, see core::BlockFd). OpenBlockCache holds one
// entry per block; the store's object files (two descriptors per large
// object) are held in another cache of the same kind.
//
// Thread-safety: all methods from any thread. mu_ is a leaf and never held
// while a descriptor closes.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "daemon/core/block_store.h"
#include "daemon/core/mutex.h"

namespace perch::store {

template <typename Key, typename Value>
class OpenFileCache {
 public:
  explicit OpenFileCache(size_t capacity) : capacity_(capacity) {}

  std::optional<Value> Find(const Key& key) {
    core::MutexLock l(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return std::nullopt;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }

  // Holds `value` as the open file(s) of `key` (replacing an older one).
  void Put(const Key& key, Value value) {
    if (capacity_ == 0) return;
    std::vector<Value> released;  // closed after the lock is dropped (declared first)
    core::MutexLock l(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      released.push_back(std::move(it->second->second));
      it->second->second = std::move(value);
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    lru_.emplace_front(key, std::move(value));
    index_.emplace(key, lru_.begin());
    while (lru_.size() > capacity_) {
      released.push_back(std::move(lru_.back().second));
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }

  // Lets go of `key`'s file(s) (being removed, or failed a check).
  void Erase(const Key& key) {
    std::optional<Value> released;  // declared before the guard: closes after the unlock
    core::MutexLock l(mu_);
    auto it = index_.find(key);
    if (it == index_.end()) return;
    released = std::move(it->second->second);
    lru_.erase(it->second);
    index_.erase(it);
  }

  size_t size() {
    core::MutexLock l(mu_);
    return lru_.size();
  }

 private:
  using Lru = std::list<std::pair<Key, Value>>;  // most recent first

  const size_t capacity_;
  core::Mutex mu_;
  Lru lru_ PERCH_GUARDED_BY(mu_);
  std::map<Key, typename Lru::iterator> index_ PERCH_GUARDED_BY(mu_);
};

struct OpenBlock {
  std::shared_ptr<const core::BlockFd> file;
  uint64_t data_offset = 0;  // where the block's bytes start in the file (after a header, or
                             // at the block's offset in an object file)
  uint64_t data_len = 0;
  uint32_t crc = 0;  // CRC32C of the block's bytes, as its header or map entry says
  // Set (never in the cache) on what a lookup returns when it has just read
  // the bytes and checked them: a read of the whole block need not again.
  bool checked_now = false;
};

using OpenBlockCache = OpenFileCache<core::BlockKey, OpenBlock>;

}  // namespace perch::store
