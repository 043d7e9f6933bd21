// FetchScheduler alone: the request and byte budgets, demand before prefetch
// and the background share, fairness between flows, cancel and boost, and the
// counters it reports. No threads: fetches end when the test releases them.
#include "daemon/core/fetch_scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

namespace perch::core {
namespace {

// Starts are recorded; fetches end when the test releases them.
struct Recorder {
  std::vector<std::string> started;
  std::map<std::string, std::function<void()>> running;
  size_t concurrent = 0, max_concurrent = 0;

  FetchScheduler::StartFn Task(const std::string& name) {
    return [this, name](std::function<void()> release) {
      started.push_back(name);
      max_concurrent = std::max(max_concurrent, ++concurrent);
      running[name] = std::move(release);
    };
  }
  void Finish(const std::string& name) {
    auto release = std::move(running.at(name));
    running.erase(name);
    --concurrent;
    release();
  }
};

TEST(FetchSchedulerTest, TheBudgetIsNeverExceeded) {
  FetchScheduler s(SchedulerOptions{4, 10000, 0.75});
  Recorder r;
  std::mt19937 rng(7);
  for (int i = 0; i < 60; ++i) {
    auto prio = static_cast<Priority>(rng() % kPriorityCount);
    s.Submit(prio, "flow" + std::to_string(rng() % 3), 100 + rng() % 900,
             r.Task("t" + std::to_string(i)));
    if (rng() % 2 == 0 && !r.running.empty()) r.Finish(r.running.begin()->first);
  }
  while (!r.running.empty()) r.Finish(r.running.begin()->first);
  EXPECT_EQ(r.started.size(), 60u);
  EXPECT_LE(r.max_concurrent, 4u);
  EXPECT_EQ(s.Stats().max_in_flight_seen, r.max_concurrent);
  EXPECT_EQ(s.Stats().in_flight, 0u);

  // Bytes too: two 6000-byte fetches do not fit a 10000-byte budget together.
  s.Submit(Priority::kDemand, "f", 6000, r.Task("big1"));
  s.Submit(Priority::kDemand, "f", 6000, r.Task("big2"));
  EXPECT_EQ(r.running.size(), 1u);
  r.Finish("big1");
  EXPECT_EQ(r.running.count("big2"), 1u);
  r.Finish("big2");
}

TEST(FetchSchedulerTest, DemandOvertakesPrefetch) {
  // Background classes may use 2 of 4 slots: demand always finds room.
  FetchScheduler s(SchedulerOptions{4, 1 << 30, 0.5});
  Recorder r;
  for (int i = 0; i < 5; ++i)
    s.Submit(Priority::kSpeculative, "ns", 1, r.Task("p" + std::to_string(i)));
  EXPECT_EQ(r.started.size(), 2u);
  s.Submit(Priority::kDemand, "ns", 1, r.Task("d0"));
  EXPECT_EQ(r.started.back(), "d0");  // started at once, ahead of three queued prefetches

  // With every slot taken, the next free one goes to demand first, then hint, warm, speculative.
  s.Submit(Priority::kDemand, "ns", 1, r.Task("d1"));
  s.Submit(Priority::kWarm, "w", 1, r.Task("w0"));
  s.Submit(Priority::kHint, "h", 1, r.Task("h0"));
  s.Submit(Priority::kDemand, "ns", 1, r.Task("d2"));
  EXPECT_EQ(r.started.size(), 4u);
  r.Finish("d0");
  EXPECT_EQ(r.started.back(), "d2");  // demand, though submitted last
  r.Finish("p0");
  EXPECT_EQ(r.started.back(), "h0");
  r.Finish("p1");
  EXPECT_EQ(r.started.back(), "w0");
  r.Finish("h0");
  EXPECT_EQ(r.started.back(), "p2");
}

TEST(FetchSchedulerTest, FlowsTakeTurnsWithinAClass) {
  FetchScheduler s(SchedulerOptions{1, 1 << 30, 1.0});
  Recorder r;
  for (int i = 0; i < 3; ++i)
    s.Submit(Priority::kSpeculative, "x", 1, r.Task("x" + std::to_string(i)));
  for (int i = 0; i < 2; ++i)
    s.Submit(Priority::kSpeculative, "y", 1, r.Task("y" + std::to_string(i)));
  while (!r.running.empty()) r.Finish(r.running.begin()->first);
  EXPECT_EQ(r.started, (std::vector<std::string>{"x0", "x1", "y0", "x2", "y1"}));
}

TEST(FetchSchedulerTest, CancelAndBoostQueuedFetches) {
  FetchScheduler s(SchedulerOptions{1, 1 << 30, 1.0});
  Recorder r;
  uint64_t a = s.Submit(Priority::kSpeculative, "ns", 1, r.Task("a"));
  uint64_t b = s.Submit(Priority::kSpeculative, "ns", 1, r.Task("b"));
  uint64_t c = s.Submit(Priority::kSpeculative, "ns", 1, r.Task("c"));
  s.Submit(Priority::kHint, "ns", 1, r.Task("h"));
  EXPECT_FALSE(s.Cancel(a));  // running
  EXPECT_TRUE(s.Cancel(b));
  EXPECT_FALSE(s.Cancel(b));
  s.Boost(c, Priority::kDemand);
  while (!r.running.empty()) r.Finish(r.running.begin()->first);
  EXPECT_EQ(r.started, (std::vector<std::string>{"a", "c", "h"}));
  EXPECT_EQ(s.Stats().cancelled, 1u);
  EXPECT_EQ(s.Stats().boosted, 1u);
}

TEST(FetchSchedulerTest, BackgroundClassesShareTheirPartOfTheByteBudget) {
  // 10000 bytes in all, 5000 for background classes together.
  FetchScheduler s(SchedulerOptions{100, 10000, 0.5});
  Recorder r;
  s.Submit(Priority::kWarm, "w", 3000, r.Task("w0"));
  s.Submit(Priority::kHint, "h", 3000, r.Task("h0"));  // 6000 > 5000: waits
  EXPECT_EQ(r.started, (std::vector<std::string>{"w0"}));
  s.Submit(Priority::kDemand, "d", 6000, r.Task("d0"));  // demand may use the rest
  EXPECT_EQ(r.started.back(), "d0");
  r.Finish("w0");
  EXPECT_EQ(r.started.back(), "h0");
  r.Finish("d0");
  r.Finish("h0");
  SchedulerStats st = s.Stats();
  EXPECT_EQ(st.in_flight, 0u);
  EXPECT_EQ(st.bytes_in_flight, 0u);
  EXPECT_EQ(st.started[static_cast<size_t>(Priority::kDemand)], 1u);
  EXPECT_EQ(st.started[static_cast<size_t>(Priority::kHint)], 1u);
  EXPECT_EQ(st.started[static_cast<size_t>(Priority::kWarm)], 1u);
}

TEST(FetchSchedulerTest, ALoneFetchLargerThanTheByteBudgetStillRuns) {
  // Nothing in flight: a block larger than the budget must not wait forever.
  FetchScheduler s(SchedulerOptions{4, 1000, 0.75});
  Recorder r;
  s.Submit(Priority::kDemand, "f", 5000, r.Task("huge"));
  EXPECT_EQ(r.started, (std::vector<std::string>{"huge"}));
  s.Submit(Priority::kDemand, "f", 10, r.Task("small"));  // waits: the budget is spent
  EXPECT_EQ(r.started.size(), 1u);
  EXPECT_EQ(s.Stats().queued[static_cast<size_t>(Priority::kDemand)], 1u);
  r.Finish("huge");
  EXPECT_EQ(r.started.back(), "small");
  r.Finish("small");
}

TEST(FetchSchedulerTest, CancellingAnUnknownTicketIsHarmless) {
  FetchScheduler s(SchedulerOptions{});
  EXPECT_FALSE(s.Cancel(12345));
  s.Boost(12345, Priority::kDemand);
  EXPECT_EQ(s.Stats().cancelled, 0u);
  EXPECT_EQ(s.Stats().boosted, 0u);
}

}  // namespace
}  // namespace perch::core
