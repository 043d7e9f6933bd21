// Fuzzes perch-transfer's ClassAd reader (the -infile HTCondor writes): any
// input is either refused with kInvalidArgument or parsed into ads that,
// written back with Unparse, read again into the same attributes.
#include <cstdint>
#include <string>

#include "tests/fuzz/fuzz_common.h"
#include "transfer/classad.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  using perch::transfer::ClassAd;
  using perch::transfer::ClassAdValue;
  std::string text(reinterpret_cast<const char*>(data), size);
  auto ads = perch::transfer::ParseClassAds(text);
  if (!ads.ok()) {
    FUZZ_CHECK(ads.status().code() == perch::core::StatusCode::kInvalidArgument);
    FUZZ_CHECK(ads.status().message().rfind("line ", 0) == 0 ||
               size > perch::transfer::kMaxClassAdInput);
    return 0;
  }
  std::string written;
  for (const ClassAd& ad : *ads) written += ad.Unparse() + "\n";
  auto again = perch::transfer::ParseClassAds(written);
  FUZZ_CHECK(again.ok());
  FUZZ_CHECK(again->size() == ads->size());
  for (size_t i = 0; i < ads->size(); ++i) {
    const auto& a = (*ads)[i].attributes();
    const auto& b = (*again)[i].attributes();
    FUZZ_CHECK(a.size() == b.size());
    for (size_t j = 0; j < a.size(); ++j) {
      FUZZ_CHECK(a[j].first == b[j].first);
      const ClassAdValue& x = a[j].second;
      const ClassAdValue& y = b[j].second;
      FUZZ_CHECK(x.kind == y.kind);
      if (x.kind == ClassAdValue::Kind::kString) FUZZ_CHECK(x.text == y.text);
      if (x.kind == ClassAdValue::Kind::kBool) FUZZ_CHECK(x.boolean == y.boolean);
      if (x.kind == ClassAdValue::Kind::kInteger) FUZZ_CHECK(x.integer == y.integer);
    }
  }
  return 0;
}
