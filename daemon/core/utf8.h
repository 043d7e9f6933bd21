// UTF-8 decoding of one character, for the places that must tell a name's
// well-formed text from its other bytes (the PROPFIND parser, the control
// API's strings). Pure, safe from any thread.
#pragma once

#include <cstdint>
#include <string_view>

namespace perch::core {

// The length (1 to 4) of the UTF-8 character at the start of `s` if it is
// well formed (no overlong form, no surrogate, at most U+10FFFF), with its
// code point in `*cp`; 0 if it is not; -1 if `s` ends inside it.
// REQUIRES: !s.empty().
inline int Utf8CharLength(std::string_view s, uint32_t* cp) {
  const auto b = static_cast<unsigned char>(s[0]);
  if (b < 0x80) {
    *cp = b;
    return 1;
  }
  const int len = b >= 0xC2 && b <= 0xDF   ? 2
                  : b >= 0xE0 && b <= 0xEF ? 3
                  : b >= 0xF0 && b <= 0xF4 ? 4
                                           : 0;
  if (len == 0) return 0;
  uint32_t c = b & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    if (static_cast<size_t>(k) >= s.size()) return -1;
    const auto x = static_cast<unsigned char>(s[k]);
    if ((x & 0xC0) != 0x80) return 0;
    c = (c << 6) | (x & 0x3F);
  }
  const uint32_t min = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
  if (c < min || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
  *cp = c;
  return len;
}

}  // namespace perch::core
