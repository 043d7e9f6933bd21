// SessionState: what one FUSE mount's kernel side relies on, handed from a
// perchd to its successor with the mount's /dev/fuse descriptor (issue 31).
//
// The kernel keeps, per connection: the node ids it was given (and how many
// lookups of each it holds until it sends FORGET), the handles of open files
// and directories (READ, READDIR and RELEASE name them), the backing files it
// reads passthrough files from (by id), and what INIT negotiated. A perchd
// that takes over the connection must answer all of them as the previous one
// would: this is that state, and its encoding (a versioned binary form; the
// decoder bounds every count by the input's length and never reads past it).
//
// Thread-safety: a value type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::fuse {

struct SessionState {
  // The kernel's FUSE_INIT request argument (fuse_init_in) as it arrived:
  // the successor's libfuse session is fed the same INIT, so it computes the
  // same connection parameters the kernel holds.
  std::string init;
  struct Node {
    uint64_t ino = 0;
    std::string path;
    uint64_t lookups = 0;
  };
  std::vector<Node> nodes;  // the root too
  uint64_t next_ino = 2;
  struct File {
    uint64_t fh = 0;
    uint64_t ino = 0;
    std::string path;
    core::FileAttr attr;  // the version the open pinned
    bool direct = false;  // answered in passthrough
  };
  std::vector<File> files;
  struct Dir {
    uint64_t dh = 0;
    std::string path;
  };
  std::vector<Dir> dirs;
  uint64_t next_dh = 1;
  struct Backing {
    uint64_t ino = 0;
    int32_t id = 0;  // registered with the kernel on this connection
  };
  std::vector<Backing> backings;
  // The open policy's state (OpenPolicy).
  bool passthrough_offered = false, passthrough_agreed = false;
  bool no_open = false, deciding = false, no_passthrough = false;
  uint64_t opens = 0, large_opens = 0;
};

std::string EncodeSessionState(const SessionState& s);
// kInvalidArgument if `in` is not a whole SessionState of this version.
core::Result<SessionState> DecodeSessionState(std::string_view in);

}  // namespace perch::fuse
