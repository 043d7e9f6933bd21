#include "transfer/classad.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "daemon/core/log_escape.h"

namespace perch::transfer {
namespace {

using core::InvalidArgumentError;
using core::Result;
using core::Status;

bool IsNameStart(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; }
bool IsNameChar(char c) { return IsNameStart(c) || (c >= '0' && c <= '9'); }
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f'; }

// A cursor over the input that knows its line and column, for messages.
class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<std::vector<ClassAd>> ParseAll() {
    std::vector<ClassAd> ads;
    while (true) {
      PERCH_RETURN_IF_ERROR(SkipSpace());
      if (AtEnd()) return ads;
      if (Peek() != '[') return Error("expected '[' to start a ClassAd");
      if (ads.size() >= kMaxClassAds) return Error("more than 100000 ClassAds");
      auto ad = ParseAd();
      if (!ad.ok()) return ad.status();
      ads.push_back(*std::move(ad));
    }
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  Status Error(const std::string& what) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      column = text_[i] == '\n' ? 1 : column + 1;
      line += text_[i] == '\n' ? 1 : 0;
    }
    return InvalidArgumentError("line " + std::to_string(line) + ", column " +
                                std::to_string(column) + ": " + what);
  }

  // Skips whitespace and comments.
  Status SkipSpace() {
    while (!AtEnd()) {
      if (IsSpace(Peek())) {
        ++pos_;
      } else if (text_.substr(pos_, 2) == "//") {
        size_t nl = text_.find('\n', pos_);
        pos_ = nl == std::string_view::npos ? text_.size() : nl + 1;
      } else if (text_.substr(pos_, 2) == "/*") {
        size_t end = text_.find("*/", pos_ + 2);
        if (end == std::string_view::npos) return Error("unterminated /* comment");
        pos_ = end + 2;
      } else {
        break;
      }
    }
    return Status::Ok();
  }

  // At '[': one ad, through its ']'.
  Result<ClassAd> ParseAd() {
    ++pos_;
    ClassAd ad;
    size_t count = 0;
    while (true) {
      PERCH_RETURN_IF_ERROR(SkipSpace());
      if (AtEnd()) return Error("unterminated ClassAd: expected ']'");
      if (Peek() == ']') {
        ++pos_;
        return ad;
      }
      auto name = ParseName();
      if (!name.ok()) return name.status();
      if (ad.Find(*name) != nullptr) return Error("attribute '" + *name + "' given twice");
      if (++count > kMaxAttributes) return Error("more than 4096 attributes in one ClassAd");
      PERCH_RETURN_IF_ERROR(SkipSpace());
      if (AtEnd() || Peek() != '=')
        return Error("expected '=' after attribute name '" + *name + "'");
      ++pos_;
      auto value = ParseValue(*name);
      if (!value.ok()) return value.status();
      ad.Set(*name, *std::move(value));
      PERCH_RETURN_IF_ERROR(SkipSpace());
      if (AtEnd()) return Error("unterminated ClassAd: expected ';' or ']'");
      if (Peek() == ';') {
        ++pos_;
      } else if (Peek() != ']') {
        return Error("expected ';' or ']' after the value of '" + *name + "'");
      }
    }
  }

  Result<std::string> ParseName() {
    if (Peek() == '\'') {
      auto quoted = ParseQuoted('\'');
      if (!quoted.ok()) return quoted.status();
      if (quoted->empty()) return Error("empty attribute name");
      return quoted;
    }
    if (!IsNameStart(Peek())) return Error("expected an attribute name");
    size_t start = pos_;
    while (!AtEnd() && IsNameChar(Peek())) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }

  // At the opening quote: a string literal (or quoted name), decoded.
  Result<std::string> ParseQuoted(char quote) {
    size_t start = pos_++;
    std::string out;
    while (true) {
      if (AtEnd()) {
        pos_ = start;
        return Error("unterminated string");
      }
      char c = text_[pos_++];
      if (c == quote) return out;
      if (out.size() >= kMaxStringBytes) return Error("string longer than 1 MiB");
      if (c == '\0') {
        --pos_;
        return Error("NUL byte in a string");
      }
      if (c != '\\') {
        out += c;
        continue;
      }
      if (AtEnd()) continue;  // reported as unterminated
      char e = text_[pos_++];
      switch (e) {
        case 'n':
          out += '\n';
          break;
        case 't':
          out += '\t';
          break;
        case 'r':
          out += '\r';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case '\\':
        case '"':
        case '\'':
        case '?':
          out += e;
          break;
        default: {
          if (e < '0' || e > '7') {
            --pos_;
            return Error("unknown escape '\\" + core::EscapeForLog(std::string(1, e)) +
                         "' in a string");
          }
          int value = e - '0';
          int max_digits = e <= '3' ? 3 : 2;
          for (int d = 1; d < max_digits && !AtEnd() && Peek() >= '0' && Peek() <= '7'; ++d) {
            value = value * 8 + (text_[pos_++] - '0');
          }
          if (value == 0) return Error("encoded NUL in a string");
          out += static_cast<char>(value);
        }
      }
    }
  }

  // After '=': the value's extent up to ';' or ']' at depth 0, then what it is.
  Result<ClassAdValue> ParseValue(const std::string& name) {
    PERCH_RETURN_IF_ERROR(SkipSpace());
    size_t start = pos_;
    std::string closers;                     // the brackets still open, innermost last
    std::optional<std::string> only_string;  // the decoded value if it is one string literal
    int tokens = 0;
    size_t end = start;  // past the value's last token (a comment after it is not part of it)
    while (!AtEnd()) {
      char c = Peek();
      if (closers.empty() && (c == ';' || c == ']')) break;
      if (IsSpace(c) || text_.substr(pos_, 2) == "//" || text_.substr(pos_, 2) == "/*") {
        PERCH_RETURN_IF_ERROR(SkipSpace());
        continue;
      }
      ++tokens;
      if (c == '"' || c == '\'') {
        auto s = ParseQuoted(c);
        if (!s.ok()) return s.status();
        if (c == '"' && tokens == 1) only_string = *std::move(s);
        end = pos_;
        continue;
      }
      if (c == '=' && closers.empty() && IsLoneAssignment(start)) {
        // "Url = "x" LocalFileName = ..." : a ';' is missing.
        return Error("expected ';' or ']' after the value of '" + name + "' (a '=' follows it)");
      }
      if (c == '(' || c == '[' || c == '{') {
        if (closers.size() >= static_cast<size_t>(kMaxNesting)) {
          return Error("value of '" + name + "' nested deeper than 32 brackets");
        }
        closers += c == '(' ? ')' : (c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (closers.empty() || closers.back() != c) {
          return Error(std::string("unbalanced '") + c + "' in the value of '" + name + "'");
        }
        closers.pop_back();
      }
      end = ++pos_;
    }
    if (!closers.empty()) {
      return Error("unterminated value of '" + name + "': expected '" + closers.back() + "'");
    }
    std::string_view raw = text_.substr(start, end - start);
    if (raw.empty()) return Error("attribute '" + name + "' has no value");
    if (only_string && tokens == 1) return ClassAdValue::String(*std::move(only_string));
    return Literal(raw, name);
  }

  // True if the '=' at pos_ is not part of an operator (==, !=, <=, >=, =?=,
  // =!=): an assignment cannot appear in a value.
  bool IsLoneAssignment(size_t value_start) const {
    char prev = pos_ > value_start ? text_[pos_ - 1] : ' ';
    char next = pos_ + 1 < text_.size() ? text_[pos_ + 1] : ' ';
    return std::string_view("=!<>?").find(prev) == std::string_view::npos &&
           std::string_view("=?!").find(next) == std::string_view::npos;
  }

  // A value that is not a string literal: a keyword, a number, an ad, a list
  // or an expression (kept as text).
  Result<ClassAdValue> Literal(std::string_view raw, const std::string& name) {
    ClassAdValue v;
    v.text = std::string(raw);
    for (auto [word, kind] : {std::pair{"true", ClassAdValue::Kind::kBool},
                              std::pair{"false", ClassAdValue::Kind::kBool},
                              std::pair{"undefined", ClassAdValue::Kind::kUndefined},
                              std::pair{"error", ClassAdValue::Kind::kError}}) {
      if (NameEquals(raw, word)) {
        v.kind = kind;
        v.boolean = NameEquals(raw, "true");
        return v;
      }
    }
    char first = raw.front();
    bool matched = raw.size() >= 2 &&
                   ((first == '[' && raw.back() == ']') || (first == '{' && raw.back() == '}'));
    if (matched && Balanced(raw.substr(1, raw.size() - 2))) {
      v.kind = first == '[' ? ClassAdValue::Kind::kAd : ClassAdValue::Kind::kList;
      return v;
    }
    std::string s(raw);
    size_t digits = (s[0] == '-' || s[0] == '+') ? 1 : 0;
    if (digits < s.size() && s[digits] >= '0' && s[digits] <= '9') {
      bool hex = s.size() > digits + 1 && s[digits] == '0' && (s[digits + 1] | 0x20) == 'x';
      char* end = nullptr;
      errno = 0;
      long long i = std::strtoll(s.c_str(), &end, hex ? 16 : 10);
      if (end == s.c_str() + s.size()) {
        if (errno == ERANGE) return Error("integer value of '" + name + "' is out of range");
        v.kind = ClassAdValue::Kind::kInteger;
        v.integer = i;
        return v;
      }
      errno = 0;
      double r = std::strtod(s.c_str(), &end);
      if (end == s.c_str() + s.size() && !hex && std::isfinite(r)) {
        v.kind = ClassAdValue::Kind::kReal;
        v.real = r;
        return v;
      }
    }
    v.kind = ClassAdValue::Kind::kExpression;
    return v;
  }

  // True if `inner` (what lies between a value's first and last bracket)
  // never closes that outer bracket early, as in "[a] + [b]".
  static bool Balanced(std::string_view inner) {
    int depth = 0;
    char quote = 0;
    for (size_t i = 0; i < inner.size(); ++i) {
      char c = inner[i];
      if (quote != 0) {
        if (c == '\\')
          ++i;
        else if (c == quote)
          quote = 0;
        continue;
      }
      if (c == '"' || c == '\'') quote = c;
      if (c == '(' || c == '[' || c == '{') ++depth;
      if ((c == ')' || c == ']' || c == '}') && --depth < 0) return false;
    }
    return depth == 0;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Result<std::vector<ClassAd>> ParseClassAds(std::string_view text) {
  if (text.size() > kMaxClassAdInput) {
    return InvalidArgumentError("more than 16 MiB of ClassAds");
  }
  return Parser(text).ParseAll();
}

}  // namespace perch::transfer
