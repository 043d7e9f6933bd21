// Metrics: the counters and latency histograms perch keeps for its control
// plane (perchctl stats, Prometheus). They are plain atomics, bumped on the
// hot path without locks and read by snapshot from any thread; a snapshot may
// mix values taken microseconds apart, never torn ones.
//
// Thread-safety: every method is safe from any thread. The maps of named
// counters (CounterFamily) take a leaf lock to find or create an entry; the
// entry itself is bumped lock-free and never moves once created.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/core/mutex.h"
#include "daemon/core/status.h"

namespace perch::core {

// A latency histogram with fixed bucket bounds (seconds), Prometheus-shaped.
class LatencyHistogram {
 public:
  // Upper bounds of the finite buckets, 50 µs to 60 s; one more bucket is +Inf.
  static constexpr std::array<double, 18> kBounds = {
      0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
      0.05,    0.1,    0.25,    0.5,    1,     2.5,    5,     10,   60};

  struct Snapshot {
    std::vector<double> bounds;    // kBounds
    std::vector<uint64_t> counts;  // per bucket (not cumulative); bounds.size() + 1 entries
    uint64_t count = 0;
    double sum_seconds = 0;
  };

  void Observe(std::chrono::nanoseconds d);
  Snapshot Take() const;

 private:
  std::array<std::atomic<uint64_t>, kBounds.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

// Failed requests by error class (one counter per StatusCode).
class ErrorCounters {
 public:
  void Count(StatusCode code) {
    counts_[static_cast<size_t>(code)].fetch_add(1, std::memory_order_relaxed);
  }
  // (class name as in ToString(StatusCode), count) for every class but kOk.
  std::vector<std::pair<std::string, uint64_t>> Take() const;

 private:
  std::array<std::atomic<uint64_t>, kStatusCodeCount> counts_{};
};

// What the block cache served, for the whole node or one namespace.
struct ReadCounters {
  std::atomic<uint64_t> hits{0};    // blocks served from the store
  std::atomic<uint64_t> misses{0};  // blocks fetched from the federation
  std::atomic<uint64_t> bytes_from_cache{0};
  std::atomic<uint64_t> bytes_from_network{0};

  struct Values {
    uint64_t hits = 0, misses = 0, bytes_from_cache = 0, bytes_from_network = 0;

    // The fields above by the names of the control API (message
    // ReadCounters), through which the adapters copy them.
    static constexpr auto Fields() {
      using Field = std::pair<std::string_view, uint64_t Values::*>;
      return std::to_array<Field>({{"hits", &Values::hits},
                                   {"misses", &Values::misses},
                                   {"bytes_from_cache", &Values::bytes_from_cache},
                                   {"bytes_from_network", &Values::bytes_from_network}});
    }
  };
  Values Take() const {
    return Values{hits.load(), misses.load(), bytes_from_cache.load(), bytes_from_network.load()};
  }
};

// Named instances of T (per namespace, per operation), created on first use
// and never removed, so a reference stays valid for the family's lifetime.
// At most `max_names` names: a new one past that counts under `overflow`
// (a label set no one can grow without bound).
template <typename T>
class CounterFamily {
 public:
  explicit CounterFamily(size_t max_names = SIZE_MAX, std::string overflow = "other")
      : max_names_(max_names), overflow_(std::move(overflow)) {}

  T& Get(const std::string& name) {
    MutexLock l(mu_);
    auto it = items_.find(name);
    if (it == items_.end()) {
      const std::string& key = items_.size() < max_names_ ? name : overflow_;
      it = items_.try_emplace(key).first;
      if (!it->second) it->second = std::make_unique<T>();
    }
    return *it->second;
  }
  // Calls fn(name, item) for each, in name order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    MutexLock l(mu_);
    for (const auto& [name, item] : items_) fn(name, *item);
  }

 private:
  const size_t max_names_;
  const std::string overflow_;
  mutable Mutex mu_;
  std::map<std::string, std::unique_ptr<T>> items_ PERCH_GUARDED_BY(mu_);
};

// Measures one operation from construction to destruction into `h` (nothing
// when `h` is null).
class ScopedLatency {
 public:
  explicit ScopedLatency(LatencyHistogram* h) : h_(h), start_(std::chrono::steady_clock::now()) {}
  ~ScopedLatency() {
    if (h_ != nullptr) h_->Observe(std::chrono::steady_clock::now() - start_);
  }
  ScopedLatency(const ScopedLatency&) = delete;
  ScopedLatency& operator=(const ScopedLatency&) = delete;

 private:
  LatencyHistogram* h_;
  std::chrono::steady_clock::time_point start_;
};

// What one kind of HTTP client (by its User-Agent product) asked of perchd's
// HTTP endpoint.
struct ClientCounters {
  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> bytes{0};   // body bytes sent
  std::atomic<uint64_t> errors{0};  // answers of 4xx/5xx, and bodies cut short
};

// Connections the HTTP endpoint ended to keep one user from locking the
// others out (issue 29).
struct EndpointCounters {
  std::atomic<uint64_t> refused_per_user{0};  // 503: the peer's uid held its share of slots
  std::atomic<uint64_t> request_timeouts{0};  // closed: a request did not arrive in time
};

// Latency and errors of filesystem operations, filled by the FUSE adapter,
// and the HTTP endpoint's requests by client.
class OpMetrics {
 public:
  enum Op { kLookup, kGetAttr, kOpenDir, kReadDir, kOpen, kRead, kStatFs, kXattr, kCount };
  static const char* Name(Op op);
  LatencyHistogram& latency(Op op) { return latency_[op]; }
  const LatencyHistogram& latency(Op op) const { return latency_[op]; }
  ErrorCounters& errors() { return errors_; }
  const ErrorCounters& errors() const { return errors_; }
  // By client label; the endpoint bounds the number of labels.
  CounterFamily<ClientCounters>& clients() { return clients_; }
  const CounterFamily<ClientCounters>& clients() const { return clients_; }
  EndpointCounters& endpoint() { return endpoint_; }
  const EndpointCounters& endpoint() const { return endpoint_; }

 private:
  std::array<LatencyHistogram, kCount> latency_;
  ErrorCounters errors_;
  CounterFamily<ClientCounters> clients_;
  EndpointCounters endpoint_;
};

}  // namespace perch::core
