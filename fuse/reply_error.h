// How the mount answers a failure: ToErrno, the one mapping out of
// core::Status for the mount, and ReplyError, which logs, counts and answers
// a request with that errno. (What a callback throws: guard.h.)
//
// Thread-safety: free functions, from any thread.
#pragma once

#include "daemon/core/metrics.h"
#include "daemon/core/status.h"

struct fuse_req;

namespace perch::fuse {

// The errno for a core error: kNotFound ENOENT, kPermissionDenied EACCES,
// kInvalidArgument EINVAL, kCancelled EINTR, kNoSpace ENOSPC, kStale ESTALE,
// everything else (unavailable, deadline, corrupt, internal) EIO.
int ToErrno(const core::Status& status);

// Logs, counts (in `metrics`, if not null) and answers `req` with the errno
// of `s`. Expected misses (ENOENT), refusals (EACCES: the federation client
// logs a namespace without a token once) and replaced objects (ESTALE:
// core's VersionGuard logs each once) are logged at debug level only: every
// user's `ls` must not flood the log.
void ReplyError(fuse_req* req, const char* op, const core::Status& s, core::OpMetrics* metrics);

}  // namespace perch::fuse
