// Fuzzes the director's header parsers, Content-Range and Cache-Control. The input is one
// header value; for X-Pelican-Authorization its lines are the header lines.
// Invariants: Link entries are bounded, sorted and http(s); a Content-Range
// has first <= last < total. Then the whole director answer
// (ParseDirectorAnswer): line 1 the object's path, line 2 X-Pelican-Namespace,
// the rest the Link header. Invariants: 1 to max_servers servers; the answer
// holds the object; one for this object only is named by the object's path;
// every server's URL of the object is an http(s) URL.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/limits.h"
#include "daemon/http/director_client.h"
#include "daemon/http/pelican_headers.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  using namespace perch;
  std::string_view v(reinterpret_cast<const char*>(data), size);
  if (auto links = http::ParseLinkHeader(v); links.ok()) {
    FUZZ_CHECK(!links->empty() && links->size() <= core::kMaxLinkEntries);
    for (size_t i = 1; i < links->size(); ++i)
      FUZZ_CHECK((*links)[i - 1].priority <= (*links)[i].priority);
    for (const auto& l : *links) FUZZ_CHECK(l.url.size() >= 7);
  }
  if (auto ns = http::ParseNamespaceHeader(v); ns.ok())
    FUZZ_CHECK(!ns->prefix.empty() && ns->prefix[0] == '/');
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t i = 0; i <= v.size(); ++i) {
    if (i == v.size() || v[i] == '\n') {
      lines.emplace_back(v.substr(start, i - start));
      start = i + 1;
    }
  }
  if (auto issuers = http::ParseAuthorizationHeaders(lines); issuers.ok()) {
    FUZZ_CHECK(issuers->size() <= core::kMaxAuthorizationIssuers);
  }
  http::ParseTokenGenerationHeader(v).status().IgnoreError();
  http::ParseKeyValueList(v).status().IgnoreError();
  // Cache-Control: a lifetime, when there is one, is within [0, kMaxFreshness].
  const http::CacheControl cc = http::ParseCacheControl(v);
  FUZZ_CHECK(!cc.max_age || (*cc.max_age >= 0 && *cc.max_age <= http::kMaxFreshness));
  if (auto joined = http::CacheControlOf(lines))
    FUZZ_CHECK(!joined->max_age || *joined->max_age >= 0);
  if (auto cr = http::ParseContentRange(v); cr.ok()) {
    FUZZ_CHECK(cr->first <= cr->last);
    FUZZ_CHECK(cr->total < 0 || cr->last < static_cast<uint64_t>(cr->total));
  }
  if (lines.size() >= 3) {
    auto path = core::ObjectPath::Parse(lines[0]);
    if (!path.ok()) return 0;
    http::HttpResponse answer;
    answer.head.status = 307;
    std::string link;
    for (size_t i = 2; i < lines.size(); ++i) link += (i > 2 ? "\n" : "") + lines[i];
    answer.head.headers = {{"x-pelican-namespace", lines[1]}, {"link", link}};
    constexpr size_t kMaxServers = 6;
    auto e = http::ParseDirectorAnswer(*path, answer, kMaxServers, core::Clock::now());
    if (e.ok()) {
      FUZZ_CHECK(!(*e)->server_bases.empty() && (*e)->server_bases.size() <= kMaxServers);
      FUZZ_CHECK(path->HasPrefix((*e)->prefix));
      FUZZ_CHECK((*e)->cacheable || (*e)->prefix == *path);
      for (size_t i = 0; i < (*e)->server_bases.size(); ++i) {
        const std::string url = (*e)->ServerUrl(i, *path);
        FUZZ_CHECK(url.starts_with("http://") || url.starts_with("https://"));
      }
    }
  }
  return 0;
}
