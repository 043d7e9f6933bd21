// Reading perchctl's JSON answers, such as `perchctl stats --json` (the Stats
// message in protobuf's JSON mapping): lists such as namespaces, http_clients,
// fuse_ops and errors are arrays of objects, each named by one of its fields.
// The including test target defines PERCHCTL_PATH.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/integration/perchd_harness.h"

namespace perch::testing {

// perchctl's JSON answer to `args` from the daemon at control socket
// `socket`; a test failure (and null) when it exits non-zero or prints no JSON.
inline nlohmann::json PerchctlJson(const std::string& socket, std::vector<std::string> args) {
  args.insert(args.begin(), {"--socket", socket});
  RunResult r = RunToExit(PERCHCTL_PATH, args, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  try {
    return nlohmann::json::parse(r.output);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "perchctl printed no JSON: " << e.what() << "\n" << r.output;
    return nlohmann::json();
  }
}

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
