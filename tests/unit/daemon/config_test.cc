#include "daemon/config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

namespace perch {
namespace {

TEST(ConfigTest, Sizes) {
  EXPECT_EQ(ParseSize("4M", "x"), 4u << 20);
  EXPECT_EQ(ParseSize("10GiB", "x"), 10ULL << 30);
  EXPECT_EQ(ParseSize("512k", "x"), 512u << 10);
  EXPECT_EQ(ParseSize("1048576", "x"), 1048576u);
  for (const char* bad : {"", "M", "4X", "-1", "4.5G", "99999999999999999999", "20000000000T"}) {
    EXPECT_THROW(ParseSize(bad, "--cache-size"), ConfigError) << bad;
  }
  try {
    ParseSize("lots", "--cache-size");
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--cache-size: 'lots' is not a size"), std::string::npos);
  }
}

TEST(ConfigTest, Durations) {
  EXPECT_EQ(ParseDuration("30s", "x"), std::chrono::seconds(30));
  EXPECT_EQ(ParseDuration("500ms", "x"), std::chrono::milliseconds(500));
  EXPECT_EQ(ParseDuration("2m", "x"), std::chrono::minutes(2));
  EXPECT_EQ(ParseDuration("45", "x"), std::chrono::seconds(45));
  EXPECT_THROW(ParseDuration("soon", "x"), ConfigError);
  EXPECT_THROW(ParseDuration("5d", "x"), ConfigError);
}

class ConfigFileTest : public ::testing::Test {
 protected:
  void TearDown() override { std::filesystem::remove(path_); }
  void Write(const std::string& text) { std::ofstream(path_) << text; }
  std::string path_ = std::filesystem::temp_directory_path() /
                      ("perch-config-" + std::to_string(getpid()) + ".toml");
};

TEST_F(ConfigFileTest, AppliesEveryKey) {
  Write(R"(federation = "osdf:///ospool/data"
mountpoint = "/osdf"
cache_dir = "/var/cache/perch"
cache_size = "50G"
block_size = 8388608
op_timeout = "10s"
fuse_threads = 8
net_threads = 3
high_watermark = 0.9
low_watermark = 0.8
dir_ttl = 60
fuse_read_ahead = "4M"
)");
  DaemonConfig c;
  ApplyConfigFile(path_, &c);
  EXPECT_EQ(c.federation_url, "osdf:///ospool/data");
  EXPECT_EQ(c.cache_size, 50ULL << 30);
  EXPECT_EQ(c.block_size, 8u << 20);
  EXPECT_EQ(c.op_timeout, std::chrono::seconds(10));
  EXPECT_EQ(c.fuse_threads, 8u);
  EXPECT_EQ(c.net_threads, 3u);
  EXPECT_EQ(NetThreadsOf(c, 64), 3u);
  EXPECT_EQ(c.dir_ttl, std::chrono::seconds(60));
  EXPECT_EQ(c.fuse_read_ahead, 4u << 20);
  EXPECT_NO_THROW(Validate(c));
}

TEST_F(ConfigFileTest, ErrorsNameTheProblem) {
  struct Case {
    const char* text;
    const char* needle;
  };
  for (const Case& k : {Case{"cache_size = \"lots\"", "cache_size"},
                        Case{"cach_size = 1", "unknown key 'cach_size'"},
                        Case{"fuse_threads = -3", "positive integer"},
                        Case{"cache_dir = 5", "must be a string"}, Case{"cache_size = [", ":1:"}}) {
    Write(k.text);
    DaemonConfig c;
    try {
      ApplyConfigFile(path_, &c);
      ADD_FAILURE() << "accepted: " << k.text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(k.needle), std::string::npos) << e.what();
    }
  }
}

TEST(ConfigValidateTest, NetThreadsAreOnePerTwoCoresUnlessSet) {
  DaemonConfig c;
  EXPECT_EQ(NetThreadsOf(c, 1), 2u);
  EXPECT_EQ(NetThreadsOf(c, 2), 2u);
  EXPECT_EQ(NetThreadsOf(c, 8), 4u);
  EXPECT_EQ(NetThreadsOf(c, 16), 8u);
  EXPECT_EQ(NetThreadsOf(c, 256), 8u);
  c.net_threads = 1;
  EXPECT_EQ(NetThreadsOf(c, 16), 1u);
  c.net_threads = 65;
  EXPECT_THROW(Validate(c), ConfigError);
}

TEST(ConfigValidateTest, CrossFieldRules) {
  DaemonConfig c;
  c.low_watermark = 0.99;
  EXPECT_THROW(Validate(c), ConfigError);
  c = DaemonConfig{};
  c.block_size = 1000;
  EXPECT_THROW(Validate(c), ConfigError);
  c = DaemonConfig{};
  c.cache_size = c.block_size;
  EXPECT_THROW(Validate(c), ConfigError);
  c = DaemonConfig{};
  c.log_level = "loud";
  EXPECT_THROW(Validate(c), ConfigError);
  c = DaemonConfig{};
  EXPECT_EQ(c.fuse_read_ahead, 1u << 20);
  c.fuse_read_ahead = 0;  // the kernel's default
  EXPECT_NO_THROW(Validate(c));
  c.fuse_read_ahead = 1ULL << 30;
  EXPECT_THROW(Validate(c), ConfigError);
}

// The control API only on a unix socket or loopback; metrics elsewhere only
// with the opt-in; the socket's group must exist.
TEST_F(ConfigFileTest, ListenersStayLocalUnlessAllowed) {
  Write("control = \"tcp:0.0.0.0:7901\"\n");
  DaemonConfig c;
  ApplyConfigFile(path_, &c);
  EXPECT_THROW(Validate(c), ConfigError);
  Write("control = \"tcp:127.0.0.1:7901\"\nmetrics = \"0.0.0.0:9464\"\n");
  c = DaemonConfig{};
  ApplyConfigFile(path_, &c);
  EXPECT_THROW(Validate(c), ConfigError);
  Write(
      "metrics = \"0.0.0.0:9464\"\nmetrics_allow_remote = true\ncontrol_group = \"root\"\n"
      "allow_nonempty_mountpoint = true\n");
  c = DaemonConfig{};
  ApplyConfigFile(path_, &c);
  EXPECT_TRUE(c.metrics_allow_remote);
  EXPECT_TRUE(c.allow_nonempty_mountpoint);
  EXPECT_EQ(c.control_group, "root");
  EXPECT_NO_THROW(Validate(c));
  c.control_group = "no-such-group-perch";
  EXPECT_THROW(Validate(c), ConfigError);
}

// The HTTP endpoint's share per user and request deadline (issue 29).
TEST_F(ConfigFileTest, EndpointLimits) {
  DaemonConfig c;
  EXPECT_EQ(c.http_connections_per_user, kHttpConnections / 4);
  EXPECT_EQ(c.http_request_timeout, std::chrono::seconds(10));
  Write("http_connections_per_user = 4\nhttp_request_timeout = \"2s\"\n");
  ApplyConfigFile(path_, &c);
  EXPECT_EQ(c.http_connections_per_user, 4u);
  EXPECT_EQ(c.http_request_timeout, std::chrono::seconds(2));
  EXPECT_NO_THROW(Validate(c));
  c.http_connections_per_user = kHttpConnections + 1;
  EXPECT_THROW(Validate(c), ConfigError);
  c = DaemonConfig{};
  c.http_request_timeout = std::chrono::milliseconds(50);
  EXPECT_THROW(Validate(c), ConfigError);
  Write("http_connections_per_user = 0\n");
  EXPECT_THROW(ApplyConfigFile(path_, &c), ConfigError);
}

// The background scrub (issue 30, item 5): on at a low rate by default, off at 0.
TEST_F(ConfigFileTest, ScrubRate) {
  DaemonConfig c;
  EXPECT_EQ(c.scrub_rate, 4u << 20);
  EXPECT_EQ(c.scrub_start_delay, std::chrono::minutes(5));
  Write("scrub_rate = \"16M\"\nscrub_start_delay = \"0s\"\n");
  ApplyConfigFile(path_, &c);
  EXPECT_EQ(c.scrub_rate, 16u << 20);
  EXPECT_EQ(c.scrub_start_delay, std::chrono::seconds(0));
  EXPECT_NO_THROW(Validate(c));
  Write("scrub_rate = 0\n");
  ApplyConfigFile(path_, &c);
  EXPECT_EQ(c.scrub_rate, 0u);
  c.scrub_start_delay = std::chrono::hours(24 * 8);
  EXPECT_THROW(Validate(c), ConfigError);
  Write("scrub_rate = \"fast\"\n");
  EXPECT_THROW(ApplyConfigFile(path_, &c), ConfigError);
}

// Several mounts: [[mount]] tables with their own token files; the one-mount
// form stays a list of one; mixing both forms, or a mount twice, is refused.
TEST_F(ConfigFileTest, MountTablesListSeveralFederations) {
  Write(R"(cache_size = "20G"
token_file = "/etc/perch/token"
[[mount]]
federation = "osdf:///"
mountpoint = "/osdf"
[[mount]]
federation = "pelican://other.example/data"
mountpoint = "/other"
token_file = "/etc/perch/other.token"
tokens = { "/data/private" = "/etc/perch/private.token" }
)");
  DaemonConfig c;
  ApplyConfigFile(path_, &c);
  std::vector<MountConfig> mounts = MountsOf(c);
  ASSERT_EQ(mounts.size(), 2u);
  EXPECT_EQ(mounts[0].federation_url, "osdf:///");
  EXPECT_EQ(mounts[0].token_file, "");  // the top-level one applies
  EXPECT_EQ(mounts[1].mountpoint, "/other");
  EXPECT_EQ(mounts[1].token_file, "/etc/perch/other.token");
  EXPECT_EQ(mounts[1].namespace_tokens.at("/data/private"), "/etc/perch/private.token");
  EXPECT_NO_THROW(Validate(c));

  c = DaemonConfig{};
  c.federation_url = "osdf:///ns";
  c.mountpoint = "/osdf";
  ASSERT_EQ(MountsOf(c).size(), 1u);
  EXPECT_EQ(MountsOf(c)[0].federation_url, "osdf:///ns");
  EXPECT_TRUE(MountsOf(DaemonConfig{}).empty());

  struct Case {
    const char* text;
    const char* needle;
  };
  for (const Case& k :
       {Case{"federation = \"osdf:///\"\n[[mount]]\nfederation = \"osdf:///a\"\nmountpoint = "
             "\"/a\"\n",
             "not both"},
        Case{"[[mount]]\nfederation = \"osdf:///a\"\n", "needs both"},
        Case{"[[mount]]\nfederation = \"osdf:///a\"\nmountpoint = \"/a\"\ncache_size = 1\n",
             "unknown key 'cache_size'"},
        Case{"mount = 3\n", "array of tables"}}) {
    Write(k.text);
    DaemonConfig bad;
    try {
      ApplyConfigFile(path_, &bad);
      ADD_FAILURE() << "accepted: " << k.text;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(k.needle), std::string::npos) << e.what();
    }
  }
  Write(
      "[[mount]]\nfederation = \"osdf:///a\"\nmountpoint = \"/a\"\n"
      "[[mount]]\nfederation = \"osdf:///b\"\nmountpoint = \"/a\"\n");
  DaemonConfig twice;
  ApplyConfigFile(path_, &twice);
  EXPECT_THROW(Validate(twice), ConfigError);
}

}  // namespace
}  // namespace perch

namespace perch {
namespace {

// The example shipped in systemd/ must stay valid.
TEST(ConfigExampleTest, ShippedExampleParses) {
  DaemonConfig c;
  ApplyConfigFile(PERCH_SOURCE_DIR "/systemd/perchd.toml.example", &c);
  EXPECT_EQ(c.mountpoint, "/osdf");
  EXPECT_EQ(c.federation_url, "osdf:///");
  EXPECT_EQ(c.cache_size, 50ULL << 30);
  EXPECT_NO_THROW(Validate(c));
}

// The example names every top-level key the reader takes (set, or commented out as
// "# key = ..."), and nothing else: a key added to the reader without a line in the example,
// or a line left for a key that went, fails here.
TEST(ConfigExampleTest, ShippedExampleNamesEveryKeyAndNoOther) {
  std::ifstream in(PERCH_SOURCE_DIR "/systemd/perchd.toml.example");
  ASSERT_TRUE(in);
  const std::regex key_line(R"(^#?\s*([a-z_]+)\s*=)");
  const std::regex table_line(R"(^#?\s*\[+\s*([a-z_]+)\s*\]+)");
  std::set<std::string> in_example;
  bool top_level = true;  // keys after the first table header belong to that table
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (std::regex_search(line, m, table_line)) {
      in_example.insert(m[1]);
      top_level = false;
    } else if (top_level && std::regex_search(line, m, key_line)) {
      in_example.insert(m[1]);
    }
  }
  const std::vector<std::string> keys = ConfigKeys();
  const std::set<std::string> known(keys.begin(), keys.end());
  for (const std::string& k : known) EXPECT_TRUE(in_example.count(k)) << "example lacks " << k;
  for (const std::string& k : in_example) EXPECT_TRUE(known.count(k)) << "example names " << k;
  EXPECT_GE(known.size(), 30u);  // the reader's list, not an empty one
}

TEST(ConfigTest, NamespaceTokenFlagIsTheTokensTable) {
  std::map<std::string, std::string> tokens;
  AddNamespaceTokenFlag("/ns/=/etc/perch/ns.token", &tokens);
  AddNamespaceTokenFlag("/a=b=c", &tokens);  // the first '=' ends the prefix
  EXPECT_EQ(tokens,
            (std::map<std::string, std::string>{{"/ns", "/etc/perch/ns.token"}, {"/a", "b=c"}}));
  for (const char* bad : {"/ns", "ns=/f", "=/f", "/ns=", "osdf:///ns"}) {
    EXPECT_THROW(AddNamespaceTokenFlag(bad, &tokens), ConfigError) << bad;
  }
}

// docs/configuration.md's table of keys is the one PERCH_CONFIG_KEYS gives, row for row:
// a key added, renamed or given another default or help without the docs following fails
// here, and prints the table to paste between the markers.
TEST(ConfigDocTest, ConfigurationMdHasTheKeyTable) {
  std::ifstream in(PERCH_SOURCE_DIR "/docs/configuration.md");
  ASSERT_TRUE(in);
  const std::string begin = "<!-- keys: from daemon/config_keys.h (ConfigDocTest) -->";
  const std::string end = "<!-- keys: end -->";
  std::string table;
  bool inside = false, ended = false;
  for (std::string line; std::getline(in, line);) {
    if (line == end) {
      ended = inside;
      break;
    }
    if (inside) table += line + "\n";
    if (line == begin) inside = true;
  }
  ASSERT_TRUE(ended) << "docs/configuration.md lacks the lines " << begin << " and " << end;
  EXPECT_EQ(table, ConfigKeysMarkdown()) << "Put this between the markers:\n"
                                         << ConfigKeysMarkdown();
}

// Each row's default, as the docs write it, is the field's initial value.
TEST(ConfigDocTest, DefaultsAreShownAsTheyAreWritten) {
  std::map<std::string, std::string> shown;
  for (const ConfigKey& k : ConfigKeyTable()) shown[std::string(k.key)] = k.default_text();
  EXPECT_EQ(shown["cache_size"], "10G");
  EXPECT_EQ(shown["block_size"], "4M");
  EXPECT_EQ(shown["op_timeout"], "30s");
  EXPECT_EQ(shown["scrub_start_delay"], "5m");
  EXPECT_EQ(shown["file_ttl"], "1h");
  EXPECT_EQ(shown["high_watermark"], "0.95");
  EXPECT_EQ(shown["prefetch"], "true");
  EXPECT_EQ(shown["fuse_threads"], "32");
  EXPECT_EQ(shown["cache_dir"], "/var/cache/perch");
  EXPECT_EQ(shown["metrics"], "off");  // the row's UNSET text
}

// Every row with a key is a key the TOML reader takes, and the reader takes no other
// top-level key but its two tables.
TEST(ConfigDocTest, TheReaderTakesTheTablesKeys) {
  std::set<std::string> rows = {"mount", "tokens"};
  for (const ConfigKey& k : ConfigKeyTable()) {
    if (!k.key.empty()) rows.insert(std::string(k.key));
  }
  const std::vector<std::string> keys = ConfigKeys();
  EXPECT_EQ(std::set<std::string>(keys.begin(), keys.end()), rows);
}

}  // namespace
}  // namespace perch
