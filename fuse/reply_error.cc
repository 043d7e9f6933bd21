#define FUSE_USE_VERSION 312
#include "fuse/reply_error.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <cstring>

#include "daemon/core/log_escape.h"

namespace perch::fuse {

using core::Status;
using core::StatusCode;

int ToErrno(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kNotFound:
      return ENOENT;
    case StatusCode::kPermissionDenied:
      return EACCES;
    case StatusCode::kInvalidArgument:
      return EINVAL;
    case StatusCode::kCancelled:
      return EINTR;
    case StatusCode::kNoSpace:
      return ENOSPC;
    case StatusCode::kStale:
      return ESTALE;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kCorrupt:
    case StatusCode::kInternal:
      return EIO;
  }
  return EIO;
}

void ReplyError(fuse_req_t req, const char* op, const Status& s, core::OpMetrics* metrics) {
  if (metrics != nullptr) metrics->errors().Count(s.code());
  int err = ToErrno(s);
  spdlog::log(
      err == ENOENT || err == EACCES || err == ESTALE ? spdlog::level::debug : spdlog::level::warn,
      "fuse {}: {} -> {}", op, core::EscapeForLog(s.ToString()), std::strerror(err));
  fuse_reply_err(req, err);
}

}  // namespace perch::fuse
