// SessionState's encoding: what one perchd hands the next survives the trip
// whole, and a cut or lying input is refused, never read past.
#include "fuse/session_state.h"

#include <gtest/gtest.h>

namespace perch::fuse {
namespace {

SessionState Sample() {
  SessionState s;
  s.init = std::string("\x07\0\0\0\x2d\0\0\0", 8) + std::string(56, '\x01');
  s.nodes = {{1, "/", 1}, {2, "/data", 3}, {7, "/data/n\xff\x01 \xe2\x82\xac", 1}};
  s.next_ino = 8;
  core::FileAttr a;
  a.size = 40 << 20;
  a.mtime = 1700000000;
  a.etag = "\"abc\"";
  a.restricted = true;
  s.files = {{5, 7, "/data/n\xff\x01 \xe2\x82\xac", a, true}, {9, 2, "/data", {}, false}};
  s.dirs = {{3, "/data"}};
  s.next_dh = 4;
  s.backings = {{7, 12}};
  s.passthrough_offered = s.passthrough_agreed = true;
  s.deciding = true;
  s.opens = 17;
  s.large_opens = 3;
  return s;
}

TEST(SessionStateTest, RoundTrips) {
  const SessionState s = Sample();
  auto got = DecodeSessionState(EncodeSessionState(s));
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(got->init, s.init);
  ASSERT_EQ(got->nodes.size(), 3u);
  EXPECT_EQ(got->nodes[2].path, s.nodes[2].path);
  EXPECT_EQ(got->nodes[1].lookups, 3u);
  EXPECT_EQ(got->next_ino, 8u);
  ASSERT_EQ(got->files.size(), 2u);
  EXPECT_EQ(got->files[0].fh, 5u);
  EXPECT_EQ(got->files[0].ino, 7u);
  EXPECT_EQ(got->files[0].attr.size, uint64_t{40} << 20);
  EXPECT_EQ(got->files[0].attr.mtime, 1700000000);
  EXPECT_EQ(got->files[0].attr.etag, "\"abc\"");
  EXPECT_TRUE(got->files[0].attr.restricted);
  EXPECT_TRUE(got->files[0].direct);
  EXPECT_FALSE(got->files[1].direct);
  ASSERT_EQ(got->dirs.size(), 1u);
  EXPECT_EQ(got->dirs[0].dh, 3u);
  EXPECT_EQ(got->next_dh, 4u);
  ASSERT_EQ(got->backings.size(), 1u);
  EXPECT_EQ(got->backings[0].id, 12);
  EXPECT_TRUE(got->passthrough_agreed);
  EXPECT_TRUE(got->deciding);
  EXPECT_FALSE(got->no_open);
  EXPECT_EQ(got->opens, 17u);
  EXPECT_EQ(got->large_opens, 3u);
}

TEST(SessionStateTest, RefusesEveryCutAndExtraBytes) {
  const std::string whole = EncodeSessionState(Sample());
  for (size_t n = 0; n < whole.size(); ++n) {
    EXPECT_FALSE(DecodeSessionState(whole.substr(0, n)).ok()) << n;
  }
  EXPECT_FALSE(DecodeSessionState(whole + "x").ok());
}

TEST(SessionStateTest, RefusesACountBeyondTheInput) {
  SessionState s;
  s.init = "i";
  std::string enc = EncodeSessionState(s);
  // version, init (8-byte length + 1), next_ino: then the node count.
  const size_t at = 1 + 8 + 1 + 1;
  ASSERT_EQ(enc[at], 0);
  enc[at] = '\x7f';  // 127 nodes in a few bytes
  EXPECT_FALSE(DecodeSessionState(enc).ok());
}

}  // namespace
}  // namespace perch::fuse
