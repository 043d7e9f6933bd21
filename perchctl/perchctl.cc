// perchctl: the command line over perchd's control API (proto/perch.proto).
//
// Output is for people by default (aligned tables, sizes in KiB/MiB/GiB) and
// for scripts with --json. Exit codes: 0 success; 1 the operation failed
// (a warm with errors, a verify that found bad blocks, an unhealthy node, a
// daemon error); 2 bad usage;
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
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "perch/cli_exit.h"
#include "perch/version.h"
#include "perchctl/control_client.h"
#include "perchctl/format.h"
#include "proto/control_address.h"

namespace perch::ctl {
namespace {

using nlohmann::json;
using Client = ControlClient;

// Paths inside the mount may be given relative to the working directory;
// federation URLs and paths pass through as they are.
std::string Absolute(const std::string& p) {
  if (p.find("://") != std::string::npos || p.starts_with("/")) return p;
  return (std::filesystem::current_path() / p).lexically_normal().string();
}

int Stats(Client& c, bool as_json, double watch) {
  for (;;) {
    v1::Stats s;
    auto ctx = c.Context(std::chrono::seconds(10));
    grpc::Status st = c.stub().GetStats(ctx.get(), v1::GetStatsRequest(), &s);
    if (!st.ok()) return c.Fail(st, "stats");
    if (as_json) {
      std::cout << ProtoJson(s).dump(watch > 0 ? -1 : 2) << std::endl;
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

// `frac` (0 to 1) of a bar 30 characters wide.
std::string Bar(double frac) {
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  return std::string(static_cast<size_t>(filled), '#') +
         std::string(static_cast<size_t>(width - filled), '.');
}

// Reads a stream of progress messages (Warm's, Verify's) to its end; `*last`
// is the last message (unchanged if none came). With `wait` (the caller waits
// for the end, no --detach) Ctrl-C cancels the call (`ctx`), and unless
// `as_json` each message is drawn on stderr as `line(message, first message,
// seconds since the start)`: in place on a terminal, otherwise a line every
// 5 s and the last. An exit code if the call failed (130 if Ctrl-C cancelled
// it), nothing if it ended well.
template <typename Progress, typename Line>
std::optional<int> Follow(Client& c, grpc::ClientContext& ctx,
                          grpc::ClientReaderInterface<Progress>& reader, const std::string& what,
                          bool wait, bool as_json, const Line& line, Progress* last) {
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
  Progress p, first;
  bool any = false;
  const bool tty = ::isatty(2);
  const auto started = std::chrono::steady_clock::now();
  auto last_line = started;
  while (reader.Read(&p)) {
    if (!any) first = p;
    any = true;
    *last = p;
    if (!wait || as_json) continue;
    const auto now = std::chrono::steady_clock::now();
    if (!tty && now - last_line < std::chrono::seconds(5) && !p.finished()) continue;
    last_line = now;
    const double secs = std::chrono::duration<double>(now - started).count();
    std::cerr << (tty ? "\r\x1b[K" : "") << line(p, first, secs) << (tty ? "" : "\n") << std::flush;
  }
  done = true;
  if (watcher.joinable()) watcher.join();
  grpc::Status st = reader.Finish();
  if (wait && tty && any && !as_json) std::cerr << "\n";
  if (st.ok()) return std::nullopt;
  if (g_interrupted) {
    std::cerr << "perchctl: " << what << " cancelled\n";
    return 130;
  }
  return c.Fail(st, what);
}

int Warm(Client& c, const std::vector<std::string>& paths, bool wait, bool recursive,
         bool as_json) {
  v1::WarmRequest req;
  for (const auto& p : paths) req.add_paths(Absolute(p));
  req.set_recursive(recursive);
  req.set_detach(!wait);
  grpc::ClientContext ctx;
  auto reader = c.stub().Warm(&ctx, req);
  v1::WarmProgress last;
  auto line = [](const v1::WarmProgress& p, const v1::WarmProgress& first, double secs) {
    const double rate =
        secs > 0 ? static_cast<double>(p.bytes_done() - first.bytes_done()) / secs : 0;
    const double frac =
        p.bytes_total() ? static_cast<double>(p.bytes_done()) / static_cast<double>(p.bytes_total())
                        : 0;
    std::string eta = "?";
    if (p.listing_done() && rate > 0)
      eta = Duration(static_cast<double>(p.bytes_total() - p.bytes_done()) / rate);
    if (p.finished()) eta = "0 s";
    char text[256];
    std::snprintf(text, sizeof(text), "[%s] %5.1f%%  %s / %s%s  %s/s  ETA %s  files %s/%s%s",
                  Bar(frac).c_str(), 100 * frac, Size(p.bytes_done()).c_str(),
                  Size(p.bytes_total()).c_str(), p.listing_done() ? "" : "+",
                  Size(static_cast<uint64_t>(rate)).c_str(), eta.c_str(),
                  Count(p.files_done()).c_str(), Count(p.files_total()).c_str(),
                  p.files_failed() ? (", " + Count(p.files_failed()) + " failed").c_str() : "");
    return std::string(text);
  };
  if (auto failed = Follow(c, ctx, *reader, "warm", wait, as_json, line, &last)) return *failed;
  if (as_json) {
    std::cout << ProtoJson(last).dump(2) << std::endl;
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

// `perchctl verify`: streams the check's progress (a bar on a terminal, a
// line every 5 s otherwise), then each file's verdict (`quiet`: those not
// verified only) and the totals; exit 1 when something was bad (it has been
// dropped and is fetched again by its next read).
int Verify(Client& c, const std::string& path, bool detach, bool as_json, bool quiet) {
  v1::VerifyRequest req;
  req.set_path(path.empty() ? path : Absolute(path));
  req.set_detach(detach);
  grpc::ClientContext ctx;
  auto reader = c.stub().Verify(&ctx, req);
  v1::VerifyProgress last;
  auto line = [](const v1::VerifyProgress& p, const v1::VerifyProgress&, double secs) {
    const double rate = secs > 0 ? static_cast<double>(p.bytes_done()) / secs : 0;
    const double frac = p.bytes_total() ? std::min(1.0, static_cast<double>(p.bytes_done()) /
                                                            static_cast<double>(p.bytes_total()))
                                        : (p.finished() ? 1.0 : 0.0);
    const uint64_t bad = p.corrupt_blocks() + p.digest_mismatches();
    char text[256];
    std::snprintf(text, sizeof(text), "[%s] %5.1f%%  %s / %s%s  %s/s  blocks %s/%s%s",
                  Bar(frac).c_str(), 100 * frac, Size(p.bytes_done()).c_str(),
                  Size(p.bytes_total()).c_str(), p.counted() ? "" : "+",
                  Size(static_cast<uint64_t>(rate)).c_str(), Count(p.blocks_done()).c_str(),
                  Count(p.blocks_total()).c_str(), bad ? (", " + Count(bad) + " bad").c_str() : "");
    return std::string(text);
  };
  if (auto failed = Follow(c, ctx, *reader, "verify", !detach, as_json, line, &last))
    return *failed;
  const uint64_t bad = last.corrupt_blocks() + last.digest_mismatches();
  if (as_json) {
    std::cout << ProtoJson(last).dump(2) << std::endl;
  } else if (detach) {
    std::cout << "verifying " << last.path() << " in the background (job #" << last.job_id()
              << "); `perchctl stats` counts what it finds\n";
  } else {
    // One line per file, as `sha256sum -c` prints them: "PATH: verdict (detail)".
    for (const v1::FileVerdict& f : last.files()) {
      if (quiet && f.verdict() == "verified") continue;
      std::cout << f.path() << ": " << (f.verdict() == "mismatched" ? "MISMATCHED" : f.verdict())
                << " (" << f.detail() << ")\n";
    }
    if (last.files_not_listed())
      std::cout << "(" << Count(last.files_not_listed()) << " more files not listed)\n";
    std::cout << "verified " << last.path() << ": " << Count(last.blocks_done()) << " blocks ("
              << Size(last.bytes_done()) << ") of " << Count(last.objects_done()) << " objects; ";
    if (bad == 0) {
      std::cout << "all good";
    } else {
      std::cout << Count(last.corrupt_blocks()) << " bad blocks";
      if (last.digest_mismatches())
        std::cout << ", " << Count(last.digest_mismatches())
                  << " objects not matching their digest";
      std::cout << " (dropped: fetched again on their next read)";
    }
    if (last.missing_blocks())
      std::cout << "; " << Count(last.missing_blocks()) << " evicted meanwhile";
    if (last.unreadable_blocks())
      std::cout << "; " << Count(last.unreadable_blocks()) << " UNREADABLE (disk errors)";
    if (last.objects_unverified())
      std::cout << "; " << Count(last.objects_unverified()) << " unverified";
    std::cout << "\n";
    if (last.files_size() == 0 || last.files_not_listed() > 0) {
      for (const auto& e : last.corrupt()) std::cout << "  " << e << "\n";
    }
  }
  return !detach && (bad > 0 || last.unreadable_blocks() > 0 || last.cancelled()) ? kExitFailed : 0;
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
  if (reply.accepted() == 0 && reply.rejected() > 0) {
    // As warm, pin and evict do: nothing the user named is of a mount.
    std::cerr << "perchctl: hint: " << (reply.rejected() == 1 ? "the path is" : "every path is")
              << " outside the mount; nothing hinted\n";
    return kExitUsage;
  }
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
                      {"listener_error", h.listener_error()},
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
    if (!h.listener_error().empty()) rows.push_back({"listeners", "DEGRADED", h.listener_error()});
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

// The first word that is not an option, when it names no command: a usage
// error that says which word and which command was likely meant ("stat":
// stats), where CLI11 would say only "A subcommand is required". 0 otherwise.
int UnknownCommand(const CLI::App& app, int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    if (word.starts_with("-")) {
      if (word == "--socket" && word.find('=') == std::string::npos) ++i;  // its value
      continue;
    }
    std::vector<std::string> names;
    for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
    if (std::find(names.begin(), names.end(), word) != names.end()) return 0;
    std::string near;
    for (const std::string& n : names) {
      if (n.starts_with(word) || word.starts_with(n)) near = n;
    }
    std::cerr << "perchctl: unknown command '" << word << "'"
              << (near.empty() ? "" : "; did you mean '" + near + "'?") << "\ncommands:";
    for (const std::string& n : names) std::cerr << " " << n;
    std::cerr << "\nRun with --help for more information.\n";
    return perch::cli::kExitUsage;
  }
  return 0;
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
  bool detach = false;
  auto* verify = app.add_subcommand(
      "verify",
      "check what is cached below PATH (default: everything) against its CRC32C and its "
      "server's digest; say per file: verified, unverified or mismatched (dropped)");
  verify->add_option("PATH", path);
  verify->add_flag("--detach", detach, "check in the background; print nothing more");
  verify->add_flag("--json", as_json, "print the final progress as JSON");
  bool quiet = false;
  verify->add_flag("--quiet,-q", quiet, "list only the files not verified");
  auto* health =
      app.add_subcommand("health", "is the mount serving, the federation reachable, the disk fine");
  health->add_flag("--json", as_json, "machine-readable output");

  if (int rc = UnknownCommand(app, argc, argv); rc != 0) return rc;
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
  if (verify->parsed()) return Verify(client, path, detach, as_json, quiet);
  if (hint->parsed()) return Hint(client, job, hint_paths, hint_file);
  return kExitUsage;
}
