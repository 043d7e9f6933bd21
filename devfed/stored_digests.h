// Stores each exported file's adler32 where XRootD looks for it (the
// `user.XrdCks.adler32` extended attribute, as `xrdadler32` writes it), so
// that the origin answers Want-Digest from the attribute, as a production
// origin does once it computed a digest, instead of computing one per
// request: XRootD 5.5.3 (Debian 12) can crash computing digests of files it
// cannot store them for (docs/quirks.md), and devfed's exports are not the
// `xrootd` user's. A file changed later has a stale attribute, which XRootD
// ignores (the attribute records the file's mtime) and computes anew.
#pragma once

#include <cstddef>
#include <filesystem>

namespace perch::devfed {

// Walks `dir` (following its own symlink, not those below it) and stores the
// attribute on every regular file; returns how many it stored. Files it
// cannot read or set an attribute on are left as they are.
size_t StoreAdler32(const std::filesystem::path& dir);

}  // namespace perch::devfed
