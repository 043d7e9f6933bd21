#include <cstdio>
#include <string>

#include "transfer/classad.h"

// ClassAd values, attribute look-up and the writer; the parser is classad.cc.
namespace perch::transfer {

using core::InvalidArgumentError;
using core::Result;

bool NameEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

namespace {

// `s` between `quote`s, with that quote, '\\' and control characters escaped.
std::string Quote(std::string_view s, char quote) {
  std::string out(1, quote);
  for (char ch : s) {
    unsigned char c = static_cast<unsigned char>(ch);
    if (ch == quote || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\%03o", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + quote;
}

// A name as written: plain when it is an identifier, else 'quoted'.
std::string UnparseName(const std::string& name) {
  bool plain = !name.empty() && !(name[0] >= '0' && name[0] <= '9');
  for (char c : name) {
    plain = plain && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                      c == '_');
  }
  return plain ? name : Quote(name, '\'');
}

}  // namespace

ClassAdValue ClassAdValue::String(std::string s) {
  ClassAdValue v;
  v.kind = Kind::kString;
  v.text = std::move(s);
  return v;
}

ClassAdValue ClassAdValue::Bool(bool b) {
  ClassAdValue v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}

ClassAdValue ClassAdValue::Integer(int64_t i) {
  ClassAdValue v;
  v.kind = Kind::kInteger;
  v.integer = i;
  return v;
}

ClassAdValue ClassAdValue::Nested(const ClassAd& ad) {
  ClassAdValue v;
  v.kind = Kind::kAd;
  v.text = ad.Unparse();
  return v;
}

ClassAdValue ClassAdValue::ListOf(const std::vector<ClassAd>& ads) {
  ClassAdValue v;
  v.kind = Kind::kList;
  v.text = "{ ";
  for (size_t i = 0; i < ads.size(); ++i) v.text += (i > 0 ? ", " : "") + ads[i].Unparse();
  v.text += " }";
  return v;
}

std::string ClassAdValue::Unparse() const {
  switch (kind) {
    case Kind::kString:
      return QuoteClassAdString(text);
    case Kind::kBool:
      return boolean ? "true" : "false";
    case Kind::kInteger:
      return std::to_string(integer);
    case Kind::kReal: {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.17g", real);
      std::string s = buf;
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
      return s;
    }
    case Kind::kUndefined:
      return "undefined";
    case Kind::kError:
      return "error";
    case Kind::kAd:
    case Kind::kList:
    case Kind::kExpression:
      return text;
  }
  return "undefined";
}

void ClassAd::Set(std::string name, ClassAdValue value) {
  for (auto& [n, v] : attributes_) {
    if (NameEquals(n, name)) {
      v = std::move(value);
      return;
    }
  }
  attributes_.emplace_back(std::move(name), std::move(value));
}

const ClassAdValue* ClassAd::Find(std::string_view name) const {
  for (const auto& [n, v] : attributes_) {
    if (NameEquals(n, name)) return &v;
  }
  return nullptr;
}

Result<std::optional<std::string>> ClassAd::GetString(std::string_view name) const {
  const ClassAdValue* v = Find(name);
  if (v == nullptr) return std::optional<std::string>();
  if (v->kind != ClassAdValue::Kind::kString) {
    return InvalidArgumentError("attribute " + std::string(name) +
                                " is not a string literal: " + v->Unparse().substr(0, 200));
  }
  return std::optional<std::string>(v->text);
}

std::string ClassAd::Unparse() const {
  std::string out = "[ ";
  for (size_t i = 0; i < attributes_.size(); ++i) {
    out += (i > 0 ? "; " : "") + UnparseName(attributes_[i].first) + " = " +
           attributes_[i].second.Unparse();
  }
  out += attributes_.empty() ? "]" : " ]";
  return out;
}

std::string QuoteClassAdString(std::string_view s) { return Quote(s, '"'); }

}  // namespace perch::transfer
