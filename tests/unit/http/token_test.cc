#include "daemon/http/token.h"

#include <gtest/gtest.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

#include "tests/fakes/unsigned_jwt.h"

namespace perch::http {
namespace {

namespace fs = std::filesystem;

// An unsigned JWT with the given claims (perch never verifies signatures:
// servers do; it only picks the token that fits).
std::string Jwt(const std::string& claims) { return testing::UnsignedJwt(claims); }

class TokenFinderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("perch-token-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_ / "creds");
    env_["_CONDOR_CREDS"] = (dir_ / "creds").string();
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content) {
    fs::path p = dir_ / name;
    std::ofstream(p) << content;
    return p.string();
  }
  TokenFinder Finder(std::string explicit_file = "",
                     OpaqueTokens opaque = OpaqueTokens::kSendDiscovered) {
    return TokenFinder(
        std::move(explicit_file), opaque,
        [this](const std::string& k) -> std::optional<std::string> {
          auto it = env_.find(k);
          return it == env_.end() ? std::nullopt : std::optional<std::string>(it->second);
        },
        4242);
  }
  TokenRequest Request() {
    return TokenRequest{"/ns/data/x", "/ns", {"https://issuer.example"}, ""};
  }

  fs::path dir_;
  std::map<std::string, std::string> env_;
  int64_t later_ = static_cast<int64_t>(std::time(nullptr)) + 3600;
};

TEST_F(TokenFinderTest, NothingFoundListsWhereItLooked) {
  auto t = Finder().Find(Request());
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(t.status().message().find("$BEARER_TOKEN_FILE"), std::string::npos);
  EXPECT_NE(t.status().message().find("scitokens.use"), std::string::npos);
  EXPECT_EQ(t.status().message().find("secret"), std::string::npos);
}

TEST_F(TokenFinderTest, ExplicitFileWinsAndJsonIsRead) {
  std::string good =
      Jwt(R"({"wlcg.ver":"1.0","iss":"https://issuer.example","scope":"storage.read:/","exp":)" +
          std::to_string(later_) + "}");
  std::string f = Write("explicit", R"({"access_token": ")" + good + R"(", "expires_in": 60})");
  env_["BEARER_TOKEN"] =
      Jwt(R"({"wlcg.ver":"1.0","iss":"https://issuer.example","scope":"storage.read:/"})");
  auto t = Finder(f).Find(Request());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, good);
  EXPECT_TRUE(t->acceptable);
  EXPECT_NE(t->source.find("explicit"), std::string::npos);
}

TEST_F(TokenFinderTest, EnvironmentOrder) {
  std::string a =
      Jwt(R"({"wlcg.ver":"1.0","iss":"https://issuer.example","scope":"storage.read:/data"})");
  env_["BEARER_TOKEN_FILE"] = Write("btf", a + "\n");
  auto t = Finder().Find(Request());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, a);
  EXPECT_TRUE(t->acceptable);
  env_["BEARER_TOKEN"] = "  " + a + "  ";
  EXPECT_EQ(Finder().Find(Request())->source, "$BEARER_TOKEN");
}

TEST_F(TokenFinderTest, SkipsUnacceptableTokensForALaterAcceptableOne) {
  std::string expired =
      Jwt(R"({"wlcg.ver":"1.0","iss":"https://issuer.example","scope":"storage.read:/","exp":1})");
  std::string wrong_issuer =
      Jwt(R"({"wlcg.ver":"1.0","iss":"https://evil.example","scope":"storage.read:/"})");
  std::string wrong_scope =
      Jwt(R"({"ver":"scitoken:2.0","iss":"https://issuer.example","scope":"read:/other"})");
  std::string good =
      Jwt(R"({"ver":"scitoken:2.0","iss":"https://issuer.example","scope":"write:/ read:/data"})");
  env_["BEARER_TOKEN"] = expired;
  env_["BEARER_TOKEN_FILE"] = Write("a", wrong_issuer);
  env_["TOKEN"] = Write("b", wrong_scope);
  Write("creds/scitokens.use", good);
  auto t = Finder().Find(Request());
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, good);
  EXPECT_EQ(t->source, "$_CONDOR_CREDS/scitokens.use");
}

TEST_F(TokenFinderTest, ADiscoveredOpaqueTokenGoesOnlyWhereTheClientRunsAsTheJob) {
  env_["BEARER_TOKEN_FILE"] = Write("macaroon", "MDAxY2xvY2F0aW9uIG9wYXF1ZQ");
  auto t = Finder().Find(Request());  // perch-transfer: the job's own macaroon
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->acceptable);
  EXPECT_EQ(t->token, "MDAxY2xvY2F0aW9uIG9wYXF1ZQ");
  auto daemon = Finder("", OpaqueTokens::kRefuse).Find(Request());  // perchd
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(daemon.status().message().find("opaque"), std::string::npos);
  EXPECT_EQ(daemon.status().message().find("MDAxY2xv"), std::string::npos);
}

// Issue #29 item 1: a JWT goes only to a namespace whose issuers include its
// `iss`, whatever the namespace asks, and a namespace naming no issuer gets none.
TEST_F(TokenFinderTest, AJwtOfAnotherIssuerIsNeverSent) {
  std::string good =
      Jwt(R"({"wlcg.ver":"1.0","iss":"https://issuer.example","scope":"storage.read:/"})");
  std::string f = Write("node.token", good);
  for (auto opaque : {OpaqueTokens::kRefuse, OpaqueTokens::kSendDiscovered}) {
    TokenRequest evil{"/evil/x.txt", "/evil", {"https://evil.example"}, ""};
    auto t = Finder(f, opaque).Find(evil);
    ASSERT_FALSE(t.ok());
    EXPECT_EQ(t.status().code(), core::StatusCode::kPermissionDenied);
    EXPECT_NE(t.status().message().find("'https://issuer.example' is not one the namespace names "
                                        "(https://evil.example)"),
              std::string::npos)
        << t.status().message();
    EXPECT_EQ(t.status().message().find(good), std::string::npos);
    TokenRequest unnamed{"/ns/x.txt", "/ns", {}, ""};
    EXPECT_FALSE(Finder(f, opaque).Find(unnamed).ok());
    TokenRequest both{"/ns/x.txt", "/ns", {"https://evil.example", "https://issuer.example"}, ""};
    auto sent = Finder(f, opaque).Find(both);
    ASSERT_TRUE(sent.ok()) << sent.status().ToString();
    EXPECT_EQ(sent->token, good);
  }
}

TEST(TokenBindingTest, WhyNotSentNamesTheIssuerNeverTheToken) {
  std::string jwt = Jwt(R"({"wlcg.ver":"1.0","iss":"https://a.example"})");
  EXPECT_EQ(JwtIssuer(jwt), "https://a.example");
  EXPECT_EQ(JwtIssuer(Jwt(R"({"wlcg.ver":"1.0"})")), "");
  EXPECT_EQ(JwtIssuer("MDAxY2xvY2F0aW9u"), std::nullopt);
  EXPECT_EQ(JwtIssuer("a.bm90IGpzb24.c"), std::nullopt);  // middle part is not JSON
  EXPECT_EQ(WhyNotSent(jwt, {"https://a.example"}, false), "");
  EXPECT_NE(WhyNotSent(jwt, {"https://b.example"}, true), "");  // naming does not bind a JWT
  EXPECT_NE(WhyNotSent(Jwt(R"({"wlcg.ver":"1.0"})"), {"https://a.example"}, true), "");
  EXPECT_EQ(WhyNotSent("opaque", {}, true), "");
  EXPECT_NE(WhyNotSent("opaque", {"https://a.example"}, false), "");
}

// perchd's decisions per namespace: the node's JWT only where its issuer is
// named, a [tokens] macaroon only below its prefix, and a token reused for a
// prefix is not reused when the director later names other issuers.
TEST_F(TokenFinderTest, NamespaceAuthBindsTheNodesTokens) {
  std::string good =
      Jwt(R"({"wlcg.ver":"1.0","iss":"https://issuer.example","scope":"storage.read:/"})");
  std::string node = Write("node.token", good);
  std::string macaroon = Write("ns.token", "MDAxY2xvY2F0aW9uIG9wYXF1ZQ");
  NamespaceAuth auth(Finder(node, OpaqueTokens::kRefuse), "", std::chrono::seconds(60),
                     {{"/mac", macaroon}});
  auto sent = auth.Headers(true, "/ns", {"https://issuer.example"}, "/ns/x");
  ASSERT_TRUE(sent.ok());
  EXPECT_EQ(*sent, std::vector<std::string>{"Authorization: Bearer " + good});
  auto evil = auth.Headers(true, "/ns", {"https://evil.example"}, "/ns/x");
  ASSERT_FALSE(evil.ok());
  EXPECT_EQ(evil.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_FALSE(auth.Headers(true, "/evil", {"https://evil.example"}, "/evil/x").ok());
  auto mac = auth.Headers(true, "/mac/sub", {"https://evil.example"}, "/mac/sub/x");
  ASSERT_TRUE(mac.ok());
  EXPECT_EQ(*mac, std::vector<std::string>{"Authorization: Bearer MDAxY2xvY2F0aW9uIG9wYXF1ZQ"});
  // A JWT in a [tokens] file is still bound to its issuer.
  NamespaceAuth bound(Finder("", OpaqueTokens::kRefuse), "", std::chrono::seconds(60),
                      {{"/ns", node}});
  EXPECT_TRUE(bound.Headers(true, "/ns", {"https://issuer.example"}, "/ns/x").ok());
  EXPECT_FALSE(bound.Headers(true, "/ns", {"https://evil.example"}, "/ns/x").ok());
  EXPECT_EQ(*auth.Headers(false, "/evil", {}, "/evil/x"), std::vector<std::string>{});
}

TEST_F(TokenFinderTest, CondorTokenName) {
  Write("creds/scitokens.use", "generic");
  Write("creds/my_vo.use", "named");
  TokenRequest r = Request();
  r.token_name = "my.vo";
  auto t = Finder().Find(r);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->token, "named");
}

TEST_F(TokenFinderTest, EmptyOrBrokenFilesAreSkipped) {
  env_["BEARER_TOKEN_FILE"] = Write("empty", "\n");
  env_["TOKEN"] = Write("broken", R"({"not_a_token": 1})");
  EXPECT_FALSE(Finder().Find(Request()).ok());
}

TEST(TokenAcceptabilityTest, ScopePathsAreSegmentPrefixes) {
  TokenRequest r{"/ns/gluex/run1", "/ns", {}, ""};
  auto tok = [](const std::string& scope) {
    return Jwt(R"({"wlcg.ver":"1.0","scope":")" + scope + R"("})");
  };
  EXPECT_TRUE(TokenFinder::IsAcceptable(tok("storage.read:/gluex"), r, 0));
  EXPECT_TRUE(TokenFinder::IsAcceptable(tok("storage.read:/gluex/"), r, 0));
  EXPECT_TRUE(TokenFinder::IsAcceptable(tok("storage.read"), r, 0));
  EXPECT_FALSE(TokenFinder::IsAcceptable(tok("storage.read:/glue"), r, 0));
  EXPECT_FALSE(TokenFinder::IsAcceptable(tok("storage.create:/"), r, 0));
  EXPECT_FALSE(TokenFinder::IsAcceptable("not-a-jwt", r, 0));
  EXPECT_FALSE(TokenFinder::IsAcceptable("a.%%%.b", r, 0));
}

}  // namespace
}  // namespace perch::http
