#include "transfer/node_config.h"

#include <toml++/toml.h>

#include <cstdlib>
#include <filesystem>

namespace perch::transfer {
namespace {

// "127.0.0.1:8480" or "http://127.0.0.1:8480/" -> "http://127.0.0.1:8480"; "" if unusable.
std::string EndpointBase(std::string value) {
  while (!value.empty() && value.back() == '/') value.pop_back();
  if (value.rfind("http://", 0) != 0) {
    if (value.find("://") != std::string::npos) return "";  // https or other: not perchd's
    value = "http://" + value;
  }
  if (value.size() <= 7 || value.find_first_of(" \t\r\n/?#", 7) != std::string::npos) return "";
  return value;
}

}  // namespace

NodeConfig ReadNodeConfig(EnvLookup env) {
  if (!env) {
    env = [](const std::string& name) -> std::optional<std::string> {
      const char* v = std::getenv(name.c_str());  // NOLINT(concurrency-mt-unsafe)
      return v ? std::optional<std::string>(v) : std::nullopt;
    };
  }
  NodeConfig out;
  if (auto ca = env("PERCH_CA_FILE"); ca && !ca->empty()) out.ca_file = *ca;
  if (auto e = env("PERCH_ENDPOINT"); e && !e->empty()) {
    out.endpoint_source = "$PERCH_ENDPOINT";
    out.endpoint = EndpointBase(*e);
    if (out.endpoint.empty()) {
      out.endpoint_problem = "$PERCH_ENDPOINT '" + *e + "' is not http://HOST:PORT";
    }
    if (!out.ca_file.empty()) return out;
  }
  std::string path = env("PERCH_CONFIG").value_or(kDefaultPerchdConfig);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    if (out.endpoint_source.empty()) {
      out.endpoint_problem =
          "no perchd endpoint configured ($PERCH_ENDPOINT unset, no " + path + ")";
    }
    return out;
  }
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    if (out.endpoint_source.empty()) {
      out.endpoint_problem =
          "cannot read perchd's config " + path + ": " + std::string(e.description());
    }
    return out;
  }
  if (out.ca_file.empty()) out.ca_file = t["ca_file"].value_or(std::string());
  if (!out.endpoint_source.empty()) return out;
  out.endpoint_source = path;
  auto http = t["http"].value<std::string>();
  if (!http || http->empty()) {
    out.endpoint_problem = "perchd's config " + path + " has no http key (its endpoint is off)";
    return out;
  }
  out.endpoint = EndpointBase(*http);
  if (out.endpoint.empty()) {
    out.endpoint_problem = "the http key of " + path + " ('" + *http + "') is not HOST:PORT";
  }
  return out;
}

}  // namespace perch::transfer
