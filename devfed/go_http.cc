#include "devfed/go_http.h"

#include <ctime>

namespace perch::devfed::gohttp {

namespace {

constexpr char kUpperHex[] = "0123456789ABCDEF";

bool IsAlnum(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

int Unhex(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// shouldEscape(c, encodePath) and shouldEscape(c, encodeQueryComponent).
bool ShouldEscape(unsigned char c, bool path_mode) {
  if (IsAlnum(c)) return false;
  switch (c) {
    case '-':
    case '_':
    case '.':
    case '~':
      return false;
    case '$':
    case '&':
    case '+':
    case ',':
    case '/':
    case ':':
    case ';':
    case '=':
    case '?':
    case '@':
      return path_mode ? c == '?' : true;
    default:
      return true;
  }
}

std::string Escape(std::string_view s, bool path_mode) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (!path_mode && c == ' ') {
      out += '+';
    } else if (ShouldEscape(c, path_mode)) {
      out += '%';
      out += kUpperHex[c >> 4];
      out += kUpperHex[c & 15];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

// unescape(s, mode): encodePath keeps '+', encodeQueryComponent makes it ' '.
std::optional<std::string> Unescape(std::string_view s, bool query_mode) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      int hi = Unhex(s[i + 1]), lo = Unhex(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi << 4 | lo);
      i += 2;
    } else if (s[i] == '+' && query_mode) {
      out += ' ';
    } else {
      out += s[i];
    }
  }
  return out;
}

void ReplaceAll(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace

std::string EscapePath(std::string_view path) { return Escape(path, true); }

std::string QueryEscape(std::string_view s) { return Escape(s, false); }

std::optional<std::string> PathUnescape(std::string_view s) { return Unescape(s, false); }

Values ParseQuery(std::string_view raw) {
  Values out;
  while (!raw.empty()) {
    size_t amp = raw.find('&');
    std::string_view pair = raw.substr(0, amp);
    raw = amp == std::string_view::npos ? std::string_view() : raw.substr(amp + 1);
    if (pair.empty() || pair.find(';') != std::string_view::npos) continue;
    size_t eq = pair.find('=');
    auto key = Unescape(pair.substr(0, eq), true);
    auto value =
        Unescape(eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1), true);
    if (!key || !value) continue;
    out[*key].push_back(*value);
  }
  return out;
}

std::string Encode(const Values& values) {
  std::string out;
  for (const auto& [key, list] : values) {
    for (const std::string& v : list) {
      if (!out.empty()) out += '&';
      out += QueryEscape(key) + "=" + QueryEscape(v);
    }
  }
  return out;
}

std::string CleanPath(std::string_view path) {
  std::vector<std::string_view> segments;
  while (!path.empty()) {
    size_t slash = path.find('/');
    std::string_view seg = path.substr(0, slash);
    path = slash == std::string_view::npos ? std::string_view() : path.substr(slash + 1);
    if (seg.empty() || seg == ".") continue;
    if (seg == "..") {
      if (!segments.empty()) segments.pop_back();
      continue;
    }
    segments.push_back(seg);
  }
  std::string out;
  for (std::string_view seg : segments) {
    out += '/';
    out += seg;
  }
  return out.empty() ? "/" : out;
}

std::string HtmlEscape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string JsonMarshal(const nlohmann::ordered_json& j, int indent) {
  std::string out = j.dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  // Outside strings JSON has none of these characters, so a plain replace is exact.
  ReplaceAll(out, "<", "\\u003c");
  ReplaceAll(out, ">", "\\u003e");
  ReplaceAll(out, "&", "\\u0026");
  ReplaceAll(out, "\xE2\x80\xA8", "\\u2028");
  ReplaceAll(out, "\xE2\x80\xA9", "\\u2029");
  return out;
}

nlohmann::ordered_json UrlStruct(const std::string& url) {
  std::string scheme, host, path;
  if (size_t sep = url.find("://"); sep != std::string::npos) {
    scheme = url.substr(0, sep);
    size_t slash = url.find('/', sep + 3);
    host = url.substr(sep + 3, slash == std::string::npos ? std::string::npos : slash - sep - 3);
    if (slash != std::string::npos) path = url.substr(slash);
  }
  return nlohmann::ordered_json{{"Scheme", scheme},  {"Opaque", ""},        {"User", nullptr},
                                {"Host", host},      {"Path", path},        {"RawPath", ""},
                                {"OmitHost", false}, {"ForceQuery", false}, {"RawQuery", ""},
                                {"Fragment", ""},    {"RawFragment", ""}};
}

std::string HttpDate() {
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
  return buf;
}

}  // namespace perch::devfed::gohttp
