// The control plane end to end: a real perch-devfed federation (XRootD
// origin), the real perchd with its FUSE mount, and the real perchctl binary
// talking gRPC over the daemon's unix socket. Every test has its own
// federation, cache dir, mountpoint and control socket, and cleans up in its
// destructors, also on failure.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/mounted_federation.h"
#include "tests/integration/stats_json.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Two directories of small files (one block each) and one of larger ones.
std::vector<TreeFile> ControlTree() {
  std::vector<TreeFile> files;
  for (int i = 0; i < 8; ++i)
    files.push_back({"a/f" + std::to_string(i), 1000 + 7000 * static_cast<uint64_t>(i)});
  for (int i = 0; i < 8; ++i)
    files.push_back({"b/g" + std::to_string(i), 3000 + 5000 * static_cast<uint64_t>(i)});
  for (int i = 0; i < 4; ++i) files.push_back({"pinned/p" + std::to_string(i), 60000});
  for (int i = 0; i < 24; ++i) files.push_back({"stream/s" + std::to_string(i), 60000});
  return files;
}

uint64_t SizeOf(const std::vector<TreeFile>& files, const std::string& dir) {
  uint64_t n = 0;
  for (const auto& f : files) n += f.rel.starts_with(dir + "/") ? f.size : 0;
  return n;
}

// Drops the page cache of `p` so that the next read reaches perchd.
void DropPageCache(const fs::path& p) {
  int fd = ::open(p.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0) << p;
  ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  ::close(fd);
}

class ControlTest : public MountedFederation {
 protected:
  void SetUp() override { StartFederation("control", ControlTree()); }

  // Cached bytes per federation path, from `perchctl ls --json`.
  std::map<std::string, uint64_t> Cached(const std::string& prefix) {
    std::map<std::string, uint64_t> out;
    for (const auto& o : CtlJson({"ls", prefix, "--json"})) out[o["path"]] = o["cached_bytes"];
    return out;
  }

  // Cached(prefix) once it lists `n` objects (blocks reach the disk after the
  // reads that fetched them are answered), or after 10 s.
  std::map<std::string, uint64_t> CachedOnceThereAre(const std::string& prefix, size_t n) {
    auto out = Cached(prefix);
    for (int i = 0; i < 200 && out.size() < n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      out = Cached(prefix);
    }
    return out;
  }
};

TEST_F(ControlTest, StatsCountWhatWasRead) {
  Mount();
  // Read half of the tree: directory a, each file once (a file is one block).
  uint64_t bytes = 0, files = 0;
  for (const auto& f : files_) {
    if (!f.rel.starts_with("a/")) continue;
    ASSERT_EQ(ReadFile(f.rel), Original(f.rel)) << f.rel;
    bytes += f.size;
    ++files;
  }
  // One miss per file, every byte fetched once. (The kernel may split a read
  // of one file into several requests; those after the first are hits.)
  // Blocks reach the disk after the read is answered: wait for the writes.
  json s = CtlJson({"stats", "--json"});
  for (int i = 0; i < 200 && s["cached_bytes"] != bytes; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    s = CtlJson({"stats", "--json"});
  }
  EXPECT_EQ(s["misses"], files);
  EXPECT_EQ(s["bytes_from_network"], bytes);
  EXPECT_EQ(s["cached_bytes"], bytes);
  const uint64_t hits0 = s["hits"], from_cache0 = s["bytes_from_cache"];
  EXPECT_EQ(s["inflight_requests"], 0u);
  EXPECT_EQ(s["failovers"], 0u);
  EXPECT_EQ(s["evictions"], 0u);
  EXPECT_GT(s["capacity_bytes"], 0u);
  // Counted under the namespace the director named, not the directory below it (issue 42).
  EXPECT_EQ(Element(s["namespaces"], "path", "/test")["counters"]["misses"], files);
  EXPECT_TRUE(Element(s["namespaces"], "path", "/test/a").is_null());
  EXPECT_TRUE(Element(s["namespaces"], "path", "/test/b").is_null());
  EXPECT_GE(Element(s["fuse_ops"], "op", "read")["latency"]["count"], files);
  EXPECT_EQ(s["origin_get"]["count"], files);

  // Again, past the page cache: every byte now comes from perch's cache.
  for (const auto& f : files_) {
    if (!f.rel.starts_with("a/")) continue;
    DropPageCache(mnt_ / f.rel);
    ASSERT_EQ(ReadFile(f.rel), Original(f.rel)) << f.rel;
  }
  s = CtlJson({"stats", "--json"});
  EXPECT_EQ(s["misses"], files);
  EXPECT_EQ(s["bytes_from_network"], bytes);
  EXPECT_GE(s["hits"].get<uint64_t>() - hits0, files);
  EXPECT_GE(s["bytes_from_cache"].get<uint64_t>() - from_cache0, bytes);
  const uint64_t hits = s["hits"];

  // perchd's own footprint, as the kernel sees that process (not perchctl's).
  const json& p = s["process"];
  const std::string proc = "/proc/" + std::to_string(perchd_.pid());
  std::istringstream stat(ReadLocalFile(proc + "/stat"));
  std::string field;
  std::vector<std::string> fields;
  while (stat >> field) fields.push_back(field);
  ASSERT_GT(fields.size(), 15u);  // no spaces in "(perchd)"
  const double ticks = static_cast<double>(::sysconf(_SC_CLK_TCK));
  const double cpu = (std::stod(fields[13]) + std::stod(fields[14])) / ticks;
  EXPECT_GT(p["cpu_seconds"].get<double>(), 0.0);
  EXPECT_LE(p["cpu_seconds"].get<double>(), cpu + 0.5) << cpu;
  EXPECT_LE(p["cpu_system_seconds"].get<double>(), p["cpu_seconds"].get<double>());
  uint64_t rss_pages = 0;
  std::istringstream(ReadLocalFile(proc + "/statm")) >> rss_pages >> rss_pages;
  const double rss = static_cast<double>(rss_pages * static_cast<uint64_t>(::getpagesize()));
  EXPECT_GT(p["resident_bytes"].get<double>(), rss / 2) << rss;
  EXPECT_LT(p["resident_bytes"].get<double>(), rss * 2) << rss;
  const auto count = [](const std::string& dir) {
    return static_cast<uint64_t>(std::distance(fs::directory_iterator(dir), {}));
  };
  EXPECT_NEAR(p["open_fds"].get<double>(), static_cast<double>(count(proc + "/fd")), 16);
  EXPECT_NEAR(p["threads"].get<double>(), static_cast<double>(count(proc + "/task")), 4);
  EXPECT_GT(p["max_fds"].get<uint64_t>(), p["open_fds"].get<uint64_t>());

  // The human form shows the same figures.
  RunResult human = Ctl({"stats"});
  EXPECT_EQ(human.exit_code, 0) << human.output;
  EXPECT_NE(human.output.find("hits " + std::to_string(hits) + ", misses " + std::to_string(files) +
                              ", hit ratio "),
            std::string::npos)
      << human.output;
  EXPECT_NE(human.output.find("/test"), std::string::npos) << human.output;
  EXPECT_NE(human.output.find(", cpu "), std::string::npos) << human.output;
  EXPECT_NE(human.output.find(", resident "), std::string::npos) << human.output;

  // Extended attributes: what is cached, who served it, where it lives.
  char buf[512];
  ssize_t n = ::getxattr((mnt_ / "a/f3").c_str(), "user.perch.cached_bytes", buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "22000");
  n = ::getxattr((mnt_ / "a/f3").c_str(), "user.perch.server", buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)).rfind("http://127.0.0.1:", 0), 0u);
  n = ::getxattr((mnt_ / "b/g1").c_str(), "user.perch.cached_bytes", buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "0");
  n = ::getxattr((mnt_ / "b/g1").c_str(), "user.perch.url", buf, sizeof(buf));
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), fed_->FederationUrl() + "/test/b/g1");
}

TEST_F(ControlTest, WarmCachesEveryFileSoReadsSurviveTheOriginStopping) {
  Mount();
  // A path inside the mount, as a user there would give it.
  RunResult r = Ctl({"warm", (mnt_ / "b").string(), "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("warmed 8 of 8 files"), std::string::npos) << r.output;
  auto cached = Cached((mnt_ / "b").string());
  ASSERT_EQ(cached.size(), 8u);
  for (const auto& f : files_) {
    if (f.rel.starts_with("b/")) {
      EXPECT_EQ(cached["/test/" + f.rel], f.size) << f.rel;
    }
  }
  json s = CtlJson({"stats", "--json"});
  EXPECT_EQ(s["bytes_from_network"], SizeOf(files_, "b"));
  ASSERT_EQ(s["warm_jobs"].size(), 1u);
  EXPECT_TRUE(s["warm_jobs"][0]["finished"]);
  EXPECT_EQ(s["warm_jobs"][0]["files_done"], 8u);

  // A second warm of the same tree fetches nothing.
  r = Ctl({"warm", "/test/b", "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(CtlJson({"stats", "--json"})["bytes_from_network"], SizeOf(files_, "b"));

  // The federation goes away; everything warmed still reads.
  fed_->Stop();
  for (const auto& f : files_) {
    if (f.rel.starts_with("b/")) {
      EXPECT_EQ(ReadFile(f.rel), Original(f.rel)) << f.rel;
    }
  }
}

TEST_F(ControlTest, DetachedWarmRunsInTheBackground) {
  Mount();
  RunResult r = Ctl({"warm", fed_->FederationUrl() + "/test/a"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("in the background"), std::string::npos) << r.output;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  json job;
  while (std::chrono::steady_clock::now() < until) {
    job = CtlJson({"stats", "--json"})["warm_jobs"][0];
    if (job["finished"]) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(job["finished"]) << job.dump();
  EXPECT_EQ(job["files_done"], 8u);
  EXPECT_EQ(job["bytes_done"], SizeOf(files_, "a"));
}

TEST_F(ControlTest, PinnedFilesSurviveEvictionUnpinnedOnesGo) {
  // 64 KiB blocks, a 1 MiB quota: "stream" (1.4 MiB) cannot all stay.
  Mount({"--block-size", "64K", "--cache-size", "1M"});
  RunResult r = Ctl({"pin", (mnt_ / "pinned").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pinned /test/pinned"), std::string::npos) << r.output;
  r = Ctl({"warm", "/test/pinned", "--wait"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int round = 0; round < 2; ++round) {
    for (const auto& f : files_) {
      if (f.rel.starts_with("stream/")) {
        ASSERT_EQ(ReadFile(f.rel), Original(f.rel)) << f.rel;
      }
    }
  }
  // Eviction runs in the background: wait until the cache is under its quota.
  json s;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  do {
    s = CtlJson({"stats", "--json"});
    if (s["cached_bytes"] <= s["capacity_bytes"]) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  } while (std::chrono::steady_clock::now() < until);
  EXPECT_LE(s["cached_bytes"], s["capacity_bytes"]);
  EXPECT_GT(s["evictions"], 0u);
  EXPECT_EQ(s["pinned_bytes"], SizeOf(files_, "pinned"));

  auto pinned = Cached("/test/pinned");
  ASSERT_EQ(pinned.size(), 4u);
  for (const auto& [path, bytes] : pinned) EXPECT_EQ(bytes, 60000u) << path;
  EXPECT_LT(Cached("/test/stream").size(), 24u);

  // Evict keeps pinned objects; after unpin it removes them.
  json e = CtlJson({"evict", "/test/pinned", "--json"});
  EXPECT_EQ(e["pinned_objects"], 4u);
  EXPECT_EQ(e["objects"], 0u);
  EXPECT_EQ(Ctl({"unpin", "/test/pinned/p0"}).exit_code, 4);  // not a pin itself
  ASSERT_EQ(Ctl({"unpin", "/test/pinned"}).exit_code, 0);
  e = CtlJson({"evict", "/test/pinned", "--json"});
  EXPECT_EQ(e["objects"], 4u);
  EXPECT_EQ(e["bytes"], SizeOf(files_, "pinned"));
  EXPECT_TRUE(Cached("/test/pinned").empty());
}

TEST_F(ControlTest, EvictRemovesAndTheNextReadFetchesAgain) {
  Mount();
  for (const auto& f : files_) {
    if (f.rel.starts_with("a/") || f.rel.starts_with("b/")) {
      ASSERT_EQ(ReadFile(f.rel), Original(f.rel));
    }
  }
  ASSERT_EQ(CachedOnceThereAre("/test/a", 8).size(), 8u);
  ASSERT_EQ(CachedOnceThereAre("/test/b", 8).size(), 8u);
  json e = CtlJson({"evict", (mnt_ / "a").string(), "--json"});
  EXPECT_EQ(e["objects"], 8u);
  EXPECT_EQ(e["bytes"], SizeOf(files_, "a"));
  EXPECT_TRUE(Cached("/test/a").empty());
  EXPECT_EQ(Cached("/test/b").size(), 8u);
  json s = CtlJson({"stats", "--json"});
  EXPECT_EQ(s["cached_bytes"], SizeOf(files_, "b"));

  DropPageCache(mnt_ / "a/f2");
  EXPECT_EQ(ReadFile("a/f2"), Original("a/f2"));
  json after = CtlJson({"stats", "--json"});
  EXPECT_EQ(after["misses"], s["misses"].get<uint64_t>() + 1);
}

TEST_F(ControlTest, HealthReportsAnUnreachableFederation) {
  Mount();
  json h = CtlJson({"health", "--json"});
  EXPECT_TRUE(h["healthy"]) << h.dump();
  EXPECT_TRUE(h["mounted"]);
  EXPECT_EQ(h["mountpoint"], fs::canonical(mnt_).string());
  ASSERT_FALSE(h["namespaces"].empty());
  EXPECT_TRUE(h["namespaces"][0]["reachable"]);
  EXPECT_GT(h["disk_total_bytes"], 0u);

  fed_->Stop();
  RunResult r = Ctl({"health", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  h = json::parse(r.output);
  EXPECT_FALSE(h["healthy"]);
  EXPECT_TRUE(h["mounted"]);
  EXPECT_FALSE(h["namespaces"][0]["reachable"]);
  EXPECT_FALSE(h["namespaces"][0]["error"].get<std::string>().empty());
  r = Ctl({"health"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("UNREACHABLE"), std::string::npos) << r.output;
}

// The name (comm) of each thread of `pid`, by thread id.
std::map<std::string, std::string> ThreadNames(pid_t pid) {
  std::map<std::string, std::string> out;
  for (const auto& t : fs::directory_iterator("/proc/" + std::to_string(pid) + "/task")) {
    std::string comm = ReadLocalFile(t.path() / "comm");
    while (!comm.empty() && comm.back() == '\n') comm.pop_back();
    out[t.path().filename().string()] = comm;
  }
  return out;
}

// perchd's threads carry names (top -H, perf, bench/cost.sh's CPU per thread): the network
// loop, the FUSE workers (named by the thread that starts them), the disk and jobs pools.
TEST_F(ControlTest, ThreadsAreNamedByTheirWork) {
  Mount();
  ASSERT_EQ(ReadFile("a/f3"), Original("a/f3"));  // the pools' threads name themselves at work
  std::map<std::string, int> names;
  for (int i = 0; i < 100; ++i) {
    names.clear();
    for (const auto& [tid, comm] : ThreadNames(perchd_.pid())) names[comm]++;
    if (names.count("perch-disk")) break;  // written after the read was answered
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_GE(names["perch-net"], 2) << ::testing::PrintToString(names);  // net_threads: at least 2
  EXPECT_GE(names["perch-fuse"], 1) << ::testing::PrintToString(names);
  EXPECT_GE(names["perch-disk"], 1) << ::testing::PrintToString(names);
  EXPECT_GE(names["perch-deadline"], 1) << ::testing::PrintToString(names);
}

// Each perch-net thread's time on a CPU so far (ns, /proc/.../schedstat), by thread id.
std::map<std::string, uint64_t> NetLoopTimes(pid_t pid) {
  std::map<std::string, uint64_t> out;
  for (const auto& [tid, comm] : ThreadNames(pid)) {
    if (comm != "perch-net") continue;
    out[tid] =
        std::stoull(ReadLocalFile("/proc/" + std::to_string(pid) + "/task/" + tid + "/schedstat"));
  }
  return out;
}

// net_threads = 3: three network loops, and reads of different files go to all of them
// (by path); every byte still right, every file fetched once.
TEST_F(ControlTest, ReadsSpreadOverEveryNetworkLoop) {
  const fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "net_threads = 3\n";
  Mount({"--config", config.string(), "--no-prefetch"});
  const std::map<std::string, uint64_t> before = NetLoopTimes(perchd_.pid());
  ASSERT_EQ(before.size(), 3u);
  std::vector<std::thread> readers;
  std::atomic<int> wrong{0};
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      for (size_t i = r; i < files_.size(); i += 4) {
        if (ReadFile(files_[i].rel) != Original(files_[i].rel)) wrong++;
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(wrong.load(), 0);
  json s = CtlJson({"stats", "--json"});
  EXPECT_EQ(s["misses"], files_.size());
  EXPECT_EQ(s["range_gets"], files_.size());
  EXPECT_EQ(s["failovers"], 0u);
  // Every loop ran transfers: an idle loop's thread waits in epoll and spends nothing.
  const std::map<std::string, uint64_t> after = NetLoopTimes(perchd_.pid());
  ASSERT_EQ(after.size(), 3u);
  for (const auto& [tid, ns] : after) {
    EXPECT_GT(ns - before.at(tid), 100'000u) << "loop thread " << tid << " did no transfer";
  }
  EXPECT_NE(ReadLocalFile(work_->path() / "perchd.log").find("network: 3 loops"),
            std::string::npos);
}

TEST_F(ControlTest, MetricsParseWithPromtool) {
  if (::access("/usr/bin/promtool", X_OK) != 0)
    GTEST_FAIL() << "promtool missing (Debian package prometheus)";
  Mount({"--metrics", "127.0.0.1:0"});
  for (const auto& f : files_) {
    if (f.rel.starts_with("a/")) {
      ASSERT_EQ(ReadFile(f.rel), Original(f.rel));
    }
  }
  std::string addr = CtlJson({"health", "--json"})["metrics_address"];
  ASSERT_FALSE(addr.empty());
  fs::path out = work_->path() / "metrics.txt";
  RunResult get =
      RunToExit("/usr/bin/curl", {"-sf", "-o", out.string(), "http://" + addr + "/metrics"});
  ASSERT_EQ(get.exit_code, 0) << get.output;
  std::string text = ReadLocalFile(out);
  RunResult check = RunToExit("/bin/sh", {"-c", "promtool check metrics < '" + out.string() + "'"});
  EXPECT_EQ(check.exit_code, 0) << check.output << "\n" << text;
  EXPECT_NE(text.find("\nperch_misses_total 8\n"), std::string::npos) << text;
  EXPECT_NE(text.find("perch_namespace_misses_total{namespace=\"/test\"} 8"), std::string::npos)
      << text;
  EXPECT_NE(text.find("perch_fuse_op_duration_seconds_bucket{op=\"read\",le=\"+Inf\"}"),
            std::string::npos);
  // Prometheus's standard process metrics, under their own names.
  for (const char* family :
       {"process_cpu_seconds_total counter", "process_resident_memory_bytes gauge",
        "process_open_fds gauge", "process_max_fds gauge"}) {
    EXPECT_NE(text.find("\n# TYPE " + std::string(family) + "\n"), std::string::npos)
        << family << "\n"
        << text;
  }
  EXPECT_EQ(text.find("perch_process_cpu_seconds"), std::string::npos) << text;
  RunResult missing = RunToExit(
      "/usr/bin/curl", {"-s", "-o", "/dev/null", "-w", "%{http_code}", "http://" + addr + "/x"});
  EXPECT_EQ(missing.output, "404");
}

TEST_F(ControlTest, ClearErrorsForBadPathsAndNoDaemon) {
  Mount();
  RunResult r = Ctl({"ls", "/etc"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("neither inside the mount"), std::string::npos) << r.output;
  r = Ctl({"warm", "pelican://elsewhere.example.org/test/a", "--wait"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  r = Ctl({"warm", "/test/no-such-dir", "--wait"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("no-such-dir"), std::string::npos) << r.output;

  // A second daemon may not take the control socket of a running one.
  fs::path other = work_->path() / "mnt2";
  fs::create_directories(other);
  RunResult second =
      RunPerchdToExit({"--foreground", "--cache-dir", (work_->path() / "cache2").string(),
                       "--control", "unix:" + (work_->path() / "ctl.sock").string(),
                       fed_->FederationUrl() + "/test", other.string()});
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_NE(second.output.find("another perchd already listens"), std::string::npos)
      << second.output;
  EXPECT_EQ(Ctl({"stats"}).exit_code, 0);  // the first one still answers

  perchd_.Stop();
  r = Ctl({"stats"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_NE(r.output.find("no perchd answers"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace perch::testing
