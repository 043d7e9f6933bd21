// PerchdProcess: runs the real perchd binary (in the foreground, as a child
// process) on a mountpoint, waits until the FUSE mount is live, and always
// tears it down: SIGTERM, then a lazy unmount and SIGKILL if it lingers.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace perch::testing {

// Whether /dev/fuse is usable (else tests GTEST_SKIP).
bool FuseAvailable();

// True if `mountpoint` is a FUSE mount right now (per /proc/self/mountinfo),
// live or dead (a dead one is never stat'ed).
bool IsMounted(const std::filesystem::path& mountpoint);

struct RunResult {
  int exit_code = -1;
  std::string output;  // stdout + stderr
};

// Runs `binary` with `args` to completion (killed after `timeout`); output is stdout + stderr.
RunResult RunToExit(const std::string& binary, const std::vector<std::string>& args,
                    std::chrono::seconds timeout = std::chrono::seconds(60));

// Runs perchd with `args` to completion (for start-up error checks).
RunResult RunPerchdToExit(const std::vector<std::string>& args,
                          std::chrono::seconds timeout = std::chrono::seconds(60));

class PerchdProcess {
 public:
  PerchdProcess() = default;
  ~PerchdProcess();
  PerchdProcess(const PerchdProcess&) = delete;
  PerchdProcess& operator=(const PerchdProcess&) = delete;

  // Makes the next Start run `wrapper` (a program and its arguments, e.g.
  // {"/usr/bin/setpriv", "--no-new-privs", "--"}) with perchd and its
  // arguments after them. The wrapper must exec perchd in its own process,
  // so that pid() and Stop() reach perchd.
  void set_wrapper(std::vector<std::string> wrapper) { wrapper_ = std::move(wrapper); }

  // Starts `perchd --foreground <args>` and waits until `mountpoint` is mounted.
  // Without "--control" in `args`, the daemon's control socket is put next to `log`.
  // Returns "" on success, else a message with perchd's log.
  std::string Start(const std::vector<std::string>& args, const std::filesystem::path& mountpoint,
                    const std::filesystem::path& log);
  // Starts `argv` as it is (argv[0] a perchd binary, e.g. one installed
  // elsewhere, with --foreground among its arguments) and waits until
  // `mountpoint` is mounted. Returns as Start does.
  std::string StartCommand(const std::vector<std::string>& argv,
                           const std::filesystem::path& mountpoint,
                           const std::filesystem::path& log);
  // Starts `binary` (a perchd: a copy at another path stands for an
  // upgrade) as `--foreground --takeover <args>` (without --takeover unless
  // `explicit_takeover`; with this perchd's control address unless `args`
  // name one) and waits until this perchd has handed its mounts over and
  // exited 0. "" on success: pid() and Log() are then the successor's. Else
  // a message with both logs; this perchd still runs (the successor exited,
  // or is killed after `timeout`).
  std::string HandOver(const std::string& binary, const std::vector<std::string>& args,
                       const std::filesystem::path& log, bool explicit_takeover = true,
                       std::chrono::seconds timeout = std::chrono::seconds(120));
  // The mounts were handed (by a command of the test's, e.g. the unit's
  // ExecReload) to perchd `next`, not a child of the test: waits until this
  // perchd has exited; "" if it exited 0, and from then on pid(), Log(),
  // Stop() are `next`'s (Stop then returns 0 once it is gone).
  std::string HandedTo(pid_t next, const std::filesystem::path& log);
  // Stops perchd cleanly (SIGTERM) and returns its exit code.
  int Stop();
  // Kills perchd with SIGKILL, as a crash would, and leaves its mount behind,
  // dead (every access ENOTCONN); Start may follow on the same mountpoint.
  // Stop or the destructor unmounts it if nothing else does.
  void Kill();
  std::string Log() const;
  // perchd's process id (-1 when not running), e.g. to read /proc/PID/status.
  pid_t pid() const { return pid_; }
  // The control address perchd was given ("unix:/tmp/.../perchd-1.sock").
  const std::string& control() const { return control_; }

 private:
  // Waits until perchd (pid_) has mounted mountpoint_ and it answers.
  std::string WaitMounted();

  pid_t pid_ = -1;
  bool child_ = true;  // pid_ is the test's child (else HandedTo's)
  std::filesystem::path mountpoint_;
  std::filesystem::path log_;
  std::string control_;
  std::vector<std::string> wrapper_;
};

}  // namespace perch::testing
