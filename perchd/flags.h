// perchd's command line: the flags of every setting in PERCH_CONFIG_KEYS
// (daemon/config_keys.h), --config, --takeover, --namespace-token and the two
// positional arguments. Defaults, then the file, then the flags.
#pragma once

#include <variant>

#include "daemon/config.h"

namespace perch {

struct CommandLine {
  DaemonConfig config;  // validated
  bool takeover = false;
};

// Parses `argv` and the file --config names. Returns the configuration, or
// the status to exit with after the message is printed: 0 for --help and
// --version, 2 for a usage or configuration error.
std::variant<CommandLine, int> ParseCommandLine(int argc, const char* const* argv);

}  // namespace perch
