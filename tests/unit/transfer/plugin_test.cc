// perch-transfer's pure parts: the command line, where perchd is found, its
// mount list and which mount serves a URL, and where a download lands.
#include "transfer/plugin.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "transfer/local_file.h"
#include "transfer/node_config.h"
#include "transfer/perchd_endpoint.h"

namespace perch::transfer {
namespace {

namespace fs = std::filesystem;
using Mode = PluginArgs::Mode;

TEST(PluginArgsTest, HTCondorsForms) {
  auto a = ParsePluginArgs({"-infile", "in.ads", "-outfile", "out.ads"});
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->mode, Mode::kTransfer);
  EXPECT_EQ(a->infile, "in.ads");
  EXPECT_EQ(a->outfile, "out.ads");
  EXPECT_FALSE(a->upload);
  auto up = ParsePluginArgs({"-outfile", "o", "-infile", "i", "-upload"});
  ASSERT_TRUE(up.ok());
  EXPECT_TRUE(up->upload);
  EXPECT_EQ(ParsePluginArgs({"-classad"})->mode, Mode::kClassAd);
  EXPECT_EQ(ParsePluginArgs({"--version"})->mode, Mode::kVersion);
  EXPECT_EQ(ParsePluginArgs({"-version"})->mode, Mode::kVersion);
  EXPECT_EQ(ParsePluginArgs({"-h"})->mode, Mode::kHelp);
  auto pos = ParsePluginArgs({"osdf:///a", "osdf:///b", "/tmp/d"});
  ASSERT_TRUE(pos.ok());
  EXPECT_EQ(pos->mode, Mode::kPositional);
  EXPECT_EQ(pos->positional.size(), 3u);
}

TEST(PluginArgsTest, BadCommandLinesSayWhatIsWrong) {
  PluginArgs partial;
  auto a = ParsePluginArgs({"-infile", "i", "-outfile", "o", "-bogus"}, &partial);
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.status().message().find("unknown option -bogus"), std::string::npos);
  auto half = ParsePluginArgs({"-infile", "i"}, &partial);
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("go together"), std::string::npos);
  EXPECT_FALSE(ParsePluginArgs({"-infile"}).ok());
  EXPECT_FALSE(ParsePluginArgs({"osdf:///only-one"}).ok());
  EXPECT_FALSE(ParsePluginArgs({}).ok());
  EXPECT_FALSE(ParsePluginArgs({"-upload", "osdf:///a", "b"}).ok());
  // The outfile is known even when the rest is wrong: the error is reported in it.
  ASSERT_FALSE(ParsePluginArgs({"-outfile", "o.ads", "-infile", "i", "extra"}, &partial).ok());
  EXPECT_EQ(partial.outfile, "o.ads");
}

TEST(PluginArgsTest, CapabilityAd) {
  std::string ad = CapabilityAd("0.1.0");
  EXPECT_NE(ad.find("MultipleFileSupport = true\n"), std::string::npos);
  EXPECT_NE(ad.find("PluginVersion = \"0.1.0\"\n"), std::string::npos);
  EXPECT_NE(ad.find("PluginType = \"FileTransfer\"\n"), std::string::npos);
  EXPECT_NE(ad.find("ProtocolVersion = 2\n"), std::string::npos);
  EXPECT_NE(ad.find("SupportedMethods = \"osdf, pelican, stash\"\n"), std::string::npos);
}

class NodeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("perch-nodecfg-" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  EnvLookup Env() {
    return [this](const std::string& name) -> std::optional<std::string> {
      auto it = env_.find(name);
      return it == env_.end() ? std::nullopt : std::optional<std::string>(it->second);
    };
  }
  std::string Config(const std::string& text) {
    std::string path = (dir_ / "perchd.toml").string();
    std::ofstream(path) << text;
    env_["PERCH_CONFIG"] = path;
    return path;
  }
  fs::path dir_;
  std::map<std::string, std::string> env_;
};

TEST_F(NodeConfigTest, EnvironmentFirst) {
  env_["PERCH_ENDPOINT"] = "127.0.0.1:8480/";
  Config("http = \"127.0.0.1:9999\"\nca_file = \"/etc/ca.pem\"\n");
  NodeConfig c = ReadNodeConfig(Env());
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:8480");
  EXPECT_EQ(c.endpoint_source, "$PERCH_ENDPOINT");
  EXPECT_EQ(c.ca_file, "/etc/ca.pem");  // still from the config
  env_["PERCH_CA_FILE"] = "/mine.pem";
  EXPECT_EQ(ReadNodeConfig(Env()).ca_file, "/mine.pem");
  env_["PERCH_ENDPOINT"] = "https://127.0.0.1:8480";
  c = ReadNodeConfig(Env());
  EXPECT_EQ(c.endpoint, "");
  EXPECT_NE(c.endpoint_problem.find("not http://HOST:PORT"), std::string::npos);
}

TEST_F(NodeConfigTest, TheConfigsHttpKey) {
  std::string path = Config("federation = \"osdf:///\"\nhttp = \"127.0.0.1:8480\"\n");
  NodeConfig c = ReadNodeConfig(Env());
  EXPECT_EQ(c.endpoint, "http://127.0.0.1:8480");
  EXPECT_EQ(c.endpoint_source, path);
  Config("federation = \"osdf:///\"\n");
  c = ReadNodeConfig(Env());
  EXPECT_EQ(c.endpoint, "");
  EXPECT_NE(c.endpoint_problem.find("has no http key"), std::string::npos);
  Config("http = [\n");
  c = ReadNodeConfig(Env());
  EXPECT_EQ(c.endpoint, "");
  EXPECT_NE(c.endpoint_problem.find("cannot read perchd's config"), std::string::npos);
  env_["PERCH_CONFIG"] = (dir_ / "absent.toml").string();
  c = ReadNodeConfig(Env());
  EXPECT_EQ(c.endpoint, "");
  EXPECT_NE(c.endpoint_problem.find("no perchd endpoint configured"), std::string::npos);
}

TEST(PerchdMountsTest, ParseAndMatch) {
  auto mounts = ParseMounts(R"({"mounts":[
      {"federation":"pelican://127.0.0.1:8443/","discovery":"https://127.0.0.1:8443",
       "prefix":"/","mountpoint":"/fed"},
      {"federation":"osdf:///ns","discovery":"https://osg-htc.org","prefix":"/ns",
       "mountpoint":"/osdf/ns"},
      {"federation":"osdf:///ns/deeper","discovery":"https://osg-htc.org","prefix":"/ns/deeper",
       "mountpoint":"/osdf/deeper"}]})");
  ASSERT_TRUE(mounts.ok()) << mounts.status().ToString();
  ASSERT_EQ(mounts->size(), 3u);
  auto match = [&](const std::string& url) -> std::string {
    auto u = http::ParseFederationUrl(url);
    EXPECT_TRUE(u.ok()) << url;
    const PerchdMount* m = MountServing(*mounts, *u);
    return m == nullptr ? "" : m->mountpoint;
  };
  EXPECT_EQ(match("pelican://127.0.0.1:8443/a/b"), "/fed");
  EXPECT_EQ(match("osdf:///ns/x"), "/osdf/ns");
  EXPECT_EQ(match("stash:///ns/deeper/x"), "/osdf/deeper");  // the longest prefix
  EXPECT_EQ(match("osdf:///nsx/y"), "");                     // segment-wise, not textual
  EXPECT_EQ(match("osdf:///other/y"), "");
  EXPECT_EQ(match("pelican://127.0.0.1:9999/a"), "");  // another federation
}

TEST(PerchdMountsTest, MalformedListsAreRefused) {
  for (const char* bad :
       {"", "[]", "{\"mounts\":{}}", "{\"mounts\":[{\"federation\":\"x\"}]}",
        "{\"mounts\":[{\"federation\":\"x\",\"discovery\":1,\"prefix\":\"/\"}]}",
        "{\"mounts\":[{\"federation\":\"x\",\"discovery\":\"y\",\"prefix\":\"a\"}]}"}) {
    auto m = ParseMounts(bad);
    EXPECT_FALSE(m.ok()) << bad;
    if (!m.ok()) {
      EXPECT_EQ(m.status().code(), core::StatusCode::kCorrupt) << bad;
    }
  }
  std::string many = "{\"mounts\":[";
  for (int i = 0; i < 1025; ++i) {
    many += std::string(i ? "," : "") + R"({"federation":"f","discovery":"d","prefix":"/"})";
  }
  EXPECT_FALSE(ParseMounts(many + "]}").ok());
}

TEST(LocalFileTest, DestinationAndTemporaryFile) {
  fs::path dir = fs::temp_directory_path() / ("perch-localfile-" + std::to_string(getpid()));
  fs::create_directories(dir);
  auto obj = core::ObjectPath::Parse("/ns/sub/x.bin");
  EXPECT_EQ(*ResolveDestination(dir.string(), *obj), dir.string() + "/x.bin");
  EXPECT_EQ(*ResolveDestination((dir / "y").string(), *obj), (dir / "y").string());
  EXPECT_FALSE(ResolveDestination(dir.string(), core::ObjectPath()).ok());
  EXPECT_FALSE(ResolveDestination("", *obj).ok());
  std::string tmp_path;
  {
    auto tmp = TempFile::CreateFor((dir / "y").string());
    ASSERT_TRUE(tmp.ok()) << tmp.status().ToString();
    tmp_path = tmp->path();
    EXPECT_TRUE(fs::exists(tmp_path));
    ASSERT_TRUE(tmp->WriteAt(3, "def").ok());
    ASSERT_TRUE(tmp->WriteAt(0, "abc").ok());
    EXPECT_FALSE(fs::exists(dir / "y"));  // nothing under the real name before Commit
  }
  EXPECT_FALSE(fs::exists(tmp_path));  // dropped without Commit: removed
  auto tmp = TempFile::CreateFor((dir / "y").string());
  ASSERT_TRUE(tmp.ok());
  ASSERT_TRUE(tmp->WriteAt(0, "abcdef").ok());
  ASSERT_TRUE(tmp->Commit().ok());
  std::ifstream in(dir / "y");
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "abcdef");
  EXPECT_EQ(std::distance(fs::directory_iterator(dir), fs::directory_iterator()), 1);
  auto missing = TempFile::CreateFor((dir / "no" / "such" / "z").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), core::StatusCode::kNotFound);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace perch::transfer
