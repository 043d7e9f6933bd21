#include "daemon/http/discovery.h"

#include <nlohmann/json.hpp>

#include "daemon/http/url.h"

namespace perch::http {

core::Result<FederationInfo> ParseDiscoveryDocument(std::string_view json) {
  nlohmann::json doc = nlohmann::json::parse(json, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded() || !doc.is_object()) {
    return core::CorruptError("discovery document is not a JSON object",
                              core::FailureSite::kDirector);
  }
  auto get = [&](const char* key) -> std::string {
    auto it = doc.find(key);
    return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  FederationInfo info;
  info.director_endpoint = get("director_endpoint");
  info.registry_endpoint = get("namespace_registration_endpoint");
  info.jwks_uri = get("jwks_uri");
  if (info.director_endpoint.empty()) {
    return core::CorruptError("discovery document has no director_endpoint",
                              core::FailureSite::kDirector);
  }
  auto split = SplitHttpUrl(info.director_endpoint);
  if (!split.ok()) {
    return core::CorruptError("discovery document: director_endpoint '" + info.director_endpoint +
                                  "' is not an http(s) URL",
                              core::FailureSite::kDirector);
  }
  std::string base = split->base;
  if (base.rfind("https://", 0) == 0 && base.size() > 4 && base.ends_with(":443")) {
    base.resize(base.size() - 4);
  }
  std::string path = split->path;
  while (!path.empty() && path.back() == '/') path.pop_back();
  info.director_endpoint = base + path;
  return info;
}

}  // namespace perch::http
