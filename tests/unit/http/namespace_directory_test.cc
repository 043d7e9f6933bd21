// The namespace directory a federation-root mount is built from.
#include "daemon/http/namespace_directory.h"

#include <gtest/gtest.h>

namespace perch::http {
namespace {

using core::ObjectPath;

ObjectPath P(const char* s) { return *ObjectPath::Parse(s); }

std::vector<NamespaceDirectory::Prefix> Public(std::vector<ObjectPath> paths) {
  std::vector<NamespaceDirectory::Prefix> out;
  for (auto& p : paths) out.push_back({p, false});
  return out;
}

std::vector<std::string> Names(const std::vector<core::DirEntry>& entries) {
  std::vector<std::string> out;
  for (const auto& e : entries) {
    EXPECT_TRUE(e.attr.is_dir);
    EXPECT_TRUE(e.attr.partial_listing);
    out.push_back(e.name);
  }
  return out;
}

TEST(NamespaceDirectoryTest, RootAndIntermediateDirectoriesComeFromPrefixes) {
  NamespaceDirectory dir;
  dir.SetAdvertised({{P("/a"), false},
                     {P("/a/b"), false},
                     {P("/ospool/uc-shared/public"), true},
                     {P("/p"), true}});
  auto root = dir.ChildrenToward(P("/"));
  EXPECT_EQ(Names(root), (std::vector<std::string>{"a", "ospool", "p"}));
  EXPECT_FALSE(root[1].attr.restricted);  // only leads to a protected namespace
  EXPECT_TRUE(root[2].attr.restricted);   // is one
  EXPECT_TRUE(dir.IsAboveNamespaces(P("/ospool")));
  EXPECT_TRUE(dir.IsAboveNamespaces(P("/ospool/uc-shared")));
  EXPECT_EQ(Names(dir.ChildrenToward(P("/ospool"))), (std::vector<std::string>{"uc-shared"}));
  EXPECT_FALSE(dir.IsAboveNamespaces(P("/a")));  // a namespace itself
  EXPECT_FALSE(dir.IsAboveNamespaces(P("/zzz")));
  EXPECT_EQ(Names(dir.ChildrenToward(P("/a"))), (std::vector<std::string>{"b"}));  // nested
  EXPECT_TRUE(dir.ChildrenToward(P("/a/b")).empty());
}

TEST(NamespaceDirectoryTest, LongestPrefixHolds) {
  NamespaceDirectory dir;
  dir.SetAdvertised(Public({P("/a"), P("/a/b")}));
  EXPECT_EQ(dir.Holder(P("/a/b/x"))->str(), "/a/b");
  EXPECT_EQ(dir.Holder(P("/a/bb"))->str(), "/a");  // segment-wise, not by characters
  EXPECT_FALSE(dir.Holder(P("/c")).has_value());
}

TEST(NamespaceDirectoryTest, SeenPrefixesSurviveANewList) {
  NamespaceDirectory dir;
  dir.AddSeen(P("/hidden/ns"), false);
  dir.SetAdvertised(Public({P("/a")}));
  EXPECT_EQ(Names(dir.ChildrenToward(P("/"))), (std::vector<std::string>{"a", "hidden"}));
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
  EXPECT_EQ((*v1)[0].path.str(), "/a");
  EXPECT_FALSE((*v1)[0].require_token);
  EXPECT_EQ((*v1)[1].path.str(), "/p");
  EXPECT_TRUE((*v1)[1].require_token);
  auto v2 = ParseNamespaceList(
      R"([{"capabilities": {"PublicRead": true, "Listing": false}, "path": "/pelican/monitoring",
           "token-generation": null, "token-issuer": null, "from-topology": false},
          {"capabilities": {"PublicRead": false}, "path": "/prot"}])");
  ASSERT_TRUE(v2.ok());
  ASSERT_EQ(v2->size(), 2u);
  EXPECT_EQ(v2->front().path.str(), "/pelican/monitoring");
  EXPECT_FALSE(v2->front().require_token);
  EXPECT_TRUE(v2->back().require_token);
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
