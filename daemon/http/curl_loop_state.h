// CurlLoop's private state, shared by its two files: curl_loop.cc (the loop:
// submitting, per-server slots, finishing, curl's sockets and timers on
// Asio) and curl_transfer.cc (one request as curl sees it: the easy
// handle's options, the header and body callbacks, the result). Only those
// two include it; everything here runs on the loop's thread.
#pragma once

#include <curl/curl.h>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <deque>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "daemon/http/curl_loop.h"

namespace perch::http {

namespace asio = boost::asio;

struct CurlLoop::Transfer {
  uint64_t id = 0;
  HostSlots* host = nullptr;  // its server's slots (set when it is submitted)
  CURL* easy = nullptr;
  curl_slist* header_list = nullptr;
  HttpRequest request;
  HttpResponse response;
  Callback done;
  bool aborted_by_sink = false;
  bool body_too_large = false;
  core::Status refused;  // what on_connected answered, when not OK
  char errbuf[CURL_ERROR_SIZE] = {0};
};

// One socket curl asked us to watch. The descriptor never owns the fd: curl
// opens and closes it; we release() it on CURL_POLL_REMOVE, before curl
// closes it, which also cancels our pending waits.
struct CurlLoop::SocketWatch {
  explicit SocketWatch(asio::io_context& io, curl_socket_t fd) : sd(io, fd), fd(fd) {}
  asio::posix::stream_descriptor sd;
  curl_socket_t fd;
  int what = 0;
  bool reading = false;
  bool writing = false;
  bool closed = false;
};

// The transfers of one server (scheme://host:port) that run, and those that
// wait for one of its max_host_connections slots or for the global budget.
struct CurlLoop::HostSlots {
  std::string server;
  size_t active = 0;
  std::deque<std::unique_ptr<Transfer>> waiting;
};

struct CurlLoop::Impl {
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work{io.get_executor()};
  // curl's timeout (CURLMOPT_TIMERFUNCTION). curl moves it after nearly every socket action,
  // and re-arming an asio timer each time costs a timerfd_settime, an exit to the hypervisor
  // on a VM (6 % of perchd's CPU on cold small files). So `timer` is moved only when curl
  // wants to be woken earlier than it is set for; a wake-up before `curl_due` sets it again,
  // and "now" (timeout 0) is a posted task, no timer at all.
  asio::steady_timer timer{io};
  std::optional<std::chrono::steady_clock::time_point> curl_due;  // nullopt: no timeout
  std::optional<std::chrono::steady_clock::time_point> timer_at;  // nullopt: timer not waiting
  bool expire_posted = false;
  CURLM* multi = nullptr;
  std::unordered_map<curl_socket_t, std::shared_ptr<SocketWatch>> sockets;
  std::unordered_map<uint64_t, std::unique_ptr<Transfer>> active;
  // Transfers wait here, not in curl: a handle added to the multi handle beyond its
  // server's connections waits in curl's own pending list, which cost ~10 % of perchd's CPU
  // per cold small file with a prefetch's 200 requests in flight to one server
  // (bench/results/cold-ab-2026-11-25-host-queue.txt). `hosts` has an entry per server
  // with a transfer running or waiting; `waiting_hosts` those with one waiting.
  std::unordered_map<std::string, HostSlots> hosts;
  std::vector<HostSlots*> waiting_hosts;
  bool starting_queued = false;
  asio::steady_timer waiting_timer{io};  // the earliest deadline of a waiting transfer
  std::optional<core::Deadline> waiting_timer_at;
  std::vector<CURL*> easy_pool;
  CurlLoop* owner = nullptr;
  std::function<void(const HttpRequest&)> observer;
  // Servers a token was held back from (plain http, not this node): logged once each.
  std::set<std::string> token_refused;
  bool stopped = false;  // StopTransfers: every transfer ends kCancelled at once

  void Arm(const std::shared_ptr<SocketWatch>& w, bool read);
  void OnSocket(const std::shared_ptr<SocketWatch>& w, bool read,
                const boost::system::error_code& ec);
  void WakeAt(std::chrono::steady_clock::time_point at);
  void Expire();
  static int SocketCallback(CURL* easy, curl_socket_t s, int what, void* userp, void* socketp);
  static int TimerCallback(CURLM* multi, long timeout_ms, void* userp);
};

namespace curl_loop_internal {

// "http://host:port/a/b?q" -> "http://host:port": curl's connections are per server.
inline std::string_view ServerOf(std::string_view url) {
  size_t b = url.find("://");
  b = b == std::string_view::npos ? 0 : b + 3;
  return url.substr(0, url.find_first_of("/?#", b));
}

// "http://host:port/a/b?q" -> "host:port" (for messages).
inline std::string HostOf(std::string_view url) {
  std::string_view server = ServerOf(url);
  size_t b = server.find("://");
  return std::string(b == std::string_view::npos ? server : server.substr(b + 3));
}

}  // namespace curl_loop_internal

}  // namespace perch::http
