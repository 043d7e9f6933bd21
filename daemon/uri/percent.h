// Percent-encoding of paths (RFC 3986): what both HTTP sides speak, the
// federation client (daemon/http) and perchd's HTTP endpoint
// (daemon/endpoint). Pure functions, safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::uri {

// Percent-encodes one path segment: RFC 3986 unreserved characters are kept,
// everything else (including '/', '%', ' ', UTF-8 bytes) becomes %XX.
std::string PercentEncodeSegment(std::string_view segment);

// "/a b/c%d" -> "/a%20b/c%25d". The root encodes to "/".
std::string PercentEncodePath(const core::ObjectPath& path);

// Decodes %XX escapes. kInvalidArgument on a truncated or non-hex escape or
// an encoded NUL.
core::Result<std::string> PercentDecode(std::string_view text);

}  // namespace perch::uri
