// CurlLoop: every HTTP request perch makes goes through one libcurl multi
// handle driven by one Boost.Asio io_context on one thread (the "net loop").
//
// Why: keep-alive connections are shared by all requests (the multi handle
// owns the connection cache), hundreds of requests can be in flight without
// a thread each, and retries/failover timers run on the same thread without
// locks. The wiring follows curl's asiohiper example (socket and timer
// callbacks mapped onto Asio waits), not its style.
//
// Thread-safety: Submit, Cancel, Post and PostAfter are safe from any thread.
// Callbacks (completion and HttpRequest::on_data) run on the loop thread; they
// must not block. Destroying the loop cancels what is still running (their
// callbacks get kCancelled) and joins the thread; callers must not Submit
// concurrently with destruction.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "daemon/core/defaults.h"
#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace boost::asio {
class io_context;
}

namespace perch::http {

// Status line and headers of a response; names lower-cased, values trimmed.
struct HttpHead {
  long status = 0;
  std::vector<std::pair<std::string, std::string>> headers;

  // The first value of header `name` (lower-case), if present.
  std::optional<std::string> Get(std::string_view name) const;
  // Every value of `name`, in order (for headers sent on several lines).
  std::vector<std::string> GetAll(std::string_view name) const;
};

struct HttpRequest {
  std::string method = "GET";        // GET, HEAD, PROPFIND, ...
  std::string url;                   // already percent-encoded
  std::vector<std::string> headers;  // "Name: value"
  std::string body;
  core::Deadline deadline = core::DeadlineAfter(std::chrono::seconds(60));
  std::chrono::milliseconds connect_timeout{10000};
  // Abort if fewer than low_speed_bytes/s arrive for low_speed_time (0 = off).
  long low_speed_bytes = 0;
  std::chrono::seconds low_speed_time{30};
  // Without on_data, the body is collected up to max_body bytes (more is kCorrupt).
  size_t max_body = 64 << 20;
  // Optional streaming sink (loop thread): called with the response head and
  // each body chunk. Returning false aborts the transfer with kCancelled.
  std::function<bool(const HttpHead&, std::string_view)> on_data;
  // Optional (loop thread): called once the connection is made or reused,
  // before the request is sent, with both ends ("127.0.0.1", port). A
  // non-OK answer ends the transfer with it, nothing sent (e.g. a loopback
  // server whose socket is not of the user expected).
  std::function<core::Status(const std::string& local_ip, int local_port,
                             const std::string& peer_ip, int peer_port)>
      on_connected;
};

struct HttpResponse {
  HttpHead head;
  std::string body;  // empty when on_data consumed it
  uint64_t body_bytes = 0;
};

class CurlLoop {
 public:
  struct Options {
    // The global budget of concurrent transfers.
    size_t max_in_flight = core::kDefaultMaxRequestsInFlight;
    long max_host_connections = 64;  // per scheme://host:port; 0 = no limit (as curl's)
    std::string ca_file;             // extra CA bundle for https ("" = system)
    // The product only: a program says its version (perchd: "perch/" and
    // perch/version.h's; perch-transfer its own).
    std::string user_agent = "perch";
  };
  using Callback = std::function<void(core::Result<HttpResponse>)>;

  explicit CurlLoop(Options options);
  ~CurlLoop();  // Shutdown()

  // Cancels every transfer (callbacks get kCancelled, on the loop thread,
  // before this returns) and joins the loop thread. Idempotent. Call it
  // before destroying objects that in-flight callbacks point at.
  void Shutdown();
  // Cancels every transfer (callbacks get kCancelled, on the loop thread, before this returns)
  // and ends every later one at once the same way, while the loop still runs what is posted to
  // it: the first step of an orderly end, so that work still running (a prefetch listing, a
  // retry) finishes now instead of at its deadline. Shutdown() follows. Idempotent; not from the
  // loop thread.
  void StopTransfers();
  CurlLoop(const CurlLoop&) = delete;
  CurlLoop& operator=(const CurlLoop&) = delete;

  // Starts `request`, or queues it while max_in_flight transfers run or its server
  // (scheme://host:port) has max_host_connections running; a queued request whose
  // deadline passes ends then with kDeadlineExceeded.
  // `done` gets the response for any HTTP status (the caller interprets it),
  // or kUnavailable/kDeadlineExceeded for transport failures (message names
  // the URL's host and curl's reason), kCancelled after Cancel(). Returns an
  // id for Cancel().
  uint64_t Submit(HttpRequest request, Callback done);

  // Cancels transfer `id` if it has not completed; its callback gets kCancelled.
  void Cancel(uint64_t id);

  // Runs `fn` on the loop thread.
  void Post(std::function<void()> fn);
  void PostAfter(std::chrono::milliseconds delay, std::function<void()> fn);

  // Called on the loop thread with every request as it starts (tests check
  // which headers went where).
  void SetRequestObserverForTest(std::function<void(const HttpRequest&)> observer);

  size_t InFlight() const { return in_flight_.load(std::memory_order_relaxed); }
  size_t Queued() const { return queued_.load(std::memory_order_relaxed); }

 private:
  friend struct CurlCallbacks;
  struct Transfer;
  struct HostSlots;
  struct SocketWatch;
  struct Impl;

  // All below is touched only on the loop thread, except where noted.
  // kPermissionDenied (logged once per server) for a request that would carry
  // a token over plain http to another host (TokenMayTravelTo).
  core::Status RefuseTokenOverPlainHttp(const HttpRequest& request);
  void StartOrQueue(std::unique_ptr<Transfer> t);
  void Start(std::unique_ptr<Transfer> t);
  void Finish(Transfer* t, core::Result<HttpResponse> result);
  // Ends every running and waiting transfer with kCancelled.
  void CancelEverything();
  void DrainCompleted();
  void StartQueued();
  bool HasSlot(const HostSlots& host) const;
  void ForgetIfIdle(HostSlots* host);
  std::vector<std::unique_ptr<Transfer>> TakeWaiting(
      const std::function<bool(const Transfer&)>& match);
  void WakeForWaitingAt(core::Deadline at);

  Options options_;
  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<size_t> in_flight_{0};
  std::atomic<size_t> queued_{0};
  std::thread thread_;
};

}  // namespace perch::http
