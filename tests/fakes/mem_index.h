// MemIndex: an Index in a std::map, with a switch that makes writes fail.
#pragma once

#include <map>
#include <mutex>

#include "daemon/core/index.h"

namespace perch::testing {

class MemIndex : public core::Index {
 public:
  core::Result<std::optional<std::string>> Get(std::string_view key) override {
    std::lock_guard<std::mutex> l(mu_);
    auto it = kv_.find(std::string(key));
    if (it == kv_.end()) return std::optional<std::string>();
    return std::optional<std::string>(it->second);
  }
  core::Status Apply(const std::vector<Write>& batch) override {
    std::lock_guard<std::mutex> l(mu_);
    if (fail_writes_) return core::InternalError("index write failed (injected)");
    for (const Write& w : batch) {
      if (w.value) {
        kv_[w.key] = *w.value;
      } else {
        kv_.erase(w.key);
      }
    }
    return core::Status::Ok();
  }
  core::Status Scan(std::string_view prefix,
                    const std::function<bool(std::string_view, std::string_view)>& fn) override {
    std::map<std::string, std::string> copy;
    {
      std::lock_guard<std::mutex> l(mu_);
      copy = kv_;
    }
    for (auto it = copy.lower_bound(std::string(prefix)); it != copy.end(); ++it) {
      if (!std::string_view(it->first).starts_with(prefix)) break;
      if (!fn(it->first, it->second)) break;
    }
    return core::Status::Ok();
  }
  void FailWrites(bool on) {
    std::lock_guard<std::mutex> l(mu_);
    fail_writes_ = on;
  }
  size_t CountPrefix(std::string_view prefix) {
    size_t n = 0;
    Scan(prefix, [&](std::string_view, std::string_view) { return ++n, true; }).IgnoreError();
    return n;
  }

 private:
  std::mutex mu_;
  std::map<std::string, std::string> kv_;  // Protected by mu_
  bool fail_writes_ = false;               // Protected by mu_
};

}  // namespace perch::testing
