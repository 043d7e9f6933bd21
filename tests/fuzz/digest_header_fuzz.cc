// Fuzzes what perch reads of a server's or a client's digest headers: the
// Digest header (ParseDigestHeader, untrusted: every server the director
// names), each digest's readings and check (Readings, CheckDigest), and the
// Want-Digest header a client of the endpoint sends (ParseWantDigest).
// Invariants: at most 8 digests, each with a lower-case non-empty name and a
// non-empty value; a reading has a length perch computes; the check of a
// digest of the input's own bytes, spelled as perch spells it, matches;
// Want-Digest yields known algorithms, each once, at most 16.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/object_digest.h"
#include "daemon/http/digest.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  using namespace perch;
  std::string_view v(reinterpret_cast<const char*>(data), size);
  auto digests = http::ParseDigestHeader(v);
  FUZZ_CHECK(digests.size() <= 8);
  for (const http::InstanceDigest& d : digests) {
    FUZZ_CHECK(!d.algorithm.empty() && !d.value.empty());
    FUZZ_CHECK(std::none_of(d.algorithm.begin(), d.algorithm.end(),
                            [](char c) { return std::isupper(static_cast<unsigned char>(c)); }));
    for (const core::ObjectDigest& r : http::Readings(d)) {
      size_t n = r.raw.size();
      FUZZ_CHECK(n == 4 || n == 16 || n == 20 || n == 32);
    }
    http::CheckDigest(d, v);  // any answer, no crash
    http::ToString(d);
  }
  auto wanted = core::ParseWantDigest(v);
  FUZZ_CHECK(wanted.size() <= 16);
  for (size_t i = 0; i < wanted.size(); ++i) {
    FUZZ_CHECK(core::IsDigestAlgorithm(wanted[i]));
    FUZZ_CHECK(std::count(wanted.begin(), wanted.end(), wanted[i]) == 1);
  }
  // The input's own digests, as perch hands them out, check against it.
  auto hasher = http::NewDigestHasher(core::DigestAlgorithms());
  hasher->Update(v);
  for (const core::ObjectDigest& d : hasher->Finish()) {
    auto parsed = http::ParseDigestHeader(core::DigestText(d));
    FUZZ_CHECK(parsed.size() == 1);
    FUZZ_CHECK(http::CheckDigest(parsed[0], v) == http::DigestCheck::kMatch);
  }
  return 0;
}
