// PrepareMountpoint: what perchd checks and repairs at a mountpoint before it
// mounts there.
//
// - A dead FUSE mount (a daemon that was SIGKILLed or crashed leaves one: the
//   kernel answers every access with ENOTCONN) is lazily unmounted, with one
//   log line, so that a restart simply mounts again.
// - A live perch mount is another perchd's: refused, never mounted over.
// - A directory with entries would have them hidden by the mount: refused
//   unless the operator allows it (libfuse 3 has no "nonempty" check of its
//   own; it mounts over anything).
//
// Called from main before anything else is opened, so a bad mountpoint costs
// no network round trip. Not thread-safe with another mount at the same path
// (nothing is: two perchds racing for one mountpoint both pass the check).
#pragma once

#include <string>

#include "daemon/core/status.h"

namespace perch::fuse {

// OK when `mountpoint` is an existing directory that perchd may mount on
// (after unmounting a dead FUSE mount there). kInvalidArgument (a usage
// error) when it is missing, not a directory, not empty (unless
// `allow_nonempty`), or a dead mount that cannot be unmounted; kUnavailable
// when a live perch mount (another perchd's) is there.
core::Status PrepareMountpoint(const std::string& mountpoint, bool allow_nonempty);

}  // namespace perch::fuse
