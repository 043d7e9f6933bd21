#include "daemon/http/range_reader.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <set>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/http/pelican_headers.h"
#include "daemon/http/range_reader_op.h"

namespace perch::http {

using core::Clock;
using core::FailureSite;
using core::ObjectPath;
using core::Result;
using core::Status;
using core::StatusCode;

void RangeReader::Read(const ObjectPath& fed_path, const core::ObjectVersion& version,
                       core::ByteRange range, core::Deadline deadline,
                       std::function<void(Result<core::FetchedBytes>)> done) {
  auto op = std::make_shared<Op>();
  op->fed_path = fed_path;
  op->version = version;
  op->range = range;
  op->verify = ctx_->options.verify_digests && version.size > 0 && range.offset == 0 &&
               range.length == version.size;
  op->deadline = deadline;
  op->done = std::move(done);
  op->buffer.reserve(range.length);
  Start(std::move(op));
}

void RangeReader::Head(const ObjectPath& fed_path, core::Deadline deadline,
                       std::function<void(Result<core::FileAttr>)> done) {
  auto op = std::make_shared<Op>();
  op->fed_path = fed_path;
  op->deadline = deadline;
  op->head_done = std::move(done);
  Start(std::move(op));
}

void RangeReader::Start(std::shared_ptr<Op> op) {
  auto self = shared_from_this();
  director_->Resolve(
      op->fed_path, op->deadline, [self, op](Result<std::shared_ptr<const NamespaceEntry>> ns) {
        if (!ns.ok()) {
          self->Finish(op, ns.status());
          return;
        }
        op->ns = *ns;
        op->direct = nullptr;
        auto auth = self->auth_->Headers(op->ns->require_token, op->ns->prefix.str(),
                                         op->ns->issuers, op->fed_path.str());
        if (!auth.ok()) {
          self->Finish(op, auth.status());
          return;
        }
        op->auth = *auth;
        if (op->vouch_done) {  // Vouch(): no body to read
          if (!self->StartVouch(op, "")) self->VouchExhausted(op);
          return;
        }
        NamespaceAnswers::Direct kept = self->director_->KeptDirect(*op->ns);
        op->plan.AllowDirect(kept.refusal.ok());
        auto now = Clock::now();
        const auto& named = op->ns->server_bases;
        const bool distrusted = self->Distrusted(op->fed_path.str(), now);
        if (kept.entry && op->plan.DirectPending() &&
            (distrusted || std::all_of(named.begin(), named.end(), [&](const std::string& s) {
               return self->health_.Penalized(s, now);
             }))) {
          // Every named server failed recently, or one sent a copy that
          // failed its digest: the origins first, the named servers after
          // them only if the origins fail too.
          op->named_after_direct = true;
          if (self->UseDirect(op, kept.entry)) return;
          op->named_after_direct = false;
        }
        if (!kept.entry && distrusted && op->plan.DirectPending()) {
          // The origins are not known yet: asked for once.
          self->director_->ResolveDirect(
              op->ns, op->fed_path, op->deadline,
              [self, op](Result<std::shared_ptr<const NamespaceEntry>> direct) {
                op->named_after_direct = true;
                if (direct.ok() && self->UseDirect(op, *direct)) return;
                op->named_after_direct = false;
                op->plan.Begin(self->health_.Order(op->ns->server_bases, Clock::now()));
                self->Attempt(op);
              });
          return;
        }
        op->plan.Begin(self->health_.Order(named, now));
        self->Attempt(op);
      });
}

void RangeReader::Distrust(const ObjectPath& fed_path) {
  if (distrusted_.size() >= kMaxDistrusted) {
    auto oldest =
        std::min_element(distrusted_.begin(), distrusted_.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    distrusted_.erase(oldest);
  }
  distrusted_[fed_path.str()] = Clock::now() + kDistrustFor;
}

void RangeReader::Blame(const ObjectPath& fed_path) {
  // They sort last for a while, as a failed one does; the one that sent
  // them all is counted (of several, which block was wrong is not known).
  const std::vector<std::string> senders = SentBy(fed_path.str());
  for (const std::string& sender : senders) health_.Penalize(sender, Clock::now());
  if (senders.size() == 1) ctx_->servers.DigestMismatch(senders.front());
}

bool RangeReader::Distrusted(const std::string& fed_path, Clock::time_point now) {
  if (distrusted_.empty()) return false;
  auto it = distrusted_.find(fed_path);
  if (it == distrusted_.end()) return false;
  if (now < it->second) return true;
  distrusted_.erase(it);
  return false;
}

bool RangeReader::BeginOn(Op& op, const NamespaceEntry& servers) {
  std::vector<size_t> order;
  for (size_t i : health_.Order(servers.server_bases, Clock::now())) {
    if (!op.failed.count(servers.server_bases[i])) order.push_back(i);
  }
  if (order.empty()) return false;
  auto auth = auth_->Headers(servers.require_token, servers.prefix.str(), servers.issuers,
                             op.fed_path.str());
  if (!auth.ok()) return false;
  op.auth = *auth;
  op.plan.Begin(std::move(order));
  return true;
}

bool RangeReader::UseDirect(const std::shared_ptr<Op>& op,
                            std::shared_ptr<const NamespaceEntry> direct) {
  if (!BeginOn(*op, *direct)) return false;
  op->direct = std::move(direct);
  op->plan.TakeDirect();
  ctx_->counters.origin_fallbacks++;
  Attempt(op);
  return true;
}

bool RangeReader::DirectMayHelp(const Op& op) {
  if (op.direct || !op.plan.DirectPending()) return false;
  NamespaceAnswers::Direct kept = director_->KeptDirect(*op.ns);
  if (!kept.refusal.ok()) return false;
  if (!kept.entry) return true;  // not asked yet: it may name an origin
  return std::any_of(kept.entry->server_bases.begin(), kept.entry->server_bases.end(),
                     [&](const std::string& s) { return s != op.server && !op.failed.count(s); });
}

void RangeReader::Attempt(std::shared_ptr<Op> op) {
  if (op->named_after_direct && !op->plan.HasNext()) {
    // The origins this read went to first failed it, a 404 included (XRootD
    // answers one to Want-Digest for a file it has): the named servers, which
    // may hold a good copy, before the read gives up.
    op->named_after_direct = false;
    if (BeginOn(*op, *op->ns)) op->direct = nullptr;
  }
  auto step = op->plan.Next("read of " + op->fed_path.str(), Clock::now(), op->deadline);
  if (step.kind == FailoverPlan::Step::kDirect) {
    // Every server failed: ask for the origins (kept per namespace). A
    // refusal or an error leaves the plan to refresh or fail.
    auto self = shared_from_this();
    director_->ResolveDirect(op->ns, op->fed_path, op->deadline,
                             [self, op](Result<std::shared_ptr<const NamespaceEntry>> direct) {
                               if (!direct.ok() || !self->UseDirect(op, *direct)) self->Attempt(op);
                             });
    return;
  }
  if (step.kind == FailoverPlan::Step::kRefresh) {
    director_->Invalidate(op->ns);
    if (op->direct) director_->Invalidate(op->direct);
    if (step.delay.count() == 0) {
      Start(op);
    } else {
      auto self = shared_from_this();
      ctx_->loop.PostAfter(step.delay, [self, op] {
        self->director_->Invalidate(op->ns);  // a read meanwhile may have put it back
        self->Start(op);
      });
    }
    return;
  }
  if (step.kind == FailoverPlan::Step::kFail) {
    if (step.status.code() == StatusCode::kNotFound && !op->asked_fresh &&
        op->ns->prefix != op->fed_path) {
      // Missing on every server of the namespace the table named: ask the
      // director about this very path once (a nested namespace it did not list).
      op->asked_fresh = true;
      auto self = shared_from_this();
      auto before = op->ns;
      director_->Resolve(
          op->fed_path, op->deadline,
          [self, op, before,
           status = step.status](Result<std::shared_ptr<const NamespaceEntry>> ns) {
            if (!ns.ok() || (*ns)->prefix == before->prefix) {
              self->Finish(op, status);
              return;
            }
            op->plan = FailoverPlan();
            self->Start(op);
          },
          /*fresh=*/true);
      return;
    }
    Finish(op, step.status);
    return;
  }
  const NamespaceEntry& serving = op->direct ? *op->direct : *op->ns;
  op->server = serving.server_bases[step.server];
  op->server_index = step.server;
  op->url = serving.ServerUrl(step.server, op->fed_path);
  op->attempt_start = op->range.offset + op->buffer.size();
  op->head_checked = false;
  op->head_error = Status();
  op->error_body.clear();
  op->attempt_seq++;
  op->started = Clock::now();
  op->first_byte_late = false;
  auto self = shared_from_this();
  HttpRequest req;
  req.url = op->url;
  req.headers = op->auth;
  req.deadline = op->deadline;
  req.connect_timeout = ctx_->options.connect_timeout;
  if (op->head_done) {
    // One byte is enough: 206 + Content-Range (or 416 for an empty file)
    // describe a file; XRootD answers a directory with 200 and an HTML
    // listing, which is cut off at its head.
    req.headers.push_back("Range: bytes=0-0");
    req.max_body = 64 << 10;
    req.on_data = [op](const HttpHead& head, std::string_view) -> bool {
      if (!op->head_checked) {
        op->head_checked = true;
        op->probe = head;
      }
      return head.status != 200;
    };
    op->transfer = ctx_->loop.Submit(std::move(req), [self, op](Result<HttpResponse> r) {
      self->AttemptDone(op, std::move(r));
    });
    WatchFirstByte(op);
    return;
  }
  if (!op->buffer.empty()) ctx_->counters.resumes++;
  uint64_t last = op->range.end() - 1;

  req.headers.push_back("Range: bytes=" + std::to_string(op->attempt_start) + "-" +
                        std::to_string(last));
  if (op->verify && !op->vouching &&
      (op->vouch.digests.empty() || (op->vouch.source == op->server && !op->vouch.origin))) {
    StartVouch(op, op->server);  // beside the body: the check adds no round trip
  }
  req.low_speed_bytes = ctx_->options.low_speed_bytes;
  req.low_speed_time = ctx_->options.low_speed_time;
  req.on_data = [self, op, last](const HttpHead& head, std::string_view chunk) -> bool {
    if (!op->head_checked) {
      op->head_checked = true;
      self->first_byte_.Observe(
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - op->started));
      if (!self->AcceptHead(*op, head, last)) return false;
    }
    if (head.status != 206 && head.status != 200) {
      if (op->error_body.size() < 4096) op->error_body.append(chunk.substr(0, 4096));
      return true;
    }
    self->ctx_->counters.body_bytes += chunk.size();
    if (op->buffer.size() + chunk.size() > op->range.length) {
      op->head_error = core::CorruptError(op->server + ": sent more bytes than the range");
      return false;
    }
    op->buffer.append(chunk);
    if (self->progress_hook_) self->progress_hook_(op->url, op->buffer.size());
    return true;
  };
  ctx_->counters.range_gets++;
  op->transfer = ctx_->loop.Submit(
      std::move(req), [self, op](Result<HttpResponse> r) { self->AttemptDone(op, std::move(r)); });
  WatchFirstByte(op);
}

// A server that has not begun to answer within the first-byte time is left
// for the next one (only when there is a next one: the last server is waited
// for until the deadline, unless the origins of a direct read, or the named
// servers after the origins, are still ahead). The abandoned transfer ends as
// kCancelled, which AttemptDone then counts as the server's failure.
void RangeReader::WatchFirstByte(std::shared_ptr<Op> op) {
  if (!op->plan.HasNext() && !DirectMayHelp(*op) && !op->named_after_direct) return;
  auto self = shared_from_this();
  uint64_t seq = op->attempt_seq;
  ctx_->loop.PostAfter(first_byte_.Timeout(), [self, op, seq] {
    if (op->attempt_seq != seq || op->head_checked || (!op->done && !op->head_done)) return;
    op->first_byte_late = true;
    self->ctx_->loop.Cancel(op->transfer);
  });
}

// Checks a response's head against what was asked; false (with head_error
// set) ends the transfer before any of its body is kept.
bool RangeReader::AcceptHead(Op& op, const HttpHead& head, uint64_t last) {
  if (auto cc = CacheControlOf(head.GetAll("cache-control"))) {
    if (cc->no_store) op.no_store = true;  // any part of the range said so: none of it is kept
    if (cc->max_age && (op.max_age < 0 || *cc->max_age < op.max_age)) op.max_age = *cc->max_age;
  }
  if (head.status == 206) {
    std::string content_range = head.Get("content-range").value_or("");
    auto cr = ParseContentRange(content_range);
    if (!cr.ok()) {
      op.head_error = core::CorruptError(op.server + ": " + cr.status().message());
    } else if (cr->first != op.attempt_start || cr->last > last) {
      op.head_error =
          core::CorruptError(op.server + ": asked for bytes " + std::to_string(op.attempt_start) +
                             "-" + std::to_string(last) + ", got Content-Range " + content_range);
    } else if (op.version.size > 0 && cr->total >= 0 &&
               static_cast<uint64_t>(cr->total) != op.version.size) {
      op.head_error =
          core::CorruptError(op.server + ": object size is " + std::to_string(cr->total) +
                             ", expected " + std::to_string(op.version.size));
    }
    if (auto etag = head.Get("etag")) {
      auto [it, inserted] = op.etag_by_server.emplace(op.server, *etag);
      if (!inserted && it->second != *etag) {
        op.head_error = core::CorruptError(op.server + ": ETag changed from " + it->second +
                                           " to " + *etag + " (object modified?)");
      }
    }
  } else if (head.status == 200) {
    if (op.attempt_start != 0 || !op.version.size || op.range.length != op.version.size) {
      op.head_error = core::CorruptError(op.server + ": ignored the Range header (HTTP 200)");
    }
  }
  return op.head_error.ok();
}

void RangeReader::AttemptDone(std::shared_ptr<Op> op, Result<HttpResponse> r) {
  Status failure;
  long http_status = 0;
  if (op->head_done && (r.ok() || op->head_checked)) {
    if (ProbeDone(op, r.ok() ? r->head : op->probe)) return;
    http_status = op->probe.status ? op->probe.status : r->head.status;
    failure = StatusFromHttp(http_status, "GET " + op->url, FailureSite::kCache, op->error_body);
  } else if (!op->head_error.ok()) {
    failure = op->head_error;
  } else if (op->first_byte_late && !r.ok()) {
    failure = core::UnavailableError(
        op->server + ": no answer within " + std::to_string(first_byte_.Timeout().count()) + " ms",
        FailureSite::kCache);
  } else if (!r.ok()) {
    if (r.status().code() == StatusCode::kCancelled) {
      Finish(op, r.status());  // shutting down: no failover
      return;
    }
    if (r.status().code() == StatusCode::kDeadlineExceeded) {
      op->plan.NoteDeadline(r.status());
      Attempt(op);  // reports the deadline
      return;
    }
    failure = r.status();
  } else if (r->head.status == 206 || r->head.status == 200) {
    if (op->buffer.size() == op->range.length) {
      if (!op->verify) {
        Finish(op, std::move(op->buffer));
        return;
      }
      op->body_ready = true;
      if (!op->vouching) Decide(op);  // else when the digest comes
      return;
    } else if (op->buffer.size() > op->attempt_start - op->range.offset) {
      if (op->plan.Continue()) {  // the server sent a shorter range than asked: go on from it
        Attempt(op);
        return;
      }
      failure = core::UnavailableError(
          op->server + ": answered short " + std::to_string(FailoverPlan::kMaxContinuations + 1) +
              " times in a row (" + std::to_string(op->range.length - op->buffer.size()) +
              " bytes still missing)",
          FailureSite::kCache);
    } else {
      failure = core::CorruptError(op->server + ": empty body for a range request");
    }
  } else {
    http_status = r->head.status;
    failure = StatusFromHttp(http_status, "GET " + op->url, FailureSite::kCache, op->error_body);
  }
  if (op->fed_path.str().find('?') != std::string::npos &&
      (http_status == 404 || failure.code() == StatusCode::kCorrupt)) {
    // XRootD (5.5) decodes %3F and takes the rest of the path for a query:
    // "d/?x" reads as d's HTML listing, "d/a?b" as 404, on every server of a
    // federation built on it. Say so once, at once, instead of walking the
    // failover list.
    Finish(op, Status(StatusCode::kUnavailable,
                      "read of " + core::EscapeForLog(op->fed_path.str()) + ": " +
                          core::EscapeForLog(op->server) +
                          " cannot serve a name with '?' (XRootD takes it for the start of a "
                          "query): " +
                          failure.message(),
                      FailureSite::kOrigin, /*retryable=*/false));
    return;
  }
  Failed(std::move(op), std::move(failure), http_status);
}

void RangeReader::Failed(std::shared_ptr<Op> op, Status failure, long http_status) {
  if (op->plan.Fail(failure, http_status) == FailureClass::kServer) {
    health_.Penalize(op->server, Clock::now());
    ctx_->servers.Failure(op->server);
    op->failed.insert(op->server);
    spdlog::warn("read of {}: {} failed ({}); {} bytes kept, trying the next server",
                 core::EscapeForLog(op->fed_path.str()), core::EscapeForLog(op->server),
                 core::EscapeForLog(failure.ToString()), op->buffer.size());
  }
  ctx_->counters.failovers++;
  Attempt(op);
}

bool DigestRefusals::MayAsk(const std::string& server, Clock::time_point now) {
  core::MutexLock l(mu_);
  auto it = until_.find(server);
  if (it == until_.end()) return true;
  if (now < it->second) return false;
  until_.erase(it);
  return true;
}

void DigestRefusals::Refused(const std::string& server, Clock::time_point now) {
  core::MutexLock l(mu_);
  if (until_.size() >= 1024) until_.clear();  // servers named over a long time
  until_[server] = now + kFor;
}

bool RangeReader::RefusesDigests(long http_status) {
  return http_status == 400 || http_status == 403 || http_status == 405 || http_status == 500 ||
         http_status == 501;
}

// Interprets a probe's answer; false when it is an error status for the
// failover walk.
bool RangeReader::ProbeDone(std::shared_ptr<Op> op, const HttpHead& head) {
  core::FileAttr attr;
  if (head.status == 200) {
    attr.is_dir = true;  // the server ignored the range: a directory's listing
    attr.partial_listing = true;
  } else if (head.status == 206 || head.status == 416) {
    // 206: "bytes 0-0/N"; 416 (an empty file): "bytes */N".
    std::string cr = head.Get("content-range").value_or("");
    size_t slash = cr.rfind('/');
    std::string total = slash == std::string::npos ? "" : cr.substr(slash + 1);
    if (total.empty() || total.size() > 16 ||
        total.find_first_not_of("0123456789") != std::string::npos ||
        std::stoull(total) > core::kMaxObjectSize) {
      return false;  // no usable size: StatusFromHttp makes it the server's failure
    }
    attr.size = std::stoull(total);
    if (auto cc = CacheControlOf(head.GetAll("cache-control")); cc && cc->max_age)
      attr.max_age = *cc->max_age;
    if (auto etag = head.Get("etag")) attr.etag = *etag;
    if (auto modified = head.Get("last-modified")) {
      time_t t = curl_getdate(modified->c_str(), nullptr);
      if (t > 0) attr.mtime = t;
    }
  } else {
    return false;
  }
  auto done = std::move(op->head_done);
  op->head_done = nullptr;
  if (done) done(attr);
  return true;
}

void RangeReader::Finish(std::shared_ptr<Op> op, Result<core::Bytes> r) {
  if (op->vouch_done) {  // Vouch() ends here only with an error
    auto done = std::move(op->vouch_done);
    op->vouch_done = nullptr;
    done(r.ok() ? core::InternalError("a digest request ended with bytes") : r.status());
    return;
  }
  if (op->head_done) {
    auto done = std::move(op->head_done);
    op->head_done = nullptr;
    done(r.status());  // a probe ends here only with an error
    return;
  }
  if (r.ok()) {
    ctx_->counters.bytes_delivered += r->size();
    if (!op->server.empty()) NoteServer(op->fed_path.str(), op->server);
  }
  auto done = std::move(op->done);
  op->done = nullptr;
  if (!done) return;
  if (!r.ok()) {
    done(r.status());
    return;
  }
  core::FetchedBytes fetched{*std::move(r), !op->no_store, std::move(op->vouched), op->max_age,
                             op->unverified};
  done(std::move(fetched));
}

void RangeReader::NoteServer(const std::string& fed_path, const std::string& server) {
  core::MutexLock l(served_mu_);
  if (served_by_.size() >= 100000) served_by_.clear();
  std::vector<std::string>& senders = served_by_[fed_path];
  senders.erase(std::remove(senders.begin(), senders.end(), server), senders.end());
  if (senders.size() >= kMaxSenders) senders.erase(senders.begin());
  senders.push_back(server);
}

std::string RangeReader::ServedBy(const std::string& fed_path) const {
  core::MutexLock l(served_mu_);
  auto it = served_by_.find(fed_path);
  return it == served_by_.end() || it->second.empty() ? std::string() : it->second.back();
}

std::vector<std::string> RangeReader::SentBy(const std::string& fed_path) const {
  core::MutexLock l(served_mu_);
  auto it = served_by_.find(fed_path);
  return it == served_by_.end() ? std::vector<std::string>{} : it->second;
}

}  // namespace perch::http
