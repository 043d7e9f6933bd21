#include "daemon/http/token.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>

namespace perch::http {
namespace {

namespace fs = std::filesystem;

std::string B64Url(const std::string& in) {
  std::string out(4 * ((in.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(in.data()),
                          static_cast<int>(in.size()));
  out.resize(static_cast<size_t>(n));
  for (char& c : out) {
    if (c == '+') c = '-';
    if (c == '/') c = '_';
  }
  while (!out.empty() && out.back() == '=') out.pop_back();
  return out;
}

// An unsigned JWT with the given claims (perch never verifies signatures:
// servers do; it only picks the token that fits).
std::string Jwt(const std::string& claims) {
  return B64Url(R"({"alg":"ES256","typ":"JWT"})") + "." + B64Url(claims) + ".c2ln";
}

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
  TokenFinder Finder(std::string explicit_file = "") {
    return TokenFinder(
        std::move(explicit_file),
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

TEST_F(TokenFinderTest, OpaqueTokenIsUsedWhenNothingIsAcceptable) {
  env_["BEARER_TOKEN_FILE"] = Write("macaroon", "MDAxY2xvY2F0aW9uIG9wYXF1ZQ");
  auto t = Finder().Find(Request());
  ASSERT_TRUE(t.ok());
  EXPECT_FALSE(t->acceptable);
  EXPECT_EQ(t->token, "MDAxY2xvY2F0aW9uIG9wYXF1ZQ");
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
