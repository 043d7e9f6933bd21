// RangeReader's check of whole objects against a digest that vouches for
// them (range_reader.h), and Vouch(). Loop thread only.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/core/log_escape.h"
#include "daemon/http/range_reader.h"
#include "daemon/http/range_reader_op.h"

namespace perch::http {

using core::Clock;
using core::ObjectDigest;
using core::Result;
using core::Status;

namespace {

// How often a read waiting for a voucher's digest slot looks whether that
// server failed meanwhile.
constexpr std::chrono::milliseconds kSlotCheck{1000};

// How long a server may take to compute a digest of `size` bytes unless it
// stored it: 2 s, and a second more per 64 MiB (it reads the whole object,
// about 64 MiB/s of it at the least).
std::chrono::milliseconds ComputeTime(uint64_t size) {
  return std::chrono::seconds(2) + std::chrono::seconds(size >> 26);
}

// How long one digest request may take: a second more than the computing.
core::Deadline VouchDeadline(const core::Deadline& read_deadline, uint64_t size) {
  return std::min(read_deadline, Clock::now() + std::chrono::seconds(1) + ComputeTime(size));
}

}  // namespace

bool RangeReader::IsOrigin(const Op& op, const std::string& server) {
  for (const auto& entry : {op.direct, op.vouch_direct}) {
    if (entry && std::find(entry->server_bases.begin(), entry->server_bases.end(), server) !=
                     entry->server_bases.end()) {
      return true;
    }
  }
  return false;
}

void RangeReader::Vouch(const core::ObjectPath& fed_path, const core::ObjectVersion& version,
                        const std::vector<std::string>& algorithms, core::Deadline deadline,
                        std::function<void(Result<std::vector<ObjectDigest>>)> done) {
  auto op = std::make_shared<Op>();
  op->fed_path = fed_path;
  op->version = version;
  op->deadline = deadline;
  op->vouch_done = std::move(done);
  op->vouch_algorithms = algorithms;
  for (std::string& s : SentBy(fed_path.str())) op->vouch_exclude.insert(std::move(s));
  // A copy of unknown senders (cached by an earlier run) may be any named
  // server's; one that failed a digest (Distrust) may have failed a wrong
  // digest: the origins vouch first.
  op->vouch_origin_first = op->vouch_exclude.empty() || Distrusted(fed_path.str(), Clock::now());
  Start(std::move(op));
}

bool RangeReader::StartVouch(const std::shared_ptr<Op>& op, const std::string& sender) {
  const auto now = Clock::now();
  auto may_ask = [&](const std::string& s) {
    return !op->vouch_tried.count(s) && digest_refusals_->MayAsk(s, now);
  };
  // A named server that neither sends these bytes nor sent this process the
  // object's bytes before (Vouch): first those that did not fail this read
  // (one that sent wrong bytes may still state the right digest, but is
  // asked after the origins).
  // A server that failed lately (penalised: a dead cache whose port still
  // takes connections) is asked after the origins, not before.
  auto named = [&](bool failed, bool penalised_too) {
    for (size_t i : health_.Order(op->ns->server_bases, now)) {
      const std::string& s = op->ns->server_bases[i];
      if (s != sender && !op->vouch_exclude.count(s) && op->failed.count(s) == failed &&
          may_ask(s) && (penalised_too || !health_.Penalized(s, now))) {
        AskVoucher(op, op->ns, i, /*origin=*/false);
        return true;
      }
    }
    return false;
  };
  // The origins: the source of the bytes, whoever sent them.
  NamespaceAnswers::Direct kept = director_->KeptDirect(*op->ns);
  std::shared_ptr<const NamespaceEntry> direct = op->vouch_direct ? op->vouch_direct : kept.entry;
  auto origins = [&] {
    if (!direct) return false;
    for (size_t i : health_.Order(direct->server_bases, now)) {
      if (may_ask(direct->server_bases[i])) {
        AskVoucher(op, direct, i, /*origin=*/true);
        return true;
      }
    }
    return false;
  };
  // At the last, the sender itself: its claim vouches for nothing, but a
  // body that fails it is wrong (Decide).
  auto self_claim = [&] {
    const std::string& s = op->server;
    if (op->vouch_done || sender.empty() || s != sender || !may_ask(s)) return false;
    AskVoucher(op, op->direct ? op->direct : op->ns, op->server_index, IsOrigin(*op, s));
    return true;
  };
  // Vouch() for a copy whose senders are unknown or that failed a digest:
  // the origins first (see Vouch).
  const bool origin_first = op->vouch_done && op->vouch_origin_first;
  const bool may_resolve = !direct && kept.refusal.ok() && !op->vouch_direct_asked;
  auto any_named = [&] { return named(false, true) || named(true, true); };
  if (origin_first && (origins() || (!may_resolve && any_named()))) return true;
  if (!origin_first && (named(false, false) || origins() || (!may_resolve && any_named()))) {
    return true;
  }
  if (!may_resolve) return self_claim();
  op->vouch_direct_asked = true;
  op->vouching = true;
  const uint64_t seq = ++op->vouch_seq;
  auto self = shared_from_this();
  director_->ResolveDirect(
      op->ns, op->fed_path, op->deadline,
      [self, op, seq, sender](Result<std::shared_ptr<const NamespaceEntry>> d) {
        if (seq != op->vouch_seq || (!op->done && !op->vouch_done)) return;
        op->vouching = false;
        if (d.ok()) op->vouch_direct = *d;
        if (!self->StartVouch(op, sender)) self->VouchExhausted(op);
      });
  return true;
}

void RangeReader::AskVoucher(const std::shared_ptr<Op>& op,
                             std::shared_ptr<const NamespaceEntry> entry, size_t index,
                             bool origin) {
  op->vouching = true;
  const uint64_t seq = ++op->vouch_seq;
  const std::string server = entry->server_bases[index];
  op->vouch_tried.insert(server);
  auto self = shared_from_this();
  // Loop thread: true while the slot is awaited, false once it came or the
  // read stopped waiting for it.
  auto waiting = std::make_shared<bool>(true);
  const DigestSlots::Key slot{op->ns->prefix.str(), server};
  digest_slots_->Acquire(slot, [self, op, entry, index, origin, seq, slot, waiting] {
    self->ctx_->loop.Post([self, op, entry, index, origin, seq, slot, waiting] {
      if (!*waiting || seq != op->vouch_seq || (!op->done && !op->vouch_done)) {
        self->digest_slots_->Release(slot);  // nobody waits for it any more
        return;
      }
      *waiting = false;
      self->SendVouch(op, entry, index, origin, seq);
    });
  });
  AwaitSlot(op, seq, server, origin, waiting);
}

void RangeReader::AwaitSlot(const std::shared_ptr<Op>& op, uint64_t seq, const std::string& server,
                            bool origin, std::shared_ptr<bool> waiting) {
  // A busy server's slot is awaited until the read's deadline, one that
  // failed meanwhile (penalised) no longer than kSlotCheck: the next voucher
  // is asked. The timer keeps neither the read nor this reader alive.
  const auto left =
      std::chrono::duration_cast<std::chrono::milliseconds>(op->deadline - Clock::now());
  ctx_->loop.PostAfter(std::clamp(left, std::chrono::milliseconds(0), kSlotCheck),
                       [weak_self = weak_from_this(), weak_op = std::weak_ptr<Op>(op), seq, server,
                        origin, waiting] {
                         auto self = weak_self.lock();
                         auto op = weak_op.lock();
                         if (!self || !op || !*waiting) return;
                         const auto now = Clock::now();
                         if (now < op->deadline && !self->health_.Penalized(server, now)) {
                           self->AwaitSlot(op, seq, server, origin, waiting);
                           return;
                         }
                         *waiting = false;  // no slot in time: this server gave nothing
                         op->vouch_errors++;
                         op->vouch_errored.insert(server);
                         self->VouchAnswered(op, seq, server, origin, {});
                       });
}

void RangeReader::SendVouch(const std::shared_ptr<Op>& op,
                            std::shared_ptr<const NamespaceEntry> entry, size_t index, bool origin,
                            uint64_t seq) {
  const std::string server = entry->server_bases[index];
  const DigestSlots::Key slot{op->ns->prefix.str(), server};
  auto self = shared_from_this();
  auto auth =
      auth_->Headers(entry->require_token, entry->prefix.str(), entry->issuers, op->fed_path.str());
  if (!auth.ok()) {
    digest_slots_->Release(slot);
    VouchAnswered(op, seq, server, origin, {});
    return;
  }
  HttpRequest req;
  req.url = entry->ServerUrl(index, op->fed_path);
  req.headers = *auth;
  req.headers.push_back("Range: bytes=0-0");  // XRootD states the digest on any range GET
  if (op->vouch_algorithms.empty()) {
    req.headers.push_back(kWantDigest);
  } else {
    std::string want = "Want-Digest: ";
    for (size_t i = 0; i < op->vouch_algorithms.size() && i < 8; ++i) {
      want += (i ? ", " : "") + op->vouch_algorithms[i];
    }
    req.headers.push_back(std::move(want));
  }
  req.deadline = VouchDeadline(op->deadline, op->version.size);
  req.connect_timeout = ctx_->options.connect_timeout;
  req.max_body = 64 << 10;
  ctx_->counters.digest_asks++;
  const auto hold = ComputeTime(op->version.size);
  // Set once the connection stands and the request goes out (the loop's
  // thread): before that the server has nothing to compute.
  auto sent = std::make_shared<bool>(false);
  req.on_connected = [sent](const std::string&, int, const std::string&, int) {
    *sent = true;
    return core::Status::Ok();
  };
  ctx_->loop.Submit(
      std::move(req), [self, op, seq, server, origin, slot, hold, sent](Result<HttpResponse> r) {
        if (r.ok() || !*sent) {
          self->digest_slots_->Release(slot);
        } else {
          // Asked, and no answer (a deadline, a dropped connection): the server
          // may still be computing the digest. Its slot stays taken until it may
          // have finished, so that no second job overlaps one perch left running.
          std::weak_ptr<DigestSlots> slots = self->digest_slots_;
          self->ctx_->loop.PostAfter(hold, [slots, slot] {
            if (auto s = slots.lock()) s->Release(slot);
          });
        }
        std::vector<ObjectDigest> claims;
        if (r.ok() && (r->head.status == 206 || r->head.status == 200)) {
          if (auto header = r->head.Get("digest")) {
            for (const InstanceDigest& d : ParseDigestHeader(*header)) {
              for (ObjectDigest& c : Readings(d)) claims.push_back(std::move(c));
            }
          }
        } else if (r.ok() && RefusesDigests(r->head.status)) {
          // XRootD answers Want-Digest with 405 (no checksums configured) or 500
          // (an algorithm it lacks): it is not asked for digests for a while.
          self->digest_refusals_->Refused(server, Clock::now());
        } else {
          op->vouch_errors++;  // no answer, or 404 (XRootD 5.5 answers one for files it has)
          op->vouch_errored.insert(server);
          if (!r.ok()) self->health_.Penalize(server, Clock::now());  // asked after the origins
        }
        if (claims.empty()) {
          spdlog::debug("{} stated no digest of {} ({})", core::EscapeForLog(server),
                        core::EscapeForLog(op->fed_path.str()),
                        r.ok() ? "HTTP " + std::to_string(r->head.status)
                               : core::EscapeForLog(r.status().ToString()));
        }
        self->VouchAnswered(op, seq, server, origin, std::move(claims));
      });
}

void RangeReader::VouchAnswered(const std::shared_ptr<Op>& op, uint64_t seq,
                                const std::string& server, bool origin,
                                std::vector<ObjectDigest> claims) {
  if (seq != op->vouch_seq || (!op->done && !op->vouch_done)) return;  // stale, or the read ended
  op->vouching = false;
  if (Clock::now() >= op->deadline) {
    Finish(op, core::DeadlineExceededError("read of " + core::EscapeForLog(op->fed_path.str()) +
                                           ": no digest to check it against in time"));
    return;
  }
  const bool usable = !claims.empty();
  if (usable) {
    if (op->vouch.source != server) op->vouch_mismatches = 0;
    op->vouch = Op::Claim{server, origin, std::move(claims)};
  }
  if (op->vouch_done) {
    if (usable) {
      auto done = std::move(op->vouch_done);
      op->vouch_done = nullptr;
      done(op->vouch.digests);
    } else if (!StartVouch(op, "")) {
      VouchExhausted(op);
    }
    return;
  }
  if (op->body_ready) {
    Decide(op);
  } else if (!usable) {
    StartVouch(op, op->server);  // the next one, while the body comes
  }
}

bool RangeReader::RetryVouch(const std::shared_ptr<Op>& op, const std::string& sender) {
  // XRootD 5.5 answers some digest requests 404 under load, for files it
  // has: the servers that failed are asked again, twice, after 50 and 200 ms.
  if (op->vouch_errored.empty() || op->vouch_rounds >= 2) return false;
  const auto delay = std::chrono::milliseconds(op->vouch_rounds == 0 ? 50 : 200);
  if (Clock::now() + delay >= op->deadline) return false;
  op->vouch_rounds++;
  for (const std::string& s : op->vouch_errored) op->vouch_tried.erase(s);
  op->vouch_errored.clear();
  op->vouch_errors = 0;
  op->vouching = true;
  const uint64_t seq = ++op->vouch_seq;
  auto self = shared_from_this();
  ctx_->loop.PostAfter(delay, [self, op, seq, sender] {
    if (seq != op->vouch_seq || (!op->done && !op->vouch_done)) return;
    op->vouching = false;
    if (!self->StartVouch(op, sender)) self->VouchExhausted(op);
  });
  return true;
}

void RangeReader::VouchExhausted(const std::shared_ptr<Op>& op) {
  if (op->vouch_done && RetryVouch(op, "")) return;
  if (op->vouch_done) {
    auto done = std::move(op->vouch_done);
    op->vouch_done = nullptr;
    const std::string what = core::EscapeForLog(op->fed_path.str());
    if (op->vouch_errors > 0) {
      done(core::UnavailableError("no server could state the digest of " + what + " now"));
    } else {
      done(core::NotFoundError("no server but those that sent its bytes states a digest of " +
                               what));
    }
    return;
  }
  if (op->done && op->body_ready) Decide(op);
}

void RangeReader::Decide(const std::shared_ptr<Op>& op) {
  const std::string& sender = op->server;
  Op::Claim& v = op->vouch;
  if (!v.origin) v.origin = IsOrigin(*op, v.source);
  if (!v.digests.empty() && (v.source != sender || v.origin)) {
    ObjectDigest matched;
    switch (VerifyAgainst(v.digests, op->buffer, &matched)) {
      case core::DigestMatch::kMatch:
        ctx_->counters.digests_verified++;
        for (const auto& [body_sender, failed] : op->failed_bodies) {
          // Raw values: an XRootD 5.5 cache may label a digest wrongly.
          if (std::any_of(failed.begin(), failed.end(),
                          [&](const ObjectDigest& d) { return d.raw == matched.raw; }))
            ctx_->servers.DigestMismatch(body_sender);
        }
        op->vouched = {std::move(matched)};
        Finish(op, std::move(op->buffer));
        return;
      case core::DigestMatch::kMismatch:
        BodyMismatch(op);
        return;
      case core::DigestMatch::kNone:
        break;  // no reading perch computes (Readings keeps none such)
    }
  }
  // The sender's own claim (it failed over to the server that vouched):
  // a body that fails it is wrong, one that matches still needs a voucher.
  if (!v.digests.empty() && v.source == sender && !v.origin &&
      VerifyAgainst(v.digests, op->buffer) == core::DigestMatch::kMismatch) {
    BodyMismatch(op);
    return;
  }
  if (StartVouch(op, sender)) return;                       // Decide again when it answers
  if (v.digests.empty() && RetryVouch(op, sender)) return;  // Decide again then
  if (v.digests.empty() && op->vouch_errors > 0) {
    // A server that may state the digest did not answer: not delivered
    // unchecked (retryable; the next read asks again).
    Finish(op, core::UnavailableError("read of " + core::EscapeForLog(op->fed_path.str()) +
                                      ": no server could state its digest now"));
    return;
  }
  if (op->mismatches_seen > 0) {
    // Bodies of this read failed a digest, and no server is left to vouch
    // for this one: the servers disagree, and none is believed.
    Finish(op, core::UnavailableError("read of " + core::EscapeForLog(op->fed_path.str()) +
                                      ": its servers' bytes and digests disagree, and no "
                                      "other server is left to vouch for them"));
    return;
  }
  Unverified(op, v.digests.empty() ? "no server of its namespace states a digest"
                                   : "only the server that sent it states a digest");
}

void RangeReader::BodyMismatch(const std::shared_ptr<Op>& op) {
  ctx_->counters.digest_mismatches++;
  op->mismatches_seen++;
  if (op->vouch.source == op->server) {
    ctx_->servers.DigestMismatch(op->server);  // its body and its own digest disagree
  } else if (op->failed_bodies.size() < 64) {
    // Its body, or the other server's digest, is wrong: told once a body
    // proves that digest (Decide).
    op->failed_bodies.emplace_back(op->server, op->vouch.digests);
  }
  Status failure = core::CorruptError(
      op->server + ": the body does not match the object's digest stated by " +
      (op->vouch.source == op->server ? std::string("itself") : op->vouch.source));
  if (++op->vouch_mismatches >= 2 && !op->vouch.origin) {
    // Two bodies disagree with that digest: it may be the one that is wrong.
    // The next body is judged by another server's, the origins' at the last.
    op->vouch_tried.insert(op->vouch.source);
    op->vouch = {};
    op->vouch_mismatches = 0;
  }
  op->buffer.clear();  // nothing of a wrong body is kept: the next server sends it all
  op->body_ready = false;
  Failed(op, std::move(failure), 0);
}

void RangeReader::Unverified(const std::shared_ptr<Op>& op, const std::string& why) {
  ctx_->counters.digests_unverified++;
  const std::string ns = op->ns->prefix.str();
  if (!unverified_said_.count(ns) && unverified_said_.size() < 1024) {
    unverified_said_.insert(ns);
    spdlog::warn(
        "namespace {}: {} of {}: its objects are served unchecked by a second source "
        "(counted as digests_unverified; said once per namespace)",
        core::EscapeForLog(ns), why, core::EscapeForLog(op->fed_path.str()));
  }
  op->unverified = why;
  Finish(op, std::move(op->buffer));
}

}  // namespace perch::http
