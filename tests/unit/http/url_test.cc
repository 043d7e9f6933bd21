#include "daemon/http/url.h"

#include <gtest/gtest.h>

namespace perch::http {
namespace {

using core::StatusCode;

TEST(FederationUrlTest, PelicanScheme) {
  auto u = ParseFederationUrl("pelican://fed.example.org:8444/ns/data");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->scheme, "pelican");
  EXPECT_EQ(u->discovery_url, "https://fed.example.org:8444");
  EXPECT_EQ(u->path.str(), "/ns/data");
  EXPECT_EQ(u->ToString(), "pelican://fed.example.org:8444/ns/data");
}

TEST(FederationUrlTest, OsdfAndStash) {
  auto u = ParseFederationUrl("osdf:///ospool/uc-shared/public");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->discovery_url, "https://osg-htc.org");
  EXPECT_EQ(u->path.str(), "/ospool/uc-shared/public");
  auto root = ParseFederationUrl("osdf:///");
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(root->path.IsRoot());
  // Two slashes: the "host" is folded into the path.
  auto folded = ParseFederationUrl("osdf://ospool/x");
  ASSERT_TRUE(folded.ok());
  EXPECT_EQ(folded->path.str(), "/ospool/x");
  auto stash = ParseFederationUrl("stash:///osgconnect/public");
  ASSERT_TRUE(stash.ok());
  EXPECT_EQ(stash->scheme, "osdf");
}

TEST(FederationUrlTest, TokenNamePrefix) {
  auto u = ParseFederationUrl("myvo+osdf:///myvo/data");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->token_name, "myvo");
  EXPECT_EQ(u->scheme, "osdf");
}

TEST(FederationUrlTest, DevelopmentHttp) {
  auto u = ParseFederationUrl("http://127.0.0.1:8080/test");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->discovery_url, "http://127.0.0.1:8080");
  EXPECT_EQ(u->path.str(), "/test");
  auto enc = ParseFederationUrl("https://localhost:1/a%20b");
  ASSERT_TRUE(enc.ok());
  EXPECT_EQ(enc->path.str(), "/a b");
}

TEST(FederationUrlTest, BadUrlsSayWhy) {
  for (const char* bad :
       {"", "/just/a/path", "ftp://host/x", "pelican:///x", "pelican://", "http://user:pw@host/x",
        "pelican://host/a/../b", "osdf:///a/%zz", "osdf:///a/%00b"}) {
    auto u = ParseFederationUrl(bad);
    EXPECT_FALSE(u.ok()) << bad;
    EXPECT_EQ(u.status().code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_FALSE(u.status().message().empty());
  }
  EXPECT_NE(ParseFederationUrl("pelican:///x").status().message().find("pelican://HOST"),
            std::string::npos);
}

TEST(PercentEncodingTest, SegmentsAndPaths) {
  EXPECT_EQ(uri::PercentEncodeSegment("a b%c/d"), "a%20b%25c%2Fd");
  EXPECT_EQ(uri::PercentEncodeSegment("Ünï-_.~"), "%C3%9Cn%C3%AF-_.~");
  EXPECT_EQ(uri::PercentEncodePath(*core::ObjectPath::Parse("/ns/a b/c")), "/ns/a%20b/c");
  EXPECT_EQ(uri::PercentEncodePath(core::ObjectPath()), "/");
  EXPECT_EQ(*uri::PercentDecode("/ns/a%20b%2fc"), "/ns/a b/c");
  EXPECT_FALSE(uri::PercentDecode("%4").ok());
  EXPECT_FALSE(uri::PercentDecode("%").ok());
  EXPECT_FALSE(uri::PercentDecode("%g1").ok());
  EXPECT_FALSE(uri::PercentDecode("a%00").ok());
}

TEST(SplitHttpUrlTest, Splits) {
  auto s = SplitHttpUrl("https://h:8443/a/b?x=1");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->base, "https://h:8443");
  EXPECT_EQ(s->path, "/a/b");
  auto bare = SplitHttpUrl("http://h");
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->path, "");
  EXPECT_FALSE(SplitHttpUrl("ftp://h/x").ok());
  EXPECT_FALSE(SplitHttpUrl("http:///x").ok());
}

}  // namespace
}  // namespace perch::http

namespace perch::http {
namespace {

TEST(TokenMayTravelToTest, HttpsAnywherePlainHttpOnlyToThisNode) {
  EXPECT_TRUE(TokenMayTravelTo("https://cache.example.org:8443/ns/f"));
  EXPECT_TRUE(TokenMayTravelTo("HTTPS://Cache.Example.org/ns/f"));
  EXPECT_TRUE(TokenMayTravelTo("http://127.0.0.1:8080/ns/f"));
  EXPECT_TRUE(TokenMayTravelTo("http://127.1.2.3/ns/f"));
  EXPECT_TRUE(TokenMayTravelTo("http://localhost:1094/ns/f"));
  EXPECT_TRUE(TokenMayTravelTo("http://[::1]:1094/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("http://cache.example.org:8000/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("http://10.0.0.7/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("http://128.0.0.1/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("http://127.0.0.1.evil.example/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("http://localhost.evil.example/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("http://127.0.0.1@evil.example/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("http://[::2]/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("ftp://127.0.0.1/ns/f"));
  EXPECT_FALSE(TokenMayTravelTo("not a url"));
}

}  // namespace
}  // namespace perch::http
