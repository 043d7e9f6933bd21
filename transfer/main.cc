// perch-transfer: HTCondor's file-transfer plugin for osdf://, pelican:// and
// stash:// URLs (plugin.h has the command line and the protocol). Logs go to
// stderr: HTCondor reads stdout for the -classad answer only.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <iostream>

#include "perch/version.h"
#include "transfer/local_file.h"
#include "transfer/plugin.h"

namespace {

using perch::kVersion;

int Run(int argc, char** argv) {
  using perch::transfer::PluginArgs;
  std::vector<std::string> args(argv + 1, argv + argc);
  PluginArgs partial;
  auto parsed = perch::transfer::ParsePluginArgs(args, &partial);
  if (!parsed.ok()) {
    std::cerr << "perch-transfer: " << parsed.status().message() << "\n\n"
              << perch::transfer::PluginUsage();
    perch::transfer::ReportUsageError(partial.outfile, parsed.status().message(), kVersion);
    return perch::transfer::kExitFailed;
  }
  auto logger = spdlog::stderr_color_mt("perch-transfer");
  logger->set_level(parsed->debug ? spdlog::level::debug : spdlog::level::warn);
  spdlog::set_default_logger(logger);
  switch (parsed->mode) {
    case PluginArgs::Mode::kHelp:
      std::cout << perch::transfer::PluginUsage();
      return perch::transfer::kExitOk;
    case PluginArgs::Mode::kVersion:
      std::cout << "perch-transfer " << kVersion << "\n";
      return perch::transfer::kExitOk;
    case PluginArgs::Mode::kClassAd:
      std::cout << perch::transfer::CapabilityAd(kVersion);
      return perch::transfer::kExitOk;
    case PluginArgs::Mode::kTransfer:
      perch::transfer::InstallCleanupOnSignals();
      return perch::transfer::RunTransfers(*parsed, kVersion);
    case PluginArgs::Mode::kPositional:
      perch::transfer::InstallCleanupOnSignals();
      return perch::transfer::RunPositional(*parsed, kVersion);
  }
  return perch::transfer::kExitFailed;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "perch-transfer: internal error: " << e.what() << std::endl;
    return perch::transfer::kExitFailed;
  }
}
