// Issue 44, a site admin's first hour: what perchctl is told back must be
// what it names. user.perch.url is the file's federation URL percent-encoded,
// so that a name with '%', '#' or ' ' passed back to perchctl names that file
// and no other; an evict of a path that names nothing says so and exits 4.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace issue_44_admin_test {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<TreeFile> OddTree() {
  return {{"odd/percent%20name.txt", 5000},
          {"odd/hash#name.txt", 7000},
          {"odd/a b.txt", 3000},
          {"big/big.bin", 12 << 20}};
}

// Stops (SIGSTOP) or resumes (SIGCONT) perch-devfed and its XRootD servers.
void SignalFederation(DevFed& fed, int sig) {
  ::kill(fed.Pid(), sig);
  for (pid_t p : fed.ServerPids()) ::kill(p, sig);
}

class AdminTest : public MountedFederation {
 protected:
  void SetUp() override { StartFederation("admin", OddTree()); }

  std::string Xattr(const std::string& rel, const char* name) {
    char buf[4096];
    ssize_t n = ::getxattr((mnt_ / rel).c_str(), name, buf, sizeof(buf));
    return n < 0 ? std::string() : std::string(buf, static_cast<size_t>(n));
  }
};

TEST_F(AdminTest, TheUrlXattrIsPercentEncodedAndEvictsThatFile) {
  Mount();
  const std::vector<std::pair<std::string, std::string>> files = {
      {"odd/percent%20name.txt", "/test/odd/percent%2520name.txt"},
      {"odd/hash#name.txt", "/test/odd/hash%23name.txt"},
      {"odd/a b.txt", "/test/odd/a%20b.txt"}};
  for (const auto& [rel, encoded] : files) {
    ASSERT_EQ(ReadFile(rel), Original(rel)) << rel;
    const std::string url = Xattr(rel, "user.perch.url");
    EXPECT_EQ(url, fed_->FederationUrl() + encoded);
    // Taken back by perchctl, the URL names this file: its bytes are freed.
    uint64_t bytes = 0;
    for (int i = 0; i < 50 && bytes == 0; ++i) {  // blocks reach the disk after the read
      bytes = CtlJson({"evict", url, "--json"}).value("bytes", 0u);
      if (bytes == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    EXPECT_EQ(bytes, fs::file_size(mnt_ / rel)) << url;
  }
}

TEST_F(AdminTest, AnEvictOfAPathThatNamesNothingSaysSoAndExitsNotFound) {
  Mount();
  ASSERT_EQ(ReadFile("odd/percent%20name.txt"), Original("odd/percent%20name.txt"));
  // The URL taken back wrong (decoded once too often) names no file.
  RunResult r = Ctl({"evict", fed_->FederationUrl() + "/test/odd/percent%20name.txt"});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  EXPECT_NE(r.output.find("/test/odd/percent name.txt: no such file or directory"),
            std::string::npos)
      << r.output;
  r = Ctl({"evict", (mnt_ / "odd/nonexistent").string()});
  EXPECT_EQ(r.exit_code, 4) << r.output;
  // A word that is no command says which one was likely meant.
  r = Ctl({"stat"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'stat'; did you mean 'stats'?"), std::string::npos)
      << r.output;
  // A hint of nothing of the mount is a usage error, as warm, pin and evict say.
  r = Ctl({"hint", "--job", "j", "/etc/passwd"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("outside the mount"), std::string::npos) << r.output;
  // A file that exists but has nothing cached (any more: the prefetcher may
  // have fetched it beside its neighbour) is no error: 0 objects.
  r = Ctl({"evict", (mnt_ / "odd/a b.txt").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  r = Ctl({"evict", (mnt_ / "odd/a b.txt").string()});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find(": 0 objects"), std::string::npos) << "[" << r.output << "]";
}

// An error names the path as the user gave it (the federation's, /test/...),
// not the path below the mount's namespace.
TEST_F(AdminTest, AWarmOfAMissingPathNamesItAsTheUserGaveIt) {
  Mount();
  RunResult r = Ctl({"warm", (mnt_ / "odd/nonexistent").string(), "--wait"});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("/test/odd/nonexistent: "), std::string::npos) << r.output;
}

// The federation stops answering and comes back. Reads of a file held open
// need no stat, yet once one fetches a block the mount is online again:
// stats and health say so at once, and health never says "healthy" beside
// "OFFLINE" (on main both stayed offline until a stat or listing succeeded).
TEST_F(AdminTest, StatusIsTrueOnceTheFederationAnswersAgain) {
  const fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "file_ttl = \"1s\"\ndir_ttl = \"1s\"\n";
  std::vector<std::string> args = MountArgs({"--config", config.string(), "--no-prefetch"});
  *(std::find(args.begin(), args.end(), "--op-timeout") + 1) = "2s";  // a stopped origin fails fast
  ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "perchd.log"), "");
  const std::string want = Original("big/big.bin");
  int fd = ::open((mnt_ / "big/big.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  std::string got(1 << 20, '\0');
  ASSERT_EQ(::pread(fd, got.data(), got.size(), 0), static_cast<ssize_t>(got.size()));
  ASSERT_EQ(ReadFile("odd/a b.txt"), Original("odd/a b.txt"));
  ASSERT_EQ(std::distance(fs::directory_iterator(mnt_ / "odd"), fs::directory_iterator()), 3);
  SignalFederation(*fed_, SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // the entry expires
  // The listing asked again: served stale, offline.
  EXPECT_EQ(std::distance(fs::directory_iterator(mnt_ / "odd"), fs::directory_iterator()), 3);
  SignalFederation(*fed_, SIGCONT);
  EXPECT_TRUE(CtlJson({"stats", "--json"}).value("offline", false)) << "not offline at all";
  // A block the open file has not read yet: fetched, the federation answers.
  ASSERT_EQ(::pread(fd, got.data(), got.size(), 9 << 20), static_cast<ssize_t>(got.size()));
  EXPECT_TRUE(got == want.substr(9 << 20, got.size()));
  ::close(fd);
  EXPECT_FALSE(CtlJson({"stats", "--json"}).value("offline", true));
  RunResult h = Ctl({"health", "--json"});
  EXPECT_EQ(h.exit_code, 0) << h.output;
  const json health = json::parse(h.output);
  EXPECT_TRUE(health.value("healthy", false)) << h.output;
  for (const json& m : health["mounts"]) EXPECT_FALSE(m.value("offline", true)) << h.output;
}

}  // namespace issue_44_admin_test
}  // namespace perch::testing
