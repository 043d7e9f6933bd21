// Fuzzes federation URL parsing, percent-decoding, URL splitting and object
// path normalisation. Invariants: an accepted path is normalised (parsing it
// again changes nothing) and percent-encoding it decodes back to itself.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/http/url.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  using namespace perch;
  std::string_view v(reinterpret_cast<const char*>(data), size);
  if (auto url = http::ParseFederationUrl(v); url.ok()) {
    FUZZ_CHECK(!url->discovery_url.empty());
    (void)url->ToString();
  }
  http::SplitHttpUrl(v).status().IgnoreError();
  if (auto decoded = uri::PercentDecode(v); decoded.ok()) {
    FUZZ_CHECK(decoded->size() <= v.size());
  }
  if (auto path = core::ObjectPath::Parse(v); path.ok()) {
    auto again = core::ObjectPath::Parse(path->str());
    FUZZ_CHECK(again.ok() && *again == *path);
    auto round = uri::PercentDecode(uri::PercentEncodePath(*path));
    FUZZ_CHECK(round.ok() && *round == path->str());
    if (!path->IsRoot()) FUZZ_CHECK(path->Parent().Child(path->Name()).ok());
  }
  return 0;
}
