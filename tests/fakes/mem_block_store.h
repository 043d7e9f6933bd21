// MemBlockStore: a BlockStore in memory, with switches for a full disk and
// for corrupting a stored block (the next Read reports kCorrupt and drops it,
// as FileBlockStore does when a checksum fails).
#pragma once

#include <atomic>
#include <map>
#include <mutex>

#include "daemon/core/block_store.h"
#include "daemon/core/executor.h"

#include <functional>

namespace perch::testing {

class MemBlockStore : public core::BlockStore {
 public:
  core::Result<core::Bytes> Read(const core::BlockKey& key, uint64_t offset, uint64_t length) override;
  core::Status Write(const core::BlockKey& key, std::string_view data) override;
  core::Status Remove(const core::BlockKey& key) override;

  void SetFull(bool full);
  void Corrupt(const core::BlockKey& key);
  bool Has(const core::BlockKey& key);
  size_t Size();

  std::atomic<int> writes{0};

 private:
  std::mutex mu_;
  std::map<core::BlockKey, core::Bytes> blocks_;  // Protected by mu_
  std::map<core::BlockKey, bool> corrupt_;        // Protected by mu_
  bool full_ = false;                             // Protected by mu_
};

// Runs tasks on the posting thread, at once (PostAfter too): deterministic.
class InlineExecutor : public core::Executor {
 public:
  void Post(std::function<void()> task) override { task(); }
  void PostAfter(std::chrono::milliseconds, std::function<void()> task) override { task(); }
};

}  // namespace perch::testing
