// Status: the one error currency of perch's core.
//
// A Status is a code, a human message, where the failure happened (this node,
// a cache, an origin, the director) and whether retrying elsewhere or later
// may help. Adapters convert foreign errors (CURLcode + HTTP status, errno,
// rocksdb::Status) into a Status where they enter; no foreign error type
// crosses into core. Each kind of output has one mapping out of Status, in
// its adapter: ToErrno() in fuse/ (the mount), ToGrpcStatus() in control/
// (the control API), StatusOf() in endpoint/ (HTTP statuses) and Describe()
// in transfer/ (perch-transfer's messages and HTCondor's error ad).
//
// Thread-safety: a Status is a value; distinct objects may be used from
// distinct threads without synchronisation.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace perch::core {

enum class StatusCode {
  kOk = 0,
  kNotFound,          // 404, absent from a listing
  kPermissionDenied,  // 401/403 from a server, no acceptable token
  kUnavailable,       // nothing answered in time; failover list exhausted (retryable)
  kDeadlineExceeded,  // the request's deadline passed
  kCorrupt,           // length, Content-Range, checksum or version mismatch
  kNoSpace,           // the cache volume is full
  kCancelled,         // interrupt or shutdown
  kInvalidArgument,   // a bad request, URL or configuration value
  kInternal,          // a bug caught at a boundary
  kStale,             // the object changed at the origin since it was opened: open it again
  // A new code goes above this line (codes are counted, and their numbers
  // are seen by HTCondor in perch-transfer's ErrorCode: never renumbered).
};
// How many codes there are (arrays indexed by code).
inline constexpr size_t kStatusCodeCount = static_cast<size_t>(StatusCode::kStale) + 1;

// Where a failure happened. It drives failover: a kCache failure moves to the
// next server in the director's list, a kOrigin failure (the object really is
// absent, or the origin refuses) does not, a kLocal failure is ours.
enum class FailureSite { kNone = 0, kLocal, kDirector, kCache, kOrigin };

std::string_view ToString(StatusCode code);
std::string_view ToString(FailureSite where);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message, FailureSite where = FailureSite::kLocal,
         bool retryable = false)
      : code_(code), where_(where), retryable_(retryable), message_(std::move(message)) {}

  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  FailureSite where() const { return where_; }
  // True when the same request may succeed later or against another server.
  bool retryable() const { return retryable_; }
  const std::string& message() const { return message_; }

  // "Unavailable (cache): connect to 127.0.0.1:1094 refused".
  std::string ToString() const;

  // Returns a copy with `context + ": "` prepended to the message.
  Status WithContext(std::string_view context) const;

  // Swallows the status on purpose; greppable.
  void IgnoreError() const {}

 private:
  StatusCode code_ = StatusCode::kOk;
  FailureSite where_ = FailureSite::kNone;
  bool retryable_ = false;
  std::string message_;
};

inline Status NotFoundError(std::string msg, FailureSite where = FailureSite::kOrigin) {
  return Status(StatusCode::kNotFound, std::move(msg), where, false);
}
inline Status PermissionDeniedError(std::string msg, FailureSite where = FailureSite::kOrigin) {
  return Status(StatusCode::kPermissionDenied, std::move(msg), where, false);
}
inline Status UnavailableError(std::string msg, FailureSite where = FailureSite::kCache) {
  return Status(StatusCode::kUnavailable, std::move(msg), where, true);
}
inline Status DeadlineExceededError(std::string msg, FailureSite where = FailureSite::kLocal) {
  return Status(StatusCode::kDeadlineExceeded, std::move(msg), where, true);
}
inline Status CorruptError(std::string msg, FailureSite where = FailureSite::kCache) {
  return Status(StatusCode::kCorrupt, std::move(msg), where, true);
}
inline Status StaleError(std::string msg, FailureSite where = FailureSite::kOrigin) {
  return Status(StatusCode::kStale, std::move(msg), where);
}
inline Status InvalidArgumentError(std::string msg, FailureSite where = FailureSite::kLocal) {
  return Status(StatusCode::kInvalidArgument, std::move(msg), where, false);
}
inline Status InternalError(std::string msg, FailureSite where = FailureSite::kLocal) {
  return Status(StatusCode::kInternal, std::move(msg), where, false);
}
inline Status CancelledError(std::string msg) {
  return Status(StatusCode::kCancelled, std::move(msg), FailureSite::kLocal, false);
}

}  // namespace perch::core
