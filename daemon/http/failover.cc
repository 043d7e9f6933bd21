#include "daemon/http/failover.h"

#include <algorithm>

namespace perch::http {

using core::Clock;
using core::FailureSite;
using core::Status;
using core::StatusCode;

FailureClass Classify(const Status& failure) {
  switch (failure.code()) {
    case StatusCode::kCancelled:
      return FailureClass::kCancelled;
    case StatusCode::kDeadlineExceeded:
      return FailureClass::kDeadline;
    case StatusCode::kNotFound:
    case StatusCode::kPermissionDenied:
      return FailureClass::kObject;
    default:
      return FailureClass::kServer;
  }
}

void ServerHealth::Penalize(const std::string& server, Clock::time_point now) {
  if (until_.size() >= max_tracked_) {
    std::erase_if(until_, [now](const auto& kv) { return kv.second <= now; });
    if (until_.size() >= max_tracked_) until_.clear();
  }
  until_[server] = now + penalty_;
}

bool ServerHealth::Penalized(const std::string& server, Clock::time_point now) const {
  auto it = until_.find(server);
  return it != until_.end() && now < it->second;
}

std::vector<size_t> ServerHealth::Order(const std::vector<std::string>& servers,
                                        Clock::time_point now) const {
  std::vector<size_t> order, penalised;
  for (size_t i = 0; i < servers.size(); ++i) {
    (Penalized(servers[i], now) ? penalised : order).push_back(i);
  }
  order.insert(order.end(), penalised.begin(), penalised.end());
  return order;
}

void FirstByteTimer::Observe(std::chrono::microseconds first_byte) {
  double us = static_cast<double>(first_byte.count());
  mean_us_ = mean_us_ == 0 ? us : 0.9 * mean_us_ + 0.1 * us;
}

std::chrono::milliseconds FirstByteTimer::Timeout() const {
  auto adaptive = std::chrono::milliseconds(static_cast<int64_t>(8 * mean_us_ / 1000));
  return std::clamp(adaptive, min_, max_);
}

void FailoverPlan::Begin(std::vector<size_t> order) {
  order_ = std::move(order);
  next_ = 0;
  continuations_ = 0;
}

FailoverPlan::Step FailoverPlan::Next(const std::string& what, Clock::time_point now,
                                      core::Deadline deadline) {
  if (now >= deadline) {
    std::string msg = what + " ran past its deadline";
    if (!last_error_.ok()) msg += "; last error: " + last_error_.message();
    return {Step::kFail, 0, core::DeadlineExceededError(msg), {}};
  }
  if (next_ < order_.size()) return {Step::kTry, order_[next_++], Status(), {}};
  if (attempts_ > 0 && DirectPending()) {
    // Every server failed for its own reasons: the origin, once.
    direct_taken_ = true;
    return {Step::kDirect, 0, Status(), {}};
  }
  if (refreshes_ < kMaxRefreshes && not_found_ == 0 && denied_ == 0) {
    // Every server failed: the director's list may be stale.
    auto delay = kRefreshDelays[refreshes_];
    if (refreshes_ == 0 || now + delay < deadline) {
      refreshes_++;
      return {Step::kRefresh, 0, Status(), delay};
    }
  }
  if (attempts_ > 0 && not_found_ == attempts_) {
    return {Step::kFail, 0, core::NotFoundError(what + ": not found on any server"), {}};
  }
  if (denied_ > 0) {
    return {Step::kFail,
            0,
            core::PermissionDeniedError(what + " refused: " + last_error_.message()),
            {}};
  }
  if (attempts_ == 0) {
    return {Step::kFail,
            0,
            core::UnavailableError(what + ": the director named no usable server",
                                   FailureSite::kDirector),
            {}};
  }
  return {Step::kFail,
          0,
          core::UnavailableError(what + " failed on all " + std::to_string(order_.size()) +
                                     " servers; last error: " + last_error_.message(),
                                 last_error_.where()),
          {}};
}

FailureClass FailoverPlan::Fail(const Status& failure, long http_status, bool asked_digest) {
  attempts_++;
  continuations_ = 0;
  last_error_ = failure;
  if (http_status == 404) not_found_++;
  if (http_status == 404 && asked_digest) digest_not_found_++;
  if (http_status == 401 || http_status == 403) denied_++;
  return Classify(failure);
}

}  // namespace perch::http
