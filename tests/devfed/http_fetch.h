// Fetch: one HTTP request with libcurl, never following redirects, returning
// what `curl -si` shows: status, every header line (names lower-cased, in
// order, repeats kept) and the body. For devfed's protocol tests.
#pragma once

#include <curl/curl.h>

#include <cctype>
#include <string>
#include <utility>
#include <vector>

namespace perch::testing {

struct Response {
  long status = 0;  // 0: no complete answer (refused, TLS failure, timeout, broken body)
  CURLcode curl_code = CURLE_OK;  // CURLE_PARTIAL_FILE: short body; CURLE_RECV_ERROR: reset
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The first value of `name` (lower case), "" if absent.
  std::string Header(const std::string& name) const {
    for (const auto& [k, v] : headers) {
      if (k == name) return v;
    }
    return "";
  }
  std::vector<std::string> All(const std::string& name) const {
    std::vector<std::string> out;
    for (const auto& [k, v] : headers) {
      if (k == name) out.push_back(v);
    }
    return out;
  }
  bool Has(const std::string& name) const { return !All(name).empty(); }
};

namespace fetch_internal {

inline size_t OnHeader(char* data, size_t size, size_t n, void* userp) {
  std::string line(data, size * n);
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(' '));
    value.erase(value.find_last_not_of("\r\n") + 1);
    static_cast<Response*>(userp)->headers.emplace_back(name, value);
  }
  return size * n;
}

inline size_t OnBody(char* data, size_t size, size_t n, void* userp) {
  static_cast<Response*>(userp)->body.append(data, size * n);
  return size * n;
}

}  // namespace fetch_internal

inline Response Fetch(const std::string& url, const std::string& method = "GET",
                      const std::vector<std::string>& headers = {}, const std::string& ca = "",
                      long timeout_ms = 30000) {
  Response r;
  CURL* c = curl_easy_init();
  curl_slist* list = nullptr;
  for (const auto& h : headers) list = curl_slist_append(list, h.c_str());
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  if (method == "HEAD") {
    curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, fetch_internal::OnHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &r);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, fetch_internal::OnBody);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &r);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
  curl_easy_setopt(c, CURLOPT_PATH_AS_IS, 1L);  // send "/x/%2e%2e/y" as written
  if (!ca.empty()) curl_easy_setopt(c, CURLOPT_CAINFO, ca.c_str());
  r.curl_code = curl_easy_perform(c);
  if (r.curl_code == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.status);
  curl_slist_free_all(list);
  curl_easy_cleanup(c);
  return r;
}

}  // namespace perch::testing
