// The Prometheus text exposition (format 0.0.4) of the control API's Stats
// message, rendered by walking its fields: names, types and help come from
// each field's (perch.v1.metric) option, labels from the (perch.v1.label)
// fields of repeated messages. Metric names follow Prometheus conventions:
// "perch_", base units (bytes, seconds), "_total" for counters.
//
// Pure functions, safe from any thread.
#pragma once

#include <google/protobuf/message.h>

#include <string>

namespace perch::control {

// Renders `stats` (a v1::Stats, or any message annotated the same way).
// Fields marked omit, strings that are not labels and repeated numbers are
// left out.
std::string RenderPrometheus(const google::protobuf::Message& stats);

}  // namespace perch::control
