// The endpoint's parsing of what clients send: targets, ranges, validators,
// client labels. Every case here is a client's input, so odd ones matter.
#include "daemon/endpoint/request.h"

#include <gtest/gtest.h>

#include "daemon/core/limits.h"

namespace perch::endpoint {
namespace {

TEST(PathOfTargetTest, DecodesAndDropsTheQuery) {
  EXPECT_EQ(PathOfTarget("/ns/a%20b.txt?directread&authz=x")->str(), "/ns/a b.txt");
  EXPECT_EQ(PathOfTarget("/ns//sub/#frag")->str(), "/ns/sub");
  EXPECT_EQ(PathOfTarget("/")->str(), "/");
  EXPECT_EQ(PathOfTarget("/t%2Bx")->str(), "/t+x");
}

TEST(PathOfTargetTest, RefusesWhatIsNotACleanAbsolutePath) {
  for (const char* bad : {"", "*", "http://host/ns/x", "ns/x", "/ns/../etc/passwd", "/ns/%2e%2e/x",
                          "/a/./b", "/a%00b", "/a%zz", "/a%2"}) {
    auto p = PathOfTarget(bad);
    EXPECT_FALSE(p.ok()) << bad;
    if (!p.ok()) {
      EXPECT_EQ(p.status().code(), core::StatusCode::kInvalidArgument) << bad;
    }
  }
  EXPECT_FALSE(PathOfTarget("/" + std::string(core::kMaxPathBytes + 1, 'x')).ok());
  EXPECT_FALSE(PathOfTarget("/" + std::string(3 * core::kMaxPathBytes, '%')).ok());
}

TEST(AnswerRangeTest, OneRangeIsServedAsAPart) {
  auto r = AnswerRange("bytes=0-99", 1000);
  EXPECT_EQ(r.kind, RangeAnswer::kPart);
  EXPECT_EQ(r.offset, 0u);
  EXPECT_EQ(r.length, 100u);
  r = AnswerRange("bytes=900-", 1000);
  EXPECT_EQ(r.kind, RangeAnswer::kPart);
  EXPECT_EQ(r.offset, 900u);
  EXPECT_EQ(r.length, 100u);
  r = AnswerRange("bytes=990-5000", 1000);  // clipped to the end
  EXPECT_EQ(r.length, 10u);
  r = AnswerRange("bytes=-10", 1000);  // the last ten
  EXPECT_EQ(r.kind, RangeAnswer::kPart);
  EXPECT_EQ(r.offset, 990u);
  EXPECT_EQ(r.length, 10u);
  r = AnswerRange("bytes=-5000", 1000);  // a suffix longer than the object: all of it
  EXPECT_EQ(r.offset, 0u);
  EXPECT_EQ(r.length, 1000u);
  r = AnswerRange(" Bytes=5-5 ", 1000);
  EXPECT_EQ(r.kind, RangeAnswer::kPart);
  EXPECT_EQ(r.length, 1u);
}

TEST(AnswerRangeTest, RangesPastTheEndAre416) {
  EXPECT_EQ(AnswerRange("bytes=1000-", 1000).kind, RangeAnswer::kUnsatisfiable);
  EXPECT_EQ(AnswerRange("bytes=5000-6000", 1000).kind, RangeAnswer::kUnsatisfiable);
  EXPECT_EQ(AnswerRange("bytes=-0", 1000).kind, RangeAnswer::kUnsatisfiable);
  EXPECT_EQ(AnswerRange("bytes=0-", 0).kind, RangeAnswer::kUnsatisfiable);
}

TEST(AnswerRangeTest, AnythingElseIsIgnored) {
  for (const char* h : {"", "bytes", "bytes=", "bytes=a-b", "bytes=5-2", "items=0-1",
                        "bytes=0-1,5-6", "bytes=99999999999999999999-", "bytes=--1", "bytes=1"}) {
    auto r = AnswerRange(h, 1000);
    EXPECT_EQ(r.kind, RangeAnswer::kWhole) << h;
    EXPECT_EQ(r.length, 1000u) << h;
  }
}

TEST(ValidatorsTest, DatesTagsAndIfRange) {
  EXPECT_EQ(HttpDate(784111777), "Sun, 06 Nov 1994 08:49:37 GMT");
  core::FileAttr a;
  a.size = 255;
  a.mtime = 784111777;
  EXPECT_EQ(EntityTag(a), "\"ff-2ebc98a1\"");
  a.etag = "\"abc:1\"";
  EXPECT_EQ(EntityTag(a), "\"abc:1\"");
  a.etag = "\"\"\x01\"";  // nothing usable: made from size and mtime
  EXPECT_EQ(EntityTag(a), "\"ff-2ebc98a1\"");
  a.etag = "abc";
  EXPECT_TRUE(IfRangeHolds("", a));
  EXPECT_TRUE(IfRangeHolds("\"abc\"", a));
  EXPECT_FALSE(IfRangeHolds("\"abd\"", a));
  EXPECT_TRUE(IfRangeHolds("Sun, 06 Nov 1994 08:49:37 GMT", a));
  EXPECT_FALSE(IfRangeHolds("Sun, 06 Nov 1994 08:49:38 GMT", a));
}

TEST(ClientLabelTest, FirstProductLowerCasedAndBounded) {
  EXPECT_EQ(ClientLabel("curl/7.88.1"), "curl");
  EXPECT_EQ(ClientLabel("Python/3.11 aiohttp/3.8.4"), "python");
  EXPECT_EQ(ClientLabel("Wget/1.21.3"), "wget");
  EXPECT_EQ(ClientLabel("pelican-client/7.27.0 project/x"), "pelican-client");
  EXPECT_EQ(ClientLabel(""), "unknown");
  EXPECT_EQ(ClientLabel("\"}{<script>"), "script");
  EXPECT_EQ(ClientLabel(std::string(1000, 'a')), std::string(32, 'a'));
}

}  // namespace
}  // namespace perch::endpoint
