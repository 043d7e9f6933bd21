// Passthrough's I/O hooks over a pipe standing in for /dev/fuse: the bytes
// it reads and writes are the kernel's UAPI layouts (fuse_in_header,
// fuse_init_in/out, fuse_open_out), patched only where they must be.
#include "fuse/passthrough.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace perch::fuse {
namespace {

constexpr uint32_t kInit = 26, kOpen = 14, kRead = 15;

template <typename T>
void Put(std::string* s, size_t at, T v) {
  if (s->size() < at + sizeof(v)) s->resize(at + sizeof(v), '\0');
  std::memcpy(s->data() + at, &v, sizeof(v));
}
template <typename T>
T Get(const std::string& s, size_t at) {
  T v;
  std::memcpy(&v, s.data() + at, sizeof(v));
  return v;
}

class PassthroughHooksTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(in_), 0);
    ASSERT_EQ(::pipe(out_), 0);
  }
  void TearDown() override {
    for (int fd : {in_[0], in_[1], out_[0], out_[1]}) ::close(fd);
  }
  // A request as the kernel writes it: fuse_in_header (40 bytes) + `body`.
  void Request(uint32_t opcode, uint64_t unique, const std::string& body = "") {
    std::string r;
    Put<uint32_t>(&r, 0, static_cast<uint32_t>(40 + body.size()));
    Put<uint32_t>(&r, 4, opcode);
    Put<uint64_t>(&r, 8, unique);
    r.resize(40, '\0');
    r += body;
    ASSERT_EQ(::write(in_[1], r.data(), r.size()), static_cast<ssize_t>(r.size()));
    char buf[4096];
    ASSERT_EQ(pt_.Read(in_[0], buf, sizeof(buf)), static_cast<ssize_t>(r.size()));
  }
  // A reply as libfuse writes it (fuse_out_header + `arg`); what reached the "device".
  std::string Reply(uint64_t unique, std::string arg, int32_t error = 0) {
    std::string h;
    Put<uint32_t>(&h, 0, static_cast<uint32_t>(16 + arg.size()));
    Put<int32_t>(&h, 4, error);
    Put<uint64_t>(&h, 8, unique);
    struct iovec iov[2] = {{h.data(), h.size()}, {arg.data(), arg.size()}};
    EXPECT_EQ(pt_.Writev(out_[1], iov, 2), static_cast<ssize_t>(h.size() + arg.size()));
    std::string got(h.size() + arg.size(), '\0');
    EXPECT_EQ(::read(out_[0], got.data(), got.size()), static_cast<ssize_t>(got.size()));
    return got.substr(16);
  }
  // An error reply as libfuse writes it (fuse_reply_err): the header alone, one iovec.
  void ErrorReply(uint64_t unique, int32_t error) {
    std::string h;
    Put<uint32_t>(&h, 0, 16);
    Put<int32_t>(&h, 4, error);
    Put<uint64_t>(&h, 8, unique);
    struct iovec iov[1] = {{h.data(), h.size()}};
    EXPECT_EQ(pt_.Writev(out_[1], iov, 1), 16);
    std::string got(16, '\0');
    EXPECT_EQ(::read(out_[0], got.data(), got.size()), 16);
    EXPECT_EQ(got, h);
  }
  static std::string InitIn(bool offers) {
    std::string b;
    Put<uint32_t>(&b, 0, 7);
    Put<uint32_t>(&b, 4, 45);
    Put<uint32_t>(&b, 12, 1u << 30);                  // FUSE_INIT_EXT
    Put<uint32_t>(&b, 16, offers ? 0x5fdu : 0x5ddu);  // flags2, bit 5: FUSE_PASSTHROUGH
    b.resize(64, '\0');
    return b;
  }
  static std::string OpenOut(uint64_t fh, uint32_t flags) {
    std::string o;
    Put<uint64_t>(&o, 0, fh);
    Put<uint32_t>(&o, 8, flags);
    Put<uint32_t>(&o, 12, 0);
    return o;
  }

  int in_[2] = {-1, -1}, out_[2] = {-1, -1};
  Passthrough pt_;
};

TEST_F(PassthroughHooksTest, InitReplyAsksForPassthroughOnlyWhenOfferedAndWanted) {
  Request(kInit, 1, InitIn(true));
  EXPECT_TRUE(pt_.offered());
  pt_.Want();
  std::string init_out(64, '\0');
  Put<uint32_t>(&init_out, 12, 0x1234u);
  const std::string sent = Reply(1, init_out);
  EXPECT_EQ(Get<uint32_t>(sent, 12), 0x1234u | (1u << 30));
  EXPECT_EQ(Get<uint32_t>(sent, 32) & (1u << 5), 1u << 5);
  EXPECT_EQ(Get<uint32_t>(sent, 36), 1u);  // max_stack_depth
  EXPECT_TRUE(pt_.agreed());
}

TEST_F(PassthroughHooksTest, AKernelWithoutPassthroughGetsAnUntouchedInitReply) {
  Request(kInit, 1, InitIn(false));
  EXPECT_FALSE(pt_.offered());
  pt_.Want();
  std::string init_out(64, '\0');
  EXPECT_EQ(Reply(1, init_out), init_out);
  EXPECT_FALSE(pt_.agreed());
}

TEST_F(PassthroughHooksTest, OnlyTheMarkedOpenReplyPassesThrough) {
  constexpr uint32_t kKeepCache = 1u << 1, kNoFlush = 1u << 5, kPassthrough = 1u << 7;
  Request(kOpen, 7);
  Request(kOpen, 8);
  Request(kRead, 9);
  pt_.Direct(/*fh=*/70, /*id=*/3);
  std::string a = Reply(7, OpenOut(70, kKeepCache | kNoFlush));
  EXPECT_EQ(Get<uint32_t>(a, 8), kNoFlush | kPassthrough);  // no keep_cache with passthrough
  EXPECT_EQ(Get<int32_t>(a, 12), 3);
  // Another open (handle not marked) and a 16-byte read reply are left alone.
  EXPECT_EQ(Reply(8, OpenOut(80, kKeepCache)), OpenOut(80, kKeepCache));
  EXPECT_EQ(Reply(9, OpenOut(70, kKeepCache)), OpenOut(70, kKeepCache));
  // A mark is used once; an error reply is never patched.
  Request(kOpen, 10);
  EXPECT_EQ(Reply(10, OpenOut(70, 0)), OpenOut(70, 0));
  Request(kOpen, 11);
  pt_.Direct(71, 4);
  EXPECT_EQ(Reply(11, "", -2), "");
  pt_.Undo(71);
}

// Issue 28 item 7: an OPEN answered with an error (ENOENT, EROFS, ENOSYS for
// no-open) is one iovec; it was never forgotten, so the set grew by one per
// failed open for the life of the mount.
TEST_F(PassthroughHooksTest, AnOpenAnsweredWithAnErrorIsForgotten) {
  Request(kOpen, 21);
  Request(kOpen, 22);
  EXPECT_EQ(pt_.PendingOpensForTest(), 2u);
  ErrorReply(21, -ENOENT);
  EXPECT_EQ(pt_.PendingOpensForTest(), 1u);
  Reply(22, OpenOut(90, 0));
  EXPECT_EQ(pt_.PendingOpensForTest(), 0u);
  for (uint64_t unique = 100; unique < 1100; ++unique) {
    Request(kOpen, unique);
    ErrorReply(unique, -ENOSYS);
  }
  EXPECT_EQ(pt_.PendingOpensForTest(), 0u);
}

// The kernel's INIT argument is kept as it came, for a successor to replay.
TEST_F(PassthroughHooksTest, KeepsTheKernelsInitArgument) {
  EXPECT_EQ(pt_.init(), "");
  Request(kInit, 2, InitIn(true));
  EXPECT_EQ(pt_.init(), InitIn(true));
  EXPECT_TRUE(pt_.offered());
}

// StopReading: a worker blocked in read(2) is woken (here by a signal, as
// perchd does) and waits without taking a request; a request written
// meanwhile stays for whoever reads next; ResumeReading lets it read again,
// EndReading lets it go with EINTR.
TEST_F(PassthroughHooksTest, StopReadingParksWorkersWithoutTakingRequests) {
  struct sigaction wake {};
  wake.sa_handler = [](int) {};
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGUSR2, &wake, &old), 0);  // no SA_RESTART
  std::atomic<int> results{0};
  std::atomic<ssize_t> last{0};
  std::atomic<int> last_errno{0};
  auto worker = [&] {
    char buf[4096];
    while (true) {
      ssize_t n = pt_.Read(in_[0], buf, sizeof(buf));
      last_errno = errno;
      last = n;
      results++;
      if (n <= 0) return;
    }
  };
  std::thread t(worker);
  // The worker is blocked in read(2) of an empty "device".
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  ASSERT_TRUE(pt_.StopReading([](pthread_t th) { pthread_kill(th, SIGUSR2); }, deadline));
  // A request now waits in the "device": the parked worker does not take it.
  std::string r;
  Put<uint32_t>(&r, 0, 40);
  Put<uint32_t>(&r, 4, kRead);
  Put<uint64_t>(&r, 8, 4);
  r.resize(40, '\0');
  ASSERT_EQ(::write(in_[1], r.data(), r.size()), 40);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(results.load(), 0);
  // Called off: it reads the request.
  pt_.ResumeReading();
  for (int i = 0; i < 500 && results.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  EXPECT_EQ(results.load(), 1);
  EXPECT_EQ(last.load(), 40);
  // Stopped again and ended: the worker returns EINTR (libfuse then ends it).
  ASSERT_TRUE(pt_.StopReading([](pthread_t th) { pthread_kill(th, SIGUSR2); },
                              std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  pt_.EndReading();
  t.join();
  EXPECT_EQ(results.load(), 2);
  EXPECT_EQ(last.load(), -1);
  EXPECT_EQ(last_errno.load(), EINTR);
  ::sigaction(SIGUSR2, &old, nullptr);
}

// A worker that holds a request (returned from the hook, not yet back) keeps
// StopReading waiting until it comes back for the next one.
TEST_F(PassthroughHooksTest, StopReadingWaitsForTheRequestInHand) {
  char buf[4096];
  std::string r;
  Put<uint32_t>(&r, 0, 40);
  Put<uint32_t>(&r, 4, kRead);
  Put<uint64_t>(&r, 8, 6);
  r.resize(40, '\0');
  ASSERT_EQ(::write(in_[1], r.data(), r.size()), 40);
  std::atomic<bool> release{false};
  std::thread t([&] {
    ASSERT_EQ(pt_.Read(in_[0], buf, sizeof(buf)), 40);  // in hand
    while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_EQ(pt_.Read(in_[0], buf, sizeof(buf)), -1);  // back: parks, then ends
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(pt_.StopReading([](pthread_t) {},
                               std::chrono::steady_clock::now() + std::chrono::milliseconds(50)));
  release = true;
  EXPECT_TRUE(pt_.StopReading([](pthread_t) {},
                              std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  pt_.EndReading();
  t.join();
}

}  // namespace
}  // namespace perch::fuse
