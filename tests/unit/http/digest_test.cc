#include "daemon/http/digest.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace perch::http {
namespace {

// "hello world\n": adler32 1e720467, crc32c f0ff7292, crc32 af083b2d.
constexpr std::string_view kHello = "hello world\n";

TEST(DigestHeaderTest, ListsEveryDigestInOrder) {
  EXPECT_EQ(ParseDigestHeader("adler32=1e720467"),
            (std::vector<InstanceDigest>{{"adler32", "1e720467"}}));
  EXPECT_EQ(
      ParseDigestHeader(" ADLER32 = 1e720467 ,md5=b1kCrCNwJL3QwXbLkwY9xA==, junk, =x, y= "),
      (std::vector<InstanceDigest>{{"adler32", "1e720467"}, {"md5", "b1kCrCNwJL3QwXbLkwY9xA=="}}));
  EXPECT_TRUE(ParseDigestHeader("").empty());
  std::string many;
  for (int i = 0; i < 100; ++i) many += "a" + std::to_string(i) + "=1,";
  EXPECT_EQ(ParseDigestHeader(many).size(), 8u);  // bounded
}

TEST(DigestCheckTest, EveryAlgorithmXrootdAnswers) {
  for (const InstanceDigest& d :
       std::vector<InstanceDigest>{{"adler32", "1e720467"},
                                   {"crc32c", "8P9ykg=="},
                                   {"crc32", "af083b2d"},
                                   {"md5", "b1kCrCNwJL3QwXbLkwY9xA=="},
                                   {"sha", "IlljY7PeQLBvmB+4XYIxLowO1RE="},
                                   {"sha-256", "qUiQTy8PR5uPgZdpSzAYSw0u0cHNKh7A+4XSmaGSpEc="}}) {
    EXPECT_EQ(CheckDigest(d, kHello), DigestCheck::kMatch) << ToString(d);
    std::string flipped(kHello);
    flipped[3] ^= 0x01;
    EXPECT_EQ(CheckDigest(d, flipped), DigestCheck::kMismatch) << ToString(d);
  }
}

// XRootD 5.5's cache relays its origin's default digest under the name asked:
// "md5=HnIEZw==" is the adler32 in base64, "adler32=f0ff7292" the crc32c in hex.
TEST(DigestCheckTest, AMislabelledDigestOfTheRightBytesMatches) {
  EXPECT_EQ(CheckDigest({"md5", "HnIEZw=="}, kHello), DigestCheck::kMatch);
  EXPECT_EQ(CheckDigest({"adler32", "f0ff7292"}, kHello), DigestCheck::kMatch);
  EXPECT_EQ(CheckDigest({"adler32", "f0ff7293"}, kHello), DigestCheck::kMismatch);
}

TEST(DigestCheckTest, WhatIsNoDigestIsUnchecked) {
  EXPECT_EQ(CheckDigest({"adler32", "xyz"}, kHello), DigestCheck::kUnchecked);
  EXPECT_EQ(CheckDigest({"unixcksum", "123"}, kHello), DigestCheck::kUnchecked);
  EXPECT_EQ(CheckDigest({"sha-512", std::string(88, 'A')}, kHello), DigestCheck::kUnchecked);
  EXPECT_EQ(CheckDigest({"adler32", "00000001"}, ""), DigestCheck::kMatch);  // empty object
}

}  // namespace
}  // namespace perch::http
