#include "daemon/core/types.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "daemon/core/codec.h"
#include "daemon/core/mutex.h"

namespace perch::core {
namespace {

TEST(ObjectPathTest, Normalises) {
  EXPECT_EQ(ObjectPath::Parse("/a//b/")->str(), "/a/b");
  EXPECT_EQ(ObjectPath::Parse("/")->str(), "/");
  EXPECT_EQ(ObjectPath::Parse("///")->str(), "/");
  EXPECT_EQ(ObjectPath::Parse("/a b/%c")->str(), "/a b/%c");
}

TEST(ObjectPathTest, RejectsHostilePaths) {
  EXPECT_EQ(ObjectPath::Parse("a/b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse("").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse("/a/../b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse("/a/./b").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ObjectPath::Parse(std::string_view("/a\0b", 4)).status().code(),
            StatusCode::kInvalidArgument);
}

TEST(ObjectPathTest, Navigation) {
  auto p = *ObjectPath::Parse("/ns/dir/file.jpg");
  EXPECT_EQ(p.Name(), "file.jpg");
  EXPECT_EQ(p.Parent().str(), "/ns/dir");
  EXPECT_EQ(p.Parent().Parent().Parent().str(), "/");
  EXPECT_TRUE(p.HasPrefix(*ObjectPath::Parse("/ns")));
  EXPECT_TRUE(p.HasPrefix(*ObjectPath::Parse("/")));
  EXPECT_FALSE(p.HasPrefix(*ObjectPath::Parse("/n")));
  EXPECT_FALSE(ObjectPath::Parse("/nsx")->HasPrefix(*ObjectPath::Parse("/ns")));
  EXPECT_EQ(ObjectPath().Child("x")->str(), "/x");
  EXPECT_FALSE(p.Child("..").ok());
  EXPECT_FALSE(p.Child("a/b").ok());
  auto segs = p.Segments();
  ASSERT_EQ(segs.size(), 3u);
  EXPECT_EQ(segs[1], "dir");
  EXPECT_TRUE(ObjectPath().Segments().empty());
}

TEST(ObjectPathTest, RelativeTo) {
  auto p = [](const char* s) { return *ObjectPath::Parse(s); };
  EXPECT_EQ(p("/ns/a/b").RelativeTo(p("/ns"))->str(), "/a/b");
  EXPECT_EQ(p("/ns").RelativeTo(p("/ns"))->str(), "/");
  EXPECT_EQ(p("/ns/a").RelativeTo(p("/"))->str(), "/ns/a");
  EXPECT_FALSE(p("/nsx/a").RelativeTo(p("/ns")));
  EXPECT_FALSE(p("/other").RelativeTo(p("/ns")));
  EXPECT_FALSE(p("/").RelativeTo(p("/ns")));
}

}  // namespace
}  // namespace perch::core

namespace perch::core {
namespace {

TEST(CodecTest, VarintsRoundTripAndRejectWhatIsNotOne) {
  for (uint64_t v : {uint64_t{0}, uint64_t{1}, uint64_t{127}, uint64_t{128}, uint64_t{300},
                     uint64_t{1} << 35, ~uint64_t{0}}) {
    std::string s;
    codec::PutVarint(&s, v);
    EXPECT_LE(s.size(), 10u);
    codec::Reader r(s);
    uint64_t got = 0;
    ASSERT_TRUE(r.GetVarint(&got)) << v;
    EXPECT_EQ(got, v);
    EXPECT_TRUE(r.done());
  }
  uint64_t v = 0;
  EXPECT_FALSE(codec::Reader(std::string("\x80\x80", 2)).GetVarint(&v));  // cut short
  EXPECT_FALSE(codec::Reader(std::string(10, '\xff')).GetVarint(&v));     // past 64 bits
  EXPECT_FALSE(codec::Reader(std::string(11, '\x80')).GetVarint(&v));     // too long
  EXPECT_FALSE(codec::Reader("").GetVarint(&v));
}

// CondVar (daemon/core/mutex.h; here until the unit tests' CMake list gets
// a mutex_test.cc of its own).
struct Guarded {
  Mutex mu;
  CondVar cv;
  bool ready PERCH_GUARDED_BY(mu) = false;
  int after PERCH_GUARDED_BY(mu) = 0;
};

TEST(CondVarTest, WaitLetsGoOfTheMutexAndHasItBackOnceNotified) {
  Guarded g;
  MutexLock l(g.mu);
  // The notifier must take the mutex the waiter holds: it can only while the
  // waiter waits.
  std::thread notifier([&g] {
    MutexLock nl(g.mu);
    g.ready = true;
    g.cv.NotifyOne();
  });
  while (!g.ready) g.cv.Wait(g.mu);
  // Held again: a second thread's write waits for this scope to end.
  std::thread writer([&g] {
    MutexLock wl(g.mu);
    g.after = 2;
  });
  g.after = 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(g.after, 1);
  l.Unlock();
  writer.join();
  notifier.join();
  MutexLock again(g.mu);
  EXPECT_EQ(g.after, 2);
}

TEST(CondVarTest, WaitUntilTellsANotifyFromTheDeadline) {
  Guarded g;
  MutexLock l(g.mu);
  const auto start = std::chrono::steady_clock::now();
  // Nobody notifies: false once the deadline has passed, and not before.
  bool notified = true;
  while (notified && std::chrono::steady_clock::now() < start + std::chrono::seconds(2))
    notified = g.cv.WaitUntil(g.mu, start + std::chrono::milliseconds(30));
  EXPECT_FALSE(notified);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(30));

  std::thread notifier([&g] {
    MutexLock nl(g.mu);
    g.ready = true;
    g.cv.NotifyAll();
  });
  bool in_time = true;
  while (!g.ready && in_time) in_time = g.cv.WaitUntil(g.mu, start + std::chrono::seconds(30));
  EXPECT_TRUE(in_time);
  EXPECT_TRUE(g.ready);
  l.Unlock();
  notifier.join();
}

}  // namespace
}  // namespace perch::core
