#include "daemon/uri/percent.h"

#include "daemon/core/log_escape.h"

namespace perch::uri {

using core::InvalidArgumentError;
using core::Result;

std::string PercentEncodeSegment(std::string_view segment) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(segment.size());
  for (unsigned char c : segment) {
    bool unreserved = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '-' || c == '.' || c == '_' || c == '~';
    if (unreserved) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  return out;
}

std::string PercentEncodePath(const core::ObjectPath& path) {
  if (path.IsRoot()) {
    return "/";
  }
  std::string out;
  for (std::string_view seg : path.Segments()) {
    out += '/';
    out += PercentEncodeSegment(seg);
  }
  return out;
}

Result<std::string> PercentDecode(std::string_view text) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    if (i + 2 >= text.size()) {
      return InvalidArgumentError("truncated percent escape in '" + core::EscapeForLog(text, 300) +
                                  "'");
    }
    int hi = hex(text[i + 1]);
    int lo = hex(text[i + 2]);
    if (hi < 0 || lo < 0) {
      return InvalidArgumentError("bad percent escape in '" + core::EscapeForLog(text, 300) + "'");
    }
    char c = static_cast<char>(hi * 16 + lo);
    if (c == '\0') {
      return InvalidArgumentError("encoded NUL in '" + core::EscapeForLog(text, 300) + "'");
    }
    out += c;
    i += 2;
  }
  return out;
}

}  // namespace perch::uri
