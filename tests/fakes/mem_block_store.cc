#include "tests/fakes/mem_block_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace perch::testing {

core::Result<core::Bytes> MemBlockStore::Read(const core::BlockKey& key, uint64_t offset,
                                              uint64_t length) {
  reads++;
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.find(key);
  if (it == blocks_.end()) return core::NotFoundError("no block", core::FailureSite::kLocal);
  if (corrupt_.erase(key)) {
    used_ -= it->second.size();
    blocks_.erase(it);
    return core::CorruptError("checksum mismatch", core::FailureSite::kLocal);
  }
  if (offset > it->second.size()) return core::Bytes();
  return it->second.substr(offset, length);
}

core::Status MemBlockStore::Write(const core::BlockKey& key, std::string_view data) {
  std::lock_guard<std::mutex> l(mu_);
  if (full_) return core::Status(core::StatusCode::kNoSpace, "disk full");
  auto old = blocks_.find(key);
  const uint64_t replaced = old == blocks_.end() ? 0 : old->second.size();
  if (capacity_ != 0 && used_ - replaced + data.size() > capacity_) {
    return core::Status(core::StatusCode::kNoSpace, "disk full (capacity)");
  }
  writes++;
  used_ += data.size() - replaced;
  blocks_[key] = std::string(data);
  return core::Status::Ok();
}

core::Status MemBlockStore::Remove(const core::BlockKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.find(key);
  if (it == blocks_.end()) return core::Status::Ok();
  used_ -= it->second.size();
  blocks_.erase(it);
  return core::Status::Ok();
}

core::Result<uint64_t> MemBlockStore::Verify(const core::BlockKey& key) {
  verifies++;
  std::lock_guard<std::mutex> l(mu_);
  auto it = blocks_.find(key);
  if (it == blocks_.end()) return core::NotFoundError("no block", core::FailureSite::kLocal);
  if (corrupt_.erase(key)) {
    used_ -= it->second.size();
    blocks_.erase(it);
    return core::CorruptError("checksum mismatch", core::FailureSite::kLocal);
  }
  return static_cast<uint64_t>(it->second.size());
}

core::Result<core::BlockSlice> MemBlockStore::Slice(const core::BlockKey& key, uint64_t offset,
                                                    uint64_t length) {
  core::Bytes block;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!slices_) return core::BlockStore::Slice(key, offset, length);
    slices++;
    auto it = blocks_.find(key);
    if (it == blocks_.end()) return core::NotFoundError("no block", core::FailureSite::kLocal);
    if (corrupt_.erase(key)) {
      used_ -= it->second.size();
      blocks_.erase(it);
      return core::CorruptError("checksum mismatch", core::FailureSite::kLocal);
    }
    block = it->second;
  }
  offset = std::min<uint64_t>(offset, block.size());
  length = std::min<uint64_t>(length, block.size() - offset);
  int fd = ::memfd_create("mem-block", MFD_CLOEXEC);
  if (fd < 0) return core::InternalError(std::string("memfd_create: ") + std::strerror(errno));
  auto file = std::make_shared<const core::BlockFd>(fd);
  for (size_t done = 0; done < block.size();) {
    ssize_t n = ::write(fd, block.data() + done, block.size() - done);
    if (n <= 0) return core::InternalError(std::string("memfd write: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return core::BlockSlice(std::move(file), offset, length);
}

void MemBlockStore::SetSlices(bool on) {
  std::lock_guard<std::mutex> l(mu_);
  slices_ = on;
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

core::Result<core::BlockScan> MemBlockStore::ForEachBlock(
    const std::function<void(const core::BlockKey&, uint64_t)>& fn,
    const std::function<bool(const core::BlockKey&)>& recorded) {
  std::map<core::BlockKey, uint64_t> copy;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [k, v] : blocks_) copy.emplace(k, v.size());
  }
  core::BlockScan scan;
  for (const auto& [k, n] : copy) {
    scan.blocks++;
    if (!recorded || !recorded(k)) fn(k, n);
  }
  return scan;
}

void MemBlockStore::SetCapacity(uint64_t bytes) {
  std::lock_guard<std::mutex> l(mu_);
  capacity_ = bytes;
}

uint64_t MemBlockStore::UsedBytes() {
  std::lock_guard<std::mutex> l(mu_);
  return used_;
}

}  // namespace perch::testing
