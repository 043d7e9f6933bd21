#include "daemon/core/metrics.h"

namespace perch::core {

void LatencyHistogram::Observe(std::chrono::nanoseconds d) {
  const double s = std::chrono::duration<double>(d).count();
  size_t i = 0;
  while (i < kBounds.size() && s > kBounds[i]) ++i;
  buckets_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(d.count() < 0 ? 0 : d.count()),
                    std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Take() const {
  Snapshot s;
  s.bounds.assign(kBounds.begin(), kBounds.end());
  for (const auto& b : buckets_) s.counts.push_back(b.load(std::memory_order_relaxed));
  // The count is the sum of the buckets we read, so the exposition stays
  // consistent (+Inf bucket == count) even while observations race.
  for (uint64_t c : s.counts) s.count += c;
  s.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

std::vector<std::pair<std::string, uint64_t>> ErrorCounters::Take() const {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (size_t i = 1; i < counts_.size(); ++i) {
    out.emplace_back(std::string(ToString(static_cast<StatusCode>(i))), counts_[i].load());
  }
  return out;
}

const char* OpMetrics::Name(Op op) {
  switch (op) {
    case kLookup:
      return "lookup";
    case kGetAttr:
      return "getattr";
    case kOpenDir:
      return "opendir";
    case kReadDir:
      return "readdir";
    case kOpen:
      return "open";
    case kRead:
      return "read";
    case kStatFs:
      return "statfs";
    case kXattr:
      return "xattr";
    case kCount:
      break;
  }
  return "unknown";
}

}  // namespace perch::core
