#include "trainer/launch.h"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "trainer/distributed.h"

namespace perch::trainer {

namespace {

using Clock = std::chrono::steady_clock;

// fork + exec of /proc/self/exe with `argv` (argv[0] first); returns the child's pid (-1 on
// failure).
pid_t Spawn(std::vector<std::string> argv,
            const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<char*> c_argv;
  for (std::string& a : argv) {
    c_argv.push_back(a.data());
  }
  c_argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    // As torchrun sets them, e.g. for a --hint-command that names the rank.
    for (const auto& [name, value] : env) {
      setenv(name.c_str(), value.c_str(), 1);
    }
    execv("/proc/self/exe", c_argv.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

int LaunchLocalRanks(int nproc, const std::vector<std::string>& args,
                     const std::atomic<int>* stop_signal, double kill_grace_s) {
  StoreServer store("127.0.0.1");
  const std::string master = "127.0.0.1:" + std::to_string(store.port());
  spdlog::info("starting {} ranks (rendezvous at {})", nproc, master);
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    std::vector<std::string> argv = {"perch-train"};
    argv.insert(argv.end(), args.begin(), args.end());
    argv.insert(argv.end(),
                {"--nproc", "1", "--rank", std::to_string(r), "--world-size", std::to_string(nproc),
                 "--local-rank", std::to_string(r), "--master", master, "--store-hosted"});
    const pid_t pid = Spawn(argv, {{"RANK", std::to_string(r)},
                                   {"LOCAL_RANK", std::to_string(r)},
                                   {"WORLD_SIZE", std::to_string(nproc)},
                                   {"MASTER_ADDR", "127.0.0.1"},
                                   {"MASTER_PORT", std::to_string(store.port())}});
    if (pid < 0) {
      spdlog::error("cannot start rank {}", r);
    }
    pids.push_back(pid);
  }
  int failure = 0;
  bool checkpointed = false;
  bool forwarded = false;
  Clock::time_point kill_at = Clock::time_point::max();
  auto stop_all = [&](int sig) {
    for (pid_t pid : pids) {
      if (pid > 0) {
        kill(pid, sig);
      }
    }
  };
  for (int r = 0; r < nproc; ++r) {
    if (pids[r] < 0) {
      failure = 1;
    }
  }
  if (failure != 0) {
    stop_all(SIGTERM);
    kill_at = Clock::now();
  }
  int running = 0;
  for (pid_t pid : pids) {
    running += pid > 0 ? 1 : 0;
  }
  while (running > 0) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      for (size_t r = 0; r < pids.size(); ++r) {
        if (pids[r] != pid) {
          continue;
        }
        pids[r] = -1;
        --running;
        const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        if (code == 85) {
          checkpointed = true;
        } else if (code != 0 && failure == 0) {
          spdlog::error("rank {} {} {}; stopping the others", r,
                        WIFEXITED(status) ? "exited with" : "was killed by signal",
                        WIFEXITED(status) ? code : WTERMSIG(status));
          failure = code;
          stop_all(SIGTERM);
          kill_at =
              Clock::now() + std::chrono::milliseconds(static_cast<int64_t>(kill_grace_s * 1000));
        }
      }
      continue;
    }
    if (!forwarded && stop_signal != nullptr && stop_signal->load() != 0) {
      forwarded = true;  // every rank checkpoints its part of the agreement and exits 85
      stop_all(SIGTERM);
    }
    if (Clock::now() >= kill_at) {
      stop_all(SIGKILL);
      kill_at = Clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failure != 0) {
    return failure;
  }
  return checkpointed ? 85 : 0;
}

std::vector<std::string> RankShareArgs(int threads, int workers, int nproc, int cores,
                                       bool omp_set) {
  const std::string share = std::to_string(std::max(1, cores / std::max(1, nproc)));
  std::vector<std::string> args;
  if (threads == 0 && !omp_set) {
    args.insert(args.end(), {"--threads", share});
  }
  if (workers == 0) {
    args.insert(args.end(), {"--workers", share});
  }
  return args;
}

sigset_t StopSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

}  // namespace perch::trainer
