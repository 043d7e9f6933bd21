// Issue #42, end to end through the real perchd and a real federation:
// - an unprivileged user (nobody) who tries every millisecond to listen on
//   perchd's HTTP endpoint and metrics ports while perchd hands its mounts
//   over, again and again, never gets either: the listening sockets travel
//   with the mounts, which serve every read right throughout;
// - a successor that cannot have a side port (here: another program holds
//   it) serves the mounts without it and says so in `perchctl health`;
// - a cache directory another user prepared (theirs, or with a `lock` that
//   links elsewhere) is refused with a clear error, nothing outside touched;
// - a name longer than 255 bytes is ENAMETOOLONG, not EIO;
// - nobody reading the metrics port sees no name inside a protected namespace.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/handoff_reader.h"
#include "tests/integration/mounted_federation.h"
#include "tests/integration/squatter.h"
#include "tests/integration/stats_json.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

class Issue42Test : public MountedFederation {
 protected:
  void SetUp() override {
    std::vector<TreeFile> files = {{"data/big.bin", 24 << 20}};
    for (int i = 0; i < 8; ++i)
      files.push_back({"data/s" + std::to_string(i), 3000 + 977 * uint64_t(i)});
    StartFederation("issue42", files);
  }

  // GET of `path` at 127.0.0.1:`port` with curl: the body, or "" on failure.
  static std::string Get(int port, const std::string& path) {
    RunResult r = RunToExit("/usr/bin/curl", {"-sf", "--max-time", "10",
                                              "http://127.0.0.1:" + std::to_string(port) + path});
    return r.exit_code == 0 ? r.output : "";
  }
};

TEST_F(Issue42Test, ASquatterNeverGetsThePortsDuringHandoffs) {
  const int http = FreeLoopbackPort(), metrics = FreeLoopbackPort();
  ASSERT_GT(http, 0);
  ASSERT_GT(metrics, 0);
  const std::vector<std::string> side = {"--http", "127.0.0.1:" + std::to_string(http), "--metrics",
                                         "127.0.0.1:" + std::to_string(metrics)};
  Mount(side);
  Squatter on_http(http, R"({"mounts":[]})"), on_metrics(metrics, "{}");
  ASSERT_TRUE(on_http.Running());
  ASSERT_FALSE(on_http.Won(std::chrono::milliseconds(200)));  // perchd holds both

  std::vector<std::string> small;
  for (int i = 0; i < 8; ++i) small.push_back("s" + std::to_string(i));
  Reader reader(mnt_ / "data", "big.bin", small);
  reader.big_expected = Original("data/big.bin");
  for (const auto& n : small) reader.small_expected.push_back(Original("data/" + n));
  reader.Start();
  ASSERT_TRUE(reader.Progress(60)) << reader.Failure();
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE("handoff " + std::to_string(round));
    ASSERT_EQ(perchd_.HandOver(PERCHD_BINARY, MountArgs(side),
                               work_->path() / ("perchd-" + std::to_string(round) + ".log")),
              "");
    EXPECT_FALSE(on_http.Won()) << "nobody took the endpoint's port";
    EXPECT_FALSE(on_metrics.Won()) << "nobody took the metrics port";
    ASSERT_TRUE(reader.Progress(60)) << reader.Failure() << perchd_.Log();
    // The new perchd answers on both ports, the ones it was handed.
    EXPECT_NE(Get(http, "/.perch/mounts").find(mnt_.string()), std::string::npos);
    EXPECT_NE(Get(metrics, "/metrics").find("perch_"), std::string::npos);
  }
  EXPECT_EQ(reader.Stop(), 0) << reader.Failure();
  EXPECT_EQ(reader.shared().failed.load(), 0u) << reader.Failure();
  EXPECT_EQ(reader.shared().wrong.load(), 0u);
  EXPECT_FALSE(on_http.Won(std::chrono::milliseconds(300)));
  nlohmann::json h = CtlJson({"health", "--json"});
  EXPECT_EQ(h["listener_error"], "") << h.dump();
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
}

TEST_F(Issue42Test, ASideListenerThatCannotBeHadNeverDropsTheMounts) {
  Mount();
  EXPECT_EQ(ReadFile("data/s1"), Original("data/s1"));
  // The successor is told to serve metrics on a port another program holds.
  const int port = FreeLoopbackPort();
  Squatter holder(port, "{}");
  ASSERT_TRUE(holder.Won(std::chrono::seconds(10)));
  ASSERT_EQ(
      perchd_.HandOver(PERCHD_BINARY, MountArgs({"--metrics", "127.0.0.1:" + std::to_string(port)}),
                       work_->path() / "perchd-next.log"),
      "");
  EXPECT_EQ(ReadFile("data/s2"), Original("data/s2"));
  EXPECT_EQ(ReadFile("data/big.bin"), Original("data/big.bin"));
  RunResult r = Ctl({"health"});
  EXPECT_NE(r.exit_code, 0) << r.output;  // not healthy: a port is missing
  EXPECT_NE(r.output.find("listeners"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cannot listen for metrics on 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << r.output;
  EXPECT_NE(perchd_.Log().find("serving the mounts without it"), std::string::npos)
      << perchd_.Log();
  EXPECT_EQ(perchd_.Stop(), 0) << perchd_.Log();
}

TEST_F(Issue42Test, ACacheDirectoryAnotherUserPreparedIsRefused) {
  // In /tmp, sticky and shared as on every node: nobody made the directory,
  // and in a second one of root's a `lock` that links to a file of root's.
  const fs::path victim = work_->path() / "victim";
  std::ofstream(victim) << "precious\n";
  const std::string base = "/tmp/perch-issue42-" + std::to_string(::getpid());
  const fs::path theirs = base + "-theirs", linked = base + "-linked";
  struct Cleanup {
    std::vector<fs::path> paths;
    ~Cleanup() {
      for (const auto& p : paths) fs::remove_all(p);
    }
  } cleanup{{theirs, linked}};
  ASSERT_EQ(
      RunToExit("/usr/sbin/runuser", {"-u", "nobody", "--", "mkdir", theirs.string()}).exit_code,
      0);
  ASSERT_EQ(RunToExit("/usr/sbin/runuser", {"-u", "nobody", "--", "ln", "-s", victim.string(),
                                            (theirs / "lock").string()})
                .exit_code,
            0);
  fs::create_directories(linked);
  fs::create_symlink(victim, linked / "lock");
  for (const fs::path& dir : {theirs, linked}) {
    SCOPED_TRACE(dir.string());
    RunResult r = RunPerchdToExit({"--foreground", "--cache-dir", dir.string(),
                                   fed_->FederationUrl() + "/test", mnt_.string()},
                                  std::chrono::seconds(20));
    if (IsMounted(mnt_)) {
      ADD_FAILURE() << "perchd mounted:\n" << r.output;
      RunToExit("/bin/fusermount3", {"-u", "-z", mnt_.string()});
    }
    EXPECT_NE(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("refusing cache directory " + dir.string()), std::string::npos)
        << r.output;
    EXPECT_NE(r.output.find(dir == theirs ? "owned by uid 65534" : "lock file is a symbolic link"),
              std::string::npos)
        << r.output;
  }
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious\n");
  struct stat st {};
  ASSERT_EQ(::lstat(theirs.c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, Squatter::kNobody);  // left as it was: no chmod, no chown
  EXPECT_FALSE(fs::exists(theirs / "index"));
  EXPECT_FALSE(fs::exists(linked / "index"));
}

TEST_F(Issue42Test, ANameLongerThan255BytesIsNameTooLong) {
  Mount();
  struct stat st {};
  const fs::path name = mnt_ / "data" / std::string(256, 'n');
  EXPECT_NE(::stat(name.c_str(), &st), 0);
  EXPECT_EQ(errno, ENAMETOOLONG);
  EXPECT_EQ(ReadFile("data/s0"), Original("data/s0"));
}

// Metrics are readable by every local user; a protected namespace's files
// are not. A mount of the namespace itself (pelican://host/prot) labels its
// counters with the namespace, never with a directory inside it.
TEST(Issue42MetricsTest, NobodyReadingTheMetricsSeesNoNameInsideAProtectedNamespace) {
  if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
  if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
  TempDir work("issue42-metrics");
  const fs::path secret = work.path() / "secret", mnt = work.path() / "mnt";
  CreateTestTree(secret, {{"secret-project-alpha/data.bin", 70000}, {"top.bin", 3000}});
  fs::create_directories(mnt);
  DevFed::Options opts;
  opts.exports.push_back({"/prot", secret.string(), true});
  DevFed fed(opts);
  ASSERT_EQ(fed.Start(), "");
  ASSERT_FALSE(fed.TokenFile().empty());
  const std::string socket = (work.path() / "ctl.sock").string();
  PerchdProcess perchd;
  ASSERT_EQ(perchd.Start({"--cache-dir", (work.path() / "cache").string(), "--control",
                          "unix:" + socket, "--metrics", "127.0.0.1:0", "--namespace-token",
                          "/=" + fed.TokenFile(), fed.FederationUrl() + "/prot", mnt.string()},
                         mnt, work.path() / "perchd.log"),
            "");
  ASSERT_EQ(ReadLocalFile(mnt / "secret-project-alpha/data.bin"),
            ReadLocalFile(secret / "secret-project-alpha/data.bin"));
  ASSERT_EQ(ReadLocalFile(mnt / "top.bin"), ReadLocalFile(secret / "top.bin"));
  const std::string address = PerchctlJson(socket, {"health", "--json"})["metrics_address"];
  RunResult r = RunToExit("/usr/sbin/runuser", {"-u", "nobody", "--", "/usr/bin/curl", "-sf",
                                                "http://" + address + "/metrics"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("secret-project-alpha"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("perch_namespace_misses_total{namespace=\"/prot\""), std::string::npos)
      << r.output;
  EXPECT_EQ(perchd.Stop(), 0) << perchd.Log();
}

}  // namespace
}  // namespace perch::testing
