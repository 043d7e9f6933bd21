// ClassAd: the part of HTCondor's ClassAd language that a file-transfer plugin
// reads and writes (docs/apis/file-transfer-plugins in HTCondor's manual).
//
// HTCondor hands the plugin a file of "new format" ads, one per transfer:
//
//   [ LocalFileName = "/execute/dir_1/x.bin"; Url = "osdf:///ns/x.bin" ]
//
// and reads the same format back. Debian has no ClassAd library, so this is a
// small, strict parser of that format: a sequence of '[ ... ]' ads of
// `Name = value` attributes separated by ';' (a trailing ';' is allowed),
// attribute names case-insensitive, whitespace and // or /* */ comments
// anywhere between tokens. Values that are literals are decoded: strings (C
// escapes and octal \ooo), booleans, integers (decimal, 0x hex), reals,
// undefined and error. Any other value (a nested ad, a list, an expression
// such as `a + 1` or `strcat(...)`) is kept as its source text, so that the
// attributes a newer HTCondor adds are skipped, not refused, as the protocol
// asks; the plugin only needs Url and LocalFileName, which must be string
// literals.
//
// Refused with kInvalidArgument naming the line and column: text outside an
// ad, a missing '=', ';' or ']', an unterminated string or comment, an
// unknown escape, an encoded NUL, an unbalanced bracket, an integer out of
// range, a name given twice in one ad, and anything past the bounds below.
//
// Thread-safety: values; parsing is a pure function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "daemon/core/result.h"

namespace perch::transfer {

// Bounds on what an input file may hold.
inline constexpr size_t kMaxClassAdInput = 16 << 20;  // bytes of one file
inline constexpr size_t kMaxClassAds = 100000;        // ads in one file
inline constexpr size_t kMaxAttributes = 4096;        // attributes in one ad
inline constexpr size_t kMaxStringBytes = 1 << 20;    // one string literal, decoded
inline constexpr int kMaxNesting = 32;                // brackets inside one value

class ClassAd;

struct ClassAdValue {
  enum class Kind { kString, kBool, kInteger, kReal, kUndefined, kError, kAd, kList, kExpression };
  Kind kind = Kind::kUndefined;
  std::string text;  // kString: the decoded string; kAd, kList, kExpression: source text
  bool boolean = false;
  int64_t integer = 0;
  double real = 0;

  static ClassAdValue String(std::string s);
  static ClassAdValue Bool(bool b);
  static ClassAdValue Integer(int64_t i);
  // A nested ad or a list of ads, serialised now.
  static ClassAdValue Nested(const ClassAd& ad);
  static ClassAdValue ListOf(const std::vector<ClassAd>& ads);

  // The value as ClassAd source text ("\"a\\\"b\"", "true", "42", ...).
  std::string Unparse() const;
};

class ClassAd {
 public:
  // Sets `name` (replacing an attribute of that name in any case).
  void Set(std::string name, ClassAdValue value);
  // The attribute `name` in any case; nullptr if absent.
  const ClassAdValue* Find(std::string_view name) const;
  // nullopt if `name` is absent; kInvalidArgument if it is not a string literal.
  core::Result<std::optional<std::string>> GetString(std::string_view name) const;

  const std::vector<std::pair<std::string, ClassAdValue>>& attributes() const {
    return attributes_;
  }

  // "[ Name = value; Other = value ]" on one line.
  std::string Unparse() const;

 private:
  std::vector<std::pair<std::string, ClassAdValue>> attributes_;
};

// True if two attribute names are the same name (ASCII case-insensitive).
bool NameEquals(std::string_view a, std::string_view b);

// Parses a sequence of new-format ads (possibly none).
core::Result<std::vector<ClassAd>> ParseClassAds(std::string_view text);

// `s` as a ClassAd string literal, quotes included.
std::string QuoteClassAdString(std::string_view s);

}  // namespace perch::transfer
