#include "daemon/store/open_block_cache.h"

#include <vector>

namespace perch::store {

std::optional<OpenBlock> OpenBlockCache::Find(const core::BlockKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second);
  return it->second->second;
}

void OpenBlockCache::Put(const core::BlockKey& key, OpenBlock block) {
  if (capacity_ == 0) return;
  std::vector<OpenBlock> released;  // closed after the lock is dropped
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      released.push_back(std::move(it->second->second));
      it->second->second = std::move(block);
      lru_.splice(lru_.begin(), lru_, it->second);
      return;
    }
    lru_.emplace_front(key, std::move(block));
    index_.emplace(key, lru_.begin());
    while (lru_.size() > capacity_) {
      released.push_back(std::move(lru_.back().second));
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
}

void OpenBlockCache::Erase(const core::BlockKey& key) {
  std::optional<OpenBlock> released;
  std::lock_guard<std::mutex> l(mu_);
  auto it = index_.find(key);
  if (it == index_.end()) return;
  released = std::move(it->second->second);
  lru_.erase(it->second);
  index_.erase(it);
  // `released` is declared before the lock guard: it closes after the unlock.
}

size_t OpenBlockCache::size() {
  std::lock_guard<std::mutex> l(mu_);
  return lru_.size();
}

}  // namespace perch::store
