// The one mapping from core's snapshots to the control API's messages
// (perchctl stats, warm progress). Pure functions, safe from any thread.
#pragma once

#include "daemon/core/node_control.h"
#include "proto/perch.pb.h"

namespace perch::control {

// `s` as the Stats message; `node` names catalog paths as federation paths.
void ToProto(const core::NodeControl& node, const core::StatsSnapshot& s, v1::Stats* out);
// `p` as the WarmProgress message.
void ToProto(const core::NodeControl& node, const core::WarmProgress& p, v1::WarmProgress* out);

}  // namespace perch::control
