// The one mapping from core's snapshots to the control API's messages
// (perchctl stats, Prometheus, warm progress). Numbers are copied by name,
// through protobuf reflection: core's lists (StatsSnapshot::ForEachNumber and
// the Fields() of its per-namespace and per-client parts) name the message
// fields, so nothing here changes when a counter is added.
// Pure functions, safe from any thread.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <string_view>

#include "daemon/core/node_control.h"
#include "daemon/core/status.h"
#include "proto/perch.pb.h"

namespace perch::control {

// `s` as the Stats message. kInternal, naming them, if some of core's names
// have no number field in Stats (a bug the unit tests catch); every other
// field is filled all the same.
[[nodiscard]] core::Status ToProto(const core::StatsSnapshot& s, v1::Stats* out);
// `p` as the WarmProgress message.
void ToProto(const core::WarmProgress& p, v1::WarmProgress* out);

// Sets the number field `name` of `message` ("a.b": field b of the message in
// field a) to `value`: a uint64 field takes it, a bool field value != 0.
// kInternal if there is no such singular uint64 or bool field.
[[nodiscard]] core::Status SetNumber(google::protobuf::Message* message, std::string_view name,
                                     uint64_t value);

}  // namespace perch::control
