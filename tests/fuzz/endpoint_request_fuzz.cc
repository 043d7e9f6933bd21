// Fuzzes what a client sends perchd's HTTP endpoint: the raw request through
// Beast's parser with the endpoint's limits, then the target, Range, If-Range
// and User-Agent through the endpoint's own parsing. Invariants: a served
// range lies inside the object and is not empty; a path is clean and bounded;
// a client label is short and of safe characters.
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/limits.h"
#include "daemon/endpoint/request.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

namespace bhttp = boost::beast::http;

std::string_view Sv(boost::beast::string_view s) { return {s.data(), s.size()}; }

void CheckRange(std::string_view header, uint64_t size) {
  auto r = perch::endpoint::AnswerRange(header, size);
  if (r.kind == perch::endpoint::RangeAnswer::kPart) {
    FUZZ_CHECK(r.length > 0 && r.offset < size && r.length <= size - r.offset);
  } else if (r.kind == perch::endpoint::RangeAnswer::kWhole) {
    FUZZ_CHECK(r.offset == 0 && r.length == size);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  using namespace perch;
  std::string_view raw(reinterpret_cast<const char*>(data), size);
  for (uint64_t object : {uint64_t{0}, uint64_t{1}, uint64_t{1000}, core::kMaxObjectSize})
    CheckRange(raw, object);
  std::string label = endpoint::ClientLabel(raw);
  FUZZ_CHECK(!label.empty() && label.size() <= 32);
  FUZZ_CHECK(label.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789._-") ==
             std::string::npos);

  bhttp::request_parser<bhttp::string_body> parser;
  parser.header_limit(8 * 1024);
  parser.body_limit(64 * 1024);
  parser.eager(true);
  boost::beast::error_code ec;
  parser.put(boost::asio::buffer(raw.data(), raw.size()), ec);
  if (ec || !parser.is_header_done()) return 0;
  const auto& req = parser.get();
  if (auto path = endpoint::PathOfTarget(Sv(req.target())); path.ok()) {
    FUZZ_CHECK(path->str().size() <= core::kMaxPathBytes);
    FUZZ_CHECK(path->str().find("/../") == std::string::npos);
  }
  core::FileAttr attr;
  attr.size = 12345;
  attr.mtime = 1700000000;
  attr.etag = std::string(Sv(req[bhttp::field::etag]));
  (void)endpoint::IfRangeHolds(Sv(req[bhttp::field::if_range]), attr);
  FUZZ_CHECK(endpoint::EntityTag(attr).size() <= 130);
  CheckRange(Sv(req[bhttp::field::range]), attr.size);
  return 0;
}
