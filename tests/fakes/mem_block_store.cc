#include "tests/fakes/mem_block_store.h"

namespace perch::testing {

core::Result<core::Bytes> MemBlockStore::Read(const core::BlockKey& key, uint64_t offset, uint64_t length) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.find(key);
  if (it == blocks_.end()) return core::NotFoundError("no block", core::FailureSite::kLocal);
  if (corrupt_.erase(key)) {
    blocks_.erase(it);
    return core::CorruptError("checksum mismatch", core::FailureSite::kLocal);
  }
  if (offset > it->second.size()) return core::Bytes();
  return it->second.substr(offset, length);
}

core::Status MemBlockStore::Write(const core::BlockKey& key, std::string_view data) {
  std::lock_guard<std::mutex> l(mu_);
  if (full_) return core::Status(core::StatusCode::kNoSpace, "disk full");
  writes++;
  blocks_[key] = std::string(data);
  return core::Status::Ok();
}

core::Status MemBlockStore::Remove(const core::BlockKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  blocks_.erase(key);
  return core::Status::Ok();
}

void MemBlockStore::SetFull(bool full) {
  std::lock_guard<std::mutex> l(mu_);
  full_ = full;
}

void MemBlockStore::Corrupt(const core::BlockKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  corrupt_[key] = true;
}

bool MemBlockStore::Has(const core::BlockKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  return blocks_.count(key) > 0;
}

size_t MemBlockStore::Size() {
  std::lock_guard<std::mutex> l(mu_);
  return blocks_.size();
}

}  // namespace perch::testing
