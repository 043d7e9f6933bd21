#include "daemon/http/pelican_headers.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <limits>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"

namespace perch::http {
namespace {

using core::EscapeForLog;
using core::InvalidArgumentError;
using core::Result;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return out;
}

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  s = Trim(s);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Splits on `sep` outside double quotes and outside <...>.
Result<std::vector<std::string_view>> SplitOutside(std::string_view s, char sep,
                                                   std::string_view what) {
  std::vector<std::string_view> out;
  bool in_quote = false, in_angle = false;
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (in_quote) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_quote = false;
      }
    } else if (in_angle) {
      if (c == '>') in_angle = false;
    } else if (c == '"') {
      in_quote = true;
    } else if (c == '<') {
      in_angle = true;
    } else if (c == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  }
  if (in_quote) return InvalidArgumentError(std::string(what) + ": unterminated quoted string");
  if (in_angle) return InvalidArgumentError(std::string(what) + ": unterminated '<'");
  out.push_back(s.substr(start));
  return out;
}

std::string Unquote(std::string_view v) {
  v = Trim(v);
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
    std::string out;
    for (size_t i = 1; i + 1 < v.size(); ++i) {
      if (v[i] == '\\' && i + 2 < v.size()) ++i;
      out += v[i];
    }
    return out;
  }
  return std::string(v);
}

bool IsHttpUrl(std::string_view u) {
  std::string l = Lower(u.substr(0, 8));
  return l.rfind("http://", 0) == 0 || l.rfind("https://", 0) == 0;
}

}  // namespace

Result<std::vector<std::pair<std::string, std::string>>> ParseKeyValueList(std::string_view value) {
  auto parts = SplitOutside(value, ',', "header");
  if (!parts.ok()) return parts.status();
  std::vector<std::pair<std::string, std::string>> out;
  for (std::string_view part : *parts) {
    part = Trim(part);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    if (eq == std::string_view::npos) {
      return InvalidArgumentError("element '" + EscapeForLog(part, 200) + "' has no '='");
    }
    out.emplace_back(Lower(Trim(part.substr(0, eq))), Unquote(part.substr(eq + 1)));
  }
  return out;
}

Result<std::vector<LinkEntry>> ParseLinkHeader(std::string_view value) {
  auto elements = SplitOutside(value, ',', "Link header");
  if (!elements.ok()) return elements.status();
  if (elements->size() > 4 * core::kMaxLinkEntries) {
    return InvalidArgumentError("Link header has " + std::to_string(elements->size()) +
                                " elements (at most " + std::to_string(4 * core::kMaxLinkEntries) +
                                " are read)");
  }
  std::vector<LinkEntry> out;
  for (std::string_view element : *elements) {
    element = Trim(element);
    if (element.empty()) continue;
    if (element.front() != '<') {
      return InvalidArgumentError("Link header: element does not start with '<': '" +
                                  EscapeForLog(element, 200) + "'");
    }
    size_t close = element.find('>');
    if (close == std::string_view::npos) {
      return InvalidArgumentError("Link header: unterminated '<'");
    }
    LinkEntry entry;
    entry.url = std::string(Trim(element.substr(1, close - 1)));
    if (!IsHttpUrl(entry.url)) {
      return InvalidArgumentError("Link header: not an http(s) URL: '" +
                                  EscapeForLog(entry.url, 200) + "'");
    }
    auto params = SplitOutside(element.substr(close + 1), ';', "Link header");
    if (!params.ok()) return params.status();
    std::string rel;
    bool has_pri = false;
    for (std::string_view param : *params) {
      param = Trim(param);
      if (param.empty()) continue;
      size_t eq = param.find('=');
      std::string key = Lower(Trim(param.substr(0, eq)));
      std::string val = eq == std::string_view::npos ? "" : Unquote(param.substr(eq + 1));
      if (key == "rel") {
        rel = Lower(val);
      } else if (key == "pri") {
        if (!ParseNumber(val, &entry.priority)) {
          return InvalidArgumentError("Link header: bad pri '" + EscapeForLog(val, 100) + "'");
        }
        has_pri = true;
      } else if (key == "depth") {
        if (!ParseNumber(val, &entry.depth) || entry.depth < 0) {
          return InvalidArgumentError("Link header: bad depth '" + EscapeForLog(val, 100) + "'");
        }
      }
    }
    if (rel != "duplicate") continue;
    if (!has_pri) entry.priority = std::numeric_limits<int>::max();
    out.push_back(std::move(entry));
  }
  if (out.empty()) {
    return InvalidArgumentError("Link header has no rel=\"duplicate\" entry");
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const LinkEntry& a, const LinkEntry& b) { return a.priority < b.priority; });
  if (out.size() > core::kMaxLinkEntries) out.resize(core::kMaxLinkEntries);  // the best ones
  return out;
}

Result<NamespaceHeader> ParseNamespaceHeader(std::string_view value) {
  auto kv = ParseKeyValueList(value);
  if (!kv.ok()) return kv.status().WithContext("X-Pelican-Namespace");
  NamespaceHeader out;
  bool has_ns = false;
  for (auto& [k, v] : *kv) {
    if (k == "namespace") {
      out.prefix = v;
      has_ns = true;
    } else if (k == "require-token") {
      std::string l = Lower(v);
      if (l != "true" && l != "false") {
        return InvalidArgumentError(
            "X-Pelican-Namespace: require-token must be true or false, not '" +
            EscapeForLog(v, 100) + "'");
      }
      out.require_token = l == "true";
    } else if (k == "collections-url") {
      if (!v.empty() && !IsHttpUrl(v)) {
        return InvalidArgumentError("X-Pelican-Namespace: collections-url is not http(s): '" +
                                    EscapeForLog(v, 200) + "'");
      }
      out.collections_url = v;
      while (!out.collections_url.empty() && out.collections_url.back() == '/') {
        out.collections_url.pop_back();
      }
    }
  }
  if (!has_ns || out.prefix.empty() || out.prefix.front() != '/') {
    return InvalidArgumentError("X-Pelican-Namespace: missing or relative namespace= in '" +
                                EscapeForLog(value, 200) + "'");
  }
  while (out.prefix.size() > 1 && out.prefix.back() == '/') out.prefix.pop_back();
  return out;
}

Result<std::vector<std::string>> ParseAuthorizationHeaders(const std::vector<std::string>& lines) {
  std::vector<std::string> issuers;
  if (lines.size() > core::kMaxAuthorizationIssuers) {
    return InvalidArgumentError("X-Pelican-Authorization: " + std::to_string(lines.size()) +
                                " header lines (at most " +
                                std::to_string(core::kMaxAuthorizationIssuers) + ")");
  }
  for (const std::string& line : lines) {
    auto kv = ParseKeyValueList(line);
    if (!kv.ok()) return kv.status().WithContext("X-Pelican-Authorization");
    for (auto& [k, v] : *kv) {
      if (k != "issuer") continue;
      if (!IsHttpUrl(v)) {
        return InvalidArgumentError("X-Pelican-Authorization: issuer is not http(s): '" +
                                    EscapeForLog(v, 200) + "'");
      }
      if (issuers.size() == core::kMaxAuthorizationIssuers) {
        return InvalidArgumentError("X-Pelican-Authorization: more than " +
                                    std::to_string(core::kMaxAuthorizationIssuers) + " issuers");
      }
      issuers.push_back(v);
    }
  }
  return issuers;
}

Result<TokenGenerationHeader> ParseTokenGenerationHeader(std::string_view value) {
  auto kv = ParseKeyValueList(value);
  if (!kv.ok()) return kv.status().WithContext("X-Pelican-Token-Generation");
  TokenGenerationHeader out;
  bool has_depth = false;
  for (auto& [k, v] : *kv) {
    if (k == "issuer") {
      out.issuer = v;
    } else if (k == "max-scope-depth") {
      if (!ParseNumber(v, &out.max_scope_depth) || out.max_scope_depth < 0) {
        return InvalidArgumentError("X-Pelican-Token-Generation: bad max-scope-depth '" +
                                    EscapeForLog(v, 100) + "'");
      }
      has_depth = true;
    } else if (k == "strategy") {
      out.strategy = v;
    } else if (k == "base-path") {
      out.base_path = v;
    }
  }
  if (!has_depth) {
    return InvalidArgumentError("X-Pelican-Token-Generation: missing max-scope-depth");
  }
  if (out.strategy != "OAuth2" && out.strategy != "Vault") {
    return InvalidArgumentError(
        "X-Pelican-Token-Generation: strategy must be OAuth2 or Vault, not '" +
        EscapeForLog(out.strategy, 100) + "'");
  }
  return out;
}

Result<ContentRange> ParseContentRange(std::string_view value) {
  std::string_view v = Trim(value);
  auto bad = [&](std::string_view why) {
    return InvalidArgumentError("Content-Range '" + EscapeForLog(value, 200) +
                                "': " + std::string(why));
  };
  if (Lower(v.substr(0, 6)) != "bytes ") return bad("does not start with 'bytes '");
  v.remove_prefix(6);
  size_t dash = v.find('-');
  size_t slash = v.find('/');
  if (dash == std::string_view::npos || slash == std::string_view::npos || dash > slash) {
    return bad("expected FIRST-LAST/TOTAL");
  }
  ContentRange out;
  if (!ParseNumber(v.substr(0, dash), &out.first) ||
      !ParseNumber(v.substr(dash + 1, slash - dash - 1), &out.last)) {
    return bad("bad FIRST or LAST");
  }
  std::string_view total = Trim(v.substr(slash + 1));
  if (total == "*") {
    out.total = -1;
  } else if (!ParseNumber(total, &out.total) || out.total < 0) {
    return bad("bad TOTAL");
  }
  if (out.last < out.first) return bad("LAST before FIRST");
  if (out.total >= 0 && out.last >= static_cast<uint64_t>(out.total)) {
    return bad("LAST beyond TOTAL");
  }
  return out;
}

namespace {

// RFC 9110 §5.6.2: the characters of a token.
bool IsTokenChar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  return std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// delta-seconds (RFC 9111 §1.2.2): digits only; beyond kMaxFreshness is kMaxFreshness.
std::optional<int64_t> DeltaSeconds(std::string_view s) {
  if (s.empty()) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = std::min<int64_t>(v * 10 + (c - '0'), kMaxFreshness);
  }
  return v;
}

}  // namespace

CacheControl ParseCacheControl(std::string_view value) {
  CacheControl out;
  bool no_cache = false;
  std::optional<int64_t> max_age, s_maxage;
  auto least = [](std::optional<int64_t>& slot, int64_t v) {
    slot = slot ? std::min(*slot, v) : v;
  };
  size_t i = 0, elements = 0;
  const size_t n = value.size();
  auto skip_ows = [&] {
    while (i < n && (value[i] == ' ' || value[i] == '\t')) ++i;
  };
  // Past the rest of a malformed element: to the next comma outside quotes.
  auto skip_element = [&] {
    bool quoted = false;
    for (; i < n; ++i) {
      if (quoted && value[i] == '\\') {
        ++i;
      } else if (value[i] == '"') {
        quoted = !quoted;
      } else if (!quoted && value[i] == ',') {
        break;
      }
    }
  };
  while (i < n && elements < kMaxCacheControlDirectives) {
    skip_ows();
    if (i < n && value[i] == ',') {  // an empty element (RFC 9110 §5.6.1)
      ++i;
      continue;
    }
    if (i >= n) break;
    ++elements;
    const size_t name_start = i;
    while (i < n && IsTokenChar(value[i])) ++i;
    std::string name = Lower(value.substr(name_start, i - name_start));
    skip_ows();
    bool has_arg = false, well_formed = !name.empty();
    std::string arg;
    if (well_formed && i < n && value[i] == '=') {
      ++i;
      skip_ows();
      has_arg = true;
      if (i < n && value[i] == '"') {
        ++i;
        bool closed = false;
        for (; i < n; ++i) {
          if (value[i] == '\\' && i + 1 < n) {
            arg += value[++i];
          } else if (value[i] == '"') {
            closed = true;
            ++i;
            break;
          } else {
            arg += value[i];
          }
        }
        well_formed = closed;
      } else {
        const size_t arg_start = i;
        while (i < n && IsTokenChar(value[i])) ++i;
        arg = std::string(value.substr(arg_start, i - arg_start));
        well_formed = !arg.empty();
      }
      skip_ows();
    }
    if (i < n && value[i] != ',') well_formed = false;
    if (!well_formed) skip_element();
    if (i < n) ++i;  // the comma
    if (name == "no-store" || name == "private") {
      out.no_store = true;  // malformed or not: never keep what may be private
    } else if (name == "no-cache") {
      no_cache = true;  // a field list or not: the whole answer is revalidated
    } else if (name == "max-age" || name == "s-maxage") {
      std::optional<int64_t> v = well_formed && has_arg ? DeltaSeconds(arg) : std::nullopt;
      least(name == "max-age" ? max_age : s_maxage, v.value_or(0));
    }
  }
  if (no_cache) {
    out.max_age = 0;
  } else if (s_maxage) {
    out.max_age = s_maxage;
  } else {
    out.max_age = max_age;
  }
  return out;
}

std::optional<CacheControl> CacheControlOf(const std::vector<std::string>& lines) {
  if (lines.empty()) return std::nullopt;
  std::string joined;
  for (const std::string& l : lines) joined += (joined.empty() ? "" : ", ") + l;
  return ParseCacheControl(joined);
}

bool CacheControlForbidsStoring(std::string_view value) {
  return ParseCacheControl(value).no_store;
}

}  // namespace perch::http
