// perch-devfed: a local Pelican-style federation on loopback, for tests,
// benchmarks, the demo and for trying perch without a real federation.
//
// For each --export /NS=DIR it starts one real XRootD origin (XrdHttp) that
// serves DIR at /NS, optionally N XCache instances in front of each public
// origin, a director of our own that answers as Pelican's does, and the
// federation's discovery host on a port of its own (director.h). It prints
// what it started, first line "federation: <discovery url>", last line
// "ready", and stops everything on SIGINT/SIGTERM. Its XRootD children die
// with it even when it is SIGKILLed (xrootd_server.h); a cache that dies is
// noticed within 200 ms and no longer named by the director.
#include <pwd.h>
#include <signal.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>

#include "daemon/core/types.h"
#include "devfed/director.h"
#include "devfed/stored_digests.h"
#include "devfed/tokens.h"
#include "devfed/wan_proxy.h"
#include "devfed/xrootd_server.h"
#include "perch/cli_exit.h"
#include "perch/version.h"

namespace fs = std::filesystem;
using perch::devfed::Director;
using perch::devfed::DiscoveryHost;
using perch::devfed::Namespace;
using perch::devfed::RunCommand;
using perch::devfed::XrootdConfig;
using perch::devfed::XrootdServer;

namespace {

struct Export {
  std::string ns;
  std::string dir;
  bool protected_ = false;
  bool listings = true;
  std::string cache_control;  // "": its servers add no Cache-Control header
};

// A server the main loop watches: a cache that dies is dropped from the director.
struct Watched {
  XrootdServer* server;
  std::string name;  // "cache /ns 1", "origin /ns"
  std::string url;   // as the director names it
  bool cache;
};

// Generates a CA and a server certificate for 127.0.0.1/localhost in `dir`.
std::string MakeTls(const fs::path& dir) {
  fs::create_directories(dir / "cadir");
  fs::path ext = dir / "ext.cnf";
  std::ofstream(ext) << "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                        "keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n";
  auto p = [&](const char* f) { return (dir / f).string(); };
  if (RunCommand({"openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                  p("ca.key"), "-out", p("ca.pem"), "-days", "7", "-subj",
                  "/CN=perch-devfed CA"}) != 0 ||
      RunCommand({"openssl", "req", "-newkey", "rsa:2048", "-nodes", "-keyout", p("server.key"),
                  "-out", p("server.csr"), "-subj", "/CN=localhost"}) != 0 ||
      RunCommand({"openssl", "x509", "-req", "-in", p("server.csr"), "-CA", p("ca.pem"), "-CAkey",
                  p("ca.key"), "-CAcreateserial", "-out", p("server.pem"), "-days", "7", "-extfile",
                  ext.string()}) != 0) {
    return "could not generate TLS certificates with openssl (apt-get install openssl)";
  }
  fs::copy_file(dir / "ca.pem", dir / "cadir" / "ca.pem", fs::copy_options::overwrite_existing);
  if (RunCommand({"openssl", "rehash", (dir / "cadir").string()}) != 0)
    return "openssl rehash failed";
  RunCommand({"chown", "-R", "xrootd", dir.string()});
  fs::permissions(dir / "server.key", fs::perms::owner_read | fs::perms::owner_write);
  return "";
}

// Checks that the xrootd user can list `dir` (it serves it).
bool XrootdCanRead(const std::string& dir) {
  return RunCommand({"runuser", "-u", "xrootd", "--", "test", "-r", dir, "-a", "-x", dir}) == 0;
}

void Say(const std::string& line) {
  std::cout << line << std::endl;  // flushed: tests read it line by line
}

// The exports as the flags describe them; "" (and `out` filled) or the error.
std::string ParseExports(const std::vector<std::string>& export_args,
                         const std::vector<std::string>& protected_args,
                         const std::vector<std::string>& nolist_args,
                         const std::vector<std::string>& cache_control_args,
                         std::vector<Export>* out) {
  std::vector<Export>& exports = *out;
  for (const std::string& e : export_args) {
    size_t eq = e.find('=');
    if (eq == std::string::npos || e.empty() || e[0] != '/')
      return "--export wants /NS=DIR, got '" + e + "'";
    auto ns = perch::core::ObjectPath::Parse(e.substr(0, eq));
    if (!ns.ok() || ns->IsRoot()) {
      return "bad namespace in '" + e + "': " + (ns.ok() ? "may not be /" : ns.status().message());
    }
    std::string dir = fs::absolute(e.substr(eq + 1)).lexically_normal().string();
    if (!fs::is_directory(dir)) return dir + " is not a directory";
    for (const Export& other : exports) {
      if (other.ns == ns->str()) return ns->str() + " is exported twice";
    }
    exports.push_back({ns->str(), dir, false, true, ""});
  }
  for (const std::string& p : protected_args) {
    bool found = false;
    for (Export& e : exports) found |= (e.ns == p) && (e.protected_ = true);
    if (!found) return "--protected " + p + " names no --export";
  }
  for (const std::string& p : nolist_args) {
    bool found = false;
    for (Export& e : exports) found |= (e.ns == p) && !(e.listings = false);
    if (!found) return "--no-listings " + p + " names no --export";
  }
  for (const std::string& c : cache_control_args) {
    size_t eq = c.find('=');
    std::string value = eq == std::string::npos ? "" : c.substr(eq + 1);
    if (value.empty() || std::any_of(value.begin(), value.end(),
                                     [](unsigned char ch) { return ch < 0x20 || ch == 0x7f; })) {
      return "--cache-control wants /NS=VALUE (a header value: no control characters), got '" + c +
             "'";
    }
    auto it = std::find_if(exports.begin(), exports.end(),
                           [&](const Export& e) { return e.ns == c.substr(0, eq); });
    if (it == exports.end()) return "--cache-control " + c + " names no --export";
    if (!it->cache_control.empty()) return "--cache-control is given twice for " + it->ns;
    it->cache_control = value;
  }
  return "";
}

// Waits for SIGINT/SIGTERM; meanwhile reaps servers that die (XCache can
// crash under load) so that the director stops naming a dead cache, and
// answers SIGUSR1 with the fault proxies' counters on stderr.
void WatchUntilStopped(const sigset_t& signals, const std::vector<Watched>& watched,
                       Director& director, const perch::devfed::WanLink* wan) {
  while (true) {
    timespec tick{0, 200'000'000};
    int sig = sigtimedwait(&signals, nullptr, &tick);
    if (sig == SIGUSR1) {
      if (wan == nullptr) continue;
      const perch::devfed::FaultCounters& c = wan->fault_counters();
      std::cerr << "perch-devfed: fault proxies: " << c.body_bytes << " response body bytes, "
                << c.cut << " cut, " << c.reset << " reset, " << c.stall << " stalled, "
                << c.corrupt << " corrupted" << std::endl;
      continue;
    }
    if (sig > 0) {
      spdlog::info("signal {}: stopping", sig);
      return;
    }
    for (const Watched& w : watched) {
      std::string how;
      if (!w.server->Reap(&how)) continue;
      bool dropped = w.cache && director.DropCache(w.url);
      std::cerr << "perch-devfed: " << w.name << " (" << w.url << ") died (" << how << ")"
                << (dropped ? "; the director no longer names it" : "") << std::endl;
    }
  }
}

// What the flags ask for.
struct Settings {
  std::vector<Export> exports;
  int caches = 0;
  int port = 0;            // the director's
  int discovery_port = 0;  // the discovery host's (the federation URL's)
  bool tls = false;
  double wan_rtt_ms = 0, wan_rate_mbit = 0;
  perch::devfed::FaultOptions faults;  // corrupt: of the caches' bodies only
  uint64_t fault_seed = 1;
  std::string token_out;
  bool stored_digests = true;  // adler32 stored with each exported file (stored_digests.h)
};

// Everything a running federation owns.
struct Federation {
  std::unique_ptr<perch::devfed::WanLink> wan;  // null: no server needs a proxy
  bool emulate_wan = false;                     // a delay or rate: every server is behind it
  std::vector<std::unique_ptr<XrootdServer>> servers;
  std::unique_ptr<Director> director;
  std::unique_ptr<DiscoveryHost> discovery;
  std::vector<Watched> watched;

  // `url` as clients see it: through a proxy of the link when the link
  // emulates a WAN or when `responses` asks for something, else `url`
  // itself. "" on error.
  std::string Outside(const std::string& url, int port, std::string* err,
                      perch::devfed::ResponseOptions responses = {}) {
    if (!wan || (!emulate_wan && !responses.any())) return url;
    int proxy = wan->AddProxy(port, err, std::move(responses));
    if (proxy == 0) return "";
    return url.substr(0, url.rfind(':') + 1) + std::to_string(proxy);
  }

  void Stop() {
    if (wan) wan->Stop();
    if (discovery) discovery->Stop();
    if (director) director->Stop();
    std::vector<XrootdServer*> all;
    for (auto& s : servers) all.push_back(s.get());
    perch::devfed::StopAll(all);
  }
};

// Starts each export's origin and caches; fills `namespaces`. "" or the error.
std::string StartServers(const Settings& s, const fs::path& work, const XrootdConfig& base,
                         perch::devfed::TokenIssuer& issuer, Federation* fed,
                         std::vector<Namespace>* namespaces) {
  perch::devfed::FaultOptions origin_faults = s.faults;
  origin_faults.corrupt = 0;  // an origin's bytes are the truth
  int k = 0;
  for (const Export& e : s.exports) {
    ++k;
    if (s.stored_digests) {
      size_t n = perch::devfed::StoreAdler32(e.dir);
      spdlog::debug("{}: adler32 stored with {} files", e.ns, n);
    }
    // The origin serves <root>/NS: a tree of directories ending in a symlink to DIR.
    fs::path root = work / ("origin-" + std::to_string(k) + "-root");
    fs::path link = root / fs::path(e.ns.substr(1));
    fs::create_directories(link.parent_path());
    fs::create_symlink(e.dir, link);
    XrootdConfig oc = base;
    oc.name = "origin-" + std::to_string(k);
    oc.export_root = root.string();
    if (e.protected_) oc.extra = issuer.XrootdConfig(e.ns);
    auto origin = std::make_unique<XrootdServer>();
    std::string err = origin->Start(oc);
    if (!err.empty()) return err;
    std::string origin_url =
        fed->Outside(origin->Url(), origin->port(), &err, {origin_faults, e.cache_control});
    if (origin_url.empty()) return err;
    Namespace ns{e.ns, e.dir, e.protected_, e.listings, origin_url, {}};
    fed->watched.push_back({origin.get(), "origin " + e.ns, origin_url, false});
    int origin_port = origin->port();
    fed->servers.push_back(std::move(origin));
    for (int i = 1; !e.protected_ && i <= s.caches; ++i) {
      XrootdConfig cc = base;
      cc.name = "cache-" + std::to_string(k) + "-" + std::to_string(i);
      cc.export_root = (work / (cc.name + "-storage")).string();
      fs::create_directories(cc.export_root);
      cc.origin_port = origin_port;
      auto cache = std::make_unique<XrootdServer>();
      err = cache->Start(cc);
      if (!err.empty()) return err;
      std::string cache_url =
          fed->Outside(cache->Url(), cache->port(), &err, {s.faults, e.cache_control});
      if (cache_url.empty()) return err;
      ns.cache_urls.push_back(cache_url);
      fed->watched.push_back(
          {cache.get(), "cache " + e.ns + " " + std::to_string(i), cache_url, true});
      fed->servers.push_back(std::move(cache));
    }
    namespaces->push_back(std::move(ns));
  }
  return "";
}

// Starts the federation `s` describes in `work` and prints what it started,
// ending with "ready". "" or the error.
std::string StartFederation(const Settings& s, const fs::path& work, Federation* fed) {
  fed->emulate_wan = s.wan_rtt_ms > 0 || s.wan_rate_mbit > 0;
  bool any_cache_control = std::any_of(s.exports.begin(), s.exports.end(),
                                       [](const Export& e) { return !e.cache_control.empty(); });
  if (fed->emulate_wan || s.faults.any() || any_cache_control) {
    fed->wan = std::make_unique<perch::devfed::WanLink>(
        std::chrono::microseconds(static_cast<int64_t>(s.wan_rtt_ms * 500)), s.wan_rate_mbit,
        s.fault_seed);
  }
  XrootdConfig base;
  base.work_dir = work.string();
  if (s.tls) {
    std::string err = MakeTls(work / "tls");
    if (!err.empty()) return err;
    base.tls_cert = (work / "tls" / "server.pem").string();
    base.tls_key = (work / "tls" / "server.key").string();
    base.tls_ca_dir = (work / "tls" / "cadir").string();
  }
  bool any_protected = false;
  for (const Export& e : s.exports) any_protected |= e.protected_;
  perch::devfed::TokenIssuer issuer;
  if (any_protected) {
    std::string err = issuer.Init(work / "tokens");
    if (!err.empty()) return err;
  }
  std::vector<Namespace> namespaces;
  if (std::string err = StartServers(s, work, base, issuer, fed, &namespaces); !err.empty())
    return err;
  try {
    fed->director = std::make_unique<Director>(namespaces, s.port, base.tls_cert, base.tls_key);
    fed->discovery = std::make_unique<DiscoveryHost>(s.discovery_port, base.tls_cert, base.tls_key);
  } catch (const std::exception& ex) {
    return std::string("director: ") + ex.what();
  }
  if (any_protected && !s.token_out.empty()) {
    std::string err = issuer.WriteToken(s.token_out);
    if (!err.empty()) return err;
  }
  std::string err;
  std::string director_url = fed->Outside(fed->director->Url(), fed->director->port(), &err);
  if (director_url.empty()) return err;
  std::string federation = fed->Outside(fed->discovery->Url(), fed->discovery->port(), &err);
  if (federation.empty()) return err;
  fed->discovery->SetUrls(federation, director_url);
  Say("federation: " + federation);
  Say("director: " + director_url);
  if (s.faults.any()) {
    Say("faults: cut " + std::to_string(s.faults.cut) + ", reset " +
        std::to_string(s.faults.reset) + ", stall " + std::to_string(s.faults.stall) +
        " of origin and cache response bodies, corrupt " + std::to_string(s.faults.corrupt) +
        " of cache response bodies (seed " + std::to_string(s.fault_seed) + ")");
  }
  for (const Export& e : s.exports) {
    if (!e.cache_control.empty()) Say("cache-control " + e.ns + ": " + e.cache_control);
  }
  if (fed->emulate_wan) {
    Say("wan: rtt " + std::to_string(s.wan_rtt_ms) + " ms, rate " +
        (s.wan_rate_mbit > 0 ? std::to_string(s.wan_rate_mbit) + " Mbit/s"
                             : std::string("unlimited")) +
        " (origins, caches, the director and the discovery host are behind it)");
  }
  size_t server = 0;
  for (const Namespace& ns : namespaces) {
    Say("origin " + ns.prefix + ": " + ns.origin_url +
        " pid=" + std::to_string(fed->servers[server++]->pid()));
    for (size_t c = 0; c < ns.cache_urls.size(); ++c) {
      Say("cache " + ns.prefix + " " + std::to_string(c + 1) + ": " + ns.cache_urls[c] +
          " pid=" + std::to_string(fed->servers[server++]->pid()));
    }
  }
  if (s.tls) Say("ca: " + (work / "tls" / "ca.pem").string());
  if (any_protected && !s.token_out.empty()) Say("token: " + fs::absolute(s.token_out).string());
  Say("ready");
  return "";
}

constexpr char kHelp[] =
    "perch-devfed: run a local Pelican-style federation on 127.0.0.1.\n\n"
    "Each --export /NS=DIR is served by a real XRootD origin at federation path /NS (nested\n"
    "prefixes such as /a and /a/b get an origin each); --caches N puts N XCache servers in\n"
    "front of each public origin; a director answering as a Pelican 7.27 director does\n"
    "redirects clients to them. The federation URL is a discovery host apart from the\n"
    "director, as the OSDF's is. The first line printed is 'federation: <url>', the second\n"
    "'director: <url>', the last 'ready'. A cache that dies is reported on stderr and no\n"
    "longer named. --fault-* and --cache-control put a proxy of perch-devfed's in front of\n"
    "the origins and caches (plain HTTP only); SIGUSR1 prints its fault counters on stderr.\n"
    "For a second federation, run a second perch-devfed.\n\n"
    "Example:\n"
    "  perch-devfed --export /test=$HOME/data --caches 2\n"
    "  curl -si http://127.0.0.1:DIRECTOR_PORT/test/file.txt   # 307, Link, X-Pelican-*\n"
    "  curl -s http://127.0.0.1:DIRECTOR_PORT/api/v2.0/director/listNamespaces\n"
    "  perchd --foreground http://127.0.0.1:FEDERATION_PORT/test /mnt/test\n\n"
    "DIR must be readable by the 'xrootd' user. Stop with Ctrl-C: every server is stopped\n"
    "and the work directory removed.";

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{kHelp};
  app.set_version_flag("--version", std::string("perch-devfed ") + perch::kVersion);
  Settings settings;
  std::vector<std::string> export_args, protected_args, nolist_args, cache_control_args;
  std::string work_dir_arg, log_level = "warn";
  app.add_option("--export", export_args, "/NS=DIR: serve DIR at federation path /NS (repeatable)")
      ->required();
  app.add_option("--protected", protected_args,
                 "/NS: the origin of this export requires a bearer token");
  app.add_option(
      "--no-listings", nolist_args,
      "/NS: this export has no Listings capability (no collections-url; PROPFIND Depth 1 -> 405)");
  app.add_option("--cache-control", cache_control_args,
                 "/NS=VALUE: the origin and caches of this export answer with 'Cache-Control: "
                 "VALUE' (e.g. no-store, max-age=60; repeatable, one per export)");
  app.add_option("--caches", settings.caches,
                 "XCache servers in front of each public origin (default 0)")
      ->check(CLI::Range(0, 6));
  app.add_flag("--tls", settings.tls, "generate a CA and serve everything over HTTPS");
  bool no_stored_digests = false;
  app.add_flag("--no-stored-digests", no_stored_digests,
               "do not store each exported file's adler32 in its extended attributes before "
               "serving (the origin then computes every digest asked: XRootD 5.5 can crash so)");
  app.add_option("--port", settings.port, "director port (default: a free one)");
  app.add_option("--discovery-port", settings.discovery_port,
                 "discovery host port, the federation URL's (default: a free one): a federation "
                 "restarted with the same port keeps its URL (without --wan-*)")
      ->check(CLI::Range(0, 65535));
  app.add_option(
      "--wan-rtt", settings.wan_rtt_ms,
      "put the origins, caches, director and discovery host behind an emulated WAN link with this "
      "RTT (ms)");
  app.add_option("--wan-rate", settings.wan_rate_mbit,
                 "the emulated link's rate in Mbit/s, each direction (0: unlimited)");
  perch::devfed::FaultOptions& faults = settings.faults;
  auto fraction = CLI::Range(0.0, 1.0);
  app.add_option(
         "--fault-cut", faults.cut,
         "fraction of origin/cache response bodies cut short: the connection closes mid-body")
      ->check(fraction);
  app.add_option("--fault-reset", faults.reset, "fraction of response bodies reset (RST) mid-body")
      ->check(fraction);
  app.add_option("--fault-stall", faults.stall,
                 "fraction of response bodies that stall mid-body on an open connection")
      ->check(fraction);
  app.add_option("--fault-corrupt", faults.corrupt,
                 "fraction of cache (not origin) GET response bodies with one byte flipped; length "
                 "and connection intact")
      ->check(fraction);
  app.add_option("--fault-seed", settings.fault_seed,
                 "seed of the fault draws (default 1: repeatable runs)");
  app.add_option("--work-dir", work_dir_arg,
                 "where configs, logs and caches go (default: a new dir under /tmp)");
  app.add_option("--token-out", settings.token_out,
                 "write a bearer token valid for the protected exports here");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  if (auto rc = perch::cli::Parse(app, argc, argv)) return *rc;  // usage errors exit 2
  settings.stored_digests = !no_stored_digests;
  // Logs go to stderr: stdout carries only the lines a caller parses
  // ("federation: ...", "ready"), and a caller may stop reading it.
  spdlog::set_default_logger(spdlog::stderr_color_mt("devfed"));
  spdlog::set_level(spdlog::level::from_str(log_level));

  // Validate everything before starting anything.
  std::vector<Export>& exports = settings.exports;
  if (std::string err =
          ParseExports(export_args, protected_args, nolist_args, cache_control_args, &exports);
      !err.empty()) {
    std::cerr << "perch-devfed: " << err << "\n";
    return 2;
  }
  if (faults.cut + faults.reset + faults.stall + faults.corrupt > 1) {
    std::cerr << "perch-devfed: --fault-cut, --fault-reset, --fault-stall and --fault-corrupt add "
                 "up to more than 1 (a body gets at most one fault)\n";
    return 2;
  }
  if (faults.corrupt > 0 && settings.caches == 0) {
    std::cerr << "perch-devfed: --fault-corrupt corrupts the caches' bodies only: it needs "
                 "--caches N\n";
    return 2;
  }
  if ((faults.any() || !cache_control_args.empty()) && settings.tls) {
    std::cerr << "perch-devfed: the --fault-* and --cache-control flags need plain HTTP (the proxy "
                 "follows HTTP/1.1), not --tls\n";
    return 2;
  }
  if (getpwnam("xrootd") == nullptr || RunCommand({"sh", "-c", "command -v xrootd"}) != 0) {
    std::cerr << "perch-devfed: xrootd is not installed (apt-get install xrootd-server "
                 "xrootd-server-plugins)\n";
    return 1;
  }
  for (const Export& e : exports) {
    if (!XrootdCanRead(e.dir)) {
      std::cerr << "perch-devfed: user 'xrootd' cannot read " << e.dir
                << " (chmod a+rX it and its parents)\n";
      return 1;
    }
  }

  // Block the stop signals now; a thread-free sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGUSR1);  // not a stop: prints the fault counters
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  fs::path work;
  if (work_dir_arg.empty()) {
    std::string t = (fs::temp_directory_path() / "perch-devfed-XXXXXX").string();
    if (mkdtemp(t.data()) == nullptr) {
      std::perror("perch-devfed: mkdtemp");
      return 1;
    }
    work = t;
  } else {
    work = fs::absolute(work_dir_arg) / ("perch-devfed-" + std::to_string(getpid()));
    fs::create_directories(work);
  }
  fs::permissions(work, fs::perms(0755));

  Federation fed;
  int rc = 0;
  if (std::string err = StartFederation(settings, work, &fed); !err.empty()) {
    std::cerr << "perch-devfed: " << err << "\n";
    rc = 1;
  } else {
    WatchUntilStopped(stop_signals, fed.watched, *fed.director, fed.wan.get());
  }
  fed.Stop();
  std::error_code ec;
  fs::remove_all(work, ec);
  return rc;
}
