// The pieces perchd, perchctl and perch-train share at their edges: how a
// command line ends on a usage error, and which addresses perchd may listen on.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "perch/cli_exit.h"
#include "proto/control_address.h"

namespace perch {
namespace {

// Parses `args` with a small CLI11 app shaped like ours; returns the exit
// status Parse asks for (-1: go on).
int ParseStatus(std::vector<const char*> args) {
  CLI::App app{"test"};
  app.set_version_flag("--version", "1.0");
  int n = 0;
  std::string path;
  app.add_option("--count", n)->check(CLI::PositiveNumber);
  app.add_option("--path", path)->required();
  auto* sub = app.add_subcommand("sub");
  (void)sub;
  args.insert(args.begin(), "prog");
  // CLI11 prints help to stdout and errors to stderr; keep test output quiet.
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  auto rc = cli::Parse(app, static_cast<int>(args.size()), args.data());
  ::testing::internal::GetCapturedStdout();
  std::string err = ::testing::internal::GetCapturedStderr();
  if (rc && *rc != 0) {
    EXPECT_FALSE(err.empty()) << "a usage error says what is wrong";
  }
  return rc ? *rc : -1;
}

TEST(CliExitTest, EveryUsageErrorIsTwoHelpAndVersionAreZero) {
  EXPECT_EQ(ParseStatus({"--path", "x"}), -1);
  EXPECT_EQ(ParseStatus({"--help"}), 0);
  EXPECT_EQ(ParseStatus({"--version"}), 0);
  EXPECT_EQ(ParseStatus({"--path", "x", "--no-such-flag"}), 2);   // CLI11: 109 (extras)
  EXPECT_EQ(ParseStatus({}), 2);                                  // 106 (required)
  EXPECT_EQ(ParseStatus({"--path", "x", "--count", "-3"}), 2);    // 105 (validation)
  EXPECT_EQ(ParseStatus({"--path", "x", "--count", "many"}), 2);  // 105 (conversion)
  EXPECT_EQ(ParseStatus({"--path"}), 2);                          // argument missing
  EXPECT_EQ(ParseStatus({"--path", "x", "stray"}), 2);
}

TEST(CliExitTest, UsageExitMapsLaterValidationToo) {
  CLI::App app{"test"};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cli::UsageExit(app, CLI::ValidationError("--max-runtime", "not a duration")), 2);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("not a duration"), std::string::npos);
}

TEST(ControlAddressTest, OnlyUnixSocketsAndLoopback) {
  for (const char* ok : {"", "unix:/run/perch/perchd.sock", "tcp:127.0.0.1:7901", "tcp:127.3.4.5:0",
                         "tcp:localhost:7901", "tcp:[::1]:7901"}) {
    EXPECT_EQ(CheckControlAddress(ok), "") << ok;
  }
  for (const char* remote :
       {"tcp:0.0.0.0:7901", "tcp:10.1.2.3:7901", "tcp:[::]:7901", "tcp::7901",
        "tcp:example.org:7901", "tcp:128.0.0.1:1", "tcp:[::ffff:10.0.0.1]:1"}) {
    EXPECT_NE(CheckControlAddress(remote).find("not on loopback"), std::string::npos) << remote;
  }
  for (const char* bad : {"unix:", "127.0.0.1:7901", "tcp:127.0.0.1", "tcp:127.0.0.1:70000",
                          "tcp:127.0.0.1:x", "tcp:::1:7901"}) {
    EXPECT_NE(CheckControlAddress(bad).find("bad control address"), std::string::npos) << bad;
  }
}

TEST(ControlAddressTest, MetricsLeaveLoopbackOnlyWhenAllowed) {
  EXPECT_EQ(CheckMetricsAddress("", false), "");
  EXPECT_EQ(CheckMetricsAddress("127.0.0.1:9464", false), "");
  EXPECT_EQ(CheckMetricsAddress("[::1]:0", false), "");
  EXPECT_NE(CheckMetricsAddress("0.0.0.0:9464", false).find("--metrics-allow-remote"),
            std::string::npos);
  EXPECT_NE(CheckMetricsAddress("[::]:9464", false).find("not on loopback"), std::string::npos);
  EXPECT_EQ(CheckMetricsAddress("0.0.0.0:9464", true), "");
  EXPECT_EQ(CheckMetricsAddress("[::]:9464", true), "");
  for (const char* bad : {"localhost:9464", "9464", "127.0.0.1:", "host:1", "::1:9464"}) {
    EXPECT_NE(CheckMetricsAddress(bad, true).find("bad metrics address"), std::string::npos) << bad;
  }
}

TEST(ControlAddressTest, Groups) {
  gid_t gid = 1;
  EXPECT_TRUE(LookupGroup("root", &gid));
  EXPECT_EQ(gid, 0u);
  EXPECT_TRUE(LookupGroup("4242", &gid));
  EXPECT_EQ(gid, 4242u);
  EXPECT_FALSE(LookupGroup("no-such-group-perch", &gid));
  EXPECT_EQ(GroupName(0), "root");
}

}  // namespace
}  // namespace perch
