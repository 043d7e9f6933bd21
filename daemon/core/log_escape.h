// EscapeForLog: makes server-controlled text (names, paths, header values)
// safe to put in a log line. A name holding "\n2026-11-23 [error] ..." must
// not forge a second log line, and terminal escape sequences must not reach
// an operator's terminal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace perch::core {

// Control characters, DEL, '\\' and bytes >= 0x80 become \xHH ('\n', '\r',
// '\t' as \n, \r, \t); everything else is kept. Output past `max_bytes` of
// input is cut and marked with "...".
inline std::string EscapeForLog(std::string_view s, size_t max_bytes = 1024) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  const bool cut = s.size() > max_bytes;
  if (cut) s = s.substr(0, max_bytes);
  out.reserve(s.size());
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c < 0x20 || c >= 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += ch;
    }
  }
  if (cut) out += "...";
  return out;
}

}  // namespace perch::core
