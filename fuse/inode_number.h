// The inode number (st_ino, d_ino) the mount shows for a path.
//
// It is a hash of the path, not the FUSE node id: a plain READDIR (the kernel
// asks for one after the first READDIRPLUS of a large directory) gives every
// entry a d_ino without a lookup, so without a node id to give, and glibc's
// readdir() drops entries whose d_ino is 0 (a directory of 8,000 files listed
// 6,551). A hash gives the same number in READDIR, READDIRPLUS, LOOKUP and
// GETATTR, across forgets, remounts and restarts. Two paths of one mount
// share a number with odds of about n^2 / 2^65 (1e-8 for a million files);
// st_nlink is 1 for files, so tools do not take a shared number for a hard
// link.
#pragma once

#include <cstdint>
#include <string_view>

#include "daemon/core/types.h"

namespace perch::fuse {

// The root is 1 (FUSE_ROOT_ID, as the kernel and libfuse number it); every
// other path a number from 2 to 2^64 - 1.
inline uint64_t InodeNumberOf(const core::ObjectPath& path) {
  if (path.IsRoot()) return 1;
  // FNV-1a over the bytes, then SplitMix64's finaliser to spread the bits.
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : std::string_view(path.str())) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h < 2 ? h + 2 : h;
}

}  // namespace perch::fuse
