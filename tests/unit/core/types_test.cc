#include "daemon/core/types.h"

#include <gtest/gtest.h>

#include "daemon/core/codec.h"

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

namespace perch::core {
namespace {

TEST(CodecTest, VarintsRoundTripAndRejectWhatIsNotOne) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                     uint64_t{1} << 35, ~uint64_t{0}}) {
    std::string s;
    codec::PutVarint(&s, v);
    EXPECT_LE(s.size(), 10u);
    codec::Reader r(s);
    uint64_t got = 0;
    ASSERT_TRUE(r.GetVarint(&got)) << v;
    EXPECT_EQ(got, v);
    EXPECT_TRUE(r.done());
  }
  uint64_t v = 0;
  EXPECT_FALSE(codec::Reader(std::string("\x80\x80", 2)).GetVarint(&v));  // cut short
  EXPECT_FALSE(codec::Reader(std::string(10, '\xff')).GetVarint(&v));     // past 64 bits
  EXPECT_FALSE(codec::Reader(std::string(11, '\x80')).GetVarint(&v));     // too long
  EXPECT_FALSE(codec::Reader("").GetVarint(&v));
}

}  // namespace
}  // namespace perch::core
