#include "daemon/core/status.h"

#include <gtest/gtest.h>

#include "daemon/core/check.h"
#include "daemon/core/metrics.h"
#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::core {
namespace {

TEST(StatusTest, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, CarriesCodeSiteAndRetryable) {
  Status s = UnavailableError("connect refused", FailureSite::kCache);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(s.where(), FailureSite::kCache);
  EXPECT_TRUE(s.retryable());
  EXPECT_EQ(s.ToString(), "Unavailable (cache): connect refused");
  EXPECT_EQ(s.WithContext("GET /x").message(), "GET /x: connect refused");
  EXPECT_FALSE(NotFoundError("x").retryable());
}

TEST(ResultTest, ValueOrStatus) {
  Result<int> v = 3;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 3);
  Result<int> e = NotFoundError("gone");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  // An OK status without a value is a bug, reported as such.
  Result<int> bad = Status::Ok();
  EXPECT_EQ(bad.status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace perch::core

namespace perch::core {
namespace {

TEST(CheckDeathTest, AFailedCheckAbortsNamingTheInvariant) {
  EXPECT_DEATH(PERCH_CHECK(1 + 1 == 3), "check failed at .*status_test.cc:[0-9]+: PERCH_CHECK");
  EXPECT_DEATH((void)PERCH_CHECKED(ObjectPath::Parse("relative")),
               "ObjectPath::Parse.*must be absolute");
  EXPECT_EQ(PERCH_CHECKED(ObjectPath::Parse("/a//b")).str(), "/a/b");
  PERCH_CHECK(true);
}

}  // namespace
}  // namespace perch::core

namespace perch::core {
namespace {

// Every code has a name and a counter of its own (an array indexed by code
// once ended at kInternal, and counting kStale wrote past it).
TEST(StatusTest, EveryCodeIsNamedAndCounted) {
  ErrorCounters errors;
  for (size_t i = 1; i < kStatusCodeCount; ++i) {
    const auto code = static_cast<StatusCode>(i);
    EXPECT_NE(ToString(code), "Unknown") << i;
    for (size_t n = 0; n < i; ++n) errors.Count(code);
  }
  auto counts = errors.Take();
  ASSERT_EQ(counts.size(), kStatusCodeCount - 1);
  for (size_t i = 1; i < kStatusCodeCount; ++i) {
    EXPECT_EQ(counts[i - 1].first, ToString(static_cast<StatusCode>(i)));
    EXPECT_EQ(counts[i - 1].second, i);
  }
  EXPECT_EQ(counts.back().first, "Stale");
}

}  // namespace
}  // namespace perch::core
