// ThreadPoolExecutor: core::Executor on a small Boost.Asio thread pool. perchd
// runs two: "disk" (block writes, index batches, eviction) and "jobs" (work
// that may block: warm walks, prefetch listings, control commands). Its
// threads carry the pool's name (top -H, perf, /proc/PID/task/*/comm).
//
// Thread-safety: Post/PostAfter from any thread. Tasks must not throw; if one
// does, it is logged and dropped. Destruction waits for running tasks and
// drops pending timers.
#pragma once

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <memory>
#include <string>

#include "daemon/core/executor.h"

namespace perch {

class ThreadPoolExecutor : public core::Executor {
 public:
  // `name`: the threads' name, at most 15 bytes (the kernel's limit).
  ThreadPoolExecutor(size_t threads, std::string name) : name_(std::move(name)), pool_(threads) {}
  ~ThreadPoolExecutor() override {
    pool_.stop();
    pool_.join();
  }

  void Post(std::function<void()> task) override {
    boost::asio::post(pool_, [this, task = std::move(task)] { Run(task); });
  }

  void PostAfter(std::chrono::milliseconds delay, std::function<void()> task) override {
    auto timer = std::make_shared<boost::asio::steady_timer>(pool_.get_executor(), delay);
    timer->async_wait([this, timer, task = std::move(task)](const boost::system::error_code& ec) {
      if (!ec) Run(task);
    });
  }

  void Join() {
    pool_.stop();
    pool_.join();
  }

 private:
  void Run(const std::function<void()>& task) const {
    thread_local bool named = false;  // a thread serves one pool
    if (!named) {
      pthread_setname_np(pthread_self(), name_.substr(0, 15).c_str());
      named = true;
    }
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("executor: task threw: {}", e.what());
    }
  }

  const std::string name_;  // before pool_: the threads use it until joined
  boost::asio::thread_pool pool_;
};

}  // namespace perch
