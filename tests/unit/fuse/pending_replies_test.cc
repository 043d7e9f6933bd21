// PendingReplies: every request answered exactly once — by its completion, or
// on expiry, or at Close — and never touched again after that.
#include "fuse/pending_replies.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "tests/fakes/fake_time_source.h"

namespace perch::fuse {
namespace {

using namespace std::chrono_literals;

// Made-up requests: PendingReplies only hands them back.
fuse_req* Req(uintptr_t n) { return reinterpret_cast<fuse_req*>(n); }

struct Expired {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<fuse_req*> reqs;
  std::function<void(fuse_req*)> Fn() {
    return [this](fuse_req* r) {
      {
        std::lock_guard<std::mutex> l(mu);
        reqs.push_back(r);
      }
      cv.notify_all();
    };
  }
  size_t size() {
    std::lock_guard<std::mutex> l(mu);
    return reqs.size();
  }
  // Waits (for the expiry thread) until `n` requests have expired; false
  // after 10 s of real time.
  bool WaitFor(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, 10s, [&] { return reqs.size() >= n; });
  }
};

// Time is a FakeTimeSource in the tests of expiry: each moves it past a
// deadline and waits for the expiry thread, instead of sleeping past it.
TEST(PendingRepliesTest, AClaimedRequestIsNotExpired) {
  testing::FakeTimeSource time;
  Expired expired;
  PendingReplies p(expired.Fn(), time);
  const uint64_t t = p.Add(Req(1), time.Now() + 100ms);
  p.Add(Req(2), time.Now() + 100ms);  // unclaimed: shows when the loop has looked
  EXPECT_EQ(p.Claim(t), Req(1));
  p.Answered();
  EXPECT_EQ(p.Claim(t), nullptr);  // once
  time.Advance(700ms);             // past the deadline and the loop's idle check
  ASSERT_TRUE(expired.WaitFor(1));
  std::lock_guard<std::mutex> l(expired.mu);
  EXPECT_EQ(expired.reqs, std::vector<fuse_req*>{Req(2)});
  EXPECT_EQ(p.pending(), 0u);
}

TEST(PendingRepliesTest, AnUnansweredRequestIsExpiredOnceAndItsCompletionDropped) {
  testing::FakeTimeSource time;
  Expired expired;
  PendingReplies p(expired.Fn(), time);
  const auto now = time.Now();
  const uint64_t late = p.Add(Req(1), now + 50ms);
  const uint64_t later = p.Add(Req(2), now + 10s);
  time.Advance(50ms);
  ASSERT_TRUE(expired.WaitFor(1));
  ASSERT_EQ(expired.size(), 1u);
  EXPECT_EQ(expired.reqs[0], Req(1));
  EXPECT_EQ(p.Claim(late), nullptr);  // its completion comes too late: dropped
  EXPECT_EQ(p.Claim(later), Req(2));  // the other still waits for its own
  p.Answered();
  EXPECT_EQ(expired.size(), 1u);
}

TEST(PendingRepliesTest, CloseAnswersWhatWaitsAndEverythingAddedAfter) {
  Expired expired;
  PendingReplies p(expired.Fn());
  const uint64_t t = p.Add(Req(1), PendingReplies::Clock::now() + 1h);
  p.Close();
  EXPECT_EQ(expired.size(), 1u);
  EXPECT_EQ(p.Claim(t), nullptr);
  const uint64_t after = p.Add(Req(2), PendingReplies::Clock::now() + 1h);
  EXPECT_EQ(expired.size(), 2u);  // answered at once: nobody would later
  EXPECT_EQ(p.Claim(after), nullptr);
  p.Close();  // idempotent
  EXPECT_EQ(expired.size(), 2u);
}

TEST(PendingRepliesTest, CloseWaitsForAnAnswerInProgress) {
  Expired expired;
  PendingReplies p(expired.Fn());
  const uint64_t t = p.Add(Req(1), PendingReplies::Clock::now() + 1h);
  ASSERT_EQ(p.Claim(t), Req(1));
  std::atomic<bool> answered{false};
  std::thread replier([&] {
    // Still replying when Close is called, most likely: nothing shows that
    // Close waits, so a sleep (if Close came later, the test would pass
    // without testing; it never fails for that).
    std::this_thread::sleep_for(200ms);
    answered = true;
    p.Answered();
  });
  p.Close();
  EXPECT_TRUE(answered.load());  // the session outlives the reply
  EXPECT_EQ(expired.size(), 0u);
  replier.join();
}

TEST(PendingRepliesTest, RacingCompletionsAndExpiryAnswerEachRequestOnce) {
  Expired expired;
  std::atomic<int> claimed{0};
  {
    PendingReplies p(expired.Fn());
    std::vector<uint64_t> tokens;
    const auto start = PendingReplies::Clock::now();
    for (uintptr_t i = 1; i <= 2000; ++i)
      tokens.push_back(p.Add(Req(i), start + std::chrono::microseconds(i * 300)));
    std::vector<std::thread> completers;
    for (int w = 0; w < 4; ++w)
      completers.emplace_back([&, w] {
        for (size_t i = w; i < tokens.size(); i += 4) {
          if (p.Claim(tokens[i]) != nullptr) {
            claimed++;
            p.Answered();
          }
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        }
      });
    for (auto& c : completers) c.join();
  }  // destroyed: Close answers the rest
  EXPECT_EQ(claimed.load() + static_cast<int>(expired.size()), 2000);
}

// Drain waits for the answers, and gives up at its deadline.
TEST(PendingRepliesTest, DrainWaitsUntilEveryRequestIsAnswered) {
  Expired expired;
  PendingReplies p(expired.Fn());
  const uint64_t t = p.Add(Req(1), PendingReplies::Clock::now() + 10s);
  EXPECT_FALSE(p.Drain(PendingReplies::Clock::now() + 20ms));
  std::thread answer([&] {
    std::this_thread::sleep_for(50ms);
    ASSERT_EQ(p.Claim(t), Req(1));
    std::this_thread::sleep_for(50ms);  // claimed, not yet answered: still draining
    p.Answered();
  });
  EXPECT_TRUE(p.Drain(PendingReplies::Clock::now() + 5s));
  EXPECT_EQ(p.pending(), 0u);
  answer.join();
  EXPECT_EQ(expired.size(), 0u);
}

}  // namespace
}  // namespace perch::fuse
