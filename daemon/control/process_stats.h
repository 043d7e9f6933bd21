// What perchd itself costs the node now: CPU time, resident memory, file
// descriptors and threads, read from the kernel (getrusage, /proc/self) when
// asked. Filled into Stats beside core's counters for `perchctl stats` and
// Prometheus (whose standard process_* names it uses).
#pragma once

#include "daemon/core/node_control.h"
#include "daemon/core/status.h"
#include "proto/perch.pb.h"

namespace perch::control {

// This process's footprint now. A figure the kernel does not give (no /proc)
// stays 0; never fails.
v1::ProcessStats SampleProcess();

// Stats as perchd serves them (GetStats, /metrics): core's snapshot `s`
// (ToProto, whose status this returns) and this process's footprint now.
[[nodiscard]] core::Status StatsNow(const core::StatsSnapshot& s, v1::Stats* out);

}  // namespace perch::control
