// The largest FUSE read whose reply libfuse can splice: a pipe of this process
// holds the reply (data, three pages and the 16-byte header, libfuse's
// estimate), and nothing larger than asked for is chosen.
#include "fuse/kernel_tuning.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

namespace perch::fuse {
namespace {

// Whether a pipe of this process can be grown to `bytes`.
bool PipeHolds(uint64_t bytes) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return false;
  const long got = ::fcntl(p[0], F_SETPIPE_SZ, static_cast<int>(bytes));
  ::close(p[0]);
  ::close(p[1]);
  return got >= 0 && static_cast<uint64_t>(got) >= bytes;
}

TEST(SpliceableMaxIoTest, ARequestThatFitsIsKept) {
  EXPECT_EQ(SpliceableMaxIo(128 << 10), 128u << 10);
}

TEST(SpliceableMaxIoTest, TheChosenSizeSplicesAndIsWholePages) {
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (uint32_t wanted : {1u << 20, 4u << 20}) {
    const uint32_t io = SpliceableMaxIo(wanted);
    EXPECT_LE(io, wanted);
    EXPECT_GE(io, 64u << 10);
    EXPECT_EQ(io % page, 0u);
    // A reply spliced from two block files (a read across a block boundary).
    EXPECT_TRUE(PipeHolds(io + 4 * page + 16)) << io;
    if (io < wanted) {
      EXPECT_FALSE(PipeHolds(wanted + 4 * page + 16)) << "cut although the pipe could grow";
    }
  }
}

}  // namespace
}  // namespace perch::fuse
