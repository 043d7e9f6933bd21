// perch-devfed at the HTTP level, the way `curl -si` sees it: discovery on its
// own host, the director's answers byte for byte as Pelican 7.27 writes them
// (devfed/director.h says where each comes from), caches and origin serving
// bytes, token enforcement by XRootD itself, TLS, and a clean stop.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/devfed/devfed_harness.h"
#include "tests/devfed/devfed_test_fixture.h"
#include "tests/devfed/http_fetch.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kCors[] =
    "Content-Type, Authorization, X-Pelican-User, X-Pelican-Timeout, X-Pelican-Token-Generation, "
    "X-Pelican-Authorization, X-Pelican-Namespace";

std::string Msg(const Response& r) {
  try {
    return nlohmann::json::parse(r.body).at("msg").get<std::string>();
  } catch (const std::exception& e) {
    return std::string("not a JSON error: ") + e.what() + ": " + r.body;
  }
}

TEST_F(DevFedTest, DiscoveryIsItsOwnHostAndNamesTheDirector) {
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 0, false});
  ASSERT_EQ(fed.Start(), "");
  std::string f = fed.FederationUrl(), d = fed.DirectorUrl();
  ASSERT_NE(f, d);
  auto disc = Fetch(f + "/.well-known/pelican-configuration");
  ASSERT_EQ(disc.status, 200);
  EXPECT_EQ(disc.Header("content-type"), "application/json");
  EXPECT_EQ(disc.body, "{\n  \"discovery_endpoint\": \"" + f + "\",\n  \"director_endpoint\": \"" +
                           d + "\",\n  \"namespace_registration_endpoint\": \"" + f +
                           "\",\n  \"jwks_uri\": \"" + f +
                           "/.well-known/issuer.jwks\",\n  \"broker_endpoint\": \"\"\n}\n");
  EXPECT_EQ(Fetch(f + "/test/hello.txt").status, 404);  // the discovery host redirects nothing
  // A director that does not host the federation's metadata (as the OSDF's).
  auto gone = Fetch(d + "/.well-known/pelican-configuration");
  EXPECT_EQ(gone.status, 410);
  EXPECT_NE(Msg(gone).find("disallow federation metadata hosting"), std::string::npos);
}

TEST_F(DevFedTest, RedirectIsPelicans) {
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 2, false});
  ASSERT_EQ(fed.Start(), "");
  std::string d = fed.DirectorUrl(), origin = fed.OriginUrl("/test");
  auto caches = fed.CacheUrls("/test");
  ASSERT_EQ(caches.size(), 2u);

  auto r = Fetch(d + "/test/sub%20dir/a%20b.txt");
  ASSERT_EQ(r.status, 307);
  std::string loc = caches[0] + "/test/sub%20dir/a%20b.txt";
  EXPECT_EQ(r.Header("location"), loc);
  EXPECT_EQ(r.Header("link"), Link(caches, "/test/sub%20dir/a%20b.txt", 2));
  EXPECT_EQ(r.Header("x-pelican-namespace"),
            "namespace=/test, require-token=false, collections-url=" + origin);
  EXPECT_EQ(r.Header("x-pelican-jobid").size(), 36u);
  EXPECT_EQ(r.All("server"), std::vector<std::string>{"pelican/7.27.0"});
  EXPECT_EQ(r.Header("content-type"), "text/html; charset=utf-8");
  EXPECT_EQ(r.body, "<a href=\"" + loc + "\">Temporary Redirect</a>.\n\n");  // net/http's Redirect
  EXPECT_EQ(r.Header("access-control-expose-headers"), kCors);
  EXPECT_FALSE(r.Has("x-pelican-authorization"));
  EXPECT_FALSE(r.Has("x-pelican-token-generation"));
  // The API route: the same answer, with Server twice (two gin groups add it).
  auto api = Fetch(d + "/api/v1.0/director/object/test/hello.txt");
  EXPECT_EQ(api.status, 307);
  EXPECT_EQ(api.All("server").size(), 2u);
  auto head = Fetch(d + "/test/hello.txt", "HEAD");
  EXPECT_EQ(head.status, 307);
  EXPECT_EQ(head.Header("content-type"), "text/html; charset=utf-8");
  EXPECT_FALSE(head.Has("content-length"));

  // Both caches and the origin serve the bytes, with ranges.
  for (const auto& base : {caches[0], caches[1], origin}) {
    auto data = Fetch(base + "/test/hello.txt", "GET", {"Range: bytes=6-10"});
    EXPECT_EQ(data.status, 206) << base;
    EXPECT_EQ(data.body, "world") << base;
  }
  // A missing object is redirected too (no stat); the cache answers 404.
  auto missing = Fetch(d + "/test/nope");
  ASSERT_EQ(missing.status, 307);
  EXPECT_EQ(Fetch(missing.Header("location")).status, 404);
  // PROPFIND (a stat without Depth) and ?directread go to the origin; the query is re-encoded.
  auto pf = Fetch(d + "/test/", "PROPFIND");
  ASSERT_EQ(pf.status, 307);
  EXPECT_EQ(pf.Header("location"), origin + "/test");
  EXPECT_EQ(pf.Header("link"), Link({origin}, "/test", 0));
  EXPECT_FALSE(pf.Has("content-type"));
  EXPECT_EQ(pf.body, "");
  EXPECT_EQ(Fetch(d + "/test/hello.txt?directread").Header("location"),
            origin + "/test/hello.txt?directread=");
  auto tok = Fetch(d + "/test/hello.txt?b=2&a=1", "GET",
                   {"Authorization: Bearer x y&z", "X-Pelican-Timeout: 9s"});
  EXPECT_EQ(tok.Header("location"),
            caches[0] + "/test/hello.txt?a=1&authz=x+y%26z&b=2&pelican.timeout=9s");
  // ?redirect=false: the headers without the redirect.
  auto meta = Fetch(d + "/test/hello.txt?redirect=false");
  EXPECT_EQ(meta.status, 200);
  EXPECT_FALSE(meta.Has("location"));
  EXPECT_EQ(meta.Header("link"), Link(caches, "/test/hello.txt", 1));
  auto opt = Fetch(d + "/test/hello.txt", "OPTIONS");
  EXPECT_EQ(opt.status, 200);
  EXPECT_EQ(opt.Header("allow"), "HEAD,GET,PUT,PROPFIND,COPY,OPTIONS,POST");
}

TEST_F(DevFedTest, ErrorsArePelicans) {
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 1, false});
  ASSERT_EQ(fed.Start(), "");
  std::string d = fed.DirectorUrl();
  auto unknown = Fetch(d + "/elsewhere/x");
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(unknown.Header("content-type"), "application/json; charset=utf-8");
  EXPECT_EQ(Msg(unknown).rfind(
                "No sources found for the requested path: no origins found for the requested "
                "namespace '/elsewhere/x': Request ID: ",
                0),
            0u)
      << unknown.body;
  EXPECT_FALSE(unknown.Has("x-pelican-jobid"));
  auto testing_ns = Fetch(d + "/testing/x");  // prefixes match on '/' boundaries
  EXPECT_EQ(testing_ns.status, 404);
  // "/test/../etc/passwd" is path.Clean'ed to /etc/passwd: no namespace.
  auto dots = Fetch(d + "/test/%2e%2e/etc/passwd");
  EXPECT_EQ(dots.status, 404);
  EXPECT_NE(Msg(dots).find("'/etc/passwd'"), std::string::npos) << dots.body;
  EXPECT_EQ(Fetch(d + "/test/%zz").status, 400);  // net/http: a bad escape is a bad request
  auto del = Fetch(d + "/test/hello.txt", "DELETE");
  EXPECT_EQ(del.status, 405);
  EXPECT_NE(Msg(del).find("support the 'delete' request type"), std::string::npos) << del.body;
  auto post = Fetch(d + "/test/hello.txt", "POST");
  EXPECT_EQ(post.status, 404);
  EXPECT_EQ(post.body, "404 page not found");
  auto both = Fetch(d + "/test/hello.txt?directread&prefercached");
  EXPECT_EQ(both.status, 400);
  EXPECT_NE(Msg(both).find("cannot have both directread and prefercached"), std::string::npos);
}

// An unsigned JWT whose claims are `claims` (the director does not check signatures).
std::string Jwt(const std::string& claims) {
  auto b64url = [](const std::string& in) {
    static const char* kAlphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    std::string out;
    uint32_t acc = 0;
    int bits = 0;
    for (unsigned char ch : in) {
      acc = (acc << 8) | ch;
      for (bits += 8; bits >= 6; bits -= 6) out += kAlphabet[(acc >> (bits - 6)) & 63];
    }
    if (bits > 0) out += kAlphabet[(acc << (6 - bits)) & 63];
    return out;
  };
  return b64url(R"({"alg":"none","typ":"JWT"})") + "." + b64url(claims) + ".";
}

TEST_F(DevFedTest, ExpiredJwtIs401) {
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 0, false});
  ASSERT_EQ(fed.Start(), "");
  std::string object = fed.DirectorUrl() + "/test/hello.txt";
  long now = static_cast<long>(std::time(nullptr));
  std::string expired = Jwt(R"({"sub":"x","exp":)" + std::to_string(now - 60) + "}");
  std::string fresh = Jwt(R"({"sub":"x","iat":)" + std::to_string(now) + R"(,"exp":)" +
                          std::to_string(now + 3600) + "}");
  std::string brief = Jwt(R"({"iat":)" + std::to_string(now - 50) + R"(,"exp":)" +
                          std::to_string(now + 8) + "}");  // 8 s left: inside the 10 s grace
  auto r = Fetch(object, "GET", {"Authorization: Bearer " + expired});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.Header("www-authenticate"),
            R"(Bearer error="invalid_token", error_description="token has expired")");
  EXPECT_EQ(Msg(r).rfind("bearer token has expired: Request ID: ", 0), 0u) << r.body;
  EXPECT_EQ(Fetch(object + "?authz=" + expired).status, 401);
  EXPECT_EQ(Fetch(object, "GET", {"Authorization: Bearer " + brief}).status, 401);
  EXPECT_EQ(Fetch(object, "GET", {"Authorization: Bearer " + fresh}).status, 307);
  EXPECT_EQ(Fetch(object, "GET", {"Authorization: Bearer opaque-macaroon"}).status, 307);
}

TEST_F(DevFedTest, PathsAreEscapedAsGoDoes) {
  // url.URL.String() keeps $&+,:;=@ in a path and escapes the rest.
  std::ofstream(dir_ / "a$b&c+d,e:f;g=h@i x'(1)#.txt") << "odd";
  fs::permissions(dir_ / "a$b&c+d,e:f;g=h@i x'(1)#.txt", fs::perms(0644));
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 1, false});
  ASSERT_EQ(fed.Start(), "");
  auto r =
      Fetch(fed.DirectorUrl() + "/test/a%24b%26c%2Bd%2Ce%3Af%3Bg%3Dh%40i%20x%27%281%29%23.txt");
  ASSERT_EQ(r.status, 307);
  std::string go = "/test/a$b&c+d,e:f;g=h@i%20x%27%281%29%23.txt";
  std::string cache = fed.CacheUrls("/test")[0];
  EXPECT_EQ(r.Header("location"), cache + go);
  EXPECT_EQ(r.Header("link"), Link({cache}, go, 1));
  EXPECT_EQ(r.body, "<a href=\"" + cache +
                        "/test/a$b&amp;c+d,e:f;g=h@i%20x%27%281%29%23.txt\">Temporary "
                        "Redirect</a>.\n\n");
  EXPECT_EQ(Fetch(cache + go).body, "odd");  // XRootD reads the name as Go wrote it
}

TEST_F(DevFedTest, NestedPrefixesRouteToTheirOwnOrigin) {
  TempData inner("inner");
  inner.Write("b.txt", "inner b");
  fs::create_directories(dir_ / "b");
  std::ofstream(dir_ / "b" / "b.txt") << "shadowed";
  fs::permissions(dir_ / "b", fs::perms(0755));
  DevFed fed(DevFed::Options{
      {{"/a", dir_.string(), false}, {"/a/b", inner.path().string(), false}}, 1, false});
  ASSERT_EQ(fed.Start(), "");
  std::string d = fed.DirectorUrl();
  ASSERT_NE(fed.OriginUrl("/a"), fed.OriginUrl("/a/b"));
  auto outer = Fetch(d + "/a/hello.txt");
  EXPECT_EQ(outer.Header("link"), Link(fed.CacheUrls("/a"), "/a/hello.txt", 1));
  auto nested = Fetch(d + "/a/b/b.txt");
  EXPECT_EQ(nested.Header("link"), Link(fed.CacheUrls("/a/b"), "/a/b/b.txt", 1));
  EXPECT_EQ(nested.Header("x-pelican-namespace"),
            "namespace=/a/b, require-token=false, collections-url=" + fed.OriginUrl("/a/b"));
  EXPECT_EQ(Fetch(nested.Header("location")).body, "inner b");
  EXPECT_EQ(Fetch(d + "/a/bb/x").Header("x-pelican-namespace").rfind("namespace=/a,", 0), 0u);
  auto pf = Fetch(d + "/a/b", "PROPFIND", {"Depth: 1"});
  EXPECT_EQ(pf.Header("location"), fed.OriginUrl("/a/b") + "/a/b");
  auto prefix = Fetch(d + "/api/v1.0/director/namespaces/prefix/a/b/c/d.txt");
  EXPECT_EQ(prefix.body, R"({"prefix":"/a/b"})");
}

TEST_F(DevFedTest, ListNamespacesIsPelicans) {
  TempData other("other");
  DevFed fed(DevFed::Options{
      {{"/pub", dir_.string(), false, false}, {"/secret", other.path().string(), true}}, 0, false});
  ASSERT_EQ(fed.Start(), "");
  std::string d = fed.DirectorUrl();
  auto v2 = Fetch(d + "/api/v2.0/director/listNamespaces");
  ASSERT_EQ(v2.status, 200);
  auto url = [](const std::string& scheme, const std::string& host, const std::string& path) {
    return nlohmann::ordered_json{{"Scheme", scheme},  {"Opaque", ""},        {"User", nullptr},
                                  {"Host", host},      {"Path", path},        {"RawPath", ""},
                                  {"OmitHost", false}, {"ForceQuery", false}, {"RawQuery", ""},
                                  {"Fragment", ""},    {"RawFragment", ""}};
  };
  auto caps = [](bool pub, bool list, bool direct) {
    return nlohmann::ordered_json{{"PublicRead", pub}, {"Read", true},           {"Write", false},
                                  {"Listing", list},   {"FallBackRead", direct}, {"Copies", false}};
  };
  std::string dhost = d.substr(7), ohost = fed.OriginUrl("/secret").substr(7);
  auto iss1 = url("http", dhost, "/issuer/secret"), iss2 = url("http", ohost, "");
  nlohmann::ordered_json expected = nlohmann::ordered_json::array();
  expected.push_back({{"Caps", caps(true, false, true)},
                      {"path", "/pub"},
                      {"token-generation",
                       {{{"strategy", ""},
                         {"vault-server", ""},
                         {"max-scope-depth", 0},
                         {"issuer", url("", "", "")}}}},
                      {"token-issuer", nlohmann::ordered_json::array()},
                      {"from-topology", false}});
  expected.push_back(
      {{"Caps", caps(false, true, true)},
       {"path", "/secret"},
       {"token-generation",
        {{{"strategy", "OAuth2"}, {"vault-server", ""}, {"max-scope-depth", 3}, {"issuer", iss1}}}},
       {"token-issuer",
        {{{"base-paths", {"/secret"}}, {"restricted-paths", nullptr}, {"issuer", iss1}},
         {{"base-paths", {"/secret"}}, {"restricted-paths", nullptr}, {"issuer", iss2}}}},
       {"from-topology", false}});
  expected.push_back({{"Caps", caps(true, false, false)},
                      {"path", "/pelican/monitoring"},
                      {"token-generation", nullptr},
                      {"token-issuer", nullptr},
                      {"from-topology", false}});
  EXPECT_EQ(v2.body, expected.dump());  // compact, in Go's field order
  auto v1 = Fetch(d + "/api/v1.0/director/listNamespaces");
  EXPECT_EQ(v1.status, 299);  // deprecated in 7.27: no data
  EXPECT_EQ(v1.Header("warning"),
            R"(299 - "Deprecated API: use GET /api/v2.0/director/listNamespaces")");
}

TEST_F(DevFedTest, NoListingsExportHasNoCollectionsUrl) {
  DevFed fed(DevFed::Options{{{"/nl", dir_.string(), false, false}}, 1, false});
  ASSERT_EQ(fed.Start(), "");
  std::string d = fed.DirectorUrl();
  auto r = Fetch(d + "/nl/hello.txt");
  ASSERT_EQ(r.status, 307);
  EXPECT_EQ(r.Header("x-pelican-namespace"), "namespace=/nl, require-token=false");
  auto ls = Fetch(d + "/nl/", "PROPFIND", {"Depth: 1"});
  EXPECT_EQ(ls.status, 405);
  EXPECT_NE(Msg(ls).find("support the 'ls' request type with queries ''"), std::string::npos)
      << ls.body;
  EXPECT_EQ(Fetch(d + "/nl/hello.txt", "PROPFIND", {"Depth: 0"}).status,
            307);  // a stat needs Reads only
  EXPECT_EQ(Fetch(d + "/nl/?recursive").status, 405);
}

TEST_F(DevFedTest, ProtectedExportIsEnforcedByXrootd) {
  DevFed fed(DevFed::Options{{{"/secret", dir_.string(), true}}, 2, false});
  ASSERT_EQ(fed.Start(), "");
  std::string d = fed.DirectorUrl(), origin = fed.OriginUrl("/secret");
  auto r = Fetch(d + "/secret/hello.txt", "GET", {"Authorization: Bearer abc"});
  ASSERT_EQ(r.status, 307);
  EXPECT_EQ(r.Header("x-pelican-namespace"),
            "namespace=/secret, require-token=true, collections-url=" + origin);
  std::string issuer = d + "/issuer/secret";
  EXPECT_EQ(r.All("x-pelican-authorization"),
            (std::vector<std::string>{"issuer=" + issuer, "issuer=" + origin}));
  EXPECT_EQ(r.Header("x-pelican-token-generation"),
            "issuer=" + issuer + ", max-scope-depth=3, strategy=OAuth2, base-path=/secret");
  EXPECT_EQ(r.Header("location"), origin + "/secret/hello.txt?authz=abc");
  EXPECT_EQ(r.Header("link").find("authz"), std::string::npos);  // Link URLs never carry tokens
  EXPECT_TRUE(fed.CacheUrls("/secret").empty());  // protected: served by the origin only
  std::string object = origin + "/secret/hello.txt";
  EXPECT_EQ(Fetch(object).status, 403);
  EXPECT_EQ(Fetch(object, "GET", {"Authorization: Bearer not-a-macaroon"}).status, 403);
  std::ifstream tf(fed.TokenFile());
  std::string token;
  std::getline(tf, token);
  auto ok = Fetch(object, "GET", {"Authorization: Bearer " + token});
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(ok.body, "hello world\n");
}

// Issue #30 item 2: origins answer Want-Digest (RFC 3230) as XRootD does when
// configured with checksums, also on a Range GET (the whole object's digest);
// caches relay the origin's. XRootD 5.5's proxy relays the origin's default
// algorithm (adler32 here) whatever was asked, and cannot relay crc32c
// (docs/quirks.md): devfed's origins list adler32 first so that caches answer
// adler32 truly.
TEST_F(DevFedTest, OriginsAndCachesAnswerWantDigest) {
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}}, 1, false});
  ASSERT_EQ(fed.Start(), "");
  std::string origin = fed.OriginUrl("/test") + "/test/hello.txt";
  std::string cache = fed.CacheUrls("/test").at(0) + "/test/hello.txt";
  // "hello world\n": adler32 1e720467, crc32c f0ff7292, md5 6f5902ac237024bdd0c176cb93063dc4.
  auto head = Fetch(origin, "HEAD", {"Want-Digest: adler32"});
  EXPECT_EQ(head.status, 200);
  EXPECT_EQ(head.Header("digest"), "adler32=1e720467");
  auto range = Fetch(origin, "GET", {"Want-Digest: crc32c", "Range: bytes=0-4"});
  EXPECT_EQ(range.status, 206);
  EXPECT_EQ(range.body, "hello");
  EXPECT_EQ(range.Header("digest"), "crc32c=8P9ykg==");
  EXPECT_EQ(Fetch(origin, "HEAD", {"Want-Digest: md5"}).Header("digest"),
            "md5=b1kCrCNwJL3QwXbLkwY9xA==");
  auto relayed = Fetch(cache, "GET", {"Want-Digest: adler32", "Range: bytes=6-10"});
  EXPECT_EQ(relayed.status, 206);
  EXPECT_EQ(relayed.body, "world");
  EXPECT_EQ(relayed.Header("digest"), "adler32=1e720467");
  EXPECT_EQ(Fetch(cache, "GET", {"Want-Digest: crc32c"}).status, 500);  // XRootD 5.5's proxy
}

// --fault-corrupt flips one byte of a cache's GET bodies, never an origin's;
// the length and the connection stay whole, and SIGUSR1 reports the count.
TEST_F(DevFedTest, FaultCorruptFlipsOneByteOfCacheBodiesOnly) {
  std::string big(100000, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7 % 251);
  data_.Write("big.bin", big);
  DevFed fed(
      DevFed::Options{{{"/test", dir_.string(), false}}, 1, false, {"--fault-corrupt", "1"}});
  ASSERT_EQ(fed.Start(), "");
  std::string origin = fed.OriginUrl("/test") + "/test/big.bin";
  std::string cache = fed.CacheUrls("/test").at(0) + "/test/big.bin";
  auto differences = [](const std::string& a, const std::string& b) {
    size_t n = 0;
    for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
    return n;
  };
  constexpr int kReads = 4;
  for (int i = 0; i < kReads; ++i) {
    auto whole = Fetch(cache);
    EXPECT_EQ(whole.status, 200);
    EXPECT_EQ(whole.curl_code, CURLE_OK);
    ASSERT_EQ(whole.body.size(), big.size());
    EXPECT_EQ(differences(whole.body, big), 1u);
    auto range = Fetch(cache, "GET", {"Range: bytes=1000-50999"});
    EXPECT_EQ(range.status, 206);
    ASSERT_EQ(range.body.size(), 50000u);
    EXPECT_EQ(differences(range.body, big.substr(1000, 50000)), 1u);
    EXPECT_EQ(Fetch(origin).body, big);
    EXPECT_EQ(Fetch(origin, "GET", {"Range: bytes=1000-50999"}).body, big.substr(1000, 50000));
  }
  EXPECT_EQ(Fetch(cache, "HEAD").status, 200);
  EXPECT_EQ(Fetch(fed.CacheUrls("/test")[0] + "/test/hello.txt").body.size(), 12u);
  ASSERT_EQ(kill(fed.Pid(), SIGUSR1), 0);
  std::string want = std::to_string(2 * kReads + 1) + " corrupted";
  for (int i = 0; i < 50 && fed.ErrLog().find(want) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(fed.ErrLog().find(want), std::string::npos) << fed.ErrLog();
}

// --cache-control /NS=VALUE: that export's origin and caches answer with the
// header (GET, HEAD, errors); other exports and the director do not.
TEST_F(DevFedTest, CacheControlOnAnExportsOriginAndCaches) {
  TempData other("other");
  other.Write("x.txt", "x");
  DevFed fed(DevFed::Options{{{"/test", dir_.string(), false}, {"/other", other.path().string()}},
                             1,
                             false,
                             {"--cache-control", "/test=no-store"}});
  ASSERT_EQ(fed.Start(), "");
  std::vector<std::string> no_store = {"no-store"};
  for (const std::string& base : {fed.OriginUrl("/test"), fed.CacheUrls("/test").at(0)}) {
    for (int i = 0; i < 2; ++i) {  // a cold and a warm cache
      auto get = Fetch(base + "/test/hello.txt");
      EXPECT_EQ(get.body, "hello world\n") << base;
      EXPECT_EQ(get.All("cache-control"), no_store) << base;
      auto range = Fetch(base + "/test/hello.txt", "GET", {"Range: bytes=6-10"});
      EXPECT_EQ(range.body, "world") << base;
      EXPECT_EQ(range.All("cache-control"), no_store) << base;
    }
    EXPECT_EQ(Fetch(base + "/test/hello.txt", "HEAD").All("cache-control"), no_store) << base;
    auto missing = Fetch(base + "/test/nope");
    EXPECT_EQ(missing.status, 404) << base;
    EXPECT_EQ(missing.All("cache-control"), no_store) << base;
  }
  for (const std::string& base : {fed.OriginUrl("/other"), fed.CacheUrls("/other").at(0)}) {
    auto r = Fetch(base + "/other/x.txt");
    EXPECT_EQ(r.body, "x") << base;
    EXPECT_FALSE(r.Has("cache-control")) << base;
  }
  EXPECT_FALSE(Fetch(fed.DirectorUrl() + "/test/hello.txt").Has("cache-control"));
}

TEST_F(DevFedTest, TlsEverywhere) {
  DevFed fed(DevFed::Options{{{"/t", dir_.string(), false}}, 1, true});
  ASSERT_EQ(fed.Start(), "");
  ASSERT_EQ(fed.FederationUrl().rfind("https://", 0), 0u);
  auto disc =
      Fetch(fed.FederationUrl() + "/.well-known/pelican-configuration", "GET", {}, fed.CaFile());
  EXPECT_EQ(nlohmann::json::parse(disc.body)["director_endpoint"], fed.DirectorUrl());
  auto r = Fetch(fed.DirectorUrl() + "/t/hello.txt", "GET", {}, fed.CaFile());
  ASSERT_EQ(r.status, 307);
  EXPECT_EQ(r.Header("location").rfind("https://", 0), 0u);
  EXPECT_EQ(Fetch(r.Header("location"), "GET", {}, fed.CaFile()).body, "hello world\n");
  EXPECT_EQ(Fetch(fed.DirectorUrl() + "/t/hello.txt").status, 0);  // untrusted without the CA
}

}  // namespace
}  // namespace perch::testing
