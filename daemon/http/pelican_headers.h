// Parsers for the headers a Pelican director answers with (docs/protocol.md
// §3) and for Content-Range and Cache-Control. Pure functions over strings: no I/O, safe from
// any thread. Each returns kInvalidArgument with a message naming the header
// and what is wrong; none throws.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"

namespace perch::http {

// One `<url>; rel="duplicate"; pri=N; depth=D` element of a Link header.
struct LinkEntry {
  std::string url;
  int priority = 0;  // 1 = best; entries without pri sort last
  int depth = -1;    // path components below the namespace prefix; -1 if absent
};

// Parses a Link header value (several header lines joined with ", ").
// Entries whose rel is not "duplicate" are ignored; the result is sorted by
// priority (stable) and cut to the best core::kMaxLinkEntries. Quoted
// strings and URLs containing ',' or ';' inside <...> are handled.
// kInvalidArgument for an unterminated '<' or '"', a non-numeric pri/depth, a
// non-http(s) URL, more than 4 * kMaxLinkEntries elements, or no usable entry.
core::Result<std::vector<LinkEntry>> ParseLinkHeader(std::string_view value);

// X-Pelican-Namespace: namespace=/p, require-token=true, collections-url=https://o:8443
struct NamespaceHeader {
  std::string prefix;
  bool require_token = false;
  std::string collections_url;  // "" when the namespace has no listings
};
core::Result<NamespaceHeader> ParseNamespaceHeader(std::string_view value);

// X-Pelican-Authorization: issuer=<url>[, issuer=<url>...]. All header lines
// are passed; the issuers of all of them are returned in order.
// kInvalidArgument past core::kMaxAuthorizationIssuers lines or issuers.
core::Result<std::vector<std::string>> ParseAuthorizationHeaders(
    const std::vector<std::string>& lines);

// X-Pelican-Token-Generation: issuer=<url>, max-scope-depth=<n>, strategy=<OAuth2|Vault>[,
// base-path=<p>]
struct TokenGenerationHeader {
  std::string issuer;
  int max_scope_depth = 0;
  std::string strategy;
  std::string base_path;
};
core::Result<TokenGenerationHeader> ParseTokenGenerationHeader(std::string_view value);

// Content-Range: bytes FIRST-LAST/TOTAL (TOTAL may be '*').
struct ContentRange {
  uint64_t first = 0;
  uint64_t last = 0;   // inclusive
  int64_t total = -1;  // -1 for '*'
};
core::Result<ContentRange> ParseContentRange(std::string_view value);

// Splits "k1=v1, k2=v2" into pairs; values may be double-quoted. Keys are
// lower-cased, surrounding spaces removed. kInvalidArgument on an element
// without '=' or an unterminated quote.
core::Result<std::vector<std::pair<std::string, std::string>>> ParseKeyValueList(
    std::string_view value);

// Cache-Control (RFC 9111 §5.2.2) as a shared cache reads a response's: the
// directives perch acts on. The value is a comma-separated list of
// `name[=argument]`, names matched case-insensitively, an argument a token or
// a quoted-string (a comma inside quotes does not split); several header lines
// are passed joined with ", ". An element that is not of that form is skipped
// up to the next comma; unknown directives are ignored; at most
// kMaxCacheControlDirectives elements are read (the rest ignored).
struct CacheControl {
  // no-store, or private (with or without a field list): a node's cache is
  // shared by every local user, so a private answer is not kept either.
  bool no_store = false;
  // Seconds the answer may be served without asking the origin again:
  // no-cache (qualified or not) 0, else s-maxage (a shared cache's own),
  // else max-age; a malformed or missing argument of those counts as 0 (a
  // response with invalid freshness is stale, §4.2.1) and the least of
  // repeated ones wins; values beyond kMaxFreshness are kMaxFreshness
  // (§1.2.2). nullopt when none of them is given.
  std::optional<int64_t> max_age;
};
constexpr size_t kMaxCacheControlDirectives = 64;
constexpr int64_t kMaxFreshness = int64_t{1} << 31;
CacheControl ParseCacheControl(std::string_view value);
// The Cache-Control of an answer from its header lines (HttpHead::GetAll);
// nullopt when it has none.
std::optional<CacheControl> CacheControlOf(const std::vector<std::string>& lines);

// Whether a Cache-Control value forbids a shared cache to keep the answer
// (ParseCacheControl's no_store).
bool CacheControlForbidsStoring(std::string_view value);

}  // namespace perch::http
