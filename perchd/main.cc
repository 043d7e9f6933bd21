// perchd: mounts federation namespaces read-only through FUSE over one
// persistent block cache. The program's parts, each in its own file:
//   flags.cc    the command line (every setting's flag from daemon/config_keys.h)
//   stack.cc    building the stack: the cache, the network loops, one Federation a mount
//   serve.cc    serving: mounts, control plane, endpoints; orderly shutdown; handing over
//   signals.cc  the main thread's wait for signals while the mounts serve
//   handoff.cc  the exchange with a successor perchd
// This file: the process (umask, allocator, logging, detaching) and the exit status.
#include <fcntl.h>
#include <malloc.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <variant>

#include "perch/cli_exit.h"
#include "perchd/flags.h"
#include "perchd/serve.h"

namespace perch {
namespace {

constexpr int kExitFailure = 1;

// The exit status for why perchd ended: 0, 2 for a usage or configuration
// error (kInvalidArgument), else 1; says why in the log.
int ExitFor(const core::Status& s) {
  if (s.ok()) return 0;
  spdlog::error("{}", s.message());
  return s.code() == core::StatusCode::kInvalidArgument ? cli::kExitUsage : kExitFailure;
}

// Closes every descriptor above stderr (close_range, Linux 5.9; else one by
// one up to the limit).
void CloseInheritedDescriptors() {
  if (::syscall(SYS_close_range, 3U, ~0U, 0U) == 0) return;
  const long max = ::sysconf(_SC_OPEN_MAX);
  for (long fd = 3; fd < (max > 0 ? max : 1024); ++fd) ::close(static_cast<int>(fd));
}

// Forks before any thread exists; the parent waits until the child has
// mounted (or failed) so that the exit status tells the truth.
int ServeInTheBackground(const DaemonConfig& cfg, bool takeover) {
  int pipefd[2];
  if (pipe(pipefd) != 0) {
    std::perror("perchd: pipe");
    return 1;
  }
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("perchd: fork");
    return 1;
  }
  if (pid > 0) {
    close(pipefd[1]);
    char status = 1;
    ssize_t n = read(pipefd[0], &status, 1);
    return n == 1 ? status : 1;
  }
  close(pipefd[0]);
  setsid();
  int rc = ExitFor(ServeAndHandOver(
      cfg,
      [&] {
        char ok = 0;
        if (write(pipefd[1], &ok, 1) != 1) {
          // The parent is gone; nothing to tell.
        }
        close(pipefd[1]);
        int devnull = open("/dev/null", O_RDWR);
        if (devnull >= 0) {
          dup2(devnull, 0);
          dup2(devnull, 1);
          dup2(devnull, 2);
          if (devnull > 2) close(devnull);
        }
        if (chdir("/") != 0) {
          // Not fatal: we never use relative paths after start.
        }
      },
      takeover));
  char code = static_cast<char>(rc);
  if (write(pipefd[1], &code, 1) != 1) {
    // Already reported ready, or the parent is gone.
  }
  return rc;
}

}  // namespace
}  // namespace perch

int main(int argc, char** argv) {
  // Descriptors the caller left open are not perchd's: a shell that holds a
  // file of the mount open and runs `perchd --takeover` would otherwise have
  // perchd hold that file of its own mount, whose release then never comes
  // and whose blocks stay in use for good (issue 44). The handoff's
  // descriptors come over its socket, later.
  perch::CloseInheritedDescriptors();
  // Everything perchd creates (block files, the index, sockets' directories)
  // is private to it: cached paths of protected namespaces must not leak.
  ::umask(077);
#if !PERCH_TCMALLOC
  // glibc gives each thread that allocates an arena of its own, up to 8 per
  // core, and memory freed in one is not reused by another: at 1 M cached
  // objects that kept ~100 MiB more resident during a warm (issue 14). Two
  // arenas, before any thread exists; MALLOC_ARENA_MAX in the environment
  // still decides when set. (tcmalloc's thread caches share one heap.)
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 2);
#endif
  auto parsed = perch::ParseCommandLine(argc, argv);
  if (const int* rc = std::get_if<int>(&parsed)) return *rc;
  const perch::CommandLine& line = std::get<perch::CommandLine>(parsed);
  const perch::DaemonConfig& cfg = line.config;
  spdlog::set_default_logger(spdlog::stderr_color_mt("perchd"));
  spdlog::set_level(spdlog::level::from_str(cfg.log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");

  if (cfg.foreground) {
    return perch::ExitFor(perch::ServeAndHandOver(
        cfg, [] {}, line.takeover));
  }
  return perch::ServeInTheBackground(cfg, line.takeover);
}
