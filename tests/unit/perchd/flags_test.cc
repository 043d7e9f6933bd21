#include "perchd/flags.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace perch {
namespace {

class FlagsTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove(config_); }

  // Parses "perchd ARGS... osdf:///ns /mnt"; the configuration, or the exit status.
  std::variant<CommandLine, int> Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "perchd");
    args.push_back("osdf:///ns");
    args.push_back("/mnt/perch");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    return ParseCommandLine(static_cast<int>(argv.size()), argv.data());
  }
  DaemonConfig Config(std::vector<std::string> args) {
    auto parsed = Parse(std::move(args));
    if (const int* rc = std::get_if<int>(&parsed)) {
      ADD_FAILURE() << "exit " << *rc;
      return {};
    }
    return std::get<CommandLine>(parsed).config;
  }
  std::string File(const std::string& text) {
    std::ofstream(config_) << text;
    return config_;
  }

  std::string config_ = std::filesystem::temp_directory_path() /
                        ("perch-flags-" + std::to_string(getpid()) + ".toml");
};

// Defaults, then the file, then the flags: every flag, text or switch, wins over
// the file's key. (perchd once read --cache-dir, --log-level, --ca-file,
// --token-file and --protected-group before the file, which then won.)
TEST_F(FlagsTest, FlagsOverrideTheFile) {
  const std::string file = File(R"(cache_dir = "/from/file"
cache_size = "20G"
log_level = "debug"
ca_file = "/file/ca.pem"
token_file = "/file/token"
protected_group = "root"
prefetch = true
op_timeout = "5s"
)");
  DaemonConfig c =
      Config({"--config", file, "--cache-dir", "/from/flag", "--cache-size", "30G", "--log-level",
              "warn", "--ca-file", "/flag/ca.pem", "--token-file", "/flag/token",
              "--protected-group", "daemon", "--no-prefetch", "--op-timeout", "2s"});
  EXPECT_EQ(c.cache_dir, "/from/flag");
  EXPECT_EQ(c.cache_size, 30ULL << 30);
  EXPECT_EQ(c.log_level, "warn");
  EXPECT_EQ(c.ca_file, "/flag/ca.pem");
  EXPECT_EQ(c.token_file, "/flag/token");
  EXPECT_EQ(c.protected_group, "daemon");
  EXPECT_FALSE(c.prefetch);
  EXPECT_EQ(c.op_timeout, std::chrono::seconds(2));

  // Without the flags, the file's values.
  c = Config({"--config", file});
  EXPECT_EQ(c.cache_dir, "/from/file");
  EXPECT_EQ(c.log_level, "debug");
  EXPECT_EQ(c.op_timeout, std::chrono::seconds(5));
  EXPECT_TRUE(c.prefetch);
}

// Each row of the table with a flag is on the command line and changes its field.
TEST_F(FlagsTest, EveryRowWithAFlagSetsItsField) {
  DaemonConfig defaults;  // and the two arguments Parse() adds
  defaults.federation_url = "osdf:///ns";
  defaults.mountpoint = "/mnt/perch";
  int flags = 0;
  for (const ConfigKey& k : ConfigKeyTable()) {
    if (k.flag.empty()) continue;
    ++flags;
    std::vector<std::string> args = {std::string(k.LongFlag())};
    if (!k.is_switch()) {
      // A value unlike the default, valid for Validate().
      std::string value = k.kind == "Size"    ? "128M"
                          : k.kind == "Time"  ? "7s"
                          : k.kind == "Count" ? "3"
                                              : "";
      if (k.key == "log_level") value = "error";
      if (k.key == "control") value = "unix:/tmp/perch-flags-test.sock";
      if (k.key == "metrics" || k.key == "http") value = "127.0.0.1:0";
      if (k.key == "control_group") value = "root";
      if (value.empty()) value = "/some/path";
      args.push_back(value);
    }
    DaemonConfig set = Config(args);
    DaemonConfig unset = defaults;
    k.set(unset, k.is_switch() ? (k.SwitchValue() ? "true" : "false") : args[1], "test");
    // The flag did what the row's setter does, and that is not the default.
#define PERCH_COMPARE(kind_, type_, field, key_, flag_, value_, unset_, help_) \
  EXPECT_EQ(set.field, unset.field) << k.flag << " vs the row's setter: " #field;
    PERCH_CONFIG_KEYS(PERCH_COMPARE)
#undef PERCH_COMPARE
    bool changed = false;
#define PERCH_CHANGED(kind_, type_, field, key_, flag_, value_, unset_, help_) \
  changed = changed || !(set.field == defaults.field);
    PERCH_CONFIG_KEYS(PERCH_CHANGED)
#undef PERCH_CHANGED
    EXPECT_TRUE(changed) << k.flag << " changed nothing";
  }
  EXPECT_GE(flags, 20);
}

TEST_F(FlagsTest, BadValuesAreUsageErrorsNamingTheFlag) {
  testing::internal::CaptureStderr();
  auto parsed = Parse({"--cache-size", "lots"});
  std::string err = testing::internal::GetCapturedStderr();
  ASSERT_TRUE(std::holds_alternative<int>(parsed));
  EXPECT_EQ(std::get<int>(parsed), 2);
  EXPECT_NE(err.find("--cache-size: 'lots' is not a size"), std::string::npos) << err;

  for (const char* bad : {"0", "-1", "x", "1.5"}) {
    testing::internal::CaptureStderr();
    parsed = Parse({"--http-connections-per-user", bad});
    err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(std::holds_alternative<int>(parsed)) << bad;
    EXPECT_EQ(std::get<int>(parsed), 2) << bad;
  }
  testing::internal::CaptureStdout();
  parsed = Parse({"--help"});
  const std::string help = testing::internal::GetCapturedStdout();
  ASSERT_TRUE(std::holds_alternative<int>(parsed));
  EXPECT_EQ(std::get<int>(parsed), 0);
  for (const ConfigKey& k : ConfigKeyTable()) {
    if (k.flag.empty()) continue;
    EXPECT_NE(help.find(std::string(k.LongFlag())), std::string::npos) << k.flag;
    EXPECT_NE(help.find(std::string(k.help.substr(0, 30))), std::string::npos) << k.flag;
  }
}

}  // namespace
}  // namespace perch
