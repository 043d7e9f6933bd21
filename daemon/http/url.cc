#include "daemon/http/url.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>

#include <memory>

#include "daemon/core/log_escape.h"

namespace perch::http {
namespace {

using core::InvalidArgumentError;
using core::Result;

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') {
      c = static_cast<char>(c - 'A' + 'a');
    }
  }
  return out;
}

struct CurlUrlDeleter {
  void operator()(CURLU* u) const { curl_url_cleanup(u); }
};

// Reads one part of a parsed URL; "" when absent.
std::string GetPart(CURLU* u, CURLUPart part, unsigned flags = 0) {
  char* value = nullptr;
  if (curl_url_get(u, part, &value, flags) != CURLUE_OK || value == nullptr) {
    return {};
  }
  std::string out(value);
  curl_free(value);
  return out;
}

constexpr std::string_view kExamples =
    "expected pelican://host[:port]/path, osdf:///path, stash:///path or http(s)://host:port/path";

}  // namespace

std::string FederationUrl::ToString() const {
  if (scheme == "osdf") {
    return "osdf://" + path.str();
  }
  std::string host = discovery_url.substr(discovery_url.find("://") + 3);
  std::string s = scheme == "pelican" ? "pelican://" + host : discovery_url;
  return s + (path.IsRoot() ? std::string("/") : path.str());
}

Result<FederationUrl> ParseFederationUrl(std::string_view url) {
  size_t colon = url.find("://");
  if (colon == std::string_view::npos || colon == 0) {
    return InvalidArgumentError("bad federation URL '" + std::string(url) +
                                "': " + std::string(kExamples));
  }
  FederationUrl out;
  std::string scheme = Lower(url.substr(0, colon));
  // HTCondor writes '_' for '.' in scheme names; a "NAME+" prefix names a token.
  if (size_t plus = scheme.rfind('+'); plus != std::string::npos) {
    out.token_name = std::string(url.substr(0, plus));
    scheme = scheme.substr(plus + 1);
  }
  if (scheme == "stash") {
    scheme = "osdf";
  }
  std::string rest(url.substr(colon + 3));
  if (scheme == "osdf") {
    // osdf://ns/path is osdf:///ns/path: the "host" is folded into the path.
    out.scheme = "osdf";
    out.discovery_url = "https://" + std::string(kOsdfDiscoveryHost);
    std::string path = "/" + rest.substr(0, rest.find_first_of("?#"));
    auto decoded = uri::PercentDecode(path);
    if (!decoded.ok()) {
      return decoded.status();
    }
    auto p = core::ObjectPath::Parse(*decoded);
    if (!p.ok()) {
      return p.status().WithContext("bad federation URL '" + std::string(url) + "'");
    }
    out.path = *p;
    return out;
  }
  if (scheme != "pelican" && scheme != "http" && scheme != "https") {
    return InvalidArgumentError("unsupported scheme '" + scheme + "' in '" + std::string(url) +
                                "': " + std::string(kExamples));
  }
  if (rest.empty() || rest.front() == '/') {
    return InvalidArgumentError("federation URL '" + std::string(url) +
                                "' names no host (did you mean pelican://HOST/path?)");
  }
  std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
  std::string as_http = (scheme == "pelican" ? "https" : scheme) + "://" + rest;
  if (CURLUcode rc = curl_url_set(u.get(), CURLUPART_URL, as_http.c_str(), CURLU_PATH_AS_IS);
      rc != CURLUE_OK) {
    return InvalidArgumentError("bad federation URL '" + std::string(url) +
                                "': " + curl_url_strerror(rc) + "; " + std::string(kExamples));
  }
  std::string host = GetPart(u.get(), CURLUPART_HOST);
  if (host.empty()) {
    return InvalidArgumentError("federation URL '" + std::string(url) +
                                "' names no host (did you mean pelican://HOST/path?)");
  }
  if (!GetPart(u.get(), CURLUPART_USER).empty()) {
    return InvalidArgumentError("federation URL '" + std::string(url) +
                                "' may not carry credentials; use a token file");
  }
  std::string port = GetPart(u.get(), CURLUPART_PORT);
  std::string raw_path = GetPart(u.get(), CURLUPART_PATH);
  auto decoded = uri::PercentDecode(raw_path.empty() ? "/" : raw_path);
  if (!decoded.ok()) {
    return decoded.status().WithContext("bad federation URL '" + std::string(url) + "'");
  }
  auto p = core::ObjectPath::Parse(*decoded);
  if (!p.ok()) {
    return p.status().WithContext("bad federation URL '" + std::string(url) + "'");
  }
  out.scheme = scheme;
  std::string http_scheme = scheme == "pelican" ? "https" : scheme;
  out.discovery_url = http_scheme + "://" + host + (port.empty() ? "" : ":" + port);
  out.path = *p;
  return out;
}

Result<SplitUrl> SplitHttpUrl(std::string_view url) {
  size_t colon = url.find("://");
  std::string scheme = Lower(url.substr(0, colon == std::string_view::npos ? 0 : colon));
  if (colon == std::string_view::npos || (scheme != "http" && scheme != "https")) {
    return InvalidArgumentError("not an absolute http(s) URL: '" + core::EscapeForLog(url, 300) +
                                "'");
  }
  size_t slash = url.find_first_of("/?#", colon + 3);
  SplitUrl out;
  if (slash == colon + 3) {
    return InvalidArgumentError("URL without a host: '" + core::EscapeForLog(url, 300) + "'");
  }
  out.base = scheme + std::string(url.substr(
                          colon, (slash == std::string_view::npos ? url.size() : slash) - colon));
  if (slash != std::string_view::npos && url[slash] == '/') {
    size_t end = url.find_first_of("?#", slash);
    out.path = std::string(url.substr(slash, end == std::string_view::npos ? end : end - slash));
  }
  return out;
}

bool TokenMayTravelTo(std::string_view url) {
  std::unique_ptr<CURLU, CurlUrlDeleter> u(curl_url());
  if (!u || curl_url_set(u.get(), CURLUPART_URL, std::string(url).c_str(), 0) != CURLUE_OK) {
    return false;
  }
  const std::string scheme = Lower(GetPart(u.get(), CURLUPART_SCHEME));
  if (scheme == "https") return true;
  if (scheme != "http") return false;
  const std::string host = Lower(GetPart(u.get(), CURLUPART_HOST));
  if (host == "localhost" || host == "[::1]") return true;
  in_addr v4{};
  return ::inet_pton(AF_INET, host.c_str(), &v4) == 1 && (ntohl(v4.s_addr) >> 24) == 127;
}

}  // namespace perch::http
