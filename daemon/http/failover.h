// Failover policy for reads from a federation's servers, without sockets.
//
// The director names several servers (caches, then the origin) for a
// namespace, best first. A read tries them in that order, skipping to the end
// those that failed recently (ServerHealth), and classifies each failure:
//
// - the *server's* fault (transport error, 5xx, wrong Content-Range, short or
//   oversized body, changed ETag): try the next server, resuming at the first
//   missing byte, and sort this server last for a while;
// - the *object's* answer (404, 401/403): try the next server too (a cache may
//   lag behind the origin), but do not blame the server; when every server
//   said 404 the object is missing, when any said 401/403 it is refused. A 404
//   to a request carrying Want-Digest is not taken for the object's answer
//   before the origin was asked too: XRootD 5.5 answers one under concurrent
//   Want-Digest requests for a file it has (docs/quirks.md);
// - cancellation and the read's deadline end the read at once.
//
// When every server failed for its own reasons, the last resort is the
// origin: once per read, the plan asks for the servers that serve the path
// without a cache (kDirect: Pelican's `?directread`, where the namespace has
// the DirectReads capability). A director may keep naming a hung cache (a
// SIGSTOPped one still accepts connections) for as long as it likes; the
// origin does not depend on it. So that this fits in the read's deadline, a
// server is left after the first-byte time while the direct read is still
// ahead, even when it is the last one named (see DirectPending).
//
// When those fail too, or direct reads are refused (405), the director's
// answer may be stale (its caches just died; it drops them within moments
// and names the origin): the plan asks for it again (kRefresh) up to
// kMaxRefreshes times, after kRefreshDelays (0, 0.5 and 1.5 s), while the deadline allows,
// then gives up with kUnavailable (retryable).
//
// Thread-safety: none; the federation client uses these on its loop thread.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "daemon/core/status.h"
#include "daemon/core/types.h"

namespace perch::http {

enum class FailureClass {
  kServer,     // the server misbehaved: next server, and penalise it
  kObject,     // 404/401/403: next server, no penalty
  kCancelled,  // shutdown or withdrawn: stop
  kDeadline,   // the read ran out of time: stop
};

FailureClass Classify(const core::Status& failure);

// Which servers failed recently, shared by all reads of one federation.
class ServerHealth {
 public:
  explicit ServerHealth(std::chrono::seconds penalty, size_t max_tracked = 4096)
      : penalty_(penalty), max_tracked_(max_tracked) {}

  // `server` (scheme://host:port or a base URL) sorts last until now + penalty.
  void Penalize(const std::string& server, core::Clock::time_point now);
  bool Penalized(const std::string& server, core::Clock::time_point now) const;

  // Indexes into `servers`: healthy ones in the given order, then penalised ones.
  std::vector<size_t> Order(const std::vector<std::string>& servers,
                            core::Clock::time_point now) const;

 private:
  std::chrono::seconds penalty_;
  size_t max_tracked_;  // the map is cleared of expired entries when it reaches this
  std::map<std::string, core::Clock::time_point> until_;
};

// How long to wait for a server's first byte before moving on: an
// exponentially weighted mean of the first-byte times seen, times 8, within
// [min, max]. Fed by every answer that began.
class FirstByteTimer {
 public:
  FirstByteTimer(std::chrono::milliseconds min, std::chrono::milliseconds max)
      : min_(min), max_(max) {}
  void Observe(std::chrono::microseconds first_byte);
  std::chrono::milliseconds Timeout() const;

 private:
  std::chrono::milliseconds min_, max_;
  double mean_us_ = 0;  // 0 until the first observation
};

// One read's walk down the server list.
class FailoverPlan {
 public:
  struct Step {
    enum Kind { kTry, kDirect, kRefresh, kFail } kind;
    size_t server = 0;                   // kTry: index into the list of the last Begin()
    core::Status status;                 // kFail: the read's result
    std::chrono::milliseconds delay{0};  // kRefresh: wait this long first
  };

  // Starts (or, after kRefresh or kDirect, restarts) the walk over `order`.
  void Begin(std::vector<size_t> order);

  // Whether the director may be asked for direct reads (false once it
  // refused them for the namespace). Without it, Next() never says kDirect.
  void AllowDirect(bool allowed) { direct_allowed_ = allowed; }

  // Marks the direct read as taken (the caller goes to the origins before
  // the named servers are exhausted, because all of them failed recently).
  void TakeDirect() { direct_taken_ = true; }

  // True while Next() may still say kDirect: allowed, not taken, and no
  // server has answered 404 (but to Want-Digest) or 401/403 for this read
  // (the object's answer).
  bool DirectPending() const {
    return direct_allowed_ && !direct_taken_ && not_found_ == digest_not_found_ && denied_ == 0;
  }

  // What to do next for the read of `what` that must end by `deadline`.
  Step Next(const std::string& what, core::Clock::time_point now, core::Deadline deadline);

  // Records the failure of the attempt Next() last returned; returns its
  // class. `asked_digest`: the request carried Want-Digest.
  FailureClass Fail(const core::Status& failure, long http_status, bool asked_digest = false);

  // The last server sent part of what was asked and stopped cleanly (a
  // shorter 206): Next() tries it again from where it stopped, at most
  // kMaxContinuations times in a row. False once that is spent (a server that
  // answers a byte at a time): the caller fails it over (Fail()).
  bool Continue() {
    if (next_ == 0 || continuations_ >= kMaxContinuations) return false;
    next_--;
    continuations_++;
    return true;
  }
  // How often one server may answer short in a row before it is left: a
  // server that works sends a range whole or, rarely, in a few pieces.
  static constexpr int kMaxContinuations = 4;

  // Records a deadline reached inside an attempt (Next() then reports it).
  void NoteDeadline(const core::Status& failure) { last_error_ = failure; }

  // True if the server Next() last returned is not the last one to try.
  bool HasNext() const { return next_ < order_.size(); }

  int attempts() const { return attempts_; }
  const core::Status& last_error() const { return last_error_; }

  // How often the director is asked again, and how long after each failed
  // round of servers it is (the first at once).
  static constexpr int kMaxRefreshes = 3;
  static constexpr std::array<std::chrono::milliseconds, kMaxRefreshes> kRefreshDelays = {
      std::chrono::milliseconds(0), std::chrono::milliseconds(500),
      std::chrono::milliseconds(1500)};

 private:
  std::vector<size_t> order_;
  size_t next_ = 0;
  int refreshes_ = 0;
  int attempts_ = 0, not_found_ = 0, denied_ = 0;
  int digest_not_found_ = 0;  // those of not_found_ answered to a request carrying Want-Digest
  int continuations_ = 0;     // Continue()s since the last Begin() or Fail()
  bool direct_allowed_ = false, direct_taken_ = false;
  core::Status last_error_;
};

}  // namespace perch::http
