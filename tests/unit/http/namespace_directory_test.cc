// The namespace directory a federation-root mount is built from.
#include "daemon/http/namespace_directory.h"

#include <gtest/gtest.h>

namespace perch::http {
namespace {

using core::ObjectPath;

ObjectPath P(const char* s) { return *ObjectPath::Parse(s); }

TEST(NamespaceDirectoryTest, RootAndIntermediateDirectoriesComeFromPrefixes) {
  NamespaceDirectory dir;
  dir.SetAdvertised({P("/a"), P("/a/b"), P("/ospool/uc-shared/public"), P("/p")});
  EXPECT_EQ(dir.ChildrenToward(P("/")), (std::vector<std::string>{"a", "ospool", "p"}));
  EXPECT_TRUE(dir.IsAboveNamespaces(P("/ospool")));
  EXPECT_TRUE(dir.IsAboveNamespaces(P("/ospool/uc-shared")));
  EXPECT_EQ(dir.ChildrenToward(P("/ospool")), (std::vector<std::string>{"uc-shared"}));
  EXPECT_FALSE(dir.IsAboveNamespaces(P("/a")));  // a namespace itself
  EXPECT_FALSE(dir.IsAboveNamespaces(P("/zzz")));
  EXPECT_EQ(dir.ChildrenToward(P("/a")), (std::vector<std::string>{"b"}));  // nested
  EXPECT_TRUE(dir.ChildrenToward(P("/a/b")).empty());
}

TEST(NamespaceDirectoryTest, LongestPrefixHolds) {
  NamespaceDirectory dir;
  dir.SetAdvertised({P("/a"), P("/a/b")});
  EXPECT_EQ(dir.Holder(P("/a/b/x"))->str(), "/a/b");
  EXPECT_EQ(dir.Holder(P("/a/bb"))->str(), "/a");  // segment-wise, not by characters
  EXPECT_FALSE(dir.Holder(P("/c")).has_value());
}

TEST(NamespaceDirectoryTest, SeenPrefixesSurviveANewList) {
  NamespaceDirectory dir;
  dir.AddSeen(P("/hidden/ns"));
  dir.SetAdvertised({P("/a")});
  EXPECT_EQ(dir.ChildrenToward(P("/")), (std::vector<std::string>{"a", "hidden"}));
  EXPECT_TRUE(dir.IsPrefix(P("/hidden/ns")));
}

TEST(ParseNamespaceListTest, V1AndV2ShapesAndHostileEntries) {
  auto v1 = ParseNamespaceList(R"([
    {"requireToken": false, "path": "/a", "url": {}, "basePath": ""},
    {"requireToken": true, "path": "/p/", "url": {}},
    {"path": "relative"}, {"path": 7}, {"nopath": "/x"}, "junk", {"path": "/"},
    {"path": "/x/../y"}, {"path": "/ok\u0000nul"}
  ])");
  ASSERT_TRUE(v1.ok()) << v1.status().ToString();
  ASSERT_EQ(v1->size(), 2u);
  EXPECT_EQ((*v1)[0].str(), "/a");
  EXPECT_EQ((*v1)[1].str(), "/p");
  auto v2 = ParseNamespaceList(
      R"([{"capabilities": {"PublicRead": true, "Listing": false}, "path": "/pelican/monitoring",
           "token-generation": null, "token-issuer": null, "from-topology": false}])");
  ASSERT_TRUE(v2.ok());
  EXPECT_EQ(v2->front().str(), "/pelican/monitoring");
  EXPECT_EQ(ParseNamespaceList("{}").status().code(), core::StatusCode::kCorrupt);
  EXPECT_EQ(ParseNamespaceList("<html>").status().code(), core::StatusCode::kCorrupt);
}

TEST(ParseNamespaceListTest, CountIsBounded) {
  std::string json = "[";
  for (size_t i = 0; i < NamespaceDirectory::kMaxPrefixes + 10; ++i) {
    json += (i ? "," : "") + std::string(R"({"path":"/n)") + std::to_string(i) + "\"}";
  }
  json += "]";
  auto list = ParseNamespaceList(json);
  ASSERT_TRUE(list.ok());
  EXPECT_EQ(list->size(), NamespaceDirectory::kMaxPrefixes);
}

}  // namespace
}  // namespace perch::http
