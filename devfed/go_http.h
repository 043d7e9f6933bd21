// Go's net/url, path, net/http and encoding/json conventions, byte for byte,
// for perch-devfed's director: a Pelican director is a Go program (gin on
// net/http), and a client is only tested against it if the bytes it reads
// are the ones Go writes. Each function names the Go function it copies
// (Go 1.26, src/net/url/url.go, src/path/path.go, src/net/http/server.go).
//
// Thread-safety: pure functions.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace perch::devfed::gohttp {

// url.URL{Path: p}.EscapedPath() (escape(p, encodePath)): keeps alphanumerics,
// "-_.~" and "$&+,/:;=@"; escapes '?' and everything else as %XX (upper hex).
std::string EscapePath(std::string_view path);

// url.QueryEscape: space as '+', everything but alphanumerics and "-_.~" as %XX.
std::string QueryEscape(std::string_view s);

// unescape(s, encodePath) as url.ParseRequestURI does for a request path:
// nullopt on a bad %-escape (Go's server then answers 400).
std::optional<std::string> PathUnescape(std::string_view s);

// url.Values; std::map iterates keys sorted, as Values.Encode does.
using Values = std::map<std::string, std::vector<std::string>>;

// url.ParseQuery: pairs split on '&', key and value on the first '='; a pair
// with ';' or a bad escape is dropped (Go reports it and keeps the rest).
Values ParseQuery(std::string_view raw);

// url.Values.Encode: "k=v" pairs, keys sorted, QueryEscape'd, joined by '&'.
std::string Encode(const Values& values);

// path.Clean for an absolute path: "/a//b/../c/" -> "/a/c"; "" -> "/".
std::string CleanPath(std::string_view path);

// net/http's htmlEscape (used in the body of http.Redirect).
std::string HtmlEscape(std::string_view s);

// encoding/json.Marshal of `j`: compact, with '<', '>', '&' as \u003c, \u003e,
// \u0026 and invalid UTF-8 replaced, as Go writes them. `indent` > 0:
// json.MarshalIndent(v, "", "  ") for indent 2.
std::string JsonMarshal(const nlohmann::ordered_json& j, int indent = -1);

// A url.URL as encoding/json writes the struct (it has no JSON methods):
// {"Scheme":..,"Opaque":"","User":null,"Host":..,"Path":..,"RawPath":"",
//  "OmitHost":false,"ForceQuery":false,"RawQuery":"","Fragment":"","RawFragment":""}.
// `url` is "scheme://host/path" or "" (the zero URL).
nlohmann::ordered_json UrlStruct(const std::string& url);

// The Date header value net/http adds to every response (RFC 1123, GMT).
std::string HttpDate();

}  // namespace perch::devfed::gohttp
