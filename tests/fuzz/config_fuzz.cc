// Fuzzes perchd's TOML configuration: toml++ parsing, every key's conversion
// and Validate(). ConfigError is the documented failure; any other exception,
// crash or sanitizer report is a finding.
#include <cstdint>
#include <string_view>

#include "daemon/config.h"
#include "tests/fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  perch::fuzz::QuietLogs();
  perch::DaemonConfig config;
  try {
    perch::ApplyConfigString(std::string_view(reinterpret_cast<const char*>(data), size),
                             "fuzz.toml", &config);
    perch::Validate(config);
  } catch (const perch::ConfigError&) {
    // Rejected with a message: fine.
  }
  return 0;
}
