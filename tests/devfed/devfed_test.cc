// perch-devfed at the HTTP level, the way `curl -si` sees it: discovery, the
// director's 307 and headers, JSON errors, caches and origin serving bytes,
// token enforcement by XRootD itself, TLS, and a clean stop.
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/devfed/devfed_harness.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

struct Response {
  long status = 0;
  std::multimap<std::string, std::string> headers;  // lower-case names
  std::string body;
  std::string Header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

size_t OnHeader(char* data, size_t size, size_t n, void* userp) {
  std::string line(data, size * n);
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    value.erase(value.find_last_not_of("\r\n") + 1);
    static_cast<Response*>(userp)->headers.emplace(name, value);
  }
  return size * n;
}

size_t OnBody(char* data, size_t size, size_t n, void* userp) {
  static_cast<Response*>(userp)->body.append(data, size * n);
  return size * n;
}

Response Fetch(const std::string& url, const std::string& method = "GET",
               std::vector<std::string> headers = {}, const std::string& ca = "") {
  Response r;
  CURL* c = curl_easy_init();
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  if (!ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, ca.c_str());
  if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(c);
  return r;
}

class DevFedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    std::string t = (fs::temp_directory_path() / "perch-devfed-data-XXXXXX").string();
    ASSERT_NE(mkdtemp(t.data()), nullptr);
    dir_ = t;
    fs::permissions(dir_, fs::perms(0755));
    fs::create_directories(dir_ / "sub dir");
    std::ofstream(dir_ / "hello.txt") << "hello world\n";
    std::ofstream(dir_ / "sub dir" / "a b.txt") << "spaces";
    for (auto& e : fs::recursive_directory_iterator(dir_)) {
      fs::permissions(e.path(), e.is_directory() ? fs::perms(0755) : fs::perms(0644));
    }
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(DevFedTest, DirectorSpeaksPelican) {
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 2, false});
  ASSERT_EQ(fed.Start(), "");
  std::string f = fed.FederationUrl();

  auto disc = Fetch(f + "/.well-known/pelican-configuration");
  ASSERT_EQ(disc.status, 200);
  auto doc = nlohmann::json::parse(disc.body);
  EXPECT_EQ(doc["director_endpoint"], f);

  auto r = Fetch(f + "/test/sub%20dir/a%20b.txt");
  ASSERT_EQ(r.status, 307);
  auto caches = fed.CacheUrls("/test");
  ASSERT_EQ(caches.size(), 2u);
  EXPECT_EQ(r.Header("location"), caches[0] + "/test/sub%20dir/a%20b.txt");
  EXPECT_EQ(r.Header("link"), "<" + caches[0] + "/test/sub%20dir/a%20b.txt>; rel=\"duplicate\"; pri=1; depth=2, <" +
                                  caches[1] + "/test/sub%20dir/a%20b.txt>; rel=\"duplicate\"; pri=2; depth=2");
  EXPECT_EQ(r.Header("x-pelican-namespace"),
            "namespace=/test, require-token=false, collections-url=" + fed.OriginUrl("/test"));
  EXPECT_EQ(r.Header("x-pelican-jobid").size(), 36u);
  EXPECT_EQ(r.Header("server").rfind("pelican/", 0), 0u);
  EXPECT_EQ(r.Header("x-pelican-authorization"), "");

  // Both caches and the origin serve the bytes, with ranges.
  for (const auto& base : {caches[0], caches[1], fed.OriginUrl("/test")}) {
    auto data = Fetch(base + "/test/hello.txt", "GET", {"Range: bytes=6-10"});
    EXPECT_EQ(data.status, 206) << base;
    EXPECT_EQ(data.body, "world") << base;
  }
  // PROPFIND and ?directread go to the origin.
  auto pf = Fetch(f + "/test/", "PROPFIND");
  ASSERT_EQ(pf.status, 307);
  EXPECT_EQ(pf.Header("location").rfind(fed.OriginUrl("/test"), 0), 0u);
  EXPECT_EQ(Fetch(f + "/test/hello.txt?directread").Header("location"),
            fed.OriginUrl("/test") + "/test/hello.txt?directread");

  // Errors: JSON bodies with the status codes of the protocol.
  auto missing = Fetch(f + "/test/nope");
  EXPECT_EQ(missing.status, 404);
  EXPECT_NE(nlohmann::json::parse(missing.body)["msg"].get<std::string>().find("No sources reported possession"),
            std::string::npos);
  auto unknown = Fetch(f + "/elsewhere/x");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("No sources found"), std::string::npos);
  EXPECT_EQ(Fetch(f + "/test/hello.txt", "DELETE").status, 405);
  EXPECT_EQ(Fetch(f + "/test/hello.txt?directread&prefercached").status, 400);
  EXPECT_EQ(Fetch(f + "/test/%2e%2e/etc/passwd").status, 400);
}

TEST_F(DevFedTest, ProtectedExportIsEnforcedByXrootd) {
  DevFed fed(DevFed::Options{{{"/secret", dir_.string(), true}}, 2, false});
  ASSERT_EQ(fed.Start(), "");
  auto r = Fetch(fed.FederationUrl() + "/secret/hello.txt", "GET", {"Authorization: Bearer abc"});
  ASSERT_EQ(r.status, 307);
  EXPECT_NE(r.Header("x-pelican-namespace").find("require-token=true"), std::string::npos);
  EXPECT_EQ(r.Header("x-pelican-authorization"), "issuer=" + fed.FederationUrl() + "/issuer/secret");
  EXPECT_NE(r.Header("location").find("authz=abc"), std::string::npos);
  EXPECT_EQ(r.Header("link").find("authz"), std::string::npos);  // Link URLs never carry tokens
  EXPECT_TRUE(fed.CacheUrls("/secret").empty());  // protected: served by the origin only
  std::string origin = fed.OriginUrl("/secret") + "/secret/hello.txt";
  EXPECT_EQ(Fetch(origin).status, 403);
  EXPECT_EQ(Fetch(origin, "GET", {"Authorization: Bearer not-a-macaroon"}).status, 403);
  std::ifstream tf(fed.TokenFile());
  std::string token;
  std::getline(tf, token);
  auto ok = Fetch(origin, "GET", {"Authorization: Bearer " + token});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "hello world\n");
}

TEST_F(DevFedTest, TlsEverywhere) {
  DevFed fed(DevFed::Options{{{"/t", dir_.string(), false}}, 1, true});
  ASSERT_EQ(fed.Start(), "");
  ASSERT_EQ(fed.FederationUrl().rfind("https://", 0), 0u);
  auto r = Fetch(fed.FederationUrl() + "/t/hello.txt", "GET", {}, fed.CaFile());
  ASSERT_EQ(r.status, 307);
  EXPECT_EQ(r.Header("location").rfind("https://", 0), 0u);
  EXPECT_EQ(Fetch(r.Header("location"), "GET", {}, fed.CaFile()).body, "hello world\n");
  EXPECT_EQ(Fetch(fed.FederationUrl() + "/t/hello.txt").status, 0);  // untrusted without the CA
}

TEST_F(DevFedTest, StopsEverythingItStarted) {
  std::vector<std::string> urls;
  {
    DevFed fed(DevFed::Options{{{"/a", dir_.string(), false}, {"/b/c", dir_.string(), false}}, 1, false});
    ASSERT_EQ(fed.Start(), "");
    urls = {fed.FederationUrl(), fed.OriginUrl("/a"), fed.OriginUrl("/b/c"), fed.CacheUrls("/b/c")[0]};
    EXPECT_EQ(Fetch(fed.FederationUrl() + "/b/c/hello.txt").status, 307);
    EXPECT_EQ(Fetch(fed.OriginUrl("/b/c") + "/b/c/hello.txt").body, "hello world\n");
  }
  for (const auto& u : urls) EXPECT_EQ(Fetch(u + "/").status, 0) << u << " still answers";
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
  auto [rc4, out4] = run("--help");
  EXPECT_EQ(rc4, 0);
  EXPECT_NE(out4.find("Example"), std::string::npos);
}

}  // namespace
}  // namespace perch::testing
