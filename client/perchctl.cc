// perchctl: the command line over perchd's control API (proto/perch.proto).
//
// Output is for people by default (aligned tables, sizes in KiB/MiB/GiB) and
// for scripts with --json. Exit codes: 0 success; 1 the operation failed
// (a warm with errors, an unhealthy node, a daemon error); 2 bad usage;
// 3 no daemon answers at the address; 4 not found (e.g. unpin of a path that
// is not pinned); 5 the control socket refuses this user.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "client/cli_exit.h"
#include "client/control_client.h"
#include "perch/version.h"
#include "proto/control_address.h"

namespace perch::ctl {
namespace {

using nlohmann::json;

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
  std::string s = std::to_string(n);
  for (int i = static_cast<int>(s.size()) - 3; i > 0; i -= 3) s.insert(static_cast<size_t>(i), ",");
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

// The upper bound of the bucket holding quantile `q` (0 when empty).
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

// Prints rows with each column padded to its widest cell; `align` has an 'l'
// (left) or 'r' (right, for numbers) per column.
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

using Client = ControlClient;

// Paths inside the mount may be given relative to the working directory;
// federation URLs and paths pass through as they are.
std::string Absolute(const std::string& p) {
  if (p.find("://") != std::string::npos || p.starts_with("/")) return p;
  return (std::filesystem::current_path() / p).lexically_normal().string();
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

json HistogramJson(const v1::Histogram& h) {
  return json{{"count", h.count()},
              {"sum_seconds", h.sum_seconds()},
              {"p50_seconds", Quantile(h, 0.5)},
              {"p99_seconds", Quantile(h, 0.99)}};
}

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

int Stats(Client& c, bool as_json, double watch) {
  for (;;) {
    v1::Stats s;
    auto ctx = c.Context(std::chrono::seconds(10));
    grpc::Status st = c.stub().GetStats(ctx.get(), v1::GetStatsRequest(), &s);
    if (!st.ok()) return c.Fail(st, "stats");
    if (as_json) {
      std::cout << StatsJson(s).dump(watch > 0 ? -1 : 2) << std::endl;
    } else {
      if (watch > 0 && ::isatty(1)) std::cout << "\x1b[H\x1b[2J";
      PrintStats(s);
      std::cout.flush();
    }
    if (watch <= 0) return 0;
    std::this_thread::sleep_for(std::chrono::duration<double>(watch));
  }
}

volatile std::sig_atomic_t g_interrupted = 0;

int Warm(Client& c, const std::vector<std::string>& paths, bool wait, bool recursive,
         bool as_json) {
  v1::WarmRequest req;
  for (const auto& p : paths) req.add_paths(Absolute(p));
  req.set_recursive(recursive);
  req.set_detach(!wait);
  grpc::ClientContext ctx;
  auto reader = c.stub().Warm(&ctx, req);
  // Ctrl-C cancels the call, and with it the warm.
  std::thread watcher;
  std::atomic<bool> done{false};
  if (wait) {
    std::signal(SIGINT, [](int) { g_interrupted = 1; });
    watcher = std::thread([&] {
      while (!done) {
        if (g_interrupted) {
          ctx.TryCancel();
          return;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    });
  }
  v1::WarmProgress p, last;
  bool any = false;
  const bool tty = ::isatty(2);
  auto started = std::chrono::steady_clock::now();
  uint64_t start_bytes = 0;
  auto last_line = started;  // without a terminal: a line every 5 s and the last one
  while (reader->Read(&p)) {
    if (!any) start_bytes = p.bytes_done();
    any = true;
    last = p;
    if (!wait || as_json) continue;
    auto now = std::chrono::steady_clock::now();
    if (!tty && now - last_line < std::chrono::seconds(5) && !p.finished()) continue;
    last_line = now;
    double secs = std::chrono::duration<double>(now - started).count();
    double rate = secs > 0 ? static_cast<double>(p.bytes_done() - start_bytes) / secs : 0;
    double frac = p.bytes_total()
                      ? static_cast<double>(p.bytes_done()) / static_cast<double>(p.bytes_total())
                      : 0;
    std::string eta = "?";
    if (p.listing_done() && rate > 0)
      eta = Duration(static_cast<double>(p.bytes_total() - p.bytes_done()) / rate);
    if (p.finished()) eta = "0 s";
    const int width = 30;
    int filled = static_cast<int>(frac * width);
    std::string bar = std::string(static_cast<size_t>(filled), '#') +
                      std::string(static_cast<size_t>(width - filled), '.');
    char line[256];
    std::snprintf(line, sizeof(line), "[%s] %5.1f%%  %s / %s%s  %s/s  ETA %s  files %s/%s%s",
                  bar.c_str(), 100 * frac, Size(p.bytes_done()).c_str(),
                  Size(p.bytes_total()).c_str(), p.listing_done() ? "" : "+",
                  Size(static_cast<uint64_t>(rate)).c_str(), eta.c_str(),
                  Count(p.files_done()).c_str(), Count(p.files_total()).c_str(),
                  p.files_failed() ? (", " + Count(p.files_failed()) + " failed").c_str() : "");
    std::cerr << (tty ? "\r\x1b[K" : "") << line << (tty ? "" : "\n") << std::flush;
  }
  done = true;
  if (watcher.joinable()) watcher.join();
  grpc::Status st = reader->Finish();
  if (wait && tty && any && !as_json) std::cerr << "\n";
  if (!st.ok()) {
    if (g_interrupted) {
      std::cerr << "perchctl: warm cancelled\n";
      return 130;
    }
    return c.Fail(st, "warm");
  }
  if (as_json) {
    std::cout << WarmJson(last).dump(2) << std::endl;
  } else if (!wait) {
    std::cout << "warming in the background (job #" << last.job_id()
              << "); `perchctl stats` shows its progress\n";
  } else {
    std::cout << "warmed " << Count(last.files_done()) << " of " << Count(last.files_total())
              << " files (" << Size(last.bytes_done()) << ")";
    if (last.files_failed()) std::cout << "; " << Count(last.files_failed()) << " failed";
    std::cout << "\n";
    for (const auto& e : last.errors()) std::cerr << "  " << e << "\n";
  }
  return wait && (last.files_failed() > 0 || last.cancelled()) ? kExitFailed : 0;
}

int PinCmd(Client& c, const std::string& path, bool pin) {
  v1::PinRequest req;
  req.set_path(Absolute(path));
  v1::PinReply reply;
  auto ctx = c.Context();
  grpc::Status st =
      pin ? c.stub().Pin(ctx.get(), req, &reply) : c.stub().Unpin(ctx.get(), req, &reply);
  if (!st.ok()) return c.Fail(st, pin ? "pin" : "unpin");
  std::cout << (pin ? "pinned " : "unpinned ") << reply.path() << "\n";
  if (reply.pins_size() > 0) {
    std::cout << "pins:";
    for (const auto& p : reply.pins()) std::cout << " " << p;
    std::cout << "\n";
  }
  return 0;
}

int Evict(Client& c, const std::string& path, bool as_json) {
  v1::EvictRequest req;
  req.set_path(Absolute(path));
  v1::EvictReply r;
  auto ctx = c.Context();
  grpc::Status st = c.stub().Evict(ctx.get(), req, &r);
  if (!st.ok()) return c.Fail(st, "evict");
  if (as_json) {
    std::cout << json{{"path", r.path()},
                      {"objects", r.objects()},
                      {"blocks", r.blocks()},
                      {"bytes", r.bytes()},
                      {"pinned_objects", r.pinned_objects()},
                      {"busy_blocks", r.busy_blocks()}}
                     .dump(2)
              << std::endl;
    return 0;
  }
  std::cout << "evicted " << r.path() << ": " << Count(r.objects()) << " objects, "
            << Size(r.bytes()) << "\n";
  if (r.pinned_objects())
    std::cout << "kept " << Count(r.pinned_objects()) << " pinned objects (unpin first)\n";
  if (r.busy_blocks())
    std::cout << "kept " << Count(r.busy_blocks()) << " blocks being read right now\n";
  return 0;
}

int Ls(Client& c, const std::string& path, bool as_json) {
  v1::ListCachedRequest req;
  req.set_path(path.empty() ? path : Absolute(path));
  req.set_page_size(1000);
  json all = json::array();
  // Rows by federation (the node lists each mount's objects in turn).
  std::map<std::string, std::vector<std::vector<std::string>>> rows;
  uint64_t total = 0, count = 0;
  for (;;) {
    v1::ListCachedReply reply;
    auto ctx = c.Context();
    grpc::Status st = c.stub().ListCached(ctx.get(), req, &reply);
    if (!st.ok()) return c.Fail(st, "ls");
    for (const auto& o : reply.objects()) {
      total += o.cached_bytes();
      ++count;
      if (as_json) {
        all.push_back(json{{"path", o.path()},
                           {"size", o.size()},
                           {"cached_bytes", o.cached_bytes()},
                           {"blocks", o.blocks()},
                           {"pinned", o.pinned()},
                           {"federation", o.federation()}});
      } else {
        rows[o.federation()].push_back(
            {Size(o.cached_bytes()), Size(o.size()), o.pinned() ? "pin" : "", o.path()});
      }
    }
    if (reply.next_page_token().empty()) break;
    req.set_page_token(reply.next_page_token());
  }
  if (as_json) {
    std::cout << all.dump(2) << std::endl;
  } else {
    for (auto& [federation, group] : rows) {
      if (rows.size() > 1)
        std::cout << (&group == &rows.begin()->second ? "" : "\n") << federation << "\n";
      group.insert(group.begin(), {"CACHED", "SIZE", "PIN", "PATH"});
      Table(group, "rrll");
    }
    std::cout << Count(count) << " cached objects, " << Size(total) << "\n";
  }
  return 0;
}

int Hint(Client& c, const std::string& job, const std::vector<std::string>& paths,
         const std::string& file) {
  v1::HintRequest req;
  req.set_job(job);
  for (const auto& p : paths) req.add_paths(Absolute(p));
  if (!file.empty()) {
    std::ifstream in_file;
    std::istream* in = &std::cin;
    if (file != "-") {
      in_file.open(file);
      if (!in_file) {
        std::cerr << "perchctl: cannot read " << file << "\n";
        return kExitUsage;
      }
      in = &in_file;
    }
    std::string line;
    while (std::getline(*in, line)) {
      if (!line.empty()) req.add_paths(Absolute(line));
    }
  }
  v1::HintReply reply;
  auto ctx = c.Context(std::chrono::seconds(120));
  grpc::Status st = c.stub().Hint(ctx.get(), req, &reply);
  if (!st.ok()) return c.Fail(st, "hint");
  std::cout << "hinted " << Count(reply.accepted()) << " paths for job " << job;
  if (reply.rejected())
    std::cout << " (" << Count(reply.rejected()) << " outside the mount, ignored)";
  std::cout << "\n";
  return 0;
}

int Health(Client& c, bool as_json) {
  v1::HealthReply h;
  auto ctx = c.Context();
  grpc::Status st = c.stub().Health(ctx.get(), v1::HealthRequest(), &h);
  if (!st.ok()) return c.Fail(st, "health");
  if (as_json) {
    json ns = json::array(), mounts = json::array();
    for (const auto& n : h.namespaces()) {
      ns.push_back(json{{"path", n.path()},
                        {"reachable", n.reachable()},
                        {"latency_ms", n.latency_ms()},
                        {"error", n.error()},
                        {"federation", n.federation()}});
    }
    for (const auto& m : h.mounts()) {
      mounts.push_back(json{{"mountpoint", m.mountpoint()},
                            {"federation_url", m.federation_url()},
                            {"mounted", m.mounted()},
                            {"offline", m.offline()},
                            {"healthy", m.healthy()}});
    }
    std::cout << json{{"healthy", h.healthy()},
                      {"mountpoint", h.mountpoint()},
                      {"federation_url", h.federation_url()},
                      {"mounted", h.mounted()},
                      {"offline", h.offline()},
                      {"namespaces", ns},
                      {"mounts", mounts},
                      {"cache_dir", h.cache_dir()},
                      {"cache_capacity_bytes", h.cache_capacity_bytes()},
                      {"cache_used_bytes", h.cache_used_bytes()},
                      {"disk_total_bytes", h.disk_total_bytes()},
                      {"disk_free_bytes", h.disk_free_bytes()},
                      {"disk_error", h.disk_error()},
                      {"store_error", h.store_error()},
                      {"version", h.version()},
                      {"pid", h.pid()},
                      {"control_address", h.control_address()},
                      {"metrics_address", h.metrics_address()},
                      {"http_address", h.http_address()}}
                     .dump(2)
              << std::endl;
  } else {
    std::cout << (h.healthy() ? "healthy" : "UNHEALTHY") << ": perchd " << h.version() << " (pid "
              << h.pid() << ")\n";
    std::vector<std::vector<std::string>> rows;
    // Each mount, then its federation's namespaces.
    for (const auto& m : h.mounts()) {
      rows.push_back(
          {"mount", m.mountpoint() + " <- " + m.federation_url(),
           m.mounted() ? (m.offline() ? "mounted, OFFLINE" : "mounted") : "NOT MOUNTED"});
      for (const auto& n : h.namespaces()) {
        if (n.federation() != m.federation_url()) continue;
        rows.push_back({"federation", n.path(),
                        n.reachable() ? "reachable (" + std::to_string(n.latency_ms()) + " ms)"
                                      : "UNREACHABLE: " + n.error()});
      }
    }
    rows.push_back({"cache", h.cache_dir(),
                    Size(h.cache_used_bytes()) + " of " + Size(h.cache_capacity_bytes()) +
                        " used; disk " +
                        (h.disk_error().empty()
                             ? Size(h.disk_free_bytes()) + " free of " + Size(h.disk_total_bytes())
                             : "ERROR " + h.disk_error())});
    if (!h.store_error().empty()) rows.push_back({"store", "DEGRADED", h.store_error()});
    rows.push_back({"control", h.control_address(), ""});
    if (!h.metrics_address().empty())
      rows.push_back({"metrics", "http://" + h.metrics_address() + "/metrics", ""});
    if (!h.http_address().empty()) rows.push_back({"http", "http://" + h.http_address() + "/", ""});
    for (auto& r : rows) {
      std::cout << "  " << r[0] << std::string(12 - std::min<size_t>(12, r[0].size()), ' ') << r[1]
                << (r[2].empty() ? "" : "  " + r[2]) << "\n";
    }
  }
  return h.healthy() ? 0 : kExitFailed;
}

}  // namespace
}  // namespace perch::ctl

int main(int argc, char** argv) {
  using namespace perch::ctl;
  CLI::App app{"perchctl: look at and steer the perch node cache (perchd)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("perchctl ") + perch::kVersion);
  std::string socket = perch::DefaultClientSocket();
  app.add_option("--socket", socket, "perchd's control socket, or tcp:HOST:PORT ($PERCH_SOCKET)")
      ->capture_default_str();
  bool as_json = false;
  double watch = 0;
  auto* stats = app.add_subcommand("stats", "cache, network and latency counters");
  stats->add_flag("--json", as_json, "machine-readable output");
  stats->add_option("--watch", watch, "repeat every SECONDS")->expected(0, 1)->default_str("2");

  std::vector<std::string> warm_paths;
  bool wait = false, no_recursive = false;
  auto* warm = app.add_subcommand("warm", "fetch files or directory trees into the cache");
  warm->add_option("PATH", warm_paths, "paths in the mount, federation URLs or federation paths")
      ->required();
  warm->add_flag("--wait", wait, "wait with a progress bar until done (Ctrl-C cancels the warm)");
  warm->add_flag("--no-recursive", no_recursive, "only the files directly in a directory");
  warm->add_flag("--json", as_json, "print the final progress as JSON");

  std::string path;  // ls without PATH: "" is the whole mount
  auto* pin = app.add_subcommand("pin", "keep everything cached below PATH from eviction");
  pin->add_option("PATH", path)->required();
  auto* unpin = app.add_subcommand("unpin", "remove a pin");
  unpin->add_option("PATH", path)->required();
  auto* evict = app.add_subcommand("evict", "remove what is cached below PATH");
  evict->add_option("PATH", path)->required();
  evict->add_flag("--json", as_json, "machine-readable output");
  auto* ls = app.add_subcommand("ls", "list cached objects below PATH (default: everything)");
  ls->add_option("PATH", path);
  ls->add_flag("--json", as_json, "machine-readable output");
  std::string job = "perchctl", hint_file;
  std::vector<std::string> hint_paths;
  auto* hint = app.add_subcommand(
      "hint", "announce the order in which files will be read (prefetched in order)");
  hint->add_option("PATH", hint_paths, "paths in reading order");
  hint->add_option("--file", hint_file, "read paths, one per line, from FILE ('-' for stdin)");
  hint->add_option("--job", job, "the job's name; a new list for the same job replaces the old one")
      ->capture_default_str();
  auto* health =
      app.add_subcommand("health", "is the mount serving, the federation reachable, the disk fine");
  health->add_flag("--json", as_json, "machine-readable output");

  if (auto rc = perch::cli::Parse(app, argc, argv)) return *rc;
  if (stats->count("--watch") > 0 && watch <= 0) watch = 2;
  Client client(socket);
  if (int rc = client.Connect(); rc != 0) return rc;
  if (stats->parsed()) return Stats(client, as_json, watch);
  if (warm->parsed()) return Warm(client, warm_paths, wait, !no_recursive, as_json);
  if (pin->parsed()) return PinCmd(client, path, true);
  if (unpin->parsed()) return PinCmd(client, path, false);
  if (evict->parsed()) return Evict(client, path, as_json);
  if (ls->parsed()) return Ls(client, path, as_json);
  if (health->parsed()) return Health(client, as_json);
  if (hint->parsed()) return Hint(client, job, hint_paths, hint_file);
  return kExitUsage;
}
