// perch-devfed as a process: it stops everything it started, its XRootD
// children die with it even when it is SIGKILLed, a cache whose process dies
// stops being named, two federations run side by side, a restarted one keeps
// its URL (--discovery-port), the ports of servers stopped on purpose stay
// held, and bad arguments are clear errors.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <thread>

#include "tests/devfed/devfed_harness.h"
#include "tests/devfed/devfed_test_fixture.h"
#include "tests/devfed/http_fetch.h"

namespace perch::testing {
namespace {

// True when `pid` no longer runs (absent, or a zombie nobody reaped yet).
bool Gone(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return true;
  size_t paren = stat.rfind(')');
  return paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z' ||
         stat[paren + 2] == 'X';
}

// Polls `pred` every 50 ms for up to `seconds`.
template <typename Pred>
bool WaitFor(Pred pred, int seconds) {
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!pred()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return true;
}

TEST_F(DevFedTest, StopsEverythingItStarted) {
  std::vector<std::string> urls;
  {
    DevFed fed(
        DevFed::Options{{{"/a", dir_.string(), false}, {"/b/c", dir_.string(), false}}, 1, false});
    ASSERT_EQ(fed.Start(), "");
    urls = {fed.FederationUrl(), fed.DirectorUrl(), fed.OriginUrl("/a"), fed.OriginUrl("/b/c"),
            fed.CacheUrls("/b/c")[0]};
    EXPECT_EQ(Fetch(fed.DirectorUrl() + "/b/c/hello.txt").status, 307);
    EXPECT_EQ(Fetch(fed.OriginUrl("/b/c") + "/b/c/hello.txt").body, "hello world\n");
  }
  for (const auto& u : urls) EXPECT_EQ(Fetch(u + "/").status, 0) << u << " still answers";
}

// Whether a socket (without SO_REUSEADDR) can bind 127.0.0.1:`port` now.
bool Bindable(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  if (fd >= 0) ::close(fd);
  return ok;
}

int PortOf(const std::string& url) { return std::atoi(url.c_str() + url.rfind(':') + 1); }

// Stopped on purpose, a federation's servers leave their ports held while the
// DevFed lives: clients are refused there, and no other test's server (which
// the kernel would give a free port) can take one.
TEST_F(DevFedTest, StoppedServersPortsStayHeldAndRefused) {
  DevFed fed(DevFed::Options{{{"/h", dir_.string(), false}}, 2, false});
  ASSERT_EQ(fed.Start(), "");
  const std::string killed = fed.CacheUrls("/h")[0];
  fed.KillCache("/h", 0);
  EXPECT_FALSE(Bindable(PortOf(killed))) << killed;
  EXPECT_EQ(Fetch(killed + "/h/hello.txt").status, 0) << killed << " answers";
  std::vector<std::string> urls = {fed.FederationUrl(), fed.DirectorUrl(), fed.OriginUrl("/h"),
                                   fed.CacheUrls("/h")[1]};
  fed.Stop();
  for (const std::string& u : urls) {
    EXPECT_FALSE(Bindable(PortOf(u))) << u << " is free for anyone";
    EXPECT_EQ(Fetch(u + "/").status, 0) << u << " still answers";
  }
}

TEST_F(DevFedTest, SigkilledDevfedTakesItsXrootdAlong) {
  DevFed fed(DevFed::Options{{{"/k", dir_.string(), false}}, 2, false});
  ASSERT_EQ(fed.Start(), "");
  std::vector<pid_t> pids = fed.ServerPids();
  ASSERT_EQ(pids.size(), 3u);
  for (pid_t p : pids) ASSERT_FALSE(Gone(p)) << p;
  ASSERT_EQ(kill(fed.Pid(), SIGKILL), 0);  // no chance to stop anything itself
  EXPECT_TRUE(WaitFor(
      [&] {
        for (pid_t p : pids) {
          if (!Gone(p)) return false;
        }
        return true;
      },
      10))
      << "an xrootd outlived perch-devfed";
}

TEST_F(DevFedTest, DeadCacheIsNoLongerNamed) {
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 2, false});
  ASSERT_EQ(fed.Start(), "");
  std::vector<std::string> caches = fed.CacheUrls("/test");
  ASSERT_EQ(caches.size(), 2u);
  std::string object = fed.DirectorUrl() + "/test/hello.txt";
  ASSERT_EQ(Fetch(object).Header("link"), Link(caches, "/test/hello.txt", 1));
  fed.KillCache("/test", 0);  // as an XCache that crashes under load
  EXPECT_TRUE(WaitFor(
      [&] { return Fetch(object).Header("link") == Link({caches[1]}, "/test/hello.txt", 1); }, 5))
      << Fetch(object).Header("link");
  EXPECT_NE(fed.ErrLog().find("cache /test 1 (" + caches[0] + ") died"), std::string::npos)
      << fed.ErrLog();
  EXPECT_NE(fed.ErrLog().find("the director no longer names it"), std::string::npos)
      << fed.ErrLog();
  // With no cache left the origin serves (its DirectReads capability).
  fed.KillCache("/test", 1);
  std::string origin = fed.OriginUrl("/test");
  EXPECT_TRUE(WaitFor(
      [&] { return Fetch(object).Header("link") == Link({origin}, "/test/hello.txt", 1); }, 5));
  auto r = Fetch(object);
  EXPECT_EQ(r.Header("location"), origin + "/test/hello.txt");
  EXPECT_EQ(Fetch(r.Header("location")).body, "hello world\n");
}

TEST_F(DevFedTest, TwoFederationsSideBySide) {
  DevFed one(DevFed::Options{{{"/test", dir_.string(), false}}, 1, false});
  DevFed two(DevFed::Options{{{"/test", dir_.string(), false}}, 0, false});
  ASSERT_EQ(one.Start(), "");
  ASSERT_EQ(two.Start(), "");
  EXPECT_NE(one.FederationUrl(), two.FederationUrl());
  auto a = Fetch(one.DirectorUrl() + "/test/hello.txt");
  auto b = Fetch(two.DirectorUrl() + "/test/hello.txt");
  EXPECT_EQ(a.Header("location"), one.CacheUrls("/test")[0] + "/test/hello.txt");
  EXPECT_EQ(b.Header("location"), two.OriginUrl("/test") + "/test/hello.txt");
  EXPECT_EQ(Fetch(a.Header("location")).body, "hello world\n");
  EXPECT_EQ(Fetch(b.Header("location")).body, "hello world\n");
}

// --discovery-port: a federation stopped and started again keeps its URL, so
// a client (perchd) configured with it finds the new director.
TEST_F(DevFedTest, ARestartedFederationKeepsItsUrl) {
  std::string url;
  {
    DevFed first(DevFed::Options{{{"/test", dir_.string(), false}}, 0, false});
    ASSERT_EQ(first.Start(), "");
    url = first.FederationUrl();
  }
  const std::string port = url.substr(url.rfind(':') + 1);
  for (int round = 0; round < 2; ++round) {
    DevFed fed(
        DevFed::Options{{{"/test", dir_.string(), false}}, 0, false, {"--discovery-port", port}});
    ASSERT_EQ(fed.Start(), "") << "round " << round;
    EXPECT_EQ(fed.FederationUrl(), url);
    auto doc = Fetch(url + "/.well-known/pelican-configuration");
    EXPECT_EQ(doc.status, 200);
    EXPECT_NE(doc.body.find(fed.DirectorUrl()), std::string::npos) << doc.body;
  }
}

TEST_F(DevFedTest, FaultFlagsBreakTheGivenFractionOfBodies) {
  std::string big(200000, 'x');
  data_.Write("big.bin", big);
  DevFed fed(DevFed::Options{
      {{"/f", dir_.string(), false}},
      1,
      false,
      {"--fault-cut", "0.3", "--fault-reset", "0.2", "--fault-stall", "0.1", "--fault-seed", "7"}});
  ASSERT_EQ(fed.Start(), "");
  // The director's own answers are never broken.
  for (int i = 0; i < 10; ++i) EXPECT_EQ(Fetch(fed.DirectorUrl() + "/f/big.bin").status, 307);
  std::map<std::string, int> seen;
  constexpr int kFetches = 60;
  for (int i = 0; i < kFetches; ++i) {
    std::string base = i % 2 ? fed.OriginUrl("/f") : fed.CacheUrls("/f")[0];
    auto r = Fetch(base + "/f/big.bin", "GET", {}, "", 1000);
    if (r.curl_code == CURLE_OK) {
      EXPECT_EQ(r.body, big);
      ++seen["whole"];
    } else {
      EXPECT_LT(r.body.size(), big.size());
      ++seen[r.curl_code == CURLE_PARTIAL_FILE         ? "cut"
             : r.curl_code == CURLE_RECV_ERROR         ? "reset"
             : r.curl_code == CURLE_OPERATION_TIMEDOUT ? "stall"
                                                       : curl_easy_strerror(r.curl_code)];
    }
  }
  // Expected 24 whole, 18 cut, 12 reset, 6 stalled; a fixed seed gives one draw,
  // the bounds (about 3 sigma) only say the draw is what the flags ask for.
  EXPECT_EQ(seen.size(), 4u) << "only whole, cut, reset and stall";
  EXPECT_GE(seen["whole"], 12);
  EXPECT_LE(seen["whole"], 36);
  EXPECT_GE(seen["cut"], 7);
  EXPECT_GE(seen["reset"], 3);
  EXPECT_GE(seen["stall"], 1);
  // A HEAD answer has no body, so it is never broken.
  for (int i = 0; i < 10; ++i)
    EXPECT_EQ(Fetch(fed.OriginUrl("/f") + "/f/big.bin", "HEAD").status, 200);
}

TEST(DevFedCliTest, BadArgumentsAreClearErrors) {
  std::string bin = PERCH_DEVFED_PATH;
  auto run = [&](const std::string& args) {
    std::string cmd = bin + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[512];
    while (fgets(buf, sizeof(buf), p)) out += buf;
    int rc = pclose(p);
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  auto [rc1, out1] = run("--export test=/tmp");
  EXPECT_NE(rc1, 0);
  EXPECT_NE(out1.find("/NS=DIR"), std::string::npos) << out1;
  auto [rc2, out2] = run("--export /t=/no/such/dir");
  EXPECT_NE(rc2, 0);
  EXPECT_NE(out2.find("not a directory"), std::string::npos) << out2;
  auto [rc3, out3] = run("--export /t=/tmp --protected /other");
  EXPECT_NE(rc3, 0);
  EXPECT_NE(out3.find("names no --export"), std::string::npos) << out3;
  auto [rc4, out4] = run("--export /t=/tmp --no-listings /t/x");
  EXPECT_NE(rc4, 0);
  EXPECT_NE(out4.find("--no-listings /t/x names no --export"), std::string::npos) << out4;
  auto [rc5, out5] = run("--export /t=/tmp --export /t/=/tmp");
  EXPECT_NE(rc5, 0);
  EXPECT_NE(out5.find("/t is exported twice"), std::string::npos) << out5;
  auto [rc7, out7] = run("--export /t=/tmp --fault-cut 0.7 --fault-reset 0.7");
  EXPECT_NE(rc7, 0);
  EXPECT_NE(out7.find("add up to more than 1"), std::string::npos) << out7;
  auto [rc8, out8] = run("--export /t=/tmp --cache-control /u=no-store");
  EXPECT_NE(rc8, 0);
  EXPECT_NE(out8.find("--cache-control /u=no-store names no --export"), std::string::npos) << out8;
  auto [rc9, out9] = run("--export /t=/tmp --cache-control /t");
  EXPECT_NE(rc9, 0);
  EXPECT_NE(out9.find("--cache-control wants /NS=VALUE"), std::string::npos) << out9;
  auto [rc10, out10] = run("--export /t=/tmp --fault-corrupt 0.5");
  EXPECT_NE(rc10, 0);
  EXPECT_NE(out10.find("it needs --caches N"), std::string::npos) << out10;
  auto [rc11, out11] = run("--export /t=/tmp --caches 1 --fault-cut 0.5 --fault-corrupt 0.6");
  EXPECT_NE(rc11, 0);
  EXPECT_NE(out11.find("add up to more than 1"), std::string::npos) << out11;
  auto [rc6, out6] = run("--help");
  EXPECT_EQ(rc6, 0);
  EXPECT_NE(out6.find("Example"), std::string::npos);
  EXPECT_NE(out6.find("--no-listings"), std::string::npos);
  EXPECT_NE(out6.find("--fault-stall"), std::string::npos);
  EXPECT_NE(out6.find("--fault-corrupt"), std::string::npos);
  EXPECT_NE(out6.find("--cache-control"), std::string::npos);
}

}  // namespace
}  // namespace perch::testing
