// The HTCondor side of perch-transfer: its command line, the capability ad,
// and the multi-file transfer run (HTCondor's file-transfer plugin protocol,
// version 2: docs/apis/file-transfer-plugins in HTCondor's manual).
//
//   perch-transfer -classad                          capability ad on stdout, exit 0
//   perch-transfer -infile IN -outfile OUT [-upload] one transfer per ad of IN,
//                                                    one result ad per transfer to OUT
//   perch-transfer URL... DEST                       by hand: DEST a file, or a
//                                                    directory for several URLs
//   perch-transfer -version | -h                     (each also as --name)
//
// Exit status: 0 when every transfer succeeded; 1 on a failure; 11 when the
// failed transfer may succeed if tried again (Pelican's plugin does the same;
// HTCondor treats every non-zero status as failure and records it as the
// hold reason's subcode). Downloads stop at the first failure, as Pelican's
// plugin does: later ads get no result ad. A malformed input file, an
// unusable command line (when OUT is known) and -upload each yield one
// result ad with TransferSuccess = false saying why, and status 1.
//
// OUT is written from its start without truncating it first (HTCondor
// pre-allocates it so that a full disk can still be reported), one ad per
// line as each transfer ends, and cut to what was written at the end.
#pragma once

#include <string>
#include <vector>

#include "daemon/core/result.h"

namespace perch::transfer {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailed = 1;
inline constexpr int kExitRetryable = 11;

struct PluginArgs {
  enum class Mode { kClassAd, kTransfer, kPositional, kVersion, kHelp };
  Mode mode = Mode::kHelp;
  std::string infile, outfile;
  bool upload = false;
  bool debug = false;                   // -d: debug log lines on stderr
  std::vector<std::string> positional;  // URL... DEST
};

// Parses argv[1..]. kInvalidArgument naming the problem; `partial` then holds
// what was understood (the outfile, if any, to report the problem in).
core::Result<PluginArgs> ParsePluginArgs(const std::vector<std::string>& args,
                                         PluginArgs* partial = nullptr);

std::string PluginUsage();

// The -classad answer, in the "long" (one attribute per line) format.
std::string CapabilityAd(const std::string& version);

// -infile/-outfile mode. Returns the exit status.
int RunTransfers(const PluginArgs& args, const std::string& version);

// URL... DEST mode. Returns the exit status.
int RunPositional(const PluginArgs& args, const std::string& version);

// Writes one failure ad to `outfile` (a command line HTCondor should not send).
void ReportUsageError(const std::string& outfile, const std::string& error,
                      const std::string& version);

}  // namespace perch::transfer
