// perch-bench-crc FILE: what the store's CRC32C checks cost on this CPU
// (issue 41), through the store's own functions: Crc32c over bytes in the
// CPU's cache (a Read of a whole block checks the bytes it just read), and
// FileCrc32c over FILE from the page cache, in records of 110 KB (a small
// file's Slice) and in blocks of 4 MiB (a large file's first read in a run).
// FILE should be a few hundred MiB; it is read once first to be in the page
// cache. Prints one line per case.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

#include "daemon/store/block_file_format.h"

namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  using perch::store::Crc32c;
  using perch::store::FileCrc32c;
  if (argc != 2) {
    std::fprintf(stderr, "usage: perch-bench-crc FILE\n");
    return 2;
  }
  const int fd = ::open(argv[1], O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    std::perror(argv[1]);
    return 1;
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint32_t sink = 0, crc = 0;
  (void)FileCrc32c(fd, 0, size, &crc);  // into the page cache

  const std::string bytes(128 << 10, 'x');
  const int reps = 20000;
  double t0 = Seconds();
  for (int i = 0; i < reps; ++i) sink ^= Crc32c(bytes);
  double t = Seconds() - t0;
  std::printf("Crc32c, 128 KiB in the CPU's cache: %.1f GB/s, %.2f us per 110 KB\n",
              reps * static_cast<double>(bytes.size()) / t / 1e9,
              t / reps / static_cast<double>(bytes.size()) * 110000 * 1e6);

  for (uint64_t piece : {uint64_t{110000}, uint64_t{4} << 20}) {
    uint64_t n = 0;
    t0 = Seconds();
    for (int pass = 0; pass < 5; ++pass) {
      for (uint64_t off = 0; off + piece <= size; off += piece, ++n) {
        if (!FileCrc32c(fd, off, piece, &crc)) return 1;
        sink ^= crc;
      }
    }
    t = Seconds() - t0;
    std::printf("FileCrc32c, %llu-byte pieces from the page cache: %.1f us each, %.3f s per GB\n",
                static_cast<unsigned long long>(piece), t / static_cast<double>(n) * 1e6,
                t / (static_cast<double>(n) * static_cast<double>(piece) / 1e9));
  }
  std::printf("(%u)\n", sink);
  ::close(fd);
  return 0;
}
