// One request as curl sees it: the easy handle's options (Start), the header
// and body callbacks, and what a finished transfer's CURLcode means
// (DrainCompleted). The loop around it is curl_loop.cc.
#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>

#include "daemon/http/curl_loop.h"
#include "daemon/http/curl_loop_state.h"

namespace perch::http {

using curl_loop_internal::HostOf;

// libcurl C callbacks. None may throw into curl: they only touch plain data.
extern "C" {
static size_t PerchCurlHeader(char* data, size_t size, size_t n, void* userp);
static size_t PerchCurlWrite(char* data, size_t size, size_t n, void* userp);
static int PerchCurlPrereq(void* userp, char* peer_ip, char* local_ip, int peer_port,
                           int local_port);
}

struct CurlCallbacks {
  static size_t Header(char* data, size_t size, size_t n, void* userp) {
    auto* t = static_cast<CurlLoop::Transfer*>(userp);
    size_t len = size * n;
    std::string_view line(data, len);
    while (!line.empty() && (line.back() == '\r' || line.back() == '\n')) line.remove_suffix(1);
    if (line.starts_with("HTTP/")) {
      // A new response (after a 1xx): forget the previous one's headers.
      t->response.head.headers.clear();
      size_t sp = line.find(' ');
      t->response.head.status =
          sp == std::string_view::npos ? 0 : std::atol(std::string(line.substr(sp + 1, 3)).c_str());
      return len;
    }
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) return len;
    std::string name(line.substr(0, colon));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t'))
      value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    t->response.head.headers.emplace_back(std::move(name), std::string(value));
    return len;
  }

  static size_t Write(char* data, size_t size, size_t n, void* userp) {
    auto* t = static_cast<CurlLoop::Transfer*>(userp);
    size_t len = size * n;
    t->response.body_bytes += len;
    if (t->request.on_data) {
      bool keep = false;
      try {
        keep = t->request.on_data(t->response.head, std::string_view(data, len));
      } catch (const std::exception& e) {
        spdlog::error("http: exception in body sink: {}", e.what());
      }
      if (!keep) {
        t->aborted_by_sink = true;
        return 0;
      }
      return len;
    }
    if (t->response.body.size() + len > t->request.max_body) {
      t->body_too_large = true;
      return 0;
    }
    t->response.body.append(data, len);
    return len;
  }

  static int Prereq(void* userp, const char* peer_ip, const char* local_ip, int peer_port,
                    int local_port) {
    auto* t = static_cast<CurlLoop::Transfer*>(userp);
    try {
      t->refused = t->request.on_connected(local_ip, local_port, peer_ip, peer_port);
    } catch (const std::exception& e) {
      t->refused = core::InternalError(std::string("connection check: ") + e.what());
    }
    return t->refused.ok() ? CURL_PREREQFUNC_OK : CURL_PREREQFUNC_ABORT;
  }
};

extern "C" {
static int PerchCurlPrereq(void* userp, char* peer_ip, char* local_ip, int peer_port,
                           int local_port) {
  return CurlCallbacks::Prereq(userp, peer_ip, local_ip, peer_port, local_port);
}
static size_t PerchCurlHeader(char* data, size_t size, size_t n, void* userp) {
  return CurlCallbacks::Header(data, size, n, userp);
}
static size_t PerchCurlWrite(char* data, size_t size, size_t n, void* userp) {
  return CurlCallbacks::Write(data, size, n, userp);
}
}

void CurlLoop::Start(std::unique_ptr<Transfer> t) {
  if (core::Clock::now() >= t->request.deadline) {
    ForgetIfIdle(t->host);
    t->done(core::DeadlineExceededError("deadline passed before " + t->request.method + " " +
                                        HostOf(t->request.url) + " could start"));
    return;
  }
  t->host->active++;
  CURL* e;
  if (!impl_->easy_pool.empty()) {
    e = impl_->easy_pool.back();
    impl_->easy_pool.pop_back();
    curl_easy_reset(e);
  } else {
    e = curl_easy_init();
  }
  t->easy = e;
  const HttpRequest& r = t->request;
  if (impl_->observer) impl_->observer(r);
  // Rounded up, so curl never gives up before the caller's deadline.
  auto remaining = std::chrono::ceil<std::chrono::milliseconds>(r.deadline - core::Clock::now());
  curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
  curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
  curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
  curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
  curl_easy_setopt(e, CURLOPT_USERAGENT, options_.user_agent.c_str());
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, static_cast<long>(r.connect_timeout.count()));
  curl_easy_setopt(e, CURLOPT_TIMEOUT_MS,
                   static_cast<long>(std::max<int64_t>(1, remaining.count())));
  if (r.low_speed_bytes > 0) {
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, r.low_speed_bytes);
    curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(r.low_speed_time.count()));
  }
  if (!options_.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options_.ca_file.c_str());
  curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &PerchCurlHeader);
  curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &PerchCurlWrite);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  if (r.on_connected) {
    curl_easy_setopt(e, CURLOPT_PREREQFUNCTION, &PerchCurlPrereq);
    curl_easy_setopt(e, CURLOPT_PREREQDATA, t.get());
  }
  if (r.method == "HEAD") {
    curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
  } else if (r.method != "GET") {
    curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
  }
  if (!r.body.empty()) {
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
  }
  t->header_list = curl_slist_append(nullptr, "Expect:");
  for (const std::string& h : r.headers)
    t->header_list = curl_slist_append(t->header_list, h.c_str());
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->header_list);

  uint64_t id = t->id;
  Transfer* raw = t.get();
  impl_->active.emplace(id, std::move(t));
  in_flight_.fetch_add(1, std::memory_order_relaxed);
  if (CURLMcode mc = curl_multi_add_handle(impl_->multi, e); mc != CURLM_OK) {
    Finish(raw,
           core::InternalError(std::string("curl_multi_add_handle: ") + curl_multi_strerror(mc)));
  }
}

void CurlLoop::DrainCompleted() {
  int pending = 0;
  while (CURLMsg* msg = curl_multi_info_read(impl_->multi, &pending)) {
    if (msg->msg != CURLMSG_DONE) continue;
    Transfer* t = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &t);
    if (t == nullptr) continue;
    CURLcode rc = msg->data.result;
    if (rc == CURLE_OK) {
      long code = 0;
      curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &code);
      t->response.head.status = code;
      Finish(t, std::move(t->response));
    } else if (!t->refused.ok()) {
      Finish(t, std::move(t->refused));
    } else if (t->aborted_by_sink) {
      Finish(t, core::CancelledError("transfer from " + HostOf(t->request.url) +
                                     " stopped by its receiver"));
    } else if (t->body_too_large) {
      Finish(t, core::CorruptError(t->request.method + " " + HostOf(t->request.url) +
                                   ": body larger than " + std::to_string(t->request.max_body) +
                                   " bytes"));
    } else {
      std::string why = t->errbuf[0] ? t->errbuf : curl_easy_strerror(rc);
      std::string msg_text = t->request.method + " " + HostOf(t->request.url) + ": " + why;
      // A timeout within a few ms of the deadline is the deadline (timers are not exact);
      // earlier ones are connect or low-speed limits: the server's failure.
      if (rc == CURLE_OPERATION_TIMEDOUT &&
          core::Clock::now() + std::chrono::milliseconds(20) >= t->request.deadline) {
        Finish(t, core::DeadlineExceededError(msg_text, core::FailureSite::kCache));
      } else {
        Finish(t, core::UnavailableError(msg_text, core::FailureSite::kCache));
      }
    }
  }
}

}  // namespace perch::http
