// A perch-train child process for the trainer's integration tests: started with arguments (and
// extra environment variables), its output appended to a log file, killed in the destructor if
// still running. Also: the child processes of a pid (perch-train --nproc ranks).
#ifndef PERCH_TRAINER_TESTS_PROCESS_H_
#define PERCH_TRAINER_TESTS_PROCESS_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#ifndef PERCH_TRAIN_PATH
#error "PERCH_TRAIN_PATH must name the perch-train binary"
#endif

namespace perch::trainer::testing {

namespace fs = std::filesystem;

class Process {
 public:
  // `env`: NAME=VALUE pairs added to the environment.
  Process(const std::vector<std::string>& args, const fs::path& log,
          const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv_s = {PERCH_TRAIN_PATH};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    pid_ = fork();
    if (pid_ == 0) {
      int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
      }
      for (const std::string& e : env) {
        putenv(const_cast<char*>(e.c_str()));
      }
      std::vector<char*> argv;
      for (auto& s : argv_s) {
        argv.push_back(s.data());
      }
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Process() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      Wait(std::chrono::seconds(10));
    }
  }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Signal(int sig) { kill(pid_, sig); }
  pid_t pid() const { return pid_; }
  // Exit code, 128 + signal, or -1 on timeout.
  int Wait(std::chrono::seconds timeout) {
    auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return -1;
  }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
};

// The pid of `parent`'s child whose command line holds "--rank RANK" (its last --rank), or -1.
inline pid_t ChildWithRank(pid_t parent, int rank) {
  std::ifstream children("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) +
                         "/children");
  pid_t child;
  while (children >> child) {
    std::ifstream f("/proc/" + std::to_string(child) + "/cmdline", std::ios::binary);
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) {
      args.push_back(a);
    }
    std::string found;
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == "--rank") {
        found = args[i + 1];
      }
    }
    if (found == std::to_string(rank)) {
      return child;
    }
  }
  return -1;
}

}  // namespace perch::trainer::testing

#endif  // PERCH_TRAINER_TESTS_PROCESS_H_
