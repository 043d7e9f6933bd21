#include "fuse/session_state.h"

#include "daemon/core/codec.h"

namespace perch::fuse {

namespace {

using core::codec::PutString;
using core::codec::PutU64;
using core::codec::PutVarint;

constexpr uint64_t kVersion = 1;

void PutAttr(std::string* out, const core::FileAttr& a) {
  PutVarint(out, (a.is_dir ? 1 : 0) | (a.restricted ? 2 : 0) | (a.partial_listing ? 4 : 0));
  PutU64(out, a.size);
  PutU64(out, static_cast<uint64_t>(a.mtime));
  PutString(out, a.etag);
}

bool GetAttr(core::codec::Reader& r, core::FileAttr* a) {
  uint64_t bits = 0, mtime = 0;
  if (!r.GetVarint(&bits) || !r.GetU64(&a->size) || !r.GetU64(&mtime) || !r.GetString(&a->etag))
    return false;
  a->is_dir = bits & 1;
  a->restricted = bits & 2;
  a->partial_listing = bits & 4;
  a->mtime = static_cast<int64_t>(mtime);
  return true;
}

}  // namespace

std::string EncodeSessionState(const SessionState& s) {
  std::string out;
  PutVarint(&out, kVersion);
  PutString(&out, s.init);
  PutVarint(&out, s.next_ino);
  PutVarint(&out, s.nodes.size());
  for (const auto& n : s.nodes) {
    PutVarint(&out, n.ino);
    PutString(&out, n.path);
    PutVarint(&out, n.lookups);
  }
  PutVarint(&out, s.files.size());
  for (const auto& f : s.files) {
    PutVarint(&out, f.fh);
    PutVarint(&out, f.ino);
    PutString(&out, f.path);
    PutAttr(&out, f.attr);
    PutVarint(&out, f.direct ? 1 : 0);
  }
  PutVarint(&out, s.next_dh);
  PutVarint(&out, s.dirs.size());
  for (const auto& d : s.dirs) {
    PutVarint(&out, d.dh);
    PutString(&out, d.path);
  }
  PutVarint(&out, s.backings.size());
  for (const auto& b : s.backings) {
    PutVarint(&out, b.ino);
    PutVarint(&out, static_cast<uint32_t>(b.id));
  }
  PutVarint(&out, (s.passthrough_offered ? 1 : 0) | (s.passthrough_agreed ? 2 : 0) |
                      (s.no_open ? 4 : 0) | (s.deciding ? 8 : 0) | (s.no_passthrough ? 16 : 0));
  PutVarint(&out, s.opens);
  PutVarint(&out, s.large_opens);
  return out;
}

core::Result<SessionState> DecodeSessionState(std::string_view in) {
  const auto bad = [](const char* what) {
    return core::InvalidArgumentError(std::string("handoff state: ") + what);
  };
  core::codec::Reader r(in);
  SessionState s;
  uint64_t version = 0, n = 0;
  if (!r.GetVarint(&version) || version != kVersion) return bad("unknown version");
  if (!r.GetString(&s.init) || !r.GetVarint(&s.next_ino) || !r.GetVarint(&n)) return bad("header");
  // Each element takes at least a byte: a count beyond the input is a lie.
  if (n > in.size()) return bad("node count");
  s.nodes.resize(n);
  for (auto& node : s.nodes) {
    if (!r.GetVarint(&node.ino) || !r.GetString(&node.path) || !r.GetVarint(&node.lookups))
      return bad("node");
  }
  if (!r.GetVarint(&n) || n > in.size()) return bad("file count");
  s.files.resize(n);
  for (auto& f : s.files) {
    uint64_t direct = 0;
    if (!r.GetVarint(&f.fh) || !r.GetVarint(&f.ino) || !r.GetString(&f.path) ||
        !GetAttr(r, &f.attr) || !r.GetVarint(&direct))
      return bad("file");
    f.direct = direct != 0;
  }
  if (!r.GetVarint(&s.next_dh) || !r.GetVarint(&n) || n > in.size()) return bad("dir count");
  s.dirs.resize(n);
  for (auto& d : s.dirs) {
    if (!r.GetVarint(&d.dh) || !r.GetString(&d.path)) return bad("dir");
  }
  if (!r.GetVarint(&n) || n > in.size()) return bad("backing count");
  s.backings.resize(n);
  for (auto& b : s.backings) {
    uint64_t id = 0;
    if (!r.GetVarint(&b.ino) || !r.GetVarint(&id) || id > UINT32_MAX) return bad("backing");
    b.id = static_cast<int32_t>(id);
  }
  uint64_t bits = 0;
  if (!r.GetVarint(&bits) || !r.GetVarint(&s.opens) || !r.GetVarint(&s.large_opens) || !r.done())
    return bad("trailer");
  s.passthrough_offered = bits & 1;
  s.passthrough_agreed = bits & 2;
  s.no_open = bits & 4;
  s.deciding = bits & 8;
  s.no_passthrough = bits & 16;
  return s;
}

}  // namespace perch::fuse
