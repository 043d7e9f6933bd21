#include "perchd/signals.h"

#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstring>
#include <thread>

namespace perch {
namespace {

void Wake(int) {}

}  // namespace

void BlockSignals() {
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) sigaddset(&stop, sig);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
}

HandoffRequests::~HandoffRequests() {
  if (int conn = conn_.exchange(-1); conn >= 0) ::close(conn);
}

void HandoffRequests::Offer(int conn) {
  if (int old = conn_.exchange(conn); old >= 0) ::close(old);
  ::kill(::getpid(), SIGUSR1);
}

core::Status RunMounts(std::vector<std::unique_ptr<Federation>>& feds,
                       std::chrono::milliseconds op_timeout, HandoffRequests& requests,
                       int* handoff_conn) {
  struct Runner {
    std::thread thread;
    std::atomic<bool> done{false};
    core::Status status;
  };
  std::vector<std::unique_ptr<Runner>> runners;
  struct sigaction wake {};
  wake.sa_handler = Wake;  // no SA_RESTART: interrupts the loop's wait
  ::sigaction(SIGUSR2, &wake, nullptr);
  for (auto& f : feds) {
    auto r = std::make_unique<Runner>();
    r->thread = std::thread([&server = *f->server, r = r.get()] {
      // libfuse's worker threads, started from this one, take its name.
      pthread_setname_np(pthread_self(), "perch-fuse");
      sigset_t usr2;
      sigemptyset(&usr2);
      sigaddset(&usr2, SIGUSR2);
      pthread_sigmask(SIG_UNBLOCK, &usr2, nullptr);
      r->status = server.Run();
      r->done = true;
      ::kill(::getpid(), SIGUSR1);  // tells the main thread
    });
    runners.push_back(std::move(r));
  }
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1}) sigaddset(&stop, sig);
  int sig = 0;
  while (true) {
    sigwait(&stop, &sig);
    int conn = sig == SIGUSR1 ? requests.Take() : -1;
    bool ended = false;
    for (auto& r : runners) ended = ended || r->done;
    // A SIGUSR1 with neither: left pending by an earlier run (serving again
    // after a refused handoff), whose loops ended on the handoff.
    if (sig == SIGUSR1 && conn < 0 && !ended) continue;
    if (conn < 0 || ended) {
      if (conn >= 0) ::close(conn);
      break;
    }
    // A successor asks: every worker finishes the request it holds and reads
    // no other; requests wait in the kernel from now on.
    const auto deadline = std::chrono::steady_clock::now() + op_timeout + std::chrono::seconds(5);
    size_t paused = 0;
    while (paused < feds.size() && feds[paused]->server->PauseReading(deadline)) ++paused;
    if (paused < feds.size()) {
      spdlog::warn("handoff: requests still in progress after {} s; refused, serving on",
                   std::chrono::duration_cast<std::chrono::seconds>(op_timeout).count() + 5);
      for (size_t i = 0; i < paused; ++i) feds[i]->server->ResumeReading();
      ::close(conn);
      continue;
    }
    for (auto& f : feds) f->server->EndForHandoff();
    *handoff_conn = conn;
    break;
  }
  if (*handoff_conn < 0) {
    spdlog::info("{}; stopping", sig == SIGUSR1 ? "a mount ended" : strsignal(sig));
  } else {
    spdlog::info("handoff: the mounts stopped reading requests; handing them over");
  }
  // A loop ends once it sees the exit flag, which a signal to its thread makes it look at.
  for (auto& f : feds) f->server->Exit();
  for (auto& r : runners) {
    while (!r->done) {
      pthread_kill(r->thread.native_handle(), SIGUSR2);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    r->thread.join();
  }
  for (auto& r : runners) {
    if (!r->status.ok()) return r->status;
  }
  return core::Status::Ok();
}

}  // namespace perch
