#include "client/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>

namespace perch::ctl {

using nlohmann::json;

namespace {

json HistogramJson(const v1::Histogram& h);

}  // namespace

std::string Size(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0) {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[u]);
  }
  return buf;
}

std::string Count(uint64_t n) {
  // Built forwards rather than by insert(), which gcc 12 -O2 warns about
  // (a false -Wrestrict, GCC bug 105329).
  const std::string digits = std::to_string(n);
  std::string s;
  s.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) s += ',';
    s += digits[i];
  }
  return s;
}

std::string Ratio(uint64_t hits, uint64_t misses) {
  if (hits + misses == 0) return "-";
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%.1f %%",
                100.0 * static_cast<double>(hits) / static_cast<double>(hits + misses));
  return buf;
}

std::string Duration(double seconds) {
  char buf[32];
  if (seconds < 0.001) {
    std::snprintf(buf, sizeof(buf), "%.0f µs", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(buf, sizeof(buf), "%.1f ms", seconds * 1e3);
  } else if (seconds < 120) {
    std::snprintf(buf, sizeof(buf), "%.1f s", seconds);
  } else {
    std::snprintf(buf, sizeof(buf), "%.0fm%02.0fs", std::floor(seconds / 60),
                  std::fmod(seconds, 60));
  }
  return buf;
}

double Quantile(const v1::Histogram& h, double q) {
  if (h.count() == 0) return 0;
  uint64_t rank = static_cast<uint64_t>(std::ceil(q * static_cast<double>(h.count())));
  uint64_t seen = 0;
  for (int i = 0; i < h.counts_size(); ++i) {
    seen += h.counts(i);
    if (seen >= rank) return i < h.bounds_seconds_size() ? h.bounds_seconds(i) : INFINITY;
  }
  return INFINITY;
}

void Table(const std::vector<std::vector<std::string>>& rows, std::string_view align) {
  std::vector<size_t> width;
  for (const auto& r : rows) {
    if (width.size() < r.size()) width.resize(r.size(), 0);
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  for (const auto& r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      std::string cell = r[i];
      std::string pad(width[i] - cell.size(), ' ');
      line += i < align.size() && align[i] == 'l' ? cell + pad : pad + cell;
      if (i + 1 < r.size()) line += "  ";
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    std::cout << line << "\n";
  }
}

json WarmJson(const v1::WarmProgress& w) {
  return json{{"job_id", w.job_id()},
              {"paths", std::vector<std::string>(w.paths().begin(), w.paths().end())},
              {"files_total", w.files_total()},
              {"files_done", w.files_done()},
              {"files_failed", w.files_failed()},
              {"bytes_total", w.bytes_total()},
              {"bytes_done", w.bytes_done()},
              {"listing_done", w.listing_done()},
              {"finished", w.finished()},
              {"cancelled", w.cancelled()},
              {"errors", std::vector<std::string>(w.errors().begin(), w.errors().end())}};
}

namespace {

json HistogramJson(const v1::Histogram& h) {
  return json{{"count", h.count()},
              {"sum_seconds", h.sum_seconds()},
              {"p50_seconds", Quantile(h, 0.5)},
              {"p99_seconds", Quantile(h, 0.99)}};
}

}  // namespace

json StatsJson(const v1::Stats& s) {
  json j{{"hits", s.hits()},
         {"misses", s.misses()},
         {"hit_ratio", s.hits() + s.misses() ? static_cast<double>(s.hits()) /
                                                   static_cast<double>(s.hits() + s.misses())
                                             : 0.0},
         {"bytes_from_cache", s.bytes_from_cache()},
         {"bytes_from_network", s.bytes_from_network()},
         {"cached_bytes", s.cached_bytes()},
         {"capacity_bytes", s.capacity_bytes()},
         {"pinned_bytes", s.pinned_bytes()},
         {"cached_blocks", s.cached_blocks()},
         {"evictions", s.evictions()},
         {"failovers", s.failovers()},
         {"resumes", s.resumes()},
         {"range_gets", s.range_gets()},
         {"inflight_requests", s.inflight_requests()},
         {"queued_requests", s.queued_requests()},
         {"shared_fetches", s.shared_fetches()},
         {"corrupt_blocks", s.corrupt_blocks()},
         {"store_errors", s.store_errors()},
         {"offline", s.offline()},
         {"uptime_seconds", s.uptime_seconds()}};
  json errors = json::object();
  for (const auto& e : s.errors()) errors[e.error_class()] = e.count();
  j["errors"] = errors;
  // "namespaces" by federation path (summed where two federations have the
  // same one), and the same grouped by federation: both add up to the totals.
  json ns = json::object(), feds = json::object();
  for (const auto& n : s.namespaces()) {
    const auto& c = n.counters();
    json one{{"hits", c.hits()},
             {"misses", c.misses()},
             {"bytes_from_cache", c.bytes_from_cache()},
             {"bytes_from_network", c.bytes_from_network()}};
    feds[n.federation()]["namespaces"][n.path()] = one;
    if (!ns.contains(n.path())) {
      ns[n.path()] = one;
    } else {
      for (auto& [k, v] : one.items())
        ns[n.path()][k] = ns[n.path()][k].get<uint64_t>() + v.get<uint64_t>();
    }
  }
  j["namespaces"] = ns;
  j["federations"] = feds;
  json ops = json::object();
  for (const auto& o : s.fuse_ops()) ops[o.op()] = HistogramJson(o.latency());
  j["fuse_ops"] = ops;
  json clients = json::object();
  for (const auto& c : s.http_clients()) {
    clients[c.client()] =
        json{{"requests", c.requests()}, {"bytes", c.bytes()}, {"errors", c.errors()}};
  }
  j["http_clients"] = clients;
  j["origin_get"] = HistogramJson(s.origin_get());
  json warms = json::array();
  for (const auto& w : s.warm_jobs()) warms.push_back(WarmJson(w));
  j["warm_jobs"] = warms;
  const auto& p = s.prefetch();
  j["prefetch"] = json{{"sequential_blocks", p.sequential_blocks()},
                       {"directory_files", p.directory_files()},
                       {"hinted_files", p.hinted_files()},
                       {"withdrawn", p.withdrawn()},
                       {"queued_demand", p.queued_demand()},
                       {"queued_hint", p.queued_hint()},
                       {"queued_warm", p.queued_warm()},
                       {"queued_speculative", p.queued_speculative()},
                       {"max_in_flight_seen", p.max_in_flight_seen()},
                       {"budget_requests", p.budget_requests()},
                       {"boosted", p.boosted()}};
  return j;
}

void PrintStats(const v1::Stats& s) {
  std::vector<std::vector<std::string>> rows;
  double used = s.capacity_bytes() ? 100.0 * static_cast<double>(s.cached_bytes()) /
                                         static_cast<double>(s.capacity_bytes())
                                   : 0;
  char pct[16];
  std::snprintf(pct, sizeof(pct), "%.1f %%", used);
  std::cout << "cache     " << Size(s.cached_bytes()) << " of " << Size(s.capacity_bytes()) << " ("
            << pct << "), " << Count(s.cached_blocks()) << " blocks, " << Size(s.pinned_bytes())
            << " pinned, " << Count(s.evictions()) << " evicted\n";
  std::cout << "reads     " << Count(s.hits()) << " hits, " << Count(s.misses())
            << " misses, hit ratio " << Ratio(s.hits(), s.misses()) << "; "
            << Size(s.bytes_from_cache()) << " from cache, " << Size(s.bytes_from_network())
            << " from network\n";
  std::cout << "network   " << s.inflight_requests() << " in flight, " << s.queued_requests()
            << " queued, " << Count(s.range_gets()) << " range GETs, " << Count(s.failovers())
            << " failovers, " << Count(s.resumes()) << " resumes"
            << (s.offline() ? ", OFFLINE (serving cached metadata)" : "") << "\n";
  const auto& pf = s.prefetch();
  std::cout << "prefetch  " << Count(pf.sequential_blocks()) << " read-ahead blocks, "
            << Count(pf.directory_files()) << " directory files, " << Count(pf.hinted_files())
            << " hinted files, " << Count(pf.withdrawn()) << " withdrawn; queued "
            << pf.queued_demand() + pf.queued_hint() + pf.queued_warm() + pf.queued_speculative()
            << ", at most " << pf.max_in_flight_seen() << " of " << pf.budget_requests()
            << " in flight\n";
  if (s.http_clients_size() > 0) {
    std::string line;
    for (const auto& c : s.http_clients()) {
      line += (line.empty() ? "" : ", ") + c.client() + " " + Count(c.requests()) + " requests " +
              Size(c.bytes()) + (c.errors() > 0 ? " (" + Count(c.errors()) + " errors)" : "");
    }
    std::cout << "http      " << line << "\n";
  }
  std::string errs;
  for (const auto& e : s.errors()) {
    if (e.count() > 0)
      errs += (errs.empty() ? "" : ", ") + e.error_class() + " " + Count(e.count());
  }
  // Blocks served but not cached (full disk) and dropped for failing their check.
  if (s.store_errors() > 0)
    errs += (errs.empty() ? "" : ", ") + std::string("store ") + Count(s.store_errors());
  if (s.corrupt_blocks() > 0)
    errs += (errs.empty() ? "" : ", ") + std::string("corrupt blocks ") + Count(s.corrupt_blocks());
  std::cout << "errors    " << (errs.empty() ? "none" : errs) << "\n";
  const v1::Histogram* read = nullptr;
  for (const auto& o : s.fuse_ops()) {
    if (o.op() == "read") read = &o.latency();
  }
  std::cout << "latency   read p50 " << (read ? Duration(Quantile(*read, 0.5)) : "-") << ", p99 "
            << (read ? Duration(Quantile(*read, 0.99)) : "-") << "; origin GET p50 "
            << Duration(Quantile(s.origin_get(), 0.5)) << ", p99 "
            << Duration(Quantile(s.origin_get(), 0.99)) << "  (bucket upper bounds)\n";
  if (s.namespaces_size() > 0) {
    std::cout << "\n";
    // Grouped by federation: a FEDERATION column once the node mounts several.
    auto sorted = std::vector<v1::NamespaceStats>(s.namespaces().begin(), s.namespaces().end());
    std::stable_sort(sorted.begin(), sorted.end(),
                     [](const auto& a, const auto& b) { return a.federation() < b.federation(); });
    bool several = !sorted.empty() && sorted.front().federation() != sorted.back().federation();
    rows.push_back({"NAMESPACE", "HITS", "MISSES", "HIT RATIO", "FROM CACHE", "FROM NETWORK"});
    if (several) rows.back().push_back("FEDERATION");
    for (const auto& n : sorted) {
      const auto& c = n.counters();
      rows.push_back({n.path(), Count(c.hits()), Count(c.misses()), Ratio(c.hits(), c.misses()),
                      Size(c.bytes_from_cache()), Size(c.bytes_from_network())});
      if (several) rows.back().push_back(n.federation());
    }
    Table(rows, several ? "lrrrrrl" : "lrrrrr");
  }
  if (s.warm_jobs_size() > 0) {
    std::cout << "\n";
    rows.clear();
    rows.push_back({"WARM", "FILES", "BYTES", "FAILED", "STATE", "PATHS"});
    for (const auto& w : s.warm_jobs()) {
      std::string paths;
      for (const auto& p : w.paths()) paths += (paths.empty() ? "" : " ") + p;
      rows.push_back({"#" + std::to_string(w.job_id()),
                      Count(w.files_done()) + "/" + Count(w.files_total()),
                      Size(w.bytes_done()) + "/" + Size(w.bytes_total()), Count(w.files_failed()),
                      w.cancelled()  ? "cancelled"
                      : w.finished() ? "done"
                                     : "running",
                      paths});
    }
    Table(rows, "lrrrll");
  }
}

}  // namespace perch::ctl
