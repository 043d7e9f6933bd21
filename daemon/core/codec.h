// Little-endian fixed-width, varint (LEB128) and length-prefixed encodings for index values
// (the on-disk format in docs/design.md "On-disk format"). Decoders never read past
// the input: a truncated value is a decode failure, not a crash.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace perch::core::codec {

inline void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
// LEB128: 7 bits a byte, low first; 1 byte below 128, at most 10.
inline void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}
inline void PutString(std::string* out, std::string_view s) {
  PutU64(out, s.size());
  out->append(s);
}

// A cursor over an encoded value; every Get returns false once input runs out.
class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool GetU64(uint64_t* v) {
    if (in_.size() < 8) return false;
    *v = 0;
    for (int i = 0; i < 8; ++i)
      *v |= static_cast<uint64_t>(static_cast<unsigned char>(in_[i])) << (8 * i);
    in_.remove_prefix(8);
    return true;
  }
  bool GetVarint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64 && !in_.empty(); shift += 7) {
      const auto b = static_cast<unsigned char>(in_[0]);
      in_.remove_prefix(1);
      if (shift == 63 && b > 1) return false;  // past 64 bits
      *v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if ((b & 0x80) == 0) return true;
    }
    return false;  // ran out, or an 11th byte would follow
  }
  bool GetString(std::string* s) {
    uint64_t n = 0;
    if (!GetU64(&n) || n > in_.size()) return false;
    s->assign(in_.substr(0, n));
    in_.remove_prefix(n);
    return true;
  }
  // As GetString, without a copy: `*s` points into the input.
  bool GetView(std::string_view* s) {
    uint64_t n = 0;
    if (!GetU64(&n) || n > in_.size()) return false;
    *s = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  std::string_view in_;
};

// 128-bit FNV-1a over `s`, as 32 hex characters: a stable, filesystem-safe id.
inline std::string StableId(std::string_view s) {
  uint64_t a = 0xcbf29ce484222325ULL, b = 0x84222325cbf29ce4ULL;
  for (unsigned char c : s) {
    a = (a ^ c) * 0x100000001b3ULL;
    b = (b ^ c) * 0x100000001b3ULL;
    b ^= b >> 29;
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (uint64_t v : {a, b}) {
    for (int i = 15; i >= 0; --i) out.push_back(kHex[(v >> (4 * i)) & 0xf]);
  }
  return out;
}

}  // namespace perch::core::codec
