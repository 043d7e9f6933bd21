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

// The hasher perch hands digests out from: the same values as CheckDigest's,
// whether the bytes come whole or in pieces.
TEST(DigestHasherTest, EveryAlgorithmInPiecesAsWhole) {
  for (size_t cut : {size_t{0}, size_t{1}, size_t{5}, kHello.size()}) {
    auto h = NewDigestHasher(core::DigestAlgorithms());
    h->Update(kHello.substr(0, cut));
    h->Update(kHello.substr(cut));
    std::vector<core::ObjectDigest> out = h->Finish();
    ASSERT_EQ(out.size(), core::DigestAlgorithms().size());
    std::vector<std::string> texts;
    for (const core::ObjectDigest& d : out) texts.push_back(core::DigestText(d));
    EXPECT_EQ(texts, (std::vector<std::string>{
                         "crc32c=f0ff7292", "adler32=1e720467", "crc32=af083b2d",
                         "md5=b1kCrCNwJL3QwXbLkwY9xA==", "sha=IlljY7PeQLBvmB+4XYIxLowO1RE=",
                         "sha-256=qUiQTy8PR5uPgZdpSzAYSw0u0cHNKh7A+4XSmaGSpEc="}))
        << cut;
  }
  auto empty = NewDigestHasher({"adler32", "crc32c", "nonesuch"});
  std::vector<core::ObjectDigest> none = empty->Finish();
  ASSERT_EQ(none.size(), 2u);  // an algorithm it does not know is left out
  EXPECT_EQ(core::DigestText(none[0]), "adler32=00000001");
  EXPECT_EQ(core::DigestText(none[1]), "crc32c=00000000");
}

TEST(DigestReadingsTest, HexAndBase64ReadingsOfDigestLength) {
  // XRootD's crc32c in base64, Pelican's in hex: the same 4 bytes.
  auto b64 = Readings({"crc32c", "8P9ykg=="});
  ASSERT_EQ(b64.size(), 1u);
  EXPECT_EQ(core::DigestText(b64[0]), "crc32c=f0ff7292");
  auto hex = Readings({"crc32c", "f0ff7292"});
  ASSERT_EQ(hex.size(), 1u);  // as base64, 8 hex digits are 6 bytes: no digest's length
  EXPECT_EQ(core::DigestText(hex[0]), "crc32c=f0ff7292");
  EXPECT_EQ(Readings({"sha1", "IlljY7PeQLBvmB+4XYIxLowO1RE="})[0].algorithm, "sha");
  EXPECT_TRUE(Readings({"adler32", "xyz"}).empty());
  EXPECT_TRUE(Readings({"adler32", "123"}).empty());
}

}  // namespace
}  // namespace perch::http
