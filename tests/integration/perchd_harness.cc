#include "tests/integration/perchd_harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "tests/integration/test_tree.h"

#ifndef PERCHD_PATH
#error "PERCHD_PATH must name the perchd binary"
#endif

namespace perch::testing {

namespace fs = std::filesystem;

bool FuseAvailable() { return access("/dev/fuse", R_OK | W_OK) == 0 && geteuid() == 0; }

bool IsMounted(const fs::path& mountpoint) {
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  // The directory resolved, not the mount itself: a dead mount cannot be.
  fs::path abs = fs::absolute(mountpoint).lexically_normal();
  std::string mp = (fs::weakly_canonical(abs.parent_path()) / abs.filename()).string();
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string id, parent, dev, root, point;
    ss >> id >> parent >> dev >> root >> point;
    if (point == mp && line.find(" - fuse") != std::string::npos) return true;
  }
  return false;
}

namespace {

pid_t Spawn(const std::string& binary, const std::vector<std::string>& args, const fs::path& log) {
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    std::vector<char*> argv;
    for (auto& s : argv_s) argv.push_back(s.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  return pid;
}

// Waits up to `timeout` for `pid`; returns its exit code or -1 if still running.
int WaitExit(pid_t pid, std::chrono::milliseconds timeout) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (true) {
    int status = 0;
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (std::chrono::steady_clock::now() > end) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

// `args` with "--control unix:<dir>/<name>.sock" added unless they name a
// control address: every test daemon gets its own socket.
std::vector<std::string> WithOwnControl(std::vector<std::string> args, const fs::path& dir,
                                        const std::string& name) {
  for (const auto& a : args) {
    if (a == "--control") return args;
  }
  args.insert(args.begin(), {"--control", "unix:" + (dir / (name + ".sock")).string()});
  return args;
}

RunResult RunPerchdToExit(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  TempDir dir("perchd-run");
  return RunToExit(PERCHD_PATH, WithOwnControl(args, dir.path(), "control"), timeout);
}

RunResult RunToExit(const std::string& binary, const std::vector<std::string>& args,
                    std::chrono::seconds timeout) {
  TempDir dir("run");
  fs::path log = dir.path() / "log";
  pid_t pid = Spawn(binary, args, log);
  RunResult out;
  out.exit_code = WaitExit(pid, timeout);
  if (out.exit_code == -1) {
    kill(pid, SIGKILL);
    WaitExit(pid, std::chrono::seconds(5));
  }
  out.output = ReadLocalFile(log);
  return out;
}

std::string PerchdProcess::Start(const std::vector<std::string>& args, const fs::path& mountpoint,
                                 const fs::path& log) {
  mountpoint_ = mountpoint;
  log_ = log;
  std::vector<std::string> all = {"--foreground"};
  auto with_control = WithOwnControl(args, log.parent_path(), log.stem().string());
  all.insert(all.end(), with_control.begin(), with_control.end());
  for (size_t i = 0; i + 1 < all.size(); ++i) {
    if (all[i] == "--control") control_ = all[i + 1];
  }
  if (wrapper_.empty()) {
    pid_ = Spawn(PERCHD_PATH, all, log);
  } else {
    std::vector<std::string> wrapped(wrapper_.begin() + 1, wrapper_.end());
    wrapped.push_back(PERCHD_PATH);
    wrapped.insert(wrapped.end(), all.begin(), all.end());
    pid_ = Spawn(wrapper_.front(), wrapped, log);
  }
  return WaitMounted();
}

std::string PerchdProcess::StartCommand(const std::vector<std::string>& argv,
                                        const fs::path& mountpoint, const fs::path& log) {
  mountpoint_ = mountpoint;
  log_ = log;
  pid_ = Spawn(argv.front(), std::vector<std::string>(argv.begin() + 1, argv.end()), log);
  return WaitMounted();
}

std::string PerchdProcess::WaitMounted() {
  const fs::path& mountpoint = mountpoint_;
  auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < end) {
    // Mounted and answering: a dead mount left by a killed perchd is not it
    // (statfs always reaches the daemon; stat may be answered from cache).
    struct statfs st {};
    if (IsMounted(mountpoint) && ::statfs(mountpoint.c_str(), &st) == 0) return "";
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return "perchd exited before mounting:\n" + Log();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Stop();
  return "perchd did not mount within 60 s:\n" + Log();
}

std::string PerchdProcess::HandOver(const std::string& binary, const std::vector<std::string>& args,
                                    const fs::path& log, bool explicit_takeover,
                                    std::chrono::seconds timeout) {
  std::vector<std::string> all = {"--foreground"};
  if (explicit_takeover) all.push_back("--takeover");
  bool has_control = false;
  for (const auto& a : args) has_control = has_control || a == "--control";
  if (!has_control && !control_.empty()) all.insert(all.end(), {"--control", control_});
  all.insert(all.end(), args.begin(), args.end());
  pid_t next = Spawn(binary, all, log);
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    int status = 0;
    if (waitpid(next, &status, WNOHANG) == next) {
      return "the successor exited (" +
             std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) +
             ") and the running perchd " + (kill(pid_, 0) == 0 ? "serves on" : "is gone") +
             ":\n--- successor ---\n" + ReadLocalFile(log) + "\n--- running ---\n" + Log();
    }
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      std::string old_log = Log();
      pid_ = next;
      log_ = log;
      struct statfs st {};
      if (code != 0 || ::statfs(mountpoint_.c_str(), &st) != 0) {
        return "the running perchd exited " + std::to_string(code) +
               (code == 0 ? " but the mount does not answer" : "") + ":\n--- old ---\n" + old_log +
               "\n--- successor ---\n" + Log();
      }
      return "";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(next, SIGKILL);
  WaitExit(next, std::chrono::seconds(5));
  return "no handoff within the time allowed:\n--- successor ---\n" + ReadLocalFile(log) +
         "\n--- running ---\n" + Log();
}

// Whether `pid` (not a child of ours) has ended: gone, or a zombie.
static bool Ended(pid_t pid) {
  if (kill(pid, 0) != 0) return true;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const auto paren = line.rfind(')');
  return paren == std::string::npos || (paren + 2 < line.size() && line[paren + 2] == 'Z');
}

std::string PerchdProcess::HandedTo(pid_t next, const fs::path& log) {
  const int code = WaitExit(pid_, std::chrono::seconds(60));
  if (code == -1) return "the running perchd did not exit:\n" + Log();
  std::string old_log = Log();
  pid_ = next;
  child_ = false;
  log_ = log;
  if (code != 0) return "the running perchd exited " + std::to_string(code) + ":\n" + old_log;
  return "";
}

int PerchdProcess::Stop() {
  int code = 0;
  if (pid_ > 0 && !child_) {
    kill(pid_, SIGTERM);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(15);
    while (!Ended(pid_) && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!Ended(pid_)) {
      kill(pid_, SIGKILL);
      code = -1;
    }
    pid_ = -1;
    child_ = true;
  }
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    code = WaitExit(pid_, std::chrono::seconds(15));
    if (code == -1) {
      kill(pid_, SIGKILL);
      code = WaitExit(pid_, std::chrono::seconds(5));
    }
    pid_ = -1;
  }
  if (!mountpoint_.empty() && IsMounted(mountpoint_)) {
    std::string cmd = "fusermount3 -u -z '" + mountpoint_.string() + "' 2>/dev/null";
    if (std::system(cmd.c_str()) != 0) {
      std::string um = "umount -l '" + mountpoint_.string() + "' 2>/dev/null";
      (void)std::system(um.c_str());
    }
  }
  return code;
}

void PerchdProcess::Kill() {
  if (pid_ > 0 && !child_) {
    kill(pid_, SIGKILL);
    pid_ = -1;
    child_ = true;
  }
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    WaitExit(pid_, std::chrono::seconds(10));
    pid_ = -1;
  }
}

std::string PerchdProcess::Log() const { return ReadLocalFile(log_); }

PerchdProcess::~PerchdProcess() { Stop(); }

}  // namespace perch::testing
