// InodeTable: the node ids the kernel holds for paths, with the kernel's
// lookup count of each (node ids <-> paths, lookups, forget).
//
// A node id is given out by Remember (a LOOKUP reply or a READDIRPLUS entry:
// one more lookup the kernel holds) and stays valid until FORGETs bring its
// count to 0; the root (kRootId, FUSE_ROOT_ID) is never forgotten. Lookup
// counts change only so: by Remember and Forget. A path remembered while it
// holds an id gets that id again; ids are never reused (a forgotten path
// gets a new one). The st_ino the mount shows is not this id but a hash of
// the path (inode_number.h).
//
// Each path is stored once (issue 14: a `find` over 1 M files remembers
// 1 M): by_path_'s key is a view of the path in inodes_ (nodes of an
// unordered_map do not move).
//
// Thread-safety: all methods from any thread; mu_ is a leaf lock.
#pragma once

#include <cstdint>
#include <string_view>
#include <unordered_map>

#include "daemon/core/mutex.h"
#include "daemon/core/status.h"
#include "daemon/core/types.h"
#include "fuse/session_state.h"

namespace perch::fuse {

class InodeTable {
 public:
  static constexpr uint64_t kRootId = 1;  // FUSE_ROOT_ID: the mount's root, "/"

  InodeTable();  // the root alone, with one lookup
  InodeTable(const InodeTable&) = delete;
  InodeTable& operator=(const InodeTable&) = delete;

  // The id of `path`, with one more lookup: the kernel is about to be told it.
  uint64_t Remember(const core::ObjectPath& path);
  // The kernel let go of `n` lookups of `ino` (n >= count: all); at 0 the id
  // is gone. Unknown ids and the root are ignored.
  void Forget(uint64_t ino, uint64_t n);
  // The path of `ino`; false if the kernel holds no such id (ESTALE).
  bool PathOf(uint64_t ino, core::ObjectPath* out) const;

  // The handoff (issue 31): every id with its path and count, and the next id.
  void Save(SessionState* s) const;
  // Replaces the table with what `s` holds (the root added if it lacks it).
  // kInvalidArgument, and the table unchanged, if a path does not parse.
  core::Status Restore(const SessionState& s);

 private:
  struct Inode {
    core::ObjectPath path;
    uint64_t lookups = 0;
  };

  mutable core::Mutex mu_;
  std::unordered_map<uint64_t, Inode> inodes_ PERCH_GUARDED_BY(mu_);
  // Path -> id of every inode in inodes_; the key views that Inode's path.
  std::unordered_map<std::string_view, uint64_t> by_path_ PERCH_GUARDED_BY(mu_);
  uint64_t next_ino_ PERCH_GUARDED_BY(mu_) = kRootId + 1;
};

}  // namespace perch::fuse
