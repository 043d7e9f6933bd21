#include "daemon/http/discovery.h"

#include <gtest/gtest.h>

namespace perch::http {
namespace {

TEST(DiscoveryTest, ParsesOsdfDocument) {
  // The real OSDF document as the OSDF serves it (docs/protocol.md §2).
  auto info = ParseDiscoveryDocument(R"({
    "director_endpoint": "https://osdf-director.osg-htc.org",
    "namespace_registration_endpoint": "https://osdf-registry.osg-htc.org",
    "jwks_uri": "https://osg-htc.org/osdf/public_signing_key.jwks"
  })");
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->director_endpoint, "https://osdf-director.osg-htc.org");
  EXPECT_EQ(info->registry_endpoint, "https://osdf-registry.osg-htc.org");
}

TEST(DiscoveryTest, NormalisesPortAndSlash) {
  auto info =
      ParseDiscoveryDocument(R"({"director_endpoint": "https://d.example:443/", "extra": 1})");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->director_endpoint, "https://d.example");
  auto http = ParseDiscoveryDocument(R"({"director_endpoint": "http://127.0.0.1:8080"})");
  ASSERT_TRUE(http.ok());
  EXPECT_EQ(http->director_endpoint, "http://127.0.0.1:8080");
}

TEST(DiscoveryTest, MalformedDocuments) {
  for (const char* bad : {"", "{", "[]", "null", R"({"director_endpoint": 5})", R"({})",
                          R"({"director_endpoint": ""})", R"({"director_endpoint": "ftp://x"})",
                          "<html>Gone</html>"}) {
    auto info = ParseDiscoveryDocument(bad);
    ASSERT_FALSE(info.ok()) << bad;
    EXPECT_EQ(info.status().code(), core::StatusCode::kCorrupt);
    EXPECT_NE(info.status().message().find("discovery document"), std::string::npos);
  }
}

}  // namespace
}  // namespace perch::http
