// Several mounts, one daemon, one cache (issue #10 item 2): two federations
// (two perch-devfed processes, each exporting /data) mounted by one perchd
// from a TOML config of two [[mount]] tables. Each reads byte-exact; a quota
// smaller than what both hold evicts across the federations and is under
// quota once eviction has run (blocks just stored may pass it for a moment);
// per-namespace stats add up to the totals; perchctl works with paths
// of each mount (and says which federations a shared federation path names);
// a restart with both federations down serves what is cached under each.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

// 8 MiB and a bit per federation; the quota (12 MiB) holds one, not both.
std::vector<TreeFile> Files() {
  return {{"a/f0.bin", 2 * kMiB},
          {"a/f1.bin", 2 * kMiB},
          {"b/g0.bin", 2 * kMiB},
          {"b/g1.bin", 2 * kMiB},
          {"small.txt", 100000}};
}

class MultiMountTest : public ::testing::Test {
 protected:
  struct Fed {
    fs::path tree, mnt;
    std::unique_ptr<DevFed> devfed;
    std::string url;  // the mounted federation URL (.../data)
  };

  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("multi-mount");
    for (const char* name : {"one", "two"}) {
      Fed f;
      f.tree = work_->path() / (std::string("tree-") + name);
      // Different bytes under the same names: a mix-up between the federations shows.
      std::vector<TreeFile> files = Files();
      if (std::string(name) == "two") files.push_back({"only-two.txt", 12345});
      CreateTestTree(f.tree, files);
      if (std::string(name) == "two") {
        // CreateTestTree's bytes depend on the name only: make two's differ.
        for (const TreeFile& t : Files()) {
          std::fstream out(f.tree / t.rel, std::ios::in | std::ios::out | std::ios::binary);
          out.seekp(0);
          out << "federation two";
        }
      }
      DevFed::Options opts;
      opts.exports.push_back({"/data", f.tree.string(), false});
      f.devfed = std::make_unique<DevFed>(opts);
      ASSERT_EQ(f.devfed->Start(), "");
      f.url = f.devfed->FederationUrl() + "/data";
      f.mnt = work_->path() / (std::string("mnt-") + name);
      fs::create_directories(f.mnt);
      feds_.push_back(std::move(f));
    }
    config_ = work_->path() / "perchd.toml";
    std::ofstream(config_) << "[[mount]]\nfederation = \"" << feds_[0].url << "\"\nmountpoint = \""
                           << feds_[0].mnt.string() << "\"\n\n[[mount]]\nfederation = \""
                           << feds_[1].url << "\"\nmountpoint = \"" << feds_[1].mnt.string()
                           << "\"\n";
  }

  void TearDown() override {
    perchd_.Stop();
    // PerchdProcess cleans up the first mountpoint; the second is ours.
    for (const Fed& f : feds_) {
      if (IsMounted(f.mnt))
        (void)std::system(("fusermount3 -u -z '" + f.mnt.string() + "' 2>/dev/null").c_str());
    }
  }

  void Start() {
    std::vector<std::string> args = {"--config",     config_.string(),
                                     "--cache-dir",  (work_->path() / "cache").string(),
                                     "--cache-size", "12M",
                                     "--block-size", "1M",
                                     "--op-timeout", "20s",
                                     "--control",    "unix:" + Socket()};
    ASSERT_EQ(perchd_.Start(args, feds_[0].mnt, work_->path() / "perchd.log"), "");
    // Both mounts are up before perchd reports ready; the harness waits for the first.
    for (int i = 0; i < 100 && !IsMounted(feds_[1].mnt); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_TRUE(IsMounted(feds_[1].mnt)) << perchd_.Log();
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  RunResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", Socket()});
    return RunToExit(PERCHCTL_PATH, args, std::chrono::seconds(120));
  }

  json CtlJson(std::vector<std::string> args) {
    RunResult r = Ctl(args);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    try {
      return json::parse(r.output);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.output;
      return json();
    }
  }

  // `perchctl health --json` (exit 1 when unhealthy, as offline is).
  json Health() {
    RunResult r = Ctl({"health", "--json"});
    try {
      return json::parse(r.output);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not JSON: " << e.what() << "\n" << r.output;
      return json();
    }
  }

  // Takes each mount's federation URL as perchd shows it (normalized).
  void LearnUrls() {
    json h = Health();
    for (Fed& f : feds_) {
      for (const json& m : h["mounts"]) {
        if (m["mountpoint"] == fs::canonical(f.mnt).string() && m["federation_url"].is_string()) {
          f.url = m["federation_url"].get<std::string>();
        }
      }
    }
  }

  // Reads every file of federation `i` through its mount, byte-exact, with
  // the cache under quota after each.
  void ReadAll(size_t i) {
    for (const TreeFile& t : Files()) {
      ASSERT_EQ(ReadLocalFile(feds_[i].mnt / t.rel), ReadLocalFile(feds_[i].tree / t.rel))
          << i << " " << t.rel;
      json s = SettledStats();
      ASSERT_LE(s["cached_bytes"].get<uint64_t>(), s["capacity_bytes"].get<uint64_t>()) << s.dump();
    }
  }

  // `perchctl stats --json` once eviction has brought the cache under its
  // quota (or after 20 s, the answer then). Eviction is a pass on the disk
  // thread after blocks are stored, and skips blocks being read: until it
  // has run, the blocks just stored (a read's, the prefetcher's) may take the
  // cache past its quota for a moment, as they may in production.
  json SettledStats() {
    json s;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    do {
      s = CtlJson({"stats", "--json"});
      if (!s.is_object() ||
          s["cached_bytes"].get<uint64_t>() <= s["capacity_bytes"].get<uint64_t>())
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (std::chrono::steady_clock::now() < until);
    return s;
  }

  // Bytes cached per federation URL, from `perchctl ls --json`.
  std::map<std::string, uint64_t> CachedByFederation(const std::string& path = "") {
    std::vector<std::string> args = {"ls", "--json"};
    if (!path.empty()) args.insert(args.begin() + 1, path);
    std::map<std::string, uint64_t> out;
    json listed = CtlJson(args);
    for (const json& o : listed) {
      if (!o.is_object() || !o["federation"].is_string() || !o["cached_bytes"].is_number()) {
        ADD_FAILURE() << "unexpected ls entry: " << listed.dump();
        break;
      }
      out[o["federation"].get<std::string>()] += o["cached_bytes"].get<uint64_t>();
    }
    return out;
  }

  std::unique_ptr<TempDir> work_;
  std::vector<Fed> feds_;
  fs::path config_;
  PerchdProcess perchd_;  // stopped in TearDown, before the federations go
};

TEST_F(MultiMountTest, TwoFederationsShareOneCacheAndSurviveARestartOffline) {
  Start();
  LearnUrls();
  uint64_t per_fed = 0;
  for (const TreeFile& t : Files()) per_fed += t.size;
  ASSERT_NE(ReadLocalFile(feds_[0].mnt / "a/f0.bin"), ReadLocalFile(feds_[1].mnt / "a/f0.bin"));
  EXPECT_TRUE(fs::exists(feds_[1].mnt / "only-two.txt"));
  EXPECT_FALSE(fs::exists(feds_[0].mnt / "only-two.txt"));

  // One quota over both: reading two evicts one's blocks, reading one again two's.
  ReadAll(0);
  ReadAll(1);
  std::map<std::string, uint64_t> cached = CachedByFederation();
  EXPECT_LT(cached[feds_[0].url], per_fed) << "nothing of federation one was evicted";
  EXPECT_GT(cached[feds_[1].url], 0u);
  // Opens keep the kernel's page cache (immutable files): drop it, so that
  // one's evicted blocks are read, and fetched, again.
  { std::ofstream("/proc/sys/vm/drop_caches") << "1\n"; }
  ReadAll(0);
  cached = CachedByFederation();
  // (Two also has only-two.txt, which its directory's prefetch may have brought.)
  EXPECT_LT(cached[feds_[1].url], per_fed + 12345) << "nothing of federation two was evicted";
  json s = SettledStats();
  EXPECT_GT(s["evictions"].get<uint64_t>(), 0u);
  EXPECT_LE(s["cached_bytes"].get<uint64_t>(), 12 * kMiB);
  EXPECT_EQ(s["capacity_bytes"].get<uint64_t>(), 12 * kMiB);

  // Per-namespace counts, each naming its federation, add up to the totals.
  std::map<std::string, int> namespaces_of;
  for (const json& n : s["namespaces"]) namespaces_of[n["federation"]]++;
  ASSERT_EQ(namespaces_of.size(), 2u) << s.dump();
  for (const char* key : {"hits", "misses", "bytes_from_cache", "bytes_from_network"}) {
    uint64_t sum = 0;
    for (const json& n : s["namespaces"]) sum += n["counters"][key].get<uint64_t>();
    EXPECT_EQ(sum, s[key].get<uint64_t>()) << key << " " << s.dump();
  }
  for (const Fed& f : feds_) EXPECT_TRUE(namespaces_of.contains(f.url)) << s["namespaces"].dump();

  // perchctl paths of each mount: mount paths, federation URLs; /data is
  // both federations' path, so it is ambiguous and the error names both.
  cached = CachedByFederation(feds_[1].mnt.string());
  EXPECT_EQ(cached.size(), 1u);
  EXPECT_TRUE(cached.count(feds_[1].url));
  cached = CachedByFederation(feds_[0].url + "/a");
  EXPECT_TRUE(cached.size() <= 1 && !cached.count(feds_[1].url));
  RunResult ambiguous = Ctl({"evict", "/data"});
  EXPECT_NE(ambiguous.exit_code, 0);
  EXPECT_NE(ambiguous.output.find("ambiguous"), std::string::npos) << ambiguous.output;
  EXPECT_NE(ambiguous.output.find(feds_[0].url), std::string::npos) << ambiguous.output;
  EXPECT_NE(ambiguous.output.find(feds_[1].url), std::string::npos) << ambiguous.output;
  for (const Fed& f : feds_) {
    json e = CtlJson({"evict", "--json", f.mnt.string()});
    EXPECT_EQ(e["path"], "/data");
  }
  EXPECT_EQ(CtlJson({"stats", "--json"})["cached_bytes"].get<uint64_t>(), 0u);
  // One warm is one mount's: paths of two are refused (and name both federations).
  RunResult two_mounts =
      Ctl({"warm", (feds_[0].mnt / "small.txt").string(), (feds_[1].mnt / "small.txt").string()});
  EXPECT_NE(two_mounts.exit_code, 0);
  EXPECT_NE(two_mounts.output.find("one mount"), std::string::npos) << two_mounts.output;
  // Warm one file under each mount, by mount path and by URL.
  json w = CtlJson({"warm", "--wait", "--json", (feds_[0].mnt / "small.txt").string()});
  EXPECT_EQ(w["files_done"], 1) << w.dump();
  w = CtlJson({"warm", "--wait", "--json", feds_[1].url + "/b/g0.bin"});
  EXPECT_EQ(w["files_done"], 1) << w.dump();
  ASSERT_EQ(ReadLocalFile(feds_[1].mnt / "only-two.txt"),
            ReadLocalFile(feds_[1].tree / "only-two.txt"));
  // Plain ls groups by federation: each URL heads its objects.
  RunResult ls = Ctl({"ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.output;
  for (const Fed& f : feds_)
    EXPECT_NE(ls.output.find(f.url + "\n"), std::string::npos) << ls.output;
  json h = Health();
  ASSERT_EQ(h["mounts"].size(), 2u) << h.dump();
  for (const json& m : h["mounts"]) EXPECT_TRUE(m["mounted"].get<bool>()) << h.dump();

  // Restart with both federations gone: what is cached under each mount reads.
  ASSERT_EQ(perchd_.Stop(), 0) << perchd_.Log();
  for (Fed& f : feds_) f.devfed->Stop();
  Start();
  EXPECT_EQ(ReadLocalFile(feds_[0].mnt / "small.txt"), ReadLocalFile(feds_[0].tree / "small.txt"));
  EXPECT_EQ(ReadLocalFile(feds_[1].mnt / "b/g0.bin"), ReadLocalFile(feds_[1].tree / "b/g0.bin"));
  EXPECT_EQ(ReadLocalFile(feds_[1].mnt / "only-two.txt"),
            ReadLocalFile(feds_[1].tree / "only-two.txt"));
  h = Health();
  ASSERT_EQ(h["mounts"].size(), 2u) << h.dump();
  // Both are mounted and serve; neither federation answers.
  for (const json& m : h["mounts"]) {
    EXPECT_TRUE(m["mounted"].get<bool>()) << h.dump();
    EXPECT_FALSE(m["healthy"].get<bool>()) << h.dump();
  }
}

}  // namespace
}  // namespace perch::testing
