// How perch's command lines (perchd, perchctl, perch-train) end on a usage
// error: CLI11 prints its message and every parse or validation error exits 2,
// as the README promises, instead of CLI11's own codes (105 for a failed
// check, 106 for an unknown flag, 109 for extra arguments, ...); --help and
// --version exit 0. Header-only and CLI11-only, so that the trainer (which
// links nothing of perch's) shares it.
#pragma once

#include <CLI/CLI.hpp>
#include <optional>

namespace perch::cli {

inline constexpr int kExitUsage = 2;

// Prints `error` the way CLI11 does (help and version to stdout, errors to
// stderr) and returns the exit status: 0 for --help/--version, else 2.
inline int UsageExit(const CLI::App& app, const CLI::Error& error) {
  return app.exit(error) == static_cast<int>(CLI::ExitCodes::Success) ? 0 : kExitUsage;
}

// Parses `argv` into `app`. Returns nothing when the program should go on,
// else the status it should exit with (see UsageExit).
inline std::optional<int> Parse(CLI::App& app, int argc, const char* const* argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return UsageExit(app, e);
  }
  return std::nullopt;
}

}  // namespace perch::cli
