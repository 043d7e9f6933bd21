// Issue 28: the mount against the export it serves, through a reader that is
// not perch (readdir, stat and read of the export directory itself), on
// seeded hostile trees (tests/integration/hostile_tree.h): every name the
// origin accepts, sizes around a block, a path near PATH_MAX, a directory of
// thousands of entries. Cold, through the HTTP endpoint, and again after
// perchd restarts on its cache. The seed is in every failure message;
// PERCH_DIFF_SEEDS="s1 s2 ..." runs others (bench/differential.sh runs many).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "daemon/uri/percent.h"
#include "tests/integration/hostile_tree.h"
#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kBlock = 64 << 10;

std::vector<uint64_t> Seeds() {
  std::vector<uint64_t> seeds = {1, 2, 3};
  if (const char* env = std::getenv("PERCH_DIFF_SEEDS")) {
    seeds.clear();
    std::istringstream in(env);
    for (uint64_t s; in >> s;) seeds.push_back(s);
  }
  return seeds;
}

class DifferentialTest : public MountedFederation, public ::testing::WithParamInterface<uint64_t> {
 protected:
  void SetUp() override {
    HostileTreeOptions o;
    o.seed = GetParam();
    o.block_size = kBlock;
    o.big_dir_entries = 2000 + (GetParam() * 2654435761u) % 8000;  // 2,000 to 10,000
    StartFederation("diff", {}, [&](const fs::path& tree) { WriteHostileTree(tree, o); });
    if (IsSkipped()) return;
    config_ = work_->path() / "perchd.toml";
    std::ofstream(config_) << "block_size = \"64K\"\n";
  }

  void MountWithEndpoint() {
    Mount({"--config", config_.string(), "--http", "127.0.0.1:0"});
    std::string addr = CtlJson({"health", "--json"})["http_address"];
    ASSERT_FALSE(addr.empty());
    endpoint_ = "http://" + addr;
  }

  // Every file through the HTTP endpoint, in one curl run: the same bytes
  // as the export, or for a name XRootD cannot serve, no 200.
  std::vector<std::string> CompareEndpoint() {
    std::vector<std::string> files = FilesBelow(tree_);
    fs::path out = work_->path() / "http";
    fs::remove_all(out);
    fs::create_directories(out);
    fs::path config = work_->path() / "curl.conf";
    {
      std::ofstream c(config);
      for (size_t i = 0; i < files.size(); ++i) {
        std::string url = endpoint_ + "/test";
        for (const auto& seg : fs::path(files[i]))
          url += "/" + uri::PercentEncodeSegment(seg.string());
        c << "url = \"" << url << "\"\noutput = \"" << (out / std::to_string(i)).string() << "\"\n";
      }
    }
    RunResult r =
        RunToExit("/usr/bin/curl",
                  {"-sS", "--max-time", "120", "-w", "%{http_code}\\n", "-K", config.string()},
                  std::chrono::seconds(180));
    std::vector<std::string> codes;
    std::istringstream lines(r.output);
    for (std::string l; std::getline(lines, l);) {
      if (l.size() == 3) codes.push_back(l);
    }
    std::vector<std::string> diffs;
    if (codes.size() != files.size()) {
      diffs.push_back("curl answered " + std::to_string(codes.size()) + " of " +
                      std::to_string(files.size()) + " requests: " + r.output.substr(0, 500));
      return diffs;
    }
    for (size_t i = 0; i < files.size() && diffs.size() < 20; ++i) {
      const std::string name = "'" + ShowName(files[i]) + "'";
      if (codes[i] != "200") {
        // XRootD reads most names with '?' as something else: an error, never other bytes.
        if (XrootdCanRead(files[i])) diffs.push_back(name + ": HTTP " + codes[i]);
      } else if (ReadLocalFile(out / std::to_string(i)) != ReadLocalFile(tree_ / files[i])) {
        diffs.push_back(name + ": bytes differ (" +
                        std::to_string(ReadLocalFile(out / std::to_string(i)).size()) + " of " +
                        std::to_string(fs::file_size(tree_ / files[i])) + " bytes" +
                        (XrootdCanRead(files[i]) ? "" : ", a name with '?'") + ")");
      }
    }
    return diffs;
  }

  static std::string Lines(const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) out += "  " + s + "\n";
    return out;
  }

  fs::path config_;
  std::string endpoint_;
};

TEST_P(DifferentialTest, TheMountIsTheExportColdAndAfterARestart) {
  SCOPED_TRACE("seed " + std::to_string(GetParam()) +
               " (PERCH_DIFF_SEEDS=" + std::to_string(GetParam()) + " reruns it)");
  MountWithEndpoint();
  auto cold = CompareTrees(tree_, mnt_);
  EXPECT_TRUE(cold.empty()) << "cold, through the mount:\n" << Lines(cold) << perchd_.Log();
  auto http = CompareEndpoint();
  EXPECT_TRUE(http.empty()) << "through the HTTP endpoint:\n" << Lines(http);
  // perchctl lists what is cached, names that are not UTF-8 escaped, in pages
  // whose tokens bring every path back exactly.
  RunResult ls = Ctl({"ls", mnt_.string()});
  EXPECT_EQ(ls.exit_code, 0) << ls.output.substr(0, 2000);
  nlohmann::json listed = CtlJson({"ls", mnt_.string(), "--json"});
  EXPECT_FALSE(listed.empty());
  // perchd restarts on its cache: the index answers what the network did.
  ASSERT_EQ(perchd_.Stop(), 0);
  MountWithEndpoint();
  auto warm = CompareTrees(tree_, mnt_);
  EXPECT_TRUE(warm.empty()) << "after a restart:\n" << Lines(warm) << perchd_.Log();
}

INSTANTIATE_TEST_SUITE_P(Seeds, DifferentialTest, ::testing::ValuesIn(Seeds()));

}  // namespace
}  // namespace perch::testing
