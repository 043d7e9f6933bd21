// Issue #11, the control plane's exposure, end to end: the real perchd
// refuses to serve its unauthenticated control API off loopback and serves
// metrics there only when told to; the real perchctl tells "permission
// denied" from "no daemon"; oversized requests are refused while the daemon
// keeps serving; every command line ends a usage error with exit 2.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

class SecurityTest : public MountedFederation {
 protected:
  void SetUp() override { StartFederation("security", {{"a/f1", 5000}, {"a/f2", 70000}}); }

  // perchd with `flags` and this test's federation and mountpoint, expected
  // to refuse at once. If it mounts instead, it is killed after a while and
  // its mount removed here, so that a failure leaves nothing behind.
  RunResult Perchd(std::vector<std::string> flags) {
    flags.insert(flags.begin(),
                 {"--foreground", "--cache-dir", (work_->path() / "cache-x").string()});
    flags.push_back(fed_->FederationUrl() + "/test");
    flags.push_back(mnt_.string());
    RunResult r = RunPerchdToExit(flags, std::chrono::seconds(15));
    if (IsMounted(mnt_)) {
      ADD_FAILURE() << "perchd mounted:\n" << r.output;
      RunToExit("/bin/fusermount3", {"-u", "-z", mnt_.string()});
    }
    return r;
  }

  // The daemon still answers perchctl and serves the mount byte-exact.
  void ExpectAlive() {
    EXPECT_EQ(Ctl({"stats"}).exit_code, 0);
    EXPECT_EQ(ReadFile("a/f2"), Original("a/f2"));
  }
};

TEST_F(SecurityTest, ControlApiOnlyOnUnixSocketOrLoopback) {
  for (const char* addr :
       {"tcp:0.0.0.0:0", "tcp:[::]:0", "tcp:192.0.2.1:7901", "tcp:example.org:7901"}) {
    RunResult r = Perchd({"--control", addr});
    EXPECT_EQ(r.exit_code, 2) << addr << "\n" << r.output;
    EXPECT_NE(r.output.find("is not on loopback"), std::string::npos) << r.output;
  }
}

TEST_F(SecurityTest, MetricsOffLoopbackOnlyWithTheOptIn) {
  RunResult r = Perchd({"--metrics", "0.0.0.0:0"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--metrics-allow-remote"), std::string::npos) << r.output;
  fs::path cfg = work_->path() / "remote.toml";
  std::ofstream(cfg) << "metrics = \"0.0.0.0:0\"\n";
  r = Perchd({"--config", cfg.string()});
  EXPECT_EQ(r.exit_code, 2) << r.output;

  Mount({"--metrics", "0.0.0.0:0", "--metrics-allow-remote"});
  std::string addr = CtlJson({"health", "--json"})["metrics_address"];
  ASSERT_EQ(addr.rfind("0.0.0.0:", 0), 0u) << addr;
  std::string port = addr.substr(addr.find(':') + 1);
  RunResult get = RunToExit("/usr/bin/curl", {"-sf", "http://127.0.0.1:" + port + "/metrics"});
  EXPECT_EQ(get.exit_code, 0) << get.output;
  EXPECT_NE(get.output.find("perch_misses_total"), std::string::npos);
  // A request with a body or oversized headers is refused; the server lives on.
  RunResult big = RunToExit("/usr/bin/curl",
                            {"-s", "-o", "/dev/null", "-H", "X-Pad: " + std::string(20000, 'x'),
                             "http://127.0.0.1:" + port + "/metrics"});
  EXPECT_NE(big.exit_code, 0) << big.output;
  EXPECT_EQ(RunToExit("/usr/bin/curl",
                      {"-sf", "-o", "/dev/null", "http://127.0.0.1:" + port + "/metrics"})
                .exit_code,
            0);
}

TEST_F(SecurityTest, OversizedRequestsAreRefusedAndTheDaemonLivesOn) {
  Mount();
  // One path longer than PATH_MAX.
  RunResult r = Ctl({"hint", "--job", "j", "/test/" + std::string(5000, 'p')});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("longer than 4096"), std::string::npos) << r.output;
  // More paths than one hint may carry (4 Mi).
  fs::path list = work_->path() / "many.txt";
  {
    std::ofstream out(list);
    for (size_t i = 0; i <= (4u << 20); ++i) out << "/t\n";
  }
  r = Ctl({"hint", "--job", "j", "--file", list.string()});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("4194305 paths is more than the 4194304"), std::string::npos) << r.output;
  // A warm of too many paths, and a job name past its bound.
  std::vector<std::string> warm = {"warm"};
  warm.insert(warm.end(), 65537, "/t");
  r = Ctl(warm);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("65537 paths"), std::string::npos) << r.output;
  r = Ctl({"hint", "--job", std::string(300, 'j'), "/test/a/f1"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  // A message past gRPC's receive limit (256 MiB): 68,000 paths of 4,000 bytes.
  {
    std::ofstream out(list, std::ios::trunc);
    std::string path = "/test/" + std::string(3994, 'q') + "\n";
    for (int i = 0; i < 68000; ++i) out << path;
  }
  r = Ctl({"hint", "--job", "j", "--file", list.string()});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("larger than max"), std::string::npos) << r.output;
  fs::remove(list);
  ExpectAlive();
  // Within the bounds, a hint is still taken.
  r = Ctl({"hint", "--job", "j", "/test/a/f1", "/test/a/f2"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
}

TEST_F(SecurityTest, PerchctlSaysPermissionDeniedNotNoDaemon) {
  if (::access("/usr/sbin/runuser", X_OK) != 0) {
    GTEST_FAIL() << "runuser missing (Debian package util-linux)";
  }
  Mount();
  // The socket (0660 root:root) in a directory anyone may enter; perchctl
  // where user nobody may run it.
  fs::permissions(work_->path(),
                  fs::perms::owner_all | fs::perms::others_exec | fs::perms::group_exec);
  struct stat st {};
  ASSERT_EQ(::stat(Socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0660u);
  EXPECT_EQ(st.st_gid, 0u);
  fs::path ctl = work_->path() / "perchctl";
  fs::copy_file(PERCHCTL_PATH, ctl);
  fs::permissions(ctl, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  auto as_nobody = [&] {
    return RunToExit("/usr/sbin/runuser",
                     {"-u", "nobody", "--", ctl.string(), "--socket", Socket(), "stats"});
  };
  RunResult r = as_nobody();
  EXPECT_EQ(r.exit_code, 5) << r.output;
  EXPECT_NE(r.output.find("permission denied: " + Socket() + " (perchctl needs to be root"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("no perchd answers"), std::string::npos) << r.output;

  // With control_group, members of that group may use perchctl.
  perchd_.Stop();
  Mount({"--control-group", "nogroup"});
  ASSERT_EQ(::stat(Socket().c_str(), &st), 0);
  EXPECT_EQ(st.st_gid, 65534u);
  r = as_nobody();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hits"), std::string::npos) << r.output;

  // No daemon at all is still "no perchd answers" (3).
  perchd_.Stop();
  r = Ctl({"stats"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
}

TEST_F(SecurityTest, EveryUsageErrorExitsTwo) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--no-such-flag"},
                                                                {"--cache-size"},
                                                                {"--config", "/no/such/file.toml"},
                                                                {"a", "b", "c"}}) {
    RunResult r = RunPerchdToExit(args, std::chrono::seconds(30));
    EXPECT_EQ(r.exit_code, 2) << args[0] << "\n" << r.output;
  }
  EXPECT_EQ(RunPerchdToExit({"--help"}).exit_code, 0);
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--no-such-flag", "stats"}, {}, {"stats", "--watch", "x"}, {"pin"}, {"frobnicate"}}) {
    RunResult r = RunToExit(PERCHCTL_PATH, args);
    EXPECT_EQ(r.exit_code, 2) << (args.empty() ? "" : args[0]) << "\n" << r.output;
  }
  EXPECT_EQ(RunToExit(PERCHCTL_PATH, {"--help"}).exit_code, 0);
#ifdef PERCH_TRAIN_PATH
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"--no-such-flag"},
           {"--data-dir", "/no/such/dir"},
           {"--max-runtime", "soon", "--loader-only", "--data-dir", "/"}}) {
    RunResult r = RunToExit(PERCH_TRAIN_PATH, args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << "\n" << r.output;
  }
  EXPECT_EQ(RunToExit(PERCH_TRAIN_PATH, {"--help"}).exit_code, 0);
#endif
}

}  // namespace
}  // namespace perch::testing
