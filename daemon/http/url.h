// Federation URLs and path encoding.
//
// perch accepts the URL forms Pelican's own client accepts (see
// docs/protocol.md §1):
//   pelican://host[:port]/path   federation named by its discovery host
//   osdf:///path, stash:///path  the OSDF (discovery host osg-htc.org);
//                                 osdf://ns/path is folded to osdf:///ns/path
//   NAME+osdf:///path            HTCondor token-name prefix (selects NAME.use)
//   http(s)://host:port/path     development: discovery over that scheme
// Parsing uses libcurl's URL API; the Pelican-specific rules are applied on top.
#pragma once

#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/core/types.h"
#include "daemon/uri/percent.h"

namespace perch::http {

struct FederationUrl {
  std::string scheme;         // "pelican", "osdf", "http" or "https" ("stash" maps to "osdf")
  std::string discovery_url;  // "https://osg-htc.org" or "http://127.0.0.1:8443": no path
  core::ObjectPath path;      // the namespace path below the federation root
  std::string token_name;     // "" unless the scheme carried a NAME+ prefix

  // pelican://host:port/path, for logs and xattrs.
  std::string ToString() const;
};

// The OSDF's discovery host (pelican_url/discovery.go: OsdfDiscoveryHost).
inline constexpr std::string_view kOsdfDiscoveryHost = "osg-htc.org";

// Parses `url`; kInvalidArgument with a message that says what is wrong and
// shows an example of the right form.
core::Result<FederationUrl> ParseFederationUrl(std::string_view url);

// Splits "scheme://authority/path?query" into its base ("scheme://authority")
// and the rest. kInvalidArgument if `url` is not an absolute http(s) URL.
struct SplitUrl {
  std::string base;  // "https://host:port"
  std::string path;  // "/a/b" (still encoded; "" when absent)
};
core::Result<SplitUrl> SplitHttpUrl(std::string_view url);

// Whether a bearer token may be sent to `url`: over https, or over plain
// http only to this node itself (localhost, 127.0.0.0/8, ::1: perch-devfed,
// a local proxy). A token sent over plain http to another host can be read
// and replayed by anyone on the path, so a federation that names such a
// server for a protected namespace gets no token from perch (docs/security.md).
bool TokenMayTravelTo(std::string_view url);

}  // namespace perch::http
