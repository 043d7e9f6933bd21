// A job reading through a perch mount while perchd is handed over (issue 31),
// for the handoff and upgrade tests: a process with its working directory
// inside the mount that holds a large file and its directory open, reads the
// file over and over and opens, reads and lists as it goes, counting every
// failed call and every wrong byte.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>
#include <thread>
#include <vector>

namespace perch::testing {

// What the reader asks of the large file at a time.
constexpr size_t kReaderChunk = 1 << 20;

// Counters the reader process shares with the test.
struct ReaderShared {
  std::atomic<int> stop{0};
  std::atomic<uint64_t> reads{0}, failed{0}, wrong{0}, opens{0}, lists{0};
  std::atomic<int> first_errno{0};
  std::atomic<uint64_t> longest_read_us{0};  // of the large file (a handoff's pause)
  char first_failure[128] = {};
};

// The reader: a process (its working directory is its own) that reads the
// large file through one descriptor, over and over (dropping its page cache
// after each pass so that reads reach perchd), and every few reads lists its
// open directory, opens and reads a small file by a relative name, and stats
// its working directory. Plain system calls only (it runs in a fork of a
// threaded process), against expected bytes taken before the fork.
class Reader {
 public:
  Reader(std::filesystem::path dir, std::string big, std::vector<std::string> smalls)
      : dir_(std::move(dir)), big_(std::move(big)), smalls_(std::move(smalls)) {
    void* p = mmap(nullptr, sizeof(ReaderShared), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    shared_ = new (p) ReaderShared();
    buf_.resize(kReaderChunk);
    dents_.resize(1 << 16);
  }
  ~Reader() {
    Stop();
    munmap(shared_, sizeof(ReaderShared));
  }

  void Start() {
    pid_ = fork();
    if (pid_ == 0) _exit(Run());
  }
  // Stops the reader; its exit code (0: it ran to the end).
  int Stop() {
    if (pid_ <= 0) return exit_code_;
    shared_->stop = 1;
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return exit_code_;
  }
  // Waits until `n` more reads than now are done (false after 60 s or if the reader died).
  bool Progress(uint64_t n) {
    const uint64_t want = shared_->reads + n;
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (shared_->reads < want) {
      if (std::chrono::steady_clock::now() > end) return false;
      if (pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  const ReaderShared& shared() const { return *shared_; }
  std::string Failure() const {
    return std::string(shared_->first_failure) + " (errno " +
           std::to_string(shared_->first_errno.load()) + ": " +
           std::strerror(shared_->first_errno.load()) + ")";
  }

  std::string big_expected;
  std::vector<std::string> small_expected;

 private:
  void Fail(const char* what, int err) {
    if (shared_->failed++ == 0) {
      shared_->first_errno = err;
      std::strncpy(shared_->first_failure, what, sizeof(shared_->first_failure) - 1);
    }
  }

  int Run() {
    if (chdir(dir_.c_str()) != 0) return Fail("chdir", errno), 1;
    int big = open(big_.c_str(), O_RDONLY);
    int dir = open(".", O_RDONLY | O_DIRECTORY);
    if (big < 0 || dir < 0) return Fail("open", errno), 1;
    uint64_t off = 0;
    for (uint64_t k = 0; !shared_->stop; ++k) {
      const size_t len =
          static_cast<size_t>(std::min<uint64_t>(kReaderChunk, big_expected.size() - off));
      const auto started = std::chrono::steady_clock::now();
      ssize_t n = pread(big, buf_.data(), len, static_cast<off_t>(off));
      const uint64_t us =
          static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(
                                    std::chrono::steady_clock::now() - started)
                                    .count());
      if (us > shared_->longest_read_us) shared_->longest_read_us = us;
      if (n != static_cast<ssize_t>(len)) {
        Fail("pread of the open large file", n < 0 ? errno : 0);
      } else if (std::memcmp(buf_.data(), big_expected.data() + off, len) != 0) {
        shared_->wrong++;
      }
      shared_->reads++;
      off += len;
      if (off >= big_expected.size()) {
        off = 0;
        posix_fadvise(big, 0, 0, POSIX_FADV_DONTNEED);
      }
      if (k % 4 != 0) continue;
      // The open directory handle, from its start.
      lseek(dir, 0, SEEK_SET);
      long got = syscall(SYS_getdents64, dir, dents_.data(), dents_.size());
      if (got <= 0) Fail("getdents64 of the open directory", got < 0 ? errno : 0);
      shared_->lists++;
      // A new open, by a name relative to the working directory.
      const size_t i = (k / 4) % smalls_.size();
      int s = open(smalls_[i].c_str(), O_RDONLY);
      if (s < 0) {
        Fail("open of a small file", errno);
      } else {
        ssize_t r = read(s, buf_.data(), buf_.size());
        if (r != static_cast<ssize_t>(small_expected[i].size())) {
          Fail("read of a small file", r < 0 ? errno : 0);
        } else if (std::memcmp(buf_.data(), small_expected[i].data(), r) != 0) {
          shared_->wrong++;
        }
        close(s);
        shared_->opens++;
      }
      struct stat st {};
      if (stat(".", &st) != 0) Fail("stat of the working directory", errno);
    }
    close(big);
    close(dir);
    return 0;
  }

  std::filesystem::path dir_;
  std::string big_;
  std::vector<std::string> smalls_;
  ReaderShared* shared_ = nullptr;
  std::vector<char> buf_, dents_;
  pid_t pid_ = -1;
  int exit_code_ = -1;
};

}  // namespace perch::testing
