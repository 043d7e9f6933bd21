// OpenBlockCache: the block files a FileBlockStore keeps open, so that the next
// read of a block neither opens, stats nor checks its file again, and a block
// just written is read through the descriptor that wrote it (a cold small file
// is written once and read at once). At most `capacity` files are held; the
// least recently used is let go first (a slice still being served keeps its
// descriptor until it is done, see core::BlockFd).
//
// Thread-safety: all methods from any thread. mu_ is a leaf and never held
// while a descriptor closes.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "daemon/core/block_store.h"

namespace perch::store {

struct OpenBlock {
  std::shared_ptr<const core::BlockFd> file;
  uint64_t data_offset = 0;  // where the block's bytes start in the file (after the header)
  uint64_t data_len = 0;
};

class OpenBlockCache {
 public:
  explicit OpenBlockCache(size_t capacity) : capacity_(capacity) {}

  std::optional<OpenBlock> Find(const core::BlockKey& key);
  // Holds `block` as the open file of `key` (replacing an older one).
  void Put(const core::BlockKey& key, OpenBlock block);
  // Lets go of `key`'s file (it is being removed or failed a check).
  void Erase(const core::BlockKey& key);
  size_t size();

 private:
  using Lru = std::list<std::pair<core::BlockKey, OpenBlock>>;  // most recent first

  const size_t capacity_;
  std::mutex mu_;
  Lru lru_;                                        // Protected by mu_
  std::map<core::BlockKey, Lru::iterator> index_;  // Protected by mu_
};

}  // namespace perch::store
