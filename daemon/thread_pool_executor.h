// ThreadPoolExecutor: core::Executor on a small Boost.Asio thread pool. perchd
// runs two: "disk" (block writes, index batches, eviction) and "jobs" (work
// that may block: warm walks, prefetch listings, control commands).
//
// Thread-safety: Post/PostAfter from any thread. Tasks must not throw; if one
// does, it is logged and dropped. Destruction waits for running tasks and
// drops pending timers.
#pragma once

#include <spdlog/spdlog.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <memory>

#include "daemon/core/executor.h"

namespace perch {

class ThreadPoolExecutor : public core::Executor {
 public:
  explicit ThreadPoolExecutor(size_t threads) : pool_(threads) {}
  ~ThreadPoolExecutor() override {
    pool_.stop();
    pool_.join();
  }

  void Post(std::function<void()> task) override {
    boost::asio::post(pool_, [task = std::move(task)] { Run(task); });
  }

  void PostAfter(std::chrono::milliseconds delay, std::function<void()> task) override {
    auto timer = std::make_shared<boost::asio::steady_timer>(pool_.get_executor(), delay);
    timer->async_wait([timer, task = std::move(task)](const boost::system::error_code& ec) {
      if (!ec) Run(task);
    });
  }

  void Join() {
    pool_.stop();
    pool_.join();
  }

 private:
  static void Run(const std::function<void()>& task) {
    try {
      task();
    } catch (const std::exception& e) {
      spdlog::error("executor: task threw: {}", e.what());
    }
  }

  boost::asio::thread_pool pool_;
};

}  // namespace perch
