// The federation discovery document (docs/protocol.md §2):
// GET <discovery url>/.well-known/pelican-configuration -> JSON.
// Pure parser; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "daemon/core/result.h"

namespace perch::http {

inline constexpr std::string_view kDiscoveryPath = "/.well-known/pelican-configuration";

struct FederationInfo {
  std::string director_endpoint;  // "https://osdf-director.osg-htc.org" (no trailing '/', no :443)
  std::string registry_endpoint;
  std::string jwks_uri;
};

// kCorrupt for a body that is not a JSON object or has no usable
// director_endpoint (perch needs a director; standalone origins are not
// supported), kInvalidArgument-free: unknown fields are ignored.
core::Result<FederationInfo> ParseDiscoveryDocument(std::string_view json);

}  // namespace perch::http
