// MemBlockStore: a BlockStore in memory, with switches for a full disk, for
// corrupting a stored block (the next Read or Slice reports kCorrupt and
// drops it, as FileBlockStore does when a checksum fails) and for slices of
// files (SetSlices: as FileBlockStore, whose blocks are all in files).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "daemon/core/block_store.h"
#include "daemon/core/executor.h"

namespace perch::testing {

class MemBlockStore : public core::BlockStore {
 public:
  core::Result<core::Bytes> Read(const core::BlockKey& key, uint64_t offset,
                                 uint64_t length) override;
  core::Status Write(const core::BlockKey& key, std::string_view data) override;
  core::Status Remove(const core::BlockKey& key) override;
  // The block's length; a block marked by Corrupt is dropped and kCorrupt.
  core::Result<uint64_t> Verify(const core::BlockKey& key) override;
  // With SetSlices(true), the bytes in a file of their own (a memfd made for
  // the call, holding the block); otherwise kInvalidArgument, as a store
  // that keeps no files answers.
  core::Result<core::BlockSlice> Slice(const core::BlockKey& key, uint64_t offset,
                                       uint64_t length) override;

  // As FileBlockStore: blocks `recorded` names are counted, not passed to `fn`.
  core::Result<core::BlockScan> ForEachBlock(
      const std::function<void(const core::BlockKey&, uint64_t)>& fn,
      const std::function<bool(const core::BlockKey&)>& recorded) override;

  void SetSlices(bool on);
  void SetFull(bool full);
  // Writes that would take the stored bytes past `bytes` fail with kNoSpace
  // (a disk of that size); 0 = no limit.
  void SetCapacity(uint64_t bytes);
  uint64_t UsedBytes();
  void Corrupt(const core::BlockKey& key);
  bool Has(const core::BlockKey& key);
  size_t Size();

  std::atomic<int> writes{0};
  std::atomic<int> reads{0};     // calls of Read (hits and misses)
  std::atomic<int> verifies{0};  // calls of Verify
  std::atomic<int> slices{0};    // calls of Slice (with SetSlices(true))

 private:
  std::mutex mu_;
  std::map<core::BlockKey, core::Bytes> blocks_;  // Protected by mu_
  std::map<core::BlockKey, bool> corrupt_;        // Protected by mu_
  bool full_ = false;                             // Protected by mu_
  bool slices_ = false;                           // Protected by mu_
  uint64_t capacity_ = 0;                         // Protected by mu_
  uint64_t used_ = 0;                             // Protected by mu_
};

// Runs nothing until told: tasks queue up and RunAll() runs them (and what
// they post) on the calling thread. PostAfter ignores the delay.
class QueuedExecutor : public core::Executor {
 public:
  void Post(std::function<void()> task) override {
    std::lock_guard<std::mutex> l(mu_);
    tasks_.push_back(std::move(task));
  }
  void PostAfter(std::chrono::milliseconds, std::function<void()> task) override {
    Post(std::move(task));
  }
  // Runs queued tasks until none is left; returns how many ran.
  size_t RunAll() {
    size_t n = 0;
    for (;;) {
      std::function<void()> t;
      {
        std::lock_guard<std::mutex> l(mu_);
        if (tasks_.empty()) return n;
        t = std::move(tasks_.front());
        tasks_.erase(tasks_.begin());
      }
      t();
      ++n;
    }
  }

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> tasks_;  // Protected by mu_
};

// Runs tasks on the posting thread, at once (PostAfter too): deterministic.
class InlineExecutor : public core::Executor {
 public:
  void Post(std::function<void()> task) override { task(); }
  void PostAfter(std::chrono::milliseconds, std::function<void()> task) override { task(); }
};

}  // namespace perch::testing
