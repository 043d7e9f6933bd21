#include "daemon/core/warning_limiter.h"

#include <gtest/gtest.h>

#include <chrono>

#include "tests/fakes/fake_time_source.h"

namespace perch::core {
namespace {

TEST(WarningLimiterTest, LetsOneThroughAPeriodAndCountsTheRest) {
  testing::FakeTimeSource time;
  WarningLimiter limiter(std::chrono::seconds(60), time);
  uint64_t more = 99;
  EXPECT_TRUE(limiter.Allow(&more));
  EXPECT_EQ(more, 0u);
  for (int i = 0; i < 5; ++i) EXPECT_FALSE(limiter.Allow(&more));
  time.Advance(std::chrono::seconds(59));
  EXPECT_FALSE(limiter.Allow(&more)) << "within the period";
  time.Advance(std::chrono::seconds(1));
  more = 99;
  EXPECT_TRUE(limiter.Allow(&more)) << "a period after the last one let through";
  EXPECT_EQ(more, 6u) << "the ones dropped since";
  EXPECT_FALSE(limiter.Allow(&more));
}

TEST(WarningLimiterTest, APeriodOfZeroLetsEveryOneThrough) {
  testing::FakeTimeSource time;
  WarningLimiter fast(std::chrono::seconds(0), time);
  uint64_t more = 99;
  EXPECT_TRUE(fast.Allow(&more));
  EXPECT_TRUE(fast.Allow(&more));
  EXPECT_EQ(more, 0u);
}

}  // namespace
}  // namespace perch::core
