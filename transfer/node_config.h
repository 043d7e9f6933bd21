// NodeConfig: what perch-transfer learns about the node it runs on: where the
// node's perchd serves its loopback HTTP endpoint, and which CA bundle the
// federation's https servers need.
//
//   endpoint  $PERCH_ENDPOINT ("http://127.0.0.1:8480" or "127.0.0.1:8480"),
//             else the `http` key of perchd's config file ($PERCH_CONFIG, else
//             /etc/perch/perchd.toml), read with toml++. Nothing else in that
//             file matters here but `ca_file`.
//   ca_file   $PERCH_CA_FILE, else perchd's `ca_file`; "" = the system bundle.
//
// A missing config file is not an error (no perchd on this node); an
// unreadable or malformed one is reported in `endpoint_problem` and the
// endpoint is not used.
//
// Thread-safety: a value; ReadNodeConfig reads the environment through `env`.
#pragma once

#include <functional>
#include <optional>
#include <string>

namespace perch::transfer {

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

inline constexpr char kDefaultPerchdConfig[] = "/etc/perch/perchd.toml";

struct NodeConfig {
  std::string endpoint;          // "http://127.0.0.1:8480" (no trailing '/'), or ""
  std::string endpoint_source;   // "$PERCH_ENDPOINT" or the config file's path
  std::string endpoint_problem;  // why there is none, for the one line on stderr
  std::string ca_file;
};

// `env` defaults to getenv.
NodeConfig ReadNodeConfig(EnvLookup env = {});

}  // namespace perch::transfer
