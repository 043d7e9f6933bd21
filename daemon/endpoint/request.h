// What an HTTP client asks of perchd's endpoint, parsed: the object path of a
// request target, a Range header against an object's size, the validators
// perch sends (ETag, Last-Modified) and a client's label for stats.
//
// Pure functions, safe from any thread. Every input is a client's: bounded
// and checked, never trusted.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::endpoint {

// The federation path a request target names: "/ns/a%20b?x=1" -> "/ns/a b".
// The query and fragment are ignored (Pelican's clients add "?directread",
// "?authz=..."). kInvalidArgument for a target that is not an absolute path
// (e.g. "http://..."), a bad escape, an encoded NUL, "." or ".." segments, or
// more than core::kMaxPathBytes.
core::Result<core::ObjectPath> PathOfTarget(std::string_view target);

// The answer to a Range header for an object of `size` bytes (RFC 9110 §14):
// one range "bytes=a-b", "bytes=a-" or "bytes=-n" is served as 206; a range
// starting at or past the end is 416; anything else (several ranges, another
// unit, malformed) is ignored and the whole object served (200), as the RFC
// allows.
struct RangeAnswer {
  enum Kind { kWhole, kPart, kUnsatisfiable } kind = kWhole;
  uint64_t offset = 0;
  uint64_t length = 0;  // kWhole: size; kPart: the bytes to send
};
RangeAnswer AnswerRange(std::string_view range_header, uint64_t size);

// An IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") for Unix time `t`.
std::string HttpDate(int64_t t);

// The strong entity tag perch sends for a version: the federation's ETag when
// it has one (quoted), else one made of size and mtime.
std::string EntityTag(const core::FileAttr& attr);

// Whether a Range may be honoured under an If-Range header (RFC 9110 §13.1.5):
// empty, or equal to the entity tag, or to the Last-Modified date.
bool IfRangeHolds(std::string_view if_range, const core::FileAttr& attr);

// A short label for the client that sent `user_agent`: its first product
// token's name, lower-cased, of [a-z0-9._-] only and at most 32 bytes
// ("curl/8.1.2" -> "curl", "Python/3.11 aiohttp/3.8.4" -> "python";
// "" -> "unknown").
std::string ClientLabel(std::string_view user_agent);

}  // namespace perch::endpoint
