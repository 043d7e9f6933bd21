// The one mapping from core's snapshots to the control API's messages
// (perchctl stats, Prometheus, warm progress). Numbers are copied by name,
// through protobuf reflection: core's lists (StatsSnapshot::ForEachNumber and
// the Fields() of its per-namespace and per-client parts) name the message
// fields, so nothing here changes when a counter is added.
// Pure functions, safe from any thread.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <string>
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
// `p` as the VerifyProgress message.
void ToProto(const core::ScrubProgress& p, v1::VerifyProgress* out);

// `text` as a protobuf string field can carry it (UTF-8): each byte of an
// invalid sequence (a name that is not UTF-8) as "\xHH". For paths shown to
// users; a path that must come back exactly travels as PageToken does.
std::string ProtoText(std::string_view text);

// A page token for the last path of a page, opaque and UTF-8 (hex), and the
// path back from one (false if it is not a token).
std::string PageToken(std::string_view last_path);
bool PathOfPageToken(std::string_view token, std::string* path);

// Sets the number field `name` of `message` ("a.b": field b of the message in
// field a) to `value`: a uint64 field takes it, a bool field value != 0.
// kInternal if there is no such singular uint64 or bool field.
[[nodiscard]] core::Status SetNumber(google::protobuf::Message* message, std::string_view name,
                                     uint64_t value);

}  // namespace perch::control
