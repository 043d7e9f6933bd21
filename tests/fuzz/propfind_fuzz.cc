// Fuzzes the PROPFIND multistatus parser and the listing interpretation. The
// first byte picks the href style; the rest is the 207 body. Invariants: every
// accepted response has a clean absolute path, and no file is larger than
// core::kMaxObjectSize.
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/limits.h"
#include "daemon/http/propfind.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  if (size == 0) return 0;
  using namespace perch;
  http::HrefStyle style;
  style.prefer_raw = (data[0] & 1) != 0;
  style.request_path = (data[0] & 2) != 0 ? "/ns/d%20x" : "/ns/d";
  std::string_view xml(reinterpret_cast<const char*>(data + 1), size - 1);
  auto parsed = http::ParseMultistatus(xml, style);
  if (!parsed.ok()) return 0;
  for (const http::DavResponse& r : *parsed) {
    FUZZ_CHECK(core::ObjectPath::Parse(r.href_path).ok());
    FUZZ_CHECK(r.attr.is_dir || r.attr.size <= core::kMaxObjectSize);
  }
  auto listing = http::InterpretListing(*parsed, style.request_path);
  if (listing.ok()) {
    for (const core::DirEntry& e : listing->children) FUZZ_CHECK(!e.name.empty());
  }
  // The first response's own path as the request: the common case.
  if (auto again = http::InterpretListing(*parsed, parsed->front().href_path); again.ok()) {
    FUZZ_CHECK(again->self.is_dir);
  }
  return 0;
}
