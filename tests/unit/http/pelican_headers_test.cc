#include "daemon/http/pelican_headers.h"

#include <gtest/gtest.h>

#include <optional>

#include "daemon/core/limits.h"

namespace perch::http {
namespace {

using core::StatusCode;

// An OSDF director answer (docs/protocol.md §3).
constexpr char kOsdfLink[] =
    "<https://osdf-uw-cache.svc.osg-htc.org:8443/some/object>; rel=\"duplicate\"; pri=1; depth=2, "
    "<https://sc-cache.chtc.wisc.edu:8443/some/object>; rel=\"duplicate\"; pri=2; depth=2, "
    "<https://dtn-pas.cinc.nrp.internet2.edu:8443/some/object>; rel=\"duplicate\"; pri=3; depth=2";

TEST(LinkHeaderTest, ParsesProtocolExample) {
  auto links = ParseLinkHeader(kOsdfLink);
  ASSERT_TRUE(links.ok()) << links.status().ToString();
  ASSERT_EQ(links->size(), 3u);
  EXPECT_EQ((*links)[0].url, "https://osdf-uw-cache.svc.osg-htc.org:8443/some/object");
  EXPECT_EQ((*links)[0].priority, 1);
  EXPECT_EQ((*links)[0].depth, 2);
  EXPECT_EQ((*links)[2].url, "https://dtn-pas.cinc.nrp.internet2.edu:8443/some/object");
}

TEST(LinkHeaderTest, SortsByPriorityAndSkipsOtherRels) {
  auto links = ParseLinkHeader(
      "<http://b/x>; rel=\"duplicate\"; pri=2, <http://c/x>; rel=\"next\"; pri=0, "
      "<http://a/x>; rel=duplicate; pri=1, <http://z/x>; rel=\"duplicate\"");
  ASSERT_TRUE(links.ok());
  ASSERT_EQ(links->size(), 3u);
  EXPECT_EQ((*links)[0].url, "http://a/x");
  EXPECT_EQ((*links)[1].url, "http://b/x");
  EXPECT_EQ((*links)[2].url, "http://z/x");  // no pri: last
  EXPECT_EQ((*links)[2].depth, -1);
}

TEST(LinkHeaderTest, UrlsWithCommasAndSemicolons) {
  auto links = ParseLinkHeader("<http://h/a,b;c>; rel=\"duplicate\"; pri=1; depth=1");
  ASSERT_TRUE(links.ok());
  EXPECT_EQ((*links)[0].url, "http://h/a,b;c");
}

TEST(LinkHeaderTest, MalformedGivesClearErrors) {
  struct Case {
    const char* value;
    const char* needle;
  };
  for (const Case& c : {Case{"<http://h/x; rel=\"duplicate\"", "unterminated"},
                        Case{"<http://h/x>; rel=\"dup", "unterminated"},
                        Case{"http://h/x; rel=\"duplicate\"", "does not start with"},
                        Case{"<http://h/x>; rel=\"duplicate\"; pri=one", "bad pri"},
                        Case{"<http://h/x>; rel=\"duplicate\"; depth=-1", "bad depth"},
                        Case{"<file:///etc/passwd>; rel=\"duplicate\"; pri=1", "not an http"},
                        Case{"", "no rel=\"duplicate\""},
                        Case{"<http://h/x>; rel=\"alternate\"", "no rel=\"duplicate\""}}) {
    auto r = ParseLinkHeader(c.value);
    ASSERT_FALSE(r.ok()) << c.value;
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << c.value << " -> " << r.status().message();
  }
}

TEST(NamespaceHeaderTest, ParsesProtocolExample) {
  auto ns = ParseNamespaceHeader(
      "namespace=/myvo/protected, require-token=true, "
      "collections-url=https://origin.example.org:8443");
  ASSERT_TRUE(ns.ok());
  EXPECT_EQ(ns->prefix, "/myvo/protected");
  EXPECT_TRUE(ns->require_token);
  EXPECT_EQ(ns->collections_url, "https://origin.example.org:8443");
  auto pub = ParseNamespaceHeader("namespace=/pelicanplatform/, require-token=false");
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->prefix, "/pelicanplatform");
  EXPECT_FALSE(pub->require_token);
  EXPECT_EQ(pub->collections_url, "");
}

TEST(NamespaceHeaderTest, Malformed) {
  EXPECT_FALSE(ParseNamespaceHeader("require-token=true").ok());
  EXPECT_FALSE(ParseNamespaceHeader("namespace=relative, require-token=true").ok());
  EXPECT_FALSE(ParseNamespaceHeader("namespace=/a, require-token=maybe").ok());
  EXPECT_FALSE(ParseNamespaceHeader("namespace=/a, collections-url=ftp://x").ok());
  EXPECT_FALSE(ParseNamespaceHeader("namespace").ok());
  EXPECT_FALSE(ParseNamespaceHeader("namespace=\"/a").ok());
}

TEST(AuthorizationHeaderTest, AllLinesAllIssuers) {
  auto issuers = ParseAuthorizationHeaders(
      {"issuer=https://a.example/x, issuer=https://b.example", "issuer=https://c.example"});
  ASSERT_TRUE(issuers.ok());
  ASSERT_EQ(issuers->size(), 3u);
  EXPECT_EQ((*issuers)[2], "https://c.example");
  EXPECT_FALSE(ParseAuthorizationHeaders({"issuer=notaurl"}).ok());
  EXPECT_FALSE(ParseAuthorizationHeaders({"issuer"}).ok());
}

TEST(TokenGenerationHeaderTest, ParsesAndValidates) {
  auto tg = ParseTokenGenerationHeader(
      "issuer=https://issuer.example.org/myvo, max-scope-depth=3, strategy=OAuth2, "
      "base-path=/myvo");
  ASSERT_TRUE(tg.ok());
  EXPECT_EQ(tg->issuer, "https://issuer.example.org/myvo");
  EXPECT_EQ(tg->max_scope_depth, 3);
  EXPECT_EQ(tg->strategy, "OAuth2");
  EXPECT_EQ(tg->base_path, "/myvo");
  EXPECT_FALSE(ParseTokenGenerationHeader("issuer=https://i, strategy=OAuth2").ok());
  EXPECT_FALSE(
      ParseTokenGenerationHeader("issuer=https://i, max-scope-depth=x, strategy=OAuth2").ok());
  EXPECT_FALSE(
      ParseTokenGenerationHeader("issuer=https://i, max-scope-depth=1, strategy=Magic").ok());
}

TEST(ContentRangeTest, Parses) {
  auto cr = ParseContentRange("bytes 0-0/14");
  ASSERT_TRUE(cr.ok());
  EXPECT_EQ(cr->first, 0u);
  EXPECT_EQ(cr->last, 0u);
  EXPECT_EQ(cr->total, 14);
  auto big = ParseContentRange("bytes 4194304-8388607/67108864");
  ASSERT_TRUE(big.ok());
  EXPECT_EQ(big->last, 8388607u);
  auto star = ParseContentRange("bytes 1-2/*");
  ASSERT_TRUE(star.ok());
  EXPECT_EQ(star->total, -1);
}

TEST(ContentRangeTest, Malformed) {
  for (const char* bad :
       {"", "bytes", "bytes 1-2", "items 1-2/3", "bytes 5-2/10", "bytes 0-10/10", "bytes a-b/c",
        "bytes -1-2/3", "bytes 1-2/-3", "bytes 99999999999999999999-1/2"}) {
    auto cr = ParseContentRange(bad);
    EXPECT_FALSE(cr.ok()) << bad;
    EXPECT_NE(cr.status().message().find("Content-Range"), std::string::npos);
  }
}

// Hardening #11: counts from a director are bounded.
TEST(PelicanHeadersTest, CountsAreBounded) {
  auto links = [](size_t n) {
    std::string v;
    for (size_t i = 0; i < n; ++i) {
      v += (v.empty() ? "" : ", ") + std::string("<https://c") + std::to_string(i) +
           "/ns>; rel=\"duplicate\"; pri=" + std::to_string(n - i);
    }
    return v;
  };
  auto best = ParseLinkHeader(links(4 * core::kMaxLinkEntries));
  ASSERT_TRUE(best.ok()) << best.status().ToString();
  ASSERT_EQ(best->size(), core::kMaxLinkEntries);
  EXPECT_EQ(best->front().priority, 1);  // the best ones are kept
  auto too_many = ParseLinkHeader(links(4 * core::kMaxLinkEntries + 1));
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("elements"), std::string::npos);

  std::vector<std::string> lines(core::kMaxAuthorizationIssuers, "issuer=https://i.example");
  EXPECT_TRUE(ParseAuthorizationHeaders(lines).ok());
  lines.push_back("issuer=https://i.example");
  EXPECT_FALSE(ParseAuthorizationHeaders(lines).ok());
  std::string one_line;
  for (size_t i = 0; i <= core::kMaxAuthorizationIssuers; ++i)
    one_line += "issuer=https://i.example, ";
  EXPECT_FALSE(ParseAuthorizationHeaders({one_line}).ok());
}

// Error messages quote header values escaped: they end up in log lines.
TEST(PelicanHeadersTest, MessagesEscapeControlCharacters) {
  auto r = ParseContentRange("bytes 1-0/5\n2026-11-23 [error] forged");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("\\n2026"), std::string::npos) << r.status().message();
}

TEST(CacheControlHeaderTest, NoStoreAndPrivateForbidStoringOthersDoNot) {
  for (const char* v : {"no-store", "No-Store", "max-age=60, no-store", "private",
                        "private=\"Set-Cookie\"", " public , PRIVATE "}) {
    EXPECT_TRUE(CacheControlForbidsStoring(v)) << v;
  }
  for (const char* v : {"", "public", "max-age=0", "no-cache", "no-transform", "must-revalidate",
                        "no-storex", "s-maxage=10"}) {
    EXPECT_FALSE(CacheControlForbidsStoring(v)) << v;
  }
}

// Issue #30 item 4: the freshness lifetime a shared cache reads off an answer.
TEST(CacheControlHeaderTest, FreshnessLifetime) {
  struct Case {
    const char* value;
    std::optional<int64_t> max_age;
  };
  const Case cases[] = {
      {"", std::nullopt},
      {"public", std::nullopt},
      {"no-store", std::nullopt},  // not kept at all: no lifetime to speak of
      {"no-cache", 0},
      {"No-Cache", 0},
      {"no-cache=\"Set-Cookie, X\", max-age=60", 0},  // qualified: still revalidated
      {"max-age=60", 60},
      {"MAX-AGE=60", 60},
      {"max-age=\"60\"", 60},                 // a quoted argument (RFC 9110 §5.6.4)
      {"public, max-age=60, s-maxage=5", 5},  // a shared cache's own wins
      {"s-maxage=300, max-age=5", 300},       // ... even when longer
      {"max-age=60, max-age=10", 10},         // repeated: the least
      {" , ,max-age=7,, ", 7},                // empty elements
      {"max-age=0", 0},
      {"max-age=abc", 0},  // invalid freshness is stale (RFC 9111 §4.2.1)
      {"max-age=-5", 0},   // delta-seconds has no sign
      {"max-age=", 0},     // no argument
      {"max-age", 0},      // likewise
      {"max-age=1.5", 0},  // not a whole number
      {"max-age=99999999999999999999999", kMaxFreshness},  // bounded (§1.2.2)
      {"max-age=2147483648", kMaxFreshness},
      {"garbage", std::nullopt},
      {"=60", std::nullopt},
      {"\"max-age=5\"", std::nullopt},              // a quoted string is no directive
      {"x=\"max-age=5, no-cache\"", std::nullopt},  // commas inside quotes do not split
      {"x=\"unterminated, max-age=5", std::nullopt},
      {"max-age=5 junk, public", 0},  // a malformed element: its lifetime is invalid
      {"foo bar, max-age=9", 9},      // a malformed other element is skipped
      {"max-agex=5", std::nullopt},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(ParseCacheControl(c.value).max_age, c.max_age) << c.value;
  }
}

TEST(CacheControlHeaderTest, NoStoreSurvivesQuotesAndJunk) {
  EXPECT_FALSE(ParseCacheControl("x=\"no-store, private\"").no_store);
  EXPECT_TRUE(ParseCacheControl("private=\"a, b\", max-age=5").no_store);
  EXPECT_EQ(ParseCacheControl("private=\"a, b\", max-age=5").max_age, 5);
  EXPECT_TRUE(ParseCacheControl("no-store junk").no_store);  // malformed, still honoured
}

TEST(CacheControlHeaderTest, SeveralLinesAndBoundedWork) {
  EXPECT_FALSE(CacheControlOf({}).has_value());
  auto cc = CacheControlOf({"public", "max-age=30", "s-maxage=4"});
  ASSERT_TRUE(cc.has_value());
  EXPECT_EQ(cc->max_age, 4);
  // Past kMaxCacheControlDirectives elements the rest is not read.
  std::string many;
  for (size_t i = 0; i < kMaxCacheControlDirectives; ++i) many += "x, ";
  EXPECT_EQ(ParseCacheControl(many + "max-age=5").max_age, std::nullopt);
  EXPECT_EQ(ParseCacheControl(std::string(1 << 20, ',') + "max-age=5").max_age, 5);
}

}  // namespace
}  // namespace perch::http
