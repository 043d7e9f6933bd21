// Reading `perchctl stats --json` (the Stats message in protobuf's JSON
// mapping): lists such as namespaces, http_clients, fuse_ops and errors are
// arrays of objects, each named by one of its fields.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace perch::testing {

// The element of `list` whose `key` is `value`; null when there is none.
inline nlohmann::json Element(const nlohmann::json& list, const std::string& key,
                              const std::string& value) {
  if (!list.is_array()) return nullptr;
  for (const nlohmann::json& e : list) {
    if (e.contains(key) && e[key] == value) return e;
  }
  return nullptr;
}

}  // namespace perch::testing
