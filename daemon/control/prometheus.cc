// The Prometheus text exposition of a StatsSnapshot. Metric names follow
// Prometheus conventions: base units (bytes, seconds), _total for counters.
#include <fmt/format.h>

#include "daemon/control/control_server.h"

namespace perch::control {

namespace {

// Escapes a label value: backslash, double quote and newline.
std::string Escape(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

class Writer {
 public:
  void Family(std::string_view name, std::string_view type, std::string_view help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void Sample(std::string_view name, uint64_t value, std::string_view labels = "") {
    out_ +=
        fmt::format("{}{} {}\n", name, labels.empty() ? "" : fmt::format("{{{}}}", labels), value);
  }
  void One(std::string_view name, std::string_view type, std::string_view help, uint64_t value) {
    Family(name, type, help);
    Sample(name, value);
  }
  void Histogram(std::string_view name, std::string_view labels,
                 const core::LatencyHistogram::Snapshot& h) {
    std::string prefix = labels.empty() ? "" : std::string(labels) + ",";
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.counts.size(); ++i) {
      cumulative += h.counts[i];
      std::string le = i < h.bounds.size() ? fmt::format("{}", h.bounds[i]) : "+Inf";
      out_ += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, prefix, le, cumulative);
    }
    std::string l = labels.empty() ? "" : fmt::format("{{{}}}", labels);
    out_ += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, l, h.sum_seconds, name, l, h.count);
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

}  // namespace

std::string RenderPrometheus(const core::StatsSnapshot& s) {
  Writer w;
  w.One("perch_hits_total", "counter", "Blocks served from the node cache.", s.totals.hits);
  w.One("perch_misses_total", "counter", "Blocks fetched from the federation.", s.totals.misses);
  w.One("perch_bytes_from_cache_total", "counter", "Bytes served from the node cache.",
        s.totals.bytes_from_cache);
  w.One("perch_bytes_from_network_total", "counter", "Bytes fetched from the federation.",
        s.totals.bytes_from_network);
  w.One("perch_shared_fetches_total", "counter", "Misses that joined a fetch already in flight.",
        s.shared_fetches);
  w.One("perch_corrupt_blocks_total", "counter", "Cached blocks that failed their check.",
        s.corrupt_blocks);
  w.One("perch_store_errors_total", "counter", "Blocks served but not cached.", s.store_errors);
  w.One("perch_cached_bytes", "gauge", "Bytes in the block cache.", s.cached_bytes);
  w.One("perch_capacity_bytes", "gauge", "The block cache quota.", s.capacity_bytes);
  w.One("perch_pinned_bytes", "gauge", "Cached bytes below a pin.", s.pinned_bytes);
  w.One("perch_cached_blocks", "gauge", "Blocks in the block cache.", s.cached_blocks);
  w.One("perch_evictions_total", "counter", "Blocks evicted.", s.evictions);
  w.One("perch_failovers_total", "counter", "Moves to the next server after a failure.",
        s.network.failovers);
  w.One("perch_resumes_total", "counter", "Transfers resumed past their first byte.",
        s.network.resumes);
  w.One("perch_range_gets_total", "counter", "HTTP range GETs sent.", s.network.range_gets);
  w.One("perch_inflight_requests", "gauge", "HTTP requests running.", s.network.inflight_requests);
  w.One("perch_queued_requests", "gauge", "HTTP requests waiting for the in-flight budget.",
        s.network.queued_requests);
  w.One("perch_offline", "gauge",
        "1 while the federation is not answering and stale metadata is served.", s.offline ? 1 : 0);
  w.One("perch_uptime_seconds", "gauge", "Seconds since perchd started.", s.uptime_seconds);

  w.One("perch_prefetch_sequential_blocks_total", "counter", "Read-ahead blocks asked for.",
        s.prefetch.sequential_blocks);
  w.One("perch_prefetch_directory_files_total", "counter",
        "Files asked for because a sibling was opened.", s.prefetch.directory_files);
  w.One("perch_prefetch_hinted_files_total", "counter", "Files asked for from hint lists.",
        s.prefetch.hinted_files);
  w.One("perch_prefetch_withdrawn_total", "counter", "Queued prefetches withdrawn.",
        s.prefetch.withdrawn);
  w.Family("perch_fetches_queued", "gauge",
           "Block fetches waiting for the request budget, by class.");
  for (size_t c = 0; c < core::kPriorityCount; ++c) {
    w.Sample("perch_fetches_queued", s.scheduler.queued[c],
             fmt::format("class=\"{}\"", core::ToString(static_cast<core::Priority>(c))));
  }
  w.Family("perch_fetches_started_total", "counter", "Block fetches started, by class.");
  for (size_t c = 0; c < core::kPriorityCount; ++c) {
    w.Sample("perch_fetches_started_total", s.scheduler.started[c],
             fmt::format("class=\"{}\"", core::ToString(static_cast<core::Priority>(c))));
  }
  w.Family("perch_fuse_errors_total", "counter", "Failed filesystem operations by error class.");
  for (const auto& [cls, n] : s.errors)
    w.Sample("perch_fuse_errors_total", n, fmt::format("class=\"{}\"", cls));

  struct ClientMetric {
    const char* name;
    const char* help;
    uint64_t core::ClientStats::*field;
  };
  const ClientMetric client_metrics[] = {
      {"perch_http_requests_total", "Requests to the HTTP endpoint, by client.",
       &core::ClientStats::requests},
      {"perch_http_bytes_total", "Body bytes the HTTP endpoint sent, by client.",
       &core::ClientStats::bytes},
      {"perch_http_errors_total", "HTTP endpoint answers of 4xx/5xx or cut short, by client.",
       &core::ClientStats::errors},
  };
  for (const ClientMetric& m : client_metrics) {
    w.Family(m.name, "counter", m.help);
    for (const core::ClientStats& c : s.http_clients)
      w.Sample(m.name, c.*(m.field), fmt::format("client=\"{}\"", Escape(c.client)));
  }

  struct NsMetric {
    const char* name;
    const char* help;
    uint64_t core::ReadCounters::Values::*field;
  };
  const NsMetric ns_metrics[] = {
      {"perch_namespace_hits_total", "Blocks served from the cache, per namespace.",
       &core::ReadCounters::Values::hits},
      {"perch_namespace_misses_total", "Blocks fetched, per namespace.",
       &core::ReadCounters::Values::misses},
      {"perch_namespace_bytes_from_cache_total", "Bytes served from the cache, per namespace.",
       &core::ReadCounters::Values::bytes_from_cache},
      {"perch_namespace_bytes_from_network_total", "Bytes fetched, per namespace.",
       &core::ReadCounters::Values::bytes_from_network},
  };
  for (const NsMetric& m : ns_metrics) {
    w.Family(m.name, "counter", m.help);
    // With several federations mounted, the namespace's federation is a label too.
    bool several = false;
    for (const core::NamespaceCounters& n : s.namespaces)
      several |= n.federation != s.namespaces[0].federation;
    for (const core::NamespaceCounters& n : s.namespaces) {
      std::string labels = fmt::format("namespace=\"{}\"", Escape(n.path));
      if (several) labels += fmt::format(",federation=\"{}\"", Escape(n.federation));
      w.Sample(m.name, n.values.*(m.field), labels);
    }
  }

  w.Family("perch_fuse_op_duration_seconds", "histogram", "Latency of filesystem operations.");
  for (const auto& [op, h] : s.fuse_ops)
    w.Histogram("perch_fuse_op_duration_seconds", fmt::format("op=\"{}\"", op), h);
  w.Family("perch_origin_get_duration_seconds", "histogram",
           "Time to fetch one block from the federation, failover included.");
  w.Histogram("perch_origin_get_duration_seconds", "", s.origin_get);
  return w.Take();
}

}  // namespace perch::control
