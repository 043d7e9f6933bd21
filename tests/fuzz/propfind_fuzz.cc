// Fuzzes the PROPFIND multistatus parser and the listing interpretation. The
// first byte picks the href style and a chunk size; the rest is the 207 body.
// Invariants: every accepted response has a clean absolute path, no file is
// larger than core::kMaxObjectSize, and the body fed in chunks parses as it
// does whole.
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
  // The same answer fed in chunks (of a size the input picks, cutting
  // characters and escapes anywhere) parses to the same result.
  {
    const size_t chunk = 1 + (data[0] >> 2) % 61;
    http::MultistatusParser stream(style);
    for (size_t i = 0; i < xml.size(); i += chunk) {
      if (!stream.Feed(xml.substr(i, chunk))) break;
    }
    auto chunked = stream.Finish();
    FUZZ_CHECK(chunked.ok() == parsed.ok());
    if (parsed.ok()) {
      FUZZ_CHECK(chunked->size() == parsed->size());
      for (size_t i = 0; i < parsed->size(); ++i) {
        FUZZ_CHECK((*chunked)[i].href_path == (*parsed)[i].href_path);
        FUZZ_CHECK((*chunked)[i].attr.size == (*parsed)[i].attr.size);
      }
    }
  }
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
