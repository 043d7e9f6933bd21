// What perchd tunes in the kernel for its FUSE mount: the size of a read
// request (so that replies are spliced, not copied) and the mount's
// read-ahead.
#pragma once

#include <cstdint>
#include <string>

namespace perch::fuse {

// The largest read request, at most `wanted`, whose reply libfuse can splice
// (see the .cc); logs when it is less than `wanted`.
uint32_t SpliceableMaxIo(uint32_t wanted);
uint32_t LoggedSpliceableMaxIo(uint32_t wanted);

// Sets the kernel read-ahead of the FUSE mount at `mountpoint` to `bytes`
// (its bdi's read_ahead_kb; root only). Blocks until the mount answers a stat:
// run it on a thread of its own while the session serves.
void SetReadAhead(const std::string& mountpoint, uint64_t bytes);

}  // namespace perch::fuse
