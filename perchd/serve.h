// perchd serving: the stack opened, the mounts mounted (or adopted from the
// perchd before), the control plane and the endpoints started, until a
// signal ends it or a successor takes the mounts over (perchd/handoff.h).
// Runs on the main thread.
#pragma once

#include <functional>

#include "daemon/config.h"
#include "daemon/core/status.h"

namespace perch {

// Serves `cfg` until a signal or until a mount is unmounted; when a
// successor asks for the mounts, hands them over and returns Ok, or, if
// the successor fails to take them, serves them again. With `takeover`,
// first takes the mounts of the perchd serving this cache directory.
// `ready` is called once, when every mount serves. Returns why perchd could
// not start or serve on, with the code of the part that failed
// (kInvalidArgument: a usage or configuration error).
core::Status ServeAndHandOver(const DaemonConfig& cfg, const std::function<void()>& ready,
                              bool takeover);

}  // namespace perch
