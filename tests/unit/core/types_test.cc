#include "daemon/core/types.h"

#include <gtest/gtest.h>

namespace perch::core {
namespace {

TEST(ObjectPathTest, Normalises) {
  EXPECT_EQ(ObjectPath::Parse("/a//b/")->str(), "/a/b");
  EXPECT_EQ(ObjectPath::Parse("/")->str(), "/");
  EXPECT_EQ(ObjectPath::Parse("///")->str(), "/");
  EXPECT_EQ(ObjectPath::Parse("/a b/%c")->str(), "/a b/%c");
}

TEST(ObjectPathTest, RejectsHostilePaths) {
  EXPECT_EQ(ObjectPath::Parse("a/b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse("/a/../b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse("/a/./b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse(std::string_view("/a\0b", 4)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ObjectPathTest, Navigation) {
  auto p = *ObjectPath::Parse("/ns/dir/file.jpg");
  EXPECT_EQ(p.Name(), "file.jpg");
  EXPECT_EQ(p.Parent().str(), "/ns/dir");
  EXPECT_EQ(p.Parent().Parent().Parent().str(), "/");
  EXPECT_TRUE(p.HasPrefix(*ObjectPath::Parse("/ns")));
  EXPECT_TRUE(p.HasPrefix(*ObjectPath::Parse("/")));
  EXPECT_FALSE(p.HasPrefix(*ObjectPath::Parse("/n")));
  EXPECT_FALSE(ObjectPath::Parse("/nsx")->HasPrefix(*ObjectPath::Parse("/ns")));
  EXPECT_EQ(ObjectPath().Child("x")->str(), "/x");
  EXPECT_FALSE(p.Child("..").ok());
  EXPECT_FALSE(p.Child("a/b").ok());
  auto segs = p.Segments();
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[1], "dir");
  EXPECT_TRUE(ObjectPath().Segments().empty());
}

TEST(ObjectPathTest, RelativeTo) {
  auto p = [](const char* s) { return *ObjectPath::Parse(s); };
  EXPECT_EQ(p("/ns/a/b").RelativeTo(p("/ns"))->str(), "/a/b");
  EXPECT_EQ(p("/ns").RelativeTo(p("/ns"))->str(), "/");
  EXPECT_EQ(p("/ns/a").RelativeTo(p("/"))->str(), "/ns/a");
  EXPECT_FALSE(p("/nsx/a").RelativeTo(p("/ns")));
  EXPECT_FALSE(p("/other").RelativeTo(p("/ns")));
  EXPECT_FALSE(p("/").RelativeTo(p("/ns")));
}

}  // namespace
}  // namespace perch::core
