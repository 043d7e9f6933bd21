#include "daemon/core/status.h"

namespace perch::core {

std::string_view ToString(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kPermissionDenied:
      return "PermissionDenied";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kDeadlineExceeded:
      return "DeadlineExceeded";
    case StatusCode::kCorrupt:
      return "Corrupt";
    case StatusCode::kStale:
      return "Stale";
    case StatusCode::kNoSpace:
      return "NoSpace";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string_view ToString(FailureSite where) {
  switch (where) {
    case FailureSite::kNone:
      return "none";
    case FailureSite::kLocal:
      return "local";
    case FailureSite::kDirector:
      return "director";
    case FailureSite::kCache:
      return "cache";
    case FailureSite::kOrigin:
      return "origin";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) {
    return "OK";
  }
  std::string out(core::ToString(code_));
  out += " (";
  out += core::ToString(where_);
  out += "): ";
  out += message_;
  return out;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) {
    return *this;
  }
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg), where_, retryable_);
}

}  // namespace perch::core
