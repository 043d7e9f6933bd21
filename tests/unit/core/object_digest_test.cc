#include "daemon/core/object_digest.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perch::core {
namespace {

std::string Raw(std::initializer_list<unsigned char> bytes) {
  return std::string(bytes.begin(), bytes.end());
}

// "hello world\n": crc32c f0ff7292, md5 6f5902ac237024bdd0c176cb93063dc4.
const ObjectDigest kCrc32c{"crc32c", Raw({0xf0, 0xff, 0x72, 0x92})};
const ObjectDigest kMd5{"md5", Raw({0x6f, 0x59, 0x02, 0xac, 0x23, 0x70, 0x24, 0xbd, 0xd0, 0xc1,
                                    0x76, 0xcb, 0x93, 0x06, 0x3d, 0xc4})};

TEST(DigestTextTest, ChecksumsInHexOthersInBase64AsPelicanReadsThem) {
  EXPECT_EQ(DigestText(kCrc32c), "crc32c=f0ff7292");
  EXPECT_EQ(DigestText({"adler32", Raw({0x00, 0x00, 0x0a, 0xff})}), "adler32=00000aff");
  EXPECT_EQ(DigestText(kMd5), "md5=b1kCrCNwJL3QwXbLkwY9xA==");
  EXPECT_EQ(DigestValueText({"sha", std::string(20, '\xff')}), "//////////////////////////8=");
  EXPECT_EQ(DigestValueText({"sha-256", std::string(32, '\0')}),
            "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=");
  EXPECT_EQ(DigestHeaderValue({kCrc32c, kMd5}), "crc32c=f0ff7292, md5=b1kCrCNwJL3QwXbLkwY9xA==");
  EXPECT_EQ(DigestHeaderValue({}), "");
}

TEST(WantDigestTest, KnownAlgorithmsInTheClientsOrder) {
  // What Pelican's client sends (wantDigestValue over KnownChecksumTypes).
  EXPECT_EQ(ParseWantDigest("md5,crc32c,crc32,sha"),
            (std::vector<std::string>{"md5", "crc32c", "crc32", "sha"}));
  EXPECT_EQ(ParseWantDigest(" CRC32C ;q=1, MD5;q=0.5, adler32;q=0, SHA1, UNIXsum, crc32c"),
            (std::vector<std::string>{"crc32c", "md5", "sha"}));
  EXPECT_EQ(ParseWantDigest("sha-256;q=0.000"), std::vector<std::string>{});
  EXPECT_TRUE(ParseWantDigest("").empty());
  EXPECT_TRUE(ParseWantDigest(",,;;==").empty());
  std::string many;
  for (int i = 0; i < 100; ++i) many += "junk" + std::to_string(i) + ",";
  EXPECT_TRUE(ParseWantDigest(many + "md5").empty());  // 16 entries at most
}

TEST(MatchDigestsTest, AClaimMatchesUnderItsNameOrAnotherOfItsLength) {
  const ObjectDigest adler{"adler32", Raw({0x1e, 0x72, 0x04, 0x67})};
  const std::vector<ObjectDigest> computed = {kCrc32c, adler, kMd5};
  ObjectDigest matched;
  EXPECT_EQ(MatchDigests({kCrc32c}, computed, &matched), DigestMatch::kMatch);
  EXPECT_EQ(matched, kCrc32c);
  // An XRootD 5.5 cache: asked md5, it answers its origin's adler32 as "md5".
  EXPECT_EQ(MatchDigests({{"md5", adler.raw}}, computed, &matched), DigestMatch::kMatch);
  EXPECT_EQ(matched, adler);
  EXPECT_EQ(MatchDigests({{"crc32c", Raw({1, 2, 3, 4})}}, computed), DigestMatch::kMismatch);
  // One reading of several may be right (a value that is hex and base64).
  EXPECT_EQ(MatchDigests({{"crc32c", Raw({1, 2, 3, 4})}, kCrc32c}, computed), DigestMatch::kMatch);
  EXPECT_EQ(MatchDigests({{"unixsum", Raw({1, 2, 3, 4, 5, 6})}}, computed), DigestMatch::kNone);
  EXPECT_EQ(MatchDigests({}, computed), DigestMatch::kNone);
}

}  // namespace
}  // namespace perch::core
