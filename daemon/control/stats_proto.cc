#include "daemon/control/stats_proto.h"

namespace perch::control {

namespace {

void Fill(const core::ReadCounters::Values& v, v1::ReadCounters* out) {
  out->set_hits(v.hits);
  out->set_misses(v.misses);
  out->set_bytes_from_cache(v.bytes_from_cache);
  out->set_bytes_from_network(v.bytes_from_network);
}

void Fill(const core::LatencyHistogram::Snapshot& h, v1::Histogram* out) {
  for (double b : h.bounds) out->add_bounds_seconds(b);
  for (uint64_t c : h.counts) out->add_counts(c);
  out->set_count(h.count);
  out->set_sum_seconds(h.sum_seconds);
}

}  // namespace

void ToProto(const core::NodeControl& node, const core::WarmProgress& p, v1::WarmProgress* out) {
  out->set_job_id(p.id);
  (void)node;
  for (const std::string& path : p.paths) out->add_paths(path);  // federation paths (Mount)
  out->set_files_total(p.files_total);
  out->set_files_done(p.files_done);
  out->set_files_failed(p.files_failed);
  out->set_bytes_total(p.bytes_total);
  out->set_bytes_done(p.bytes_done);
  out->set_listing_done(p.listing_done);
  out->set_finished(p.finished);
  out->set_cancelled(p.cancelled);
  for (const std::string& e : p.errors) out->add_errors(e);
}

void ToProto(const core::NodeControl& node, const core::StatsSnapshot& s, v1::Stats* out) {
  out->set_hits(s.totals.hits);
  out->set_misses(s.totals.misses);
  out->set_bytes_from_cache(s.totals.bytes_from_cache);
  out->set_bytes_from_network(s.totals.bytes_from_network);
  out->set_cached_bytes(s.cached_bytes);
  out->set_capacity_bytes(s.capacity_bytes);
  out->set_evictions(s.evictions);
  out->set_failovers(s.network.failovers);
  out->set_inflight_requests(s.network.inflight_requests);
  out->set_queued_requests(s.network.queued_requests);
  out->set_pinned_bytes(s.pinned_bytes);
  out->set_cached_blocks(s.cached_blocks);
  out->set_shared_fetches(s.shared_fetches);
  out->set_corrupt_blocks(s.corrupt_blocks);
  out->set_store_errors(s.store_errors);
  out->set_resumes(s.network.resumes);
  out->set_range_gets(s.network.range_gets);
  out->set_offline(s.offline);
  out->set_uptime_seconds(s.uptime_seconds);
  for (const auto& [cls, n] : s.errors) {
    auto* e = out->add_errors();
    e->set_error_class(cls);
    e->set_count(n);
  }
  for (const core::NamespaceCounters& n : s.namespaces) {
    auto* ns = out->add_namespaces();
    ns->set_path(n.path);
    ns->set_federation(n.federation);
    Fill(n.values, ns->mutable_counters());
  }
  for (const auto& [op, h] : s.fuse_ops) {
    auto* o = out->add_fuse_ops();
    o->set_op(op);
    Fill(h, o->mutable_latency());
  }
  for (const core::ClientStats& c : s.http_clients) {
    auto* h = out->add_http_clients();
    h->set_client(c.client);
    h->set_requests(c.requests);
    h->set_bytes(c.bytes);
    h->set_errors(c.errors);
  }
  Fill(s.origin_get, out->mutable_origin_get());
  for (const auto& w : s.warm_jobs) ToProto(node, w, out->add_warm_jobs());
  auto* p = out->mutable_prefetch();
  p->set_sequential_blocks(s.prefetch.sequential_blocks);
  p->set_directory_files(s.prefetch.directory_files);
  p->set_hinted_files(s.prefetch.hinted_files);
  p->set_withdrawn(s.prefetch.withdrawn);
  using core::Priority;
  p->set_queued_demand(s.scheduler.queued[static_cast<size_t>(Priority::kDemand)]);
  p->set_queued_hint(s.scheduler.queued[static_cast<size_t>(Priority::kHint)]);
  p->set_queued_warm(s.scheduler.queued[static_cast<size_t>(Priority::kWarm)]);
  p->set_queued_speculative(s.scheduler.queued[static_cast<size_t>(Priority::kSpeculative)]);
  p->set_max_in_flight_seen(s.scheduler.max_in_flight_seen);
  p->set_budget_requests(s.budget_requests);
  p->set_boosted(s.scheduler.boosted);
}

}  // namespace perch::control
