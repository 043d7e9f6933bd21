// PendingReplies: FUSE requests answered later, from another thread (a read
// waiting for a fetch is answered by the thread that completes it, and the
// FUSE worker goes back to the queue instead of blocking).
//
// Each request is answered exactly once: by whoever Claims it first — the
// completion, or this class when its time is up (`on_expire`, on a thread of
// this class's: the adapter answers EIO, as a blocking read that gave up at
// its deadline did) or when it closes. A completion that comes after that
// finds nothing to claim and drops its result. No FUSE call waits longer than
// the time given to Add (give or take half a second: Add wakes nobody),
// whatever happens below.
//
// The requests are only handed back, never dereferenced here (unit tests
// pass made-up ones).
//
// Thread-safety: all methods from any thread. Close, then destroy, before
// the session the requests belong to goes.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <thread>
#include <vector>

#include "daemon/core/clock.h"
#include "daemon/core/mutex.h"

struct fuse_req;

namespace perch::fuse {

class PendingReplies {
 public:
  using Clock = core::Clock;
  // Deadlines are on `time` (which outlives this); Add's are from its Now().
  explicit PendingReplies(std::function<void(fuse_req*)> on_expire,
                          const core::TimeSource& time = core::TimeSource::Steady());
  ~PendingReplies();  // Close()
  PendingReplies(const PendingReplies&) = delete;
  PendingReplies& operator=(const PendingReplies&) = delete;

  // Registers `req`, to be answered by `by` at the latest; a token for Claim.
  // Deadlines must not decrease from one Add to the next (the caller's is
  // now plus a fixed time).
  uint64_t Add(fuse_req* req, Clock::time_point by);
  // The request of `token` if it is still unanswered: the caller answers it
  // and then calls Answered(). Null if it was answered already (expired or
  // closed): the caller must not touch it.
  fuse_req* Claim(uint64_t token);
  void Answered();
  // Answers every pending request with `on_expire`, refuses later claims and
  // waits for answers in progress. Idempotent.
  void Close();
  // Waits until every request added so far is answered (none pending, none
  // being answered), up to `deadline`; false if some were not by then.
  bool Drain(Clock::time_point deadline);

  size_t pending() const;

 private:
  void Loop() PERCH_EXCLUDES(mu_);
  // Answers `reqs` (already taken out of pending_) with on_expire;
  // replying_ counts them.
  void Expire(const std::vector<fuse_req*>& reqs) PERCH_EXCLUDES(mu_);

  // Constant after construction
  const std::function<void(fuse_req*)> on_expire_;
  const core::TimeSource& time_;

  mutable core::Mutex mu_;
  core::CondVar cv_;           // closing (the loop's)
  core::CondVar answered_cv_;  // replying_ fell to 0 after closing (Close's)
  struct Entry {
    fuse_req* req;
    Clock::time_point by;
  };
  // Protected by mu_
  std::map<uint64_t, Entry> pending_ PERCH_GUARDED_BY(mu_);  // by token, hence by deadline
  uint64_t next_ PERCH_GUARDED_BY(mu_) = 1;
  int replying_ PERCH_GUARDED_BY(mu_) = 0;  // claimed, answer not yet sent
  bool closed_ PERCH_GUARDED_BY(mu_) = false;

  std::thread thread_;
};

}  // namespace perch::fuse
