// Issue 28, "never wrong": races between replies and eviction, end to end.
// The real perchd over perch-devfed (XRootD origins), its FUSE mount and its
// HTTP endpoint, perchctl, and clients of our own that read as slowly as a
// stalled peer does. Each test here failed on the issue's main:
//   - items 4: an evict while a slow endpoint client was being sent a cached
//     block (an object file's, or a small object's pack record after its
//     1 s grace) sent zeros with 200 OK;
//   - item 5: with passthrough and the switch to no-open both on (the
//     defaults), a file open in passthrough made every later open of it EIO;
//   - item 6: a failure after the headers put the X-Transfer-Status trailer
//     inside a chunk whose size was already sent;
// and a stress test of all of it at once checks every byte it reads.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/mounted_federation.h"
#include "tests/integration/stats_json.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

// A connected loopback socket to `addr` ("127.0.0.1:PORT") with a receive
// buffer of `rcvbuf` bytes (0: the default), so that the server's sends
// block as they do for a stalled client; -1 on failure.
int Connect(const std::string& addr, int rcvbuf) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (rcvbuf > 0) ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  struct timeval tv {
    60, 0
  };
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))));
  ::inet_pton(AF_INET, addr.substr(0, addr.rfind(':')).c_str(), &sa.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Receives up to `n` bytes into `out` (appended) in pieces of at most
// `piece`; false at the end of the stream or on an error.
bool Receive(int fd, std::string* out, size_t n, size_t piece = 64 << 10) {
  std::string buf(std::min(n, piece), '\0');
  while (n > 0) {
    ssize_t got = ::recv(fd, buf.data(), std::min(n, buf.size()), 0);
    if (got <= 0) return false;
    out->append(buf.data(), static_cast<size_t>(got));
    n -= static_cast<size_t>(got);
  }
  return true;
}

// One GET of `path` from the endpoint at `addr`, read slowly: the answer's
// head, then `first` bytes of the body, then `pause()` runs, then the rest,
// in pieces of `piece` bytes with `nap` between them.
struct Answer {
  std::string head, body;
  uint64_t content_length = 0;
  bool complete = false;  // Content-Length bytes arrived
};
Answer SlowGet(const std::string& addr, const std::string& path, uint64_t first,
               const std::function<void()>& pause, size_t piece = 64 << 10,
               std::chrono::microseconds nap = std::chrono::microseconds(0)) {
  Answer a;
  const int fd = Connect(addr, 4096);
  if (fd < 0) return a;
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: perch\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return a;
  }
  std::string in;
  size_t end = std::string::npos;
  while ((end = in.find("\r\n\r\n")) == std::string::npos) {
    if (!Receive(fd, &in, 1, 1)) break;
  }
  if (end == std::string::npos) {
    ::close(fd);
    return a;
  }
  a.head = in.substr(0, end + 4);
  const size_t cl = a.head.find("Content-Length: ");
  if (cl != std::string::npos) a.content_length = std::stoull(a.head.substr(cl + 16));
  bool ok = Receive(fd, &a.body, std::min<uint64_t>(first, a.content_length));
  if (pause) pause();
  while (ok && a.body.size() < a.content_length) {
    ok = Receive(fd, &a.body, std::min<uint64_t>(piece, a.content_length - a.body.size()), piece);
    if (nap.count() > 0) std::this_thread::sleep_for(nap);
  }
  a.complete = a.body.size() == a.content_length;
  ::close(fd);
  return a;
}

// Where `got` first differs from `want` ("" if nowhere), for a failure message.
std::string FirstDifference(const std::string& got, const std::string& want) {
  if (got == want) return "";
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  size_t zeros = 0;
  while (i + zeros < got.size() && got[i + zeros] == '\0') ++zeros;
  return "differs from byte " + std::to_string(i) + " of " + std::to_string(want.size()) +
         " (got " + std::to_string(got.size()) + " bytes; " + std::to_string(zeros) +
         " zero bytes from there)";
}

class Issue28Test : public MountedFederation {
 protected:
  void SetUp() override {
    std::vector<TreeFile> files = {
        {"big.bin", 9 * kMiB + 333}, {"packed.bin", 3 * kMiB + 777}, {"gone.bin", 8 * kMiB + 55}};
    for (int i = 0; i < 300; ++i) files.push_back({"many/f" + std::to_string(i), 700});
    for (int i = 0; i < 4; ++i)
      files.push_back({"s/big" + std::to_string(i), 5 * kMiB + 1000u * i});
    for (int i = 0; i < 40; ++i)
      files.push_back({"s/small" + std::to_string(i), 20000u + 23456u * static_cast<unsigned>(i)});
    StartFederation("issue28", files);
  }

  // Mounts /test with the endpoint on a free loopback port.
  void MountWithEndpoint(std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"--http", "127.0.0.1:0", "--log-level", "info"});
    Mount(extra);
    if (HasFatalFailure()) return;
    addr_ = CtlJson({"health", "--json"}).value("http_address", "");
    ASSERT_FALSE(addr_.empty());
  }

  json Stats() { return CtlJson({"stats", "--json"}); }
  static uint64_t Num(const json& s, const char* name) {
    return s.contains(name) ? s[name].get<uint64_t>() : 0;
  }
  void Warm(const std::string& rel) {
    RunResult r = Ctl({"warm", "/test/" + rel, "--wait"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  void Evict(const std::string& rel) {
    RunResult r = Ctl({"evict", "/test/" + rel});
    EXPECT_EQ(r.exit_code, 0) << r.output;
  }

  std::string addr_;
};

// Item 4: a cached file of three blocks (object file), a client that reads
// 64 KiB and stalls, an evict, then the rest: on main the rest of block 0
// was zeros (the hole punched under sendfile), with 200 OK.
TEST_F(Issue28Test, AnEvictDuringASlowSendLeavesTheBlockBeingSent) {
  MountWithEndpoint();
  const std::string want = Original("big.bin");
  Warm("big.bin");
  Answer a = SlowGet(addr_, "/test/big.bin", 64 << 10, [&] { Evict("big.bin"); });
  ASSERT_NE(a.head.find(" 200 "), std::string::npos) << a.head;
  EXPECT_TRUE(a.complete);
  EXPECT_TRUE(a.body == want) << FirstDifference(a.body, want);
  // The next reader gets the origin's bytes too.
  EXPECT_TRUE(ReadFile("big.bin") == want);
}

// Item 4, a small object: its record in a pack is punched 1 s after its
// evict; a client stalled longer than that got zeros on main.
TEST_F(Issue28Test, AnEvictedPackRecordStaysUntilTheSlowSendEnds) {
  MountWithEndpoint();
  const std::string want = Original("packed.bin");
  Warm("packed.bin");
  Answer a = SlowGet(addr_, "/test/packed.bin", 64 << 10, [&] {
    Evict("packed.bin");
    std::this_thread::sleep_for(std::chrono::milliseconds(1800));  // past the pack's grace
  });
  ASSERT_NE(a.head.find(" 200 "), std::string::npos) << a.head;
  EXPECT_TRUE(a.complete);
  EXPECT_TRUE(a.body == want) << FirstDifference(a.body, want);
  EXPECT_TRUE(ReadFile("packed.bin") == want);
}

// Item 6: a read that fails after the headers went out (the object gone
// from the origin, its first block and attributes still cached) ends the
// chunked body with the trailer, in a well-formed chunked body: on main the
// next chunk's size was sent before its read failed, and the trailer landed
// inside that chunk.
TEST_F(Issue28Test, AFailureAfterTheHeadersEndsAWellFormedChunkedBody) {
  MountWithEndpoint({"--block-size", "1M"});
  const std::string want = Original("gone.bin");
  // Its first block cached (the prefetcher may add a block or two of the
  // nine), then it goes from the origin.
  RunResult r = RunToExit("/usr/bin/curl", {"-sS", "-r", "0-999", "-o", "/dev/null",
                                            "http://" + addr_ + "/test/gone.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  fs::remove(tree_ / "gone.bin");
  const int fd = Connect(addr_, 0);
  ASSERT_GE(fd, 0);
  const std::string req =
      "GET /test/gone.bin HTTP/1.1\r\nHost: perch\r\nX-Transfer-Status: true\r\n"
      "TE: trailers\r\nConnection: close\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::string in;
  while (Receive(fd, &in, 1 << 16)) {
  }
  ::close(fd);
  const size_t end = in.find("\r\n\r\n");
  ASSERT_NE(end, std::string::npos) << in;
  const std::string head = in.substr(0, end + 4);
  ASSERT_NE(head.find(" 200 "), std::string::npos) << head;
  ASSERT_NE(head.find("Transfer-Encoding: chunked"), std::string::npos) << head;
  // The chunks: "<hex>\r\n<bytes>\r\n" ..., "0\r\n", the trailer, "\r\n".
  size_t at = end + 4;
  std::string body;
  for (;;) {
    const size_t eol = in.find("\r\n", at);
    ASSERT_NE(eol, std::string::npos) << "no chunk size at " << at << ": " << in.substr(at, 200);
    const std::string size_line = in.substr(at, eol - at);
    ASSERT_FALSE(size_line.empty());
    ASSERT_EQ(size_line.find_first_not_of("0123456789abcdef"), std::string::npos)
        << "not a chunk size: " << size_line.substr(0, 100);
    const uint64_t n = std::stoull(size_line, nullptr, 16);
    at = eol + 2;
    if (n == 0) break;
    ASSERT_LE(at + n + 2, in.size()) << "a chunk of " << n << " bytes announced, " << in.size() - at
                                     << " sent: " << in.substr(at, 200);
    ASSERT_EQ(in.substr(at + n, 2), "\r\n");
    body += in.substr(at, n);
    at += n + 2;
  }
  const std::string trailer = in.substr(at);
  EXPECT_EQ(trailer.rfind("X-Transfer-Status: ", 0), 0u) << trailer;
  EXPECT_EQ(trailer.find("X-Transfer-Status: 200"), std::string::npos) << trailer;
  EXPECT_EQ(trailer.substr(trailer.size() - 4), "\r\n\r\n") << trailer;
  EXPECT_GE(body.size(), kMiB);  // at least the cached first block
  EXPECT_LT(body.size(), want.size());
  EXPECT_TRUE(body == want.substr(0, body.size())) << FirstDifference(body, want);
}

// Item 5: a complete cached file open in passthrough (fd 3), then a
// small-file workload that turns the mount to no-open: the kernel refuses a
// no-open open of an inode open in passthrough, so on main `cat` of that
// file was EIO until fd 3 was closed. Now the switch waits for fd 3.
TEST_F(Issue28Test, AFileOpenInPassthroughPutsOffTheSwitchToNoOpen) {
  Mount({"--log-level", "info"});
  if (perchd_.Log().find("passthrough for complete cached objects") == std::string::npos) {
    GTEST_SKIP() << "the kernel offers no FUSE passthrough here";
  }
  const std::string want = Original("big.bin");
  Warm("big.bin");  // cached whole without an open through the mount (an open counts as large)
  const int fd3 = ::open((mnt_ / "big.bin").c_str(), O_RDONLY);
  ASSERT_GE(fd3, 0);
  ASSERT_EQ(Num(Stats(), "whole_files"), 1u) << "fd 3 is not open in passthrough";
  for (int i = 0; i < 300; ++i) {
    const std::string rel = "many/f" + std::to_string(i);
    ASSERT_EQ(ReadFile(rel), Original(rel)) << rel;
  }
  EXPECT_NE(perchd_.Log().find("a small-file workload"), std::string::npos) << perchd_.Log();
  EXPECT_TRUE(ReadFile("big.bin") == want) << "cat big.bin while fd 3 is open: EIO";
  std::string buf(1000, '\0');
  ASSERT_EQ(::pread(fd3, buf.data(), buf.size(), 5 * kMiB), 1000);
  EXPECT_TRUE(buf == want.substr(5 * kMiB, 1000));
  ::close(fd3);
  // Once fd 3's release reaches perchd, the mount turns to no-open.
  bool switched = false;
  for (int i = 0; i < 100 && !switched; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    switched = perchd_.Log().find("no-open from now on") != std::string::npos;
  }
  EXPECT_TRUE(switched) << perchd_.Log();
  EXPECT_TRUE(ReadFile("big.bin") == want);
  auto opens = [&] {
    json op = Element(Stats()["fuse_ops"], "op", "open");
    return op.is_null() ? uint64_t{0} : op["latency"]["count"].get<uint64_t>();
  };
  const uint64_t before = opens();
  for (int i = 0; i < 50; ++i) {
    const std::string rel = "many/f" + std::to_string(i);
    ASSERT_EQ(ReadFile(rel), Original(rel)) << rel;
  }
  EXPECT_TRUE(ReadFile("big.bin") == want);
  EXPECT_LE(opens(), before + 1) << "opens are still answered: no-open is not on";
}

// Eviction of every kind running against every kind of reader, for 20 s:
// quota eviction (a cache of 12 MiB under a 40 MiB working set of 1 MiB
// blocks), perchctl evict of single files and the whole directory, pack
// records punched after their grace; against FUSE reads at random offsets
// (the kernel's page cache dropped first, so each read reaches perchd),
// whole reads of large files (passed through when complete and cached) and
// slow endpoint clients. Every byte read is compared with the origin's:
// no wrong byte, ever, and no read fails.
TEST_F(Issue28Test, EvictionAgainstEveryReaderNeverServesAWrongByte) {
  MountWithEndpoint({"--block-size", "1M", "--cache-size", "12M"});
  std::vector<std::string> names;
  std::vector<std::string> originals;
  for (const TreeFile& f : files_) {
    if (f.rel.rfind("s/", 0) != 0) continue;
    names.push_back(f.rel);
    originals.push_back(Original(f.rel));
  }
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::atomic<uint64_t> reads{0}, gets{0}, wrong{0}, failed{0}, evicts{0};
  std::mutex mu;
  std::vector<std::string> problems;  // the first few, for the failure message
  auto note = [&](std::atomic<uint64_t>& count, const std::string& what) {
    count++;
    std::lock_guard<std::mutex> l(mu);
    if (problems.size() < 10) problems.push_back(what);
  };
  auto running = [&] { return std::chrono::steady_clock::now() < until; };

  std::vector<std::thread> threads;
  // FUSE readers: random ranges, each from perchd (the page cache dropped).
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + t);
      while (running()) {
        const size_t i = rng() % names.size();
        const std::string& want = originals[i];
        const int fd = ::open((mnt_ / names[i]).c_str(), O_RDONLY);
        if (fd < 0) {
          note(failed, "open " + names[i] + ": " + std::strerror(errno));
          continue;
        }
        for (int k = 0; k < 4; ++k) {
          ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
          const uint64_t off = rng() % want.size();
          const uint64_t len = std::min<uint64_t>(1 + rng() % (3 * kMiB), want.size() - off);
          std::string buf(len, '\0');
          size_t got = 0;
          while (got < len) {
            ssize_t n = ::pread(fd, buf.data() + got, len - got, static_cast<off_t>(off + got));
            if (n <= 0) break;
            got += static_cast<size_t>(n);
          }
          reads++;
          if (got != len) {
            note(failed, "read " + names[i] + " at " + std::to_string(off) + ": " +
                             std::to_string(got) + " of " + std::to_string(len) + " bytes");
          } else if (buf != want.substr(off, len)) {
            note(wrong, "FUSE " + names[i] + " at " + std::to_string(off) + ": " +
                            FirstDifference(buf, want.substr(off, len)));
          }
        }
        ::close(fd);
      }
    });
  }
  // Whole reads of the large files: passed through once complete and cached.
  threads.emplace_back([&] {
    std::mt19937_64 rng(seed + 10);
    while (running()) {
      const size_t i = rng() % 4;  // s/big0..3 come first
      const std::string got = ReadFile(names[i]);
      reads++;
      if (got != originals[i])
        note(wrong, "whole " + names[i] + ": " + FirstDifference(got, originals[i]));
    }
  });
  // Slow endpoint clients.
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + 20 + t);
      while (running()) {
        const size_t i = rng() % names.size();
        Answer a = SlowGet(addr_, "/test/" + names[i], 16 << 10, nullptr, 32 << 10,
                           std::chrono::microseconds(rng() % 4000));
        reads++;
        gets++;
        if (!a.complete || a.head.find(" 200 ") == std::string::npos) {
          note(failed, "GET " + names[i] + ": " + a.head.substr(0, a.head.find("\r\n")) + ", " +
                           std::to_string(a.body.size()) + " bytes");
        } else if (a.body != originals[i]) {
          note(wrong, "GET " + names[i] + ": " + FirstDifference(a.body, originals[i]));
        }
      }
    });
  }
  // perchctl evict: single files and the whole directory.
  threads.emplace_back([&] {
    std::mt19937_64 rng(seed + 30);
    while (running()) {
      const std::string what = rng() % 4 == 0 ? "s" : names[rng() % names.size()];
      RunResult r = Ctl({"evict", "/test/" + what});
      if (r.exit_code != 0) note(failed, "evict " + what + ": " + r.output);
      evicts++;
      std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 200));
    }
  });
  for (std::thread& t : threads) t.join();
  const json stats = Stats();
  std::string report;
  for (const std::string& p : problems) report += "\n  " + p;
  EXPECT_EQ(wrong.load(), 0u) << "wrong bytes:" << report;
  EXPECT_EQ(failed.load(), 0u) << "failures:" << report;
  EXPECT_GT(reads.load(), 50u);
  EXPECT_GT(evicts.load(), 10u);
  EXPECT_GT(Num(stats, "evictions"), 0u) << stats.dump();
  std::printf(
      "stress: %llu reads (%llu endpoint GETs), %llu perchctl evicts, %llu blocks evicted, %llu "
      "passthrough opens\n",
      static_cast<unsigned long long>(reads.load()), static_cast<unsigned long long>(gets.load()),
      static_cast<unsigned long long>(evicts.load()),
      static_cast<unsigned long long>(Num(stats, "evictions")),
      static_cast<unsigned long long>(Num(stats, "whole_files")));
}

}  // namespace
}  // namespace perch::testing
