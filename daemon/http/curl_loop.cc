// CurlLoop: the loop (submitting, per-server slots, finishing; curl's sockets and
// timers on Asio, after curl's asiohiper.cpp). One request as curl sees it is
// curl_transfer.cc.
#include "daemon/http/curl_loop.h"

#include <curl/curl.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <strings.h>

#include <algorithm>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <future>
#include <mutex>
#include <set>

#include "daemon/core/log_escape.h"
#include "daemon/http/curl_loop_state.h"
#include "daemon/http/url.h"

namespace perch::http {

using core::Result;
using curl_loop_internal::HostOf;
using curl_loop_internal::ServerOf;

std::optional<std::string> HttpHead::Get(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return std::nullopt;
}

std::vector<std::string> HttpHead::GetAll(std::string_view name) const {
  std::vector<std::string> out;
  for (const auto& [k, v] : headers) {
    if (k == name) out.push_back(v);
  }
  return out;
}

namespace {

std::once_flag g_curl_init;

}  // namespace

CurlLoop::CurlLoop(Options options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  impl_->owner = this;
  impl_->multi = curl_multi_init();
  curl_multi_setopt(impl_->multi, CURLMOPT_SOCKETFUNCTION, &Impl::SocketCallback);
  curl_multi_setopt(impl_->multi, CURLMOPT_SOCKETDATA, impl_.get());
  curl_multi_setopt(impl_->multi, CURLMOPT_TIMERFUNCTION, &Impl::TimerCallback);
  curl_multi_setopt(impl_->multi, CURLMOPT_TIMERDATA, impl_.get());
  curl_multi_setopt(impl_->multi, CURLMOPT_MAX_HOST_CONNECTIONS, options_.max_host_connections);
  curl_multi_setopt(impl_->multi, CURLMOPT_MAXCONNECTS,
                    static_cast<long>(std::max<size_t>(options_.max_in_flight, 16)));
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "perch-net");
    try {
      impl_->io.run();
    } catch (const std::exception& e) {
      spdlog::critical("net loop: uncaught exception: {}", e.what());
      std::abort();
    }
  });
}

CurlLoop::~CurlLoop() {
  Shutdown();
  for (CURL* e : impl_->easy_pool) curl_easy_cleanup(e);
  curl_multi_cleanup(impl_->multi);
}

void CurlLoop::CancelEverything() {
  // The waiting first: finishing a running transfer would start one of them.
  auto waiting = TakeWaiting([](const Transfer&) { return true; });
  std::vector<uint64_t> ids;
  for (auto& [id, t] : impl_->active) ids.push_back(id);
  for (uint64_t id : ids) {
    auto it = impl_->active.find(id);
    if (it != impl_->active.end()) Finish(it->second.get(), core::CancelledError("shutting down"));
  }
  for (auto& t : waiting) {
    if (t->done) t->done(core::CancelledError("shutting down"));
  }
}

void CurlLoop::StopTransfers() {
  if (!thread_.joinable()) return;
  std::promise<void> stopped;
  asio::post(impl_->io, [this, &stopped] {
    impl_->stopped = true;
    CancelEverything();
    stopped.set_value();
  });
  stopped.get_future().wait();
}

void CurlLoop::Shutdown() {
  if (!thread_.joinable()) return;
  asio::post(impl_->io, [this] {
    CancelEverything();
    impl_->timer.cancel();
    impl_->waiting_timer.cancel();
    impl_->work.reset();
    impl_->io.stop();  // drop pending timers (retry backoffs): nothing may run after Shutdown
  });
  thread_.join();
}

uint64_t CurlLoop::Submit(HttpRequest request, Callback done) {
  auto t = std::make_unique<Transfer>();
  t->id = next_id_.fetch_add(1);
  t->request = std::move(request);
  t->done = std::move(done);
  uint64_t id = t->id;
  queued_.fetch_add(1, std::memory_order_relaxed);
  asio::post(impl_->io, [this, t = std::move(t)]() mutable {
    queued_.fetch_sub(1, std::memory_order_relaxed);
    if (core::Status held = RefuseTokenOverPlainHttp(t->request); !held.ok()) {
      if (t->done) t->done(held);
      return;
    }
    StartOrQueue(std::move(t));
  });
  return id;
}

core::Status CurlLoop::RefuseTokenOverPlainHttp(const HttpRequest& request) {
  const bool has_token = std::any_of(request.headers.begin(), request.headers.end(), [](auto& h) {
    return h.size() >= 14 && strncasecmp(h.c_str(), "authorization:", 14) == 0;
  });
  if (!has_token || TokenMayTravelTo(request.url)) return core::Status::Ok();
  std::string server(ServerOf(request.url));
  if (impl_->token_refused.size() < 1000 && impl_->token_refused.insert(server).second) {
    spdlog::warn(
        "not sending a token to {} over plain http (another host: anyone on the path could read "
        "it); its protected objects are read from other servers or not at all",
        core::EscapeForLog(server, 200));
  }
  return core::PermissionDeniedError(
      core::EscapeForLog(server, 200) + ": a token is never sent over plain http to another host",
      core::FailureSite::kCache);
}

void CurlLoop::Cancel(uint64_t id) {
  asio::post(impl_->io, [this, id] {
    auto it = impl_->active.find(id);
    if (it != impl_->active.end()) {
      Finish(it->second.get(), core::CancelledError("cancelled"));
      return;
    }
    for (auto& t : TakeWaiting([id](const Transfer& w) { return w.id == id; })) {
      if (t->done) t->done(core::CancelledError("cancelled"));
    }
  });
}

void CurlLoop::Post(std::function<void()> fn) {
  asio::post(impl_->io, [fn = std::move(fn)] {
    try {
      fn();
    } catch (const std::exception& e) {
      spdlog::error("net loop: exception in posted task: {}", e.what());
    }
  });
}

void CurlLoop::PostAfter(std::chrono::milliseconds delay, std::function<void()> fn) {
  Post([this, delay, fn = std::move(fn)]() mutable {
    auto timer = std::make_shared<asio::steady_timer>(impl_->io, delay);
    timer->async_wait([timer, fn = std::move(fn)](const boost::system::error_code& ec) {
      if (ec) return;
      try {
        fn();
      } catch (const std::exception& e) {
        spdlog::error("net loop: exception in timer task: {}", e.what());
      }
    });
  });
}

void CurlLoop::SetRequestObserverForTest(std::function<void(const HttpRequest&)> observer) {
  Post([this, observer = std::move(observer)]() mutable { impl_->observer = std::move(observer); });
}

void CurlLoop::StartOrQueue(std::unique_ptr<Transfer> t) {
  if (impl_->stopped) {
    if (t->done) t->done(core::CancelledError("shutting down"));
    return;
  }
  std::string_view server = ServerOf(t->request.url);
  auto [it, fresh] = impl_->hosts.try_emplace(std::string(server));
  HostSlots& host = it->second;
  if (fresh) host.server = it->first;
  t->host = &host;
  if (host.waiting.empty() && HasSlot(host)) {
    Start(std::move(t));
    return;
  }
  queued_.fetch_add(1, std::memory_order_relaxed);
  core::Deadline deadline = t->request.deadline;
  host.waiting.push_back(std::move(t));
  if (host.waiting.size() == 1) impl_->waiting_hosts.push_back(&host);
  WakeForWaitingAt(deadline);
}

bool CurlLoop::HasSlot(const HostSlots& host) const {
  return impl_->active.size() < options_.max_in_flight &&
         (options_.max_host_connections <= 0 ||
          host.active < static_cast<size_t>(options_.max_host_connections));
}

void CurlLoop::ForgetIfIdle(HostSlots* host) {
  if (host->active == 0 && host->waiting.empty())
    impl_->hosts.erase(impl_->hosts.find(host->server));
}

// Removes the waiting transfers that `match`, and the servers left with none waiting.
std::vector<std::unique_ptr<CurlLoop::Transfer>> CurlLoop::TakeWaiting(
    const std::function<bool(const Transfer&)>& match) {
  std::vector<std::unique_ptr<Transfer>> taken;
  auto& hosts = impl_->waiting_hosts;
  for (size_t i = 0; i < hosts.size();) {
    HostSlots* h = hosts[i];
    for (auto q = h->waiting.begin(); q != h->waiting.end();) {
      if (match(**q)) {
        taken.push_back(std::move(*q));
        q = h->waiting.erase(q);
      } else {
        ++q;
      }
    }
    if (h->waiting.empty()) {
      hosts[i] = hosts.back();
      hosts.pop_back();
      ForgetIfIdle(h);
    } else {
      ++i;
    }
  }
  queued_.fetch_sub(taken.size(), std::memory_order_relaxed);
  return taken;
}

// A waiting transfer whose deadline passes ends then, not when a slot frees (the
// transfers holding the slots may run much longer: a stalled server, a large block).
void CurlLoop::WakeForWaitingAt(core::Deadline at) {
  if (impl_->waiting_timer_at && *impl_->waiting_timer_at <= at) return;
  impl_->waiting_timer_at = at;
  impl_->waiting_timer.expires_at(at);
  impl_->waiting_timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    impl_->waiting_timer_at.reset();
    core::Deadline now = core::Clock::now();
    auto expired = TakeWaiting([now](const Transfer& w) { return w.request.deadline <= now; });
    std::optional<core::Deadline> next;
    for (HostSlots* h : impl_->waiting_hosts) {
      for (const auto& w : h->waiting) {
        if (!next || w->request.deadline < *next) next = w->request.deadline;
      }
    }
    if (next) WakeForWaitingAt(*next);
    for (auto& t : expired) {
      if (t->done) {
        t->done(core::DeadlineExceededError("deadline passed before " + t->request.method + " " +
                                            HostOf(t->request.url) + " could start"));
      }
    }
  });
}

void CurlLoop::Finish(Transfer* t, Result<HttpResponse> result) {
  auto it = impl_->active.find(t->id);
  if (it == impl_->active.end()) return;
  std::unique_ptr<Transfer> owned = std::move(it->second);
  impl_->active.erase(it);
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  owned->host->active--;
  ForgetIfIdle(owned->host);
  curl_multi_remove_handle(impl_->multi, owned->easy);
  curl_slist_free_all(owned->header_list);
  owned->header_list = nullptr;
  if (impl_->easy_pool.size() < 64) {
    impl_->easy_pool.push_back(owned->easy);
  } else {
    curl_easy_cleanup(owned->easy);
  }
  owned->easy = nullptr;
  if (owned->done) {
    try {
      owned->done(std::move(result));
    } catch (const std::exception& e) {
      spdlog::error("http: exception in completion callback: {}", e.what());
    }
  }
  StartQueued();
}

// Starts waiting transfers while there are slots, one server's at a time in turn.
// Not reentrant: a transfer that fails as it starts finishes, and Finish calls here.
void CurlLoop::StartQueued() {
  if (impl_->starting_queued) return;
  impl_->starting_queued = true;
  auto& hosts = impl_->waiting_hosts;
  for (bool started = true; started && impl_->active.size() < options_.max_in_flight;) {
    started = false;
    for (size_t i = 0; i < hosts.size();) {
      HostSlots* h = hosts[i];
      if (!HasSlot(*h)) {
        ++i;
        continue;
      }
      auto t = std::move(h->waiting.front());
      h->waiting.pop_front();
      queued_.fetch_sub(1, std::memory_order_relaxed);
      bool last = h->waiting.empty();
      if (last) {  // off the list before Start, which may forget `h`
        hosts[i] = hosts.back();
        hosts.pop_back();
      } else {
        ++i;
      }
      Start(std::move(t));
      started = true;
    }
  }
  impl_->starting_queued = false;
}

void CurlLoop::Impl::Arm(const std::shared_ptr<SocketWatch>& w, bool read) {
  bool& pending = read ? w->reading : w->writing;
  if (pending || w->closed) return;
  pending = true;
  w->sd.async_wait(
      read ? asio::posix::stream_descriptor::wait_read : asio::posix::stream_descriptor::wait_write,
      [this, w, read](const boost::system::error_code& ec) { OnSocket(w, read, ec); });
}

void CurlLoop::Impl::OnSocket(const std::shared_ptr<SocketWatch>& w, bool read,
                              const boost::system::error_code& ec) {
  (read ? w->reading : w->writing) = false;
  if (w->closed || ec == asio::error::operation_aborted) return;
  int running = 0;
  int flags = ec ? CURL_CSELECT_ERR : (read ? CURL_CSELECT_IN : CURL_CSELECT_OUT);
  curl_multi_socket_action(multi, w->fd, flags, &running);
  owner->DrainCompleted();
  if (!w->closed && (w->what & (read ? CURL_POLL_IN : CURL_POLL_OUT))) Arm(w, read);
}

void CurlLoop::Impl::WakeAt(std::chrono::steady_clock::time_point at) {
  if (timer_at && *timer_at <= at) return;  // wakes earlier already: Expire() sets it again
  timer_at = at;
  timer.expires_at(at);  // aborts the wait for the later time
  timer.async_wait([this](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;  // moved earlier, or shutting down
    timer_at.reset();
    Expire();
  });
}

void CurlLoop::Impl::Expire() {
  if (!curl_due) return;
  if (std::chrono::steady_clock::now() < *curl_due) {
    WakeAt(*curl_due);
    return;
  }
  curl_due.reset();
  int running = 0;
  curl_multi_socket_action(multi, CURL_SOCKET_TIMEOUT, 0, &running);
  owner->DrainCompleted();
}

int CurlLoop::Impl::SocketCallback(CURL* /*easy*/, curl_socket_t s, int what, void* userp,
                                   void* /*socketp*/) {
  auto* self = static_cast<Impl*>(userp);
  auto it = self->sockets.find(s);
  if (what == CURL_POLL_REMOVE) {
    if (it != self->sockets.end()) {
      it->second->closed = true;
      boost::system::error_code ignored;
      it->second->sd.cancel(ignored);
      it->second->sd.release();
      self->sockets.erase(it);
    }
    return 0;
  }
  std::shared_ptr<SocketWatch> w;
  if (it == self->sockets.end()) {
    w = std::make_shared<SocketWatch>(self->io, s);
    self->sockets.emplace(s, w);
  } else {
    w = it->second;
  }
  w->what = what;
  if (what & CURL_POLL_IN) self->Arm(w, true);
  if (what & CURL_POLL_OUT) self->Arm(w, false);
  return 0;
}

int CurlLoop::Impl::TimerCallback(CURLM* /*multi*/, long timeout_ms, void* userp) {
  auto* self = static_cast<Impl*>(userp);
  if (timeout_ms < 0) {
    self->curl_due.reset();  // a timer still waiting finds nothing due
    return 0;
  }
  auto now = std::chrono::steady_clock::now();
  self->curl_due = now + std::chrono::milliseconds(timeout_ms);
  if (timeout_ms > 0) {
    self->WakeAt(*self->curl_due);
  } else if (!self->expire_posted) {  // curl may not be called back from here: soon, not now
    self->expire_posted = true;
    asio::post(self->io, [self] {
      self->expire_posted = false;
      self->Expire();
    });
  }
  return 0;
}

}  // namespace perch::http
