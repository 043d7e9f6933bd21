#include "fuse/kernel_tuning.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace perch::fuse {

// The largest read request whose reply libfuse can splice. It moves a reply
// (a 16-byte header and the data) through a per-thread pipe that it grows to
// the data and the header plus a page for the header and for each source
// buffer and one more (libfuse's fuse_send_data_iov), so four pages for a read
// spliced from two block files (one that spans a block boundary); a process without
// CAP_SYS_RESOURCE cannot grow a pipe past fs.pipe-max-size (1 MiB by
// default), and libfuse then copies every such reply through memory (a pread
// into a buffer and a writev: two copies per byte, measured at ~0.4 s of CPU
// per GB). So `wanted` is cut to what the largest pipe this process may have
// holds: 1004 KiB under the default limit.
uint32_t SpliceableMaxIo(uint32_t wanted) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  constexpr uint64_t kOutHeader = 16;  // struct fuse_out_header
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return wanted;
  constexpr uint64_t kPages = 4;  // header page, two source files, libfuse's spare
  long got = ::fcntl(p[0], F_SETPIPE_SZ, static_cast<int>(wanted + kPages * page + kOutHeader));
  if (got < 0) {
    uint64_t limit = 0;
    std::ifstream("/proc/sys/fs/pipe-max-size") >> limit;
    got = limit > 0 ? ::fcntl(p[0], F_SETPIPE_SZ, static_cast<int>(limit)) : -1;
  }
  ::close(p[0]);
  ::close(p[1]);
  if (got < 0 || static_cast<uint64_t>(got) < kPages * page + kOutHeader + 64 * 1024) return wanted;
  const uint64_t fits = (static_cast<uint64_t>(got) - kPages * page - kOutHeader) / page * page;
  return static_cast<uint32_t>(std::min<uint64_t>(wanted, fits));
}

uint32_t LoggedSpliceableMaxIo(uint32_t wanted) {
  const uint32_t io = SpliceableMaxIo(wanted);
  if (io < wanted) {
    spdlog::info(
        "fuse: largest read {} KiB, not {} KiB: replies are spliced through a pipe, "
        "and this process may not grow one past fs.pipe-max-size",
        io / 1024, wanted / 1024);
  }
  return io;
}

// Sets the kernel read-ahead of the FUSE mount at `mountpoint` to `bytes`.
// Runs on a thread of its own (detached: it holds nothing of the server)
// while the session loop serves the stat.
void SetReadAhead(const std::string& mountpoint, uint64_t bytes) {
  // The stat waits until the kernel has our INIT reply (which caps the
  // read-ahead at max_readahead) and names the mount's device: its bdi is
  // /sys/class/bdi/<major>:<minor>.
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) return;  // unmounted meanwhile
  // Still our FUSE mount (not the directory under it, unmounted meanwhile:
  // that bdi would be a real disk's).
  struct statfs fs {};
  constexpr decltype(fs.f_type) kFuseSuperMagic = 0x65735546;
  if (::statfs(mountpoint.c_str(), &fs) != 0 || fs.f_type != kFuseSuperMagic ||
      major(st.st_dev) != 0) {
    return;
  }
  const std::string file = "/sys/class/bdi/" + std::to_string(major(st.st_dev)) + ":" +
                           std::to_string(minor(st.st_dev)) + "/read_ahead_kb";
  const std::string kb = std::to_string(bytes >> 10);
  std::FILE* f = std::fopen(file.c_str(), "w");
  bool ok = f != nullptr && std::fputs(kb.c_str(), f) >= 0;
  if (f != nullptr) ok = std::fclose(f) == 0 && ok;
  const int err = errno;
  if (ok) {
    spdlog::info("fuse: kernel read-ahead of {} is {} KiB", mountpoint, kb);
  } else if (::getuid() != 0) {
    spdlog::info("fuse: kernel read-ahead of {} left as it is (setting it needs root)", mountpoint);
  } else {
    spdlog::warn("fuse: cannot set the kernel read-ahead of {} ({}: {})", mountpoint, file,
                 std::strerror(err));
  }
}

}  // namespace perch::fuse
