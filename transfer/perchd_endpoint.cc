#include "transfer/perchd_endpoint.h"

#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/mutex.h"
#include "daemon/core/wait.h"
#include "daemon/http/digest.h"
#include "daemon/http/pelican_headers.h"
#include "daemon/peers/peer_credentials.h"

namespace perch::transfer {
namespace {

using core::Result;
using core::Status;
using namespace std::chrono_literals;

// The endpoint is perchd's only if the socket that answers is root's (or
// this user's own: a perchd of theirs). Any local user may listen on a free
// loopback port, and would then hand out bytes as perchd (issue #42).
Status ServedByPerchd(const std::string& local_ip, int local_port, const std::string& peer_ip,
                      int peer_port) {
  const std::string where = peer_ip + ":" + std::to_string(peer_port);
  auto peer = peers::LoopbackPeerOf(local_ip, local_port, peer_ip, peer_port);
  if (!peer) {
    return core::PermissionDeniedError(
        "cannot tell who listens at " + where + " (not on this node's loopback)",
        core::FailureSite::kLocal);
  }
  if (peer->uid != 0 && peer->uid != ::geteuid()) {
    return core::PermissionDeniedError("the server at " + where + " is uid " +
                                           std::to_string(peer->uid) +
                                           "'s, not perchd's (root): not taking bytes from it",
                                       core::FailureSite::kLocal);
  }
  return Status::Ok();
}

// A request to the endpoint, sent only once its server is known to be perchd.
http::HttpRequest ToPerchd(std::string url) {
  http::HttpRequest req;
  req.url = std::move(url);
  req.on_connected = &ServedByPerchd;
  return req;
}

constexpr size_t kMaxMounts = 1024;
constexpr size_t kMaxField = 4096;
constexpr int kMaxIdleAttempts = 3;  // attempts in a row that bring no new byte
constexpr int kMaxAttempts = 1000;

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

Status Corrupt(const std::string& msg) {
  return core::CorruptError("perchd: " + msg, core::FailureSite::kCache);
}

// An HTTP error answer of perchd's, as a Status (the body is added later).
Status HttpError(long status) {
  std::string msg = "perchd answered " + std::to_string(status);
  switch (status) {
    case 403:
      return core::PermissionDeniedError(msg + " (protected namespace)");
    case 404:
      return core::NotFoundError(msg + " (not found)");
    case 503:
      return core::UnavailableError(msg + " (federation unavailable)");
    case 504:
      return core::DeadlineExceededError(msg + " (deadline)", core::FailureSite::kCache);
    default:
      return core::UnavailableError(msg);
  }
}

std::optional<uint64_t> ParseDecimal(std::string_view s) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty()) return std::nullopt;
  return v;
}

}  // namespace

// One GET's state. The body sink runs on the loop thread; the caller reads
// the fields only after the GET completed (its completion is the barrier).
struct PerchdEndpoint::Attempt {
  const TempFile* file = nullptr;
  std::string federation;         // the mount's, to check X-Perch-Federation
  uint64_t offset = 0;            // the next byte to write
  std::optional<uint64_t> total;  // the object's size, from the first answer
  uint64_t received = 0;          // body bytes over every attempt
  bool head_checked = false;
  Status error;  // final for the download: an HTTP error, a bad answer, a local write
  long http_status = 0;
  std::string error_body;
  Status transport;  // the connection's failure (resumable)

  Status CheckHead(const http::HttpHead& head) {
    http_status = head.status;
    if (head.status != 200 && head.status != 206) return HttpError(head.status);
    if (auto f = head.Get("x-perch-federation"); f && *f != federation) {
      return Corrupt("answered for federation " + core::EscapeForLog(*f, 200) + ", not " +
                     federation);
    }
    uint64_t t = 0;
    if (head.status == 206) {
      auto cr = head.Get("content-range");
      if (!cr) return Corrupt("206 without Content-Range");
      auto r = http::ParseContentRange(*cr);
      if (!r.ok()) return Corrupt(r.status().message());
      if (r->total < 0 || r->first != offset || r->last + 1 != static_cast<uint64_t>(r->total)) {
        return Corrupt("asked for bytes " + std::to_string(offset) + "-, got Content-Range " +
                       core::EscapeForLog(*cr, 100));
      }
      t = static_cast<uint64_t>(r->total);
    } else {
      auto cl = head.Get("content-length");
      auto n = cl ? ParseDecimal(*cl) : std::nullopt;
      if (!n) return Corrupt("200 without a usable Content-Length");
      t = *n;
      offset = 0;  // the whole object: written from the start again
    }
    if (t > core::kMaxObjectSize) return Corrupt("object size " + std::to_string(t) + " too large");
    if (total && *total != t) {
      return Corrupt("the object's size changed from " + std::to_string(*total) + " to " +
                     std::to_string(t) + " between answers");
    }
    total = t;
    return Status::Ok();
  }

  bool Take(const http::HttpHead& head, std::string_view chunk) {
    if (!head_checked) {
      head_checked = true;
      error = CheckHead(head);
    }
    if (!error.ok()) {
      if (head.status < 400) return false;
      error_body.append(chunk.substr(0, std::min(chunk.size(), 1024 - error_body.size())));
      return error_body.size() < 1024;
    }
    if (offset + chunk.size() > *total) {
      error = Corrupt("sent more than the object's " + std::to_string(*total) + " bytes");
      return false;
    }
    if (Status s = file->WriteAt(offset, chunk); !s.ok()) {
      error = s;
      return false;
    }
    offset += chunk.size();
    received += chunk.size();
    return true;
  }
};

Result<std::vector<PerchdMount>> ParseMounts(std::string_view json) {
  auto doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("mounts") ||
      !doc["mounts"].is_array()) {
    return Corrupt("/.perch/mounts is not {\"mounts\": [...]}");
  }
  const auto& list = doc["mounts"];
  if (list.size() > kMaxMounts) return Corrupt("/.perch/mounts lists more than 1024 mounts");
  std::vector<PerchdMount> out;
  for (size_t i = 0; i < list.size(); ++i) {
    const auto& m = list[i];
    auto field = [&](const char* name, bool required, std::string* value) -> Status {
      if (!m.is_object() || !m.contains(name)) {
        return required ? Corrupt("mount " + std::to_string(i) + " has no " + name) : Status::Ok();
      }
      if (!m[name].is_string() || m[name].get_ref<const std::string&>().size() > kMaxField) {
        return Corrupt("mount " + std::to_string(i) + ": " + name + " is not a short string");
      }
      *value = m[name].get<std::string>();
      return Status::Ok();
    };
    PerchdMount mount;
    std::string prefix;
    PERCH_RETURN_IF_ERROR(field("federation", true, &mount.federation));
    PERCH_RETURN_IF_ERROR(field("discovery", true, &mount.discovery));
    PERCH_RETURN_IF_ERROR(field("prefix", true, &prefix));
    PERCH_RETURN_IF_ERROR(field("mountpoint", false, &mount.mountpoint));
    auto p = core::ObjectPath::Parse(prefix);
    if (!p.ok()) return Corrupt("mount " + std::to_string(i) + ": " + p.status().message());
    mount.prefix = *p;
    out.push_back(std::move(mount));
  }
  return out;
}

const PerchdMount* MountServing(const std::vector<PerchdMount>& mounts,
                                const http::FederationUrl& url) {
  const PerchdMount* best = nullptr;
  std::string discovery = Lower(url.discovery_url);
  for (const PerchdMount& m : mounts) {
    if (Lower(m.discovery) != discovery || !url.path.HasPrefix(m.prefix)) continue;
    if (best == nullptr || m.prefix.str().size() > best->prefix.str().size()) best = &m;
  }
  return best;
}

Result<std::vector<PerchdMount>> PerchdEndpoint::LoadMounts() {
  http::HttpRequest req = ToPerchd(base_ + "/.perch/mounts");
  req.connect_timeout = 2000ms;
  req.deadline = core::DeadlineAfter(10s);
  req.max_body = 1 << 20;
  auto r = core::WaitFor<http::HttpResponse>(
      req.deadline, [&](auto done) { loop_.Submit(std::move(req), std::move(done)); });
  if (!r.ok()) return core::UnavailableError("perchd at " + base_ + ": " + r.status().message());
  if (r->head.status != 200) {
    return core::UnavailableError("perchd at " + base_ + " answered " +
                                  std::to_string(r->head.status) + " to /.perch/mounts");
  }
  return ParseMounts(r->body);
}

Result<std::vector<core::ObjectDigest>> PerchdEndpoint::AskDigests(const std::string& url) {
  http::HttpRequest req = ToPerchd(url);
  req.method = "HEAD";
  req.headers.push_back("Want-Digest: crc32c, md5;q=0.5, adler32;q=0.4, sha;q=0.3");
  req.connect_timeout = 2000ms;
  req.deadline = core::DeadlineAfter(120s);  // perchd reads the object once to check it
  req.max_body = 0;
  auto r = core::WaitFor<http::HttpResponse>(
      req.deadline, [&](auto done) { loop_.Submit(std::move(req), std::move(done)); });
  std::vector<core::ObjectDigest> out;
  if (r.ok() && r->head.status == 502) {
    return core::CorruptError("perchd at " + base_ +
                              ": its copy does not match the object's digest (HTTP 502)");
  }
  if (!r.ok() || r->head.status != 200) return out;
  auto header = r->head.Get("digest");
  if (!header) return out;
  for (const http::InstanceDigest& d : http::ParseDigestHeader(*header)) {
    for (core::ObjectDigest& claim : http::Readings(d)) out.push_back(std::move(claim));
  }
  return out;
}

void PerchdEndpoint::RunAttempt(const std::string& url, const PerchdMount& mount, Attempt& a) {
  struct Sync {
    core::Mutex mu;
    core::CondVar cv;
    bool done PERCH_GUARDED_BY(mu) = false;
    Status transport PERCH_GUARDED_BY(mu);
    http::HttpHead head PERCH_GUARDED_BY(mu);
  };
  auto sync = std::make_shared<Sync>();
  http::HttpRequest req = ToPerchd(url);
  if (a.offset > 0) req.headers.push_back("Range: bytes=" + std::to_string(a.offset) + "-");
  req.connect_timeout = 2000ms;
  req.deadline = core::DeadlineAfter(std::chrono::hours(6));
  req.low_speed_bytes = 1024;  // perchd may wait for the federation: up to its op_timeout
  req.low_speed_time = 120s;
  core::Deadline deadline = req.deadline;
  a.federation = mount.federation;
  Attempt* ap = &a;  // valid until `done` ran: this function waits for it
  req.on_data = [ap](const http::HttpHead& head, std::string_view chunk) {
    return ap->Take(head, chunk);
  };
  uint64_t id = loop_.Submit(std::move(req), [sync](Result<http::HttpResponse> r) {
    core::MutexLock l(sync->mu);
    if (r.ok()) {
      sync->head = r->head;
    } else {
      sync->transport = r.status();
    }
    sync->done = true;
    sync->cv.NotifyAll();
  });
  core::MutexLock l(sync->mu);
  while (!sync->done) {
    if (!sync->cv.WaitUntil(sync->mu, deadline + 60s) && !sync->done) {
      loop_.Cancel(id);  // its callback still runs; wait for it
      while (!sync->done) sync->cv.Wait(sync->mu);
    }
  }
  a.transport = sync->transport;
  if (!a.head_checked && a.transport.ok()) {  // no body: an error answer or an empty object
    a.head_checked = true;
    a.error = a.CheckHead(sync->head);
  }
}

Result<FetchReport> PerchdEndpoint::Fetch(const http::FederationUrl& fu, const PerchdMount& mount,
                                          const TempFile& file) {
  std::string url = base_ + uri::PercentEncodePath(fu.path);
  Attempt a;
  a.file = &file;
  FetchReport report;
  report.via = "perchd";
  report.server = base_;
  int idle = 0;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    uint64_t before = a.offset;
    if (attempt > 0 && before > 0) report.resumes++;
    a.head_checked = false;
    a.error = Status::Ok();
    a.error_body.clear();
    RunAttempt(url, mount, a);
    if (!a.error.ok()) {
      // perchd's error bodies end in a newline: not part of the message.
      std::string_view text = a.error_body;
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' '))
        text.remove_suffix(1);
      std::string body = core::EscapeForLog(std::string(text), 300);
      if (body.empty()) return a.error;
      return Status(a.error.code(), a.error.message() + ": " + body, a.error.where(),
                    a.error.retryable());
    }
    if (a.transport.ok() && a.total && a.offset == *a.total) {
      report.file_bytes = *a.total;
      report.network_bytes = a.received;
      auto digests = AskDigests(url);
      if (!digests.ok()) return digests.status();
      report.digests = *std::move(digests);
      return report;
    }
    idle = a.offset > before ? 0 : idle + 1;
    if (idle >= kMaxIdleAttempts) {
      std::string where = " at byte " + std::to_string(a.offset) +
                          (a.total ? " of " + std::to_string(*a.total) : std::string());
      return a.transport.ok() ? core::UnavailableError("perchd's answer ended early" + where)
                              : a.transport.WithContext("perchd at " + base_ + where);
    }
    std::this_thread::sleep_for(idle * 200ms);
  }
  return core::UnavailableError("perchd: more than 1000 attempts for " + url);
}

}  // namespace perch::transfer
