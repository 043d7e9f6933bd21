// ReadBytes: core::FileSystem::Read as one blocking call that yields the
// bytes, for tests that check what a read gives rather than how (slices are
// read from their files). Waits no longer than the read's deadline and
// kAnswerSlack.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "daemon/core/filesystem.h"
#include "daemon/core/wait.h"

namespace perch::testing {

// The bytes of `pieces`, in order.
inline core::Result<core::Bytes> Joined(const std::vector<core::ReadPiece>& pieces) {
  core::Bytes all;
  for (const core::ReadPiece& p : pieces) {
    if (const core::SharedBytes* b = p.bytes()) {
      all += b->view();
      continue;
    }
    const core::BlockSlice& s = *p.slice();
    std::string part(s.length(), '\0');
    ssize_t n = ::pread(s.fd(), part.data(), part.size(), static_cast<off_t>(s.file_offset()));
    if (n != static_cast<ssize_t>(part.size()))
      return core::InternalError("short pread of a slice");
    all += part;
  }
  return all;
}

inline core::Result<core::Bytes> ReadBytes(core::FileSystem& fs, const core::FileRef& file,
                                           uint64_t offset, uint64_t size) {
  auto pieces = core::WaitFor<std::vector<core::ReadPiece>>(
      fs.NewDeadline(), [&](auto done) { fs.Read(file, offset, size, done); });
  if (!pieces.ok()) return pieces.status();
  return Joined(*pieces);
}

// The same for an open file's handle.
inline core::Result<core::Bytes> ReadBytes(core::FileSystem& fs, uint64_t handle, uint64_t offset,
                                           uint64_t size) {
  return ReadBytes(fs, core::FileRef::Handle(handle), offset, size);
}

}  // namespace perch::testing
