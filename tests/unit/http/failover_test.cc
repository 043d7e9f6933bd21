// The failover policy and the director-answer parser, without sockets.
#include "daemon/http/failover.h"

#include <gtest/gtest.h>

#include "daemon/http/director_client.h"

namespace perch::http {
namespace {

using core::Clock;
using core::ObjectPath;
using core::StatusCode;

TEST(ServerHealthTest, PenalisedServersSortLastUntilThePenaltyEnds) {
  ServerHealth health(std::chrono::seconds(30));
  auto t0 = Clock::now();
  std::vector<std::string> servers = {"http://c1", "http://c2", "http://origin"};
  EXPECT_EQ(health.Order(servers, t0), (std::vector<size_t>{0, 1, 2}));
  health.Penalize("http://c1", t0);
  EXPECT_EQ(health.Order(servers, t0 + std::chrono::seconds(29)), (std::vector<size_t>{1, 2, 0}));
  EXPECT_EQ(health.Order(servers, t0 + std::chrono::seconds(30)), (std::vector<size_t>{0, 1, 2}));
}

TEST(ServerHealthTest, TrackingIsBounded) {
  ServerHealth health(std::chrono::seconds(30), 8);
  auto t0 = Clock::now();
  for (int i = 0; i < 100; ++i) health.Penalize("http://s" + std::to_string(i), t0);
  EXPECT_TRUE(health.Penalized("http://s99", t0));
  EXPECT_FALSE(health.Penalized("http://s0", t0));  // dropped when the table filled
}

TEST(FirstByteTimerTest, AdaptsWithinBounds) {
  FirstByteTimer t(std::chrono::milliseconds(1000), std::chrono::milliseconds(10000));
  EXPECT_EQ(t.Timeout(), std::chrono::milliseconds(1000));  // nothing seen yet
  for (int i = 0; i < 50; ++i) t.Observe(std::chrono::milliseconds(500));
  EXPECT_GT(t.Timeout(), std::chrono::milliseconds(3500));  // about 8 x 500 ms
  EXPECT_LE(t.Timeout(), std::chrono::milliseconds(4000));
  for (int i = 0; i < 50; ++i) t.Observe(std::chrono::seconds(30));
  EXPECT_EQ(t.Timeout(), std::chrono::milliseconds(10000));
}

TEST(FailoverPlanTest, ServerFaultsWalkTheListThenAskTheDirectorAgainWithBackoffThenFail) {
  FailoverPlan plan;
  auto now = Clock::now();
  auto deadline = now + std::chrono::seconds(10);
  plan.Begin({1, 0});
  auto s = plan.Next("read of /x", now, deadline);
  ASSERT_EQ(s.kind, FailoverPlan::Step::kTry);
  EXPECT_EQ(s.server, 1u);
  EXPECT_EQ(plan.Fail(core::UnavailableError("reset"), 0), FailureClass::kServer);
  s = plan.Next("read of /x", now, deadline);
  ASSERT_EQ(s.kind, FailoverPlan::Step::kTry);
  EXPECT_EQ(s.server, 0u);
  EXPECT_EQ(plan.Fail(core::UnavailableError("HTTP 503"), 503), FailureClass::kServer);
  // The director may name other servers in a moment (its caches just died).
  std::vector<std::chrono::milliseconds> delays;
  for (int i = 0; i < 3; ++i) {
    s = plan.Next("read of /x", now, deadline);
    ASSERT_EQ(s.kind, FailoverPlan::Step::kRefresh) << i;
    delays.push_back(s.delay);
    plan.Begin({0});
    ASSERT_EQ(plan.Next("read of /x", now, deadline).kind, FailoverPlan::Step::kTry);
    plan.Fail(core::UnavailableError("HTTP 502"), 502);
  }
  EXPECT_EQ(delays, (std::vector<std::chrono::milliseconds>{std::chrono::milliseconds(0),
                                                            std::chrono::milliseconds(500),
                                                            std::chrono::milliseconds(1500)}));
  s = plan.Next("read of /x", now, deadline);
  ASSERT_EQ(s.kind, FailoverPlan::Step::kFail);
  EXPECT_EQ(s.status.code(), StatusCode::kUnavailable);
  EXPECT_TRUE(s.status.retryable());
  EXPECT_NE(s.status.message().find("failed on all"), std::string::npos);
}

TEST(FailoverPlanTest, NoRefreshThatTheDeadlineCannotWaitFor) {
  FailoverPlan plan;
  auto now = Clock::now();
  auto deadline = now + std::chrono::milliseconds(300);
  plan.Begin({0});
  plan.Next("r", now, deadline);
  plan.Fail(core::UnavailableError("reset"), 0);
  EXPECT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kRefresh);  // at once
  plan.Begin({0});
  plan.Next("r", now, deadline);
  plan.Fail(core::UnavailableError("reset"), 0);
  EXPECT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kFail);  // 500 ms > 300 ms
}

TEST(FailoverPlanTest, NotFoundEverywhereIsTheObjectsAnswer) {
  FailoverPlan plan;
  auto now = Clock::now();
  plan.Begin({0, 1});
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(plan.Next("read of /x", now, now + std::chrono::seconds(1)).kind,
              FailoverPlan::Step::kTry);
    EXPECT_EQ(plan.Fail(core::NotFoundError("404"), 404), FailureClass::kObject);
  }
  auto s = plan.Next("read of /x", now, now + std::chrono::seconds(1));
  ASSERT_EQ(s.kind, FailoverPlan::Step::kFail);  // no refresh: the servers answered
  EXPECT_EQ(s.status.code(), StatusCode::kNotFound);
}

TEST(FailoverPlanTest, AnyRefusalWithOtherFailuresIsPermissionDenied) {
  FailoverPlan plan;
  auto now = Clock::now();
  plan.Begin({0, 1});
  plan.Next("r", now, now + std::chrono::seconds(1));
  plan.Fail(core::UnavailableError("reset"), 0);
  plan.Next("r", now, now + std::chrono::seconds(1));
  plan.Fail(core::PermissionDeniedError("HTTP 403"), 403);
  auto s = plan.Next("r", now, now + std::chrono::seconds(1));
  ASSERT_EQ(s.kind, FailoverPlan::Step::kFail);
  EXPECT_EQ(s.status.code(), StatusCode::kPermissionDenied);
}

TEST(FailoverPlanTest, DeadlineEndsTheWalkAndNamesTheLastError) {
  FailoverPlan plan;
  auto now = Clock::now();
  plan.Begin({0, 1});
  plan.Next("read of /x", now, now + std::chrono::seconds(1));
  plan.Fail(core::UnavailableError("stalled"), 0);
  auto s = plan.Next("read of /x", now + std::chrono::seconds(2), now + std::chrono::seconds(1));
  ASSERT_EQ(s.kind, FailoverPlan::Step::kFail);
  EXPECT_EQ(s.status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.status.message().find("stalled"), std::string::npos);
}

TEST(FailoverPlanTest, ContinueRetriesTheSameServer) {
  FailoverPlan plan;
  auto now = Clock::now();
  plan.Begin({3, 4});
  EXPECT_EQ(plan.Next("r", now, now + std::chrono::seconds(1)).server, 3u);
  EXPECT_TRUE(plan.Continue());
  EXPECT_EQ(plan.Next("r", now, now + std::chrono::seconds(1)).server, 3u);
  EXPECT_EQ(plan.Next("r", now, now + std::chrono::seconds(1)).server, 4u);
}

TEST(FailoverPlanTest, AServerThatAnswersShortAgainAndAgainIsLeft) {
  FailoverPlan plan;
  auto now = Clock::now();
  auto deadline = now + std::chrono::seconds(1);
  plan.Begin({3, 4});
  EXPECT_EQ(plan.Next("r", now, deadline).server, 3u);
  for (int i = 0; i < FailoverPlan::kMaxContinuations; ++i) {
    ASSERT_TRUE(plan.Continue()) << i;
    EXPECT_EQ(plan.Next("r", now, deadline).server, 3u);
  }
  EXPECT_FALSE(plan.Continue());  // the caller fails it over
  EXPECT_EQ(plan.Fail(core::UnavailableError("answered short"), 0), FailureClass::kServer);
  EXPECT_EQ(plan.Next("r", now, deadline).server, 4u);
  EXPECT_TRUE(plan.Continue());  // the next server has its own few
  EXPECT_EQ(plan.Next("r", now, deadline).server, 4u);
}

TEST(FailoverPlanTest, TheOriginComesOnceAfterEveryServerFailedThenTheDirectorAgain) {
  FailoverPlan plan;
  auto now = Clock::now();
  auto deadline = now + std::chrono::seconds(10);
  plan.AllowDirect(true);
  plan.Begin({0});
  EXPECT_TRUE(plan.DirectPending());
  ASSERT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kTry);
  EXPECT_FALSE(plan.HasNext());
  plan.Fail(core::UnavailableError("no answer within 1000 ms"), 0);
  ASSERT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kDirect);
  EXPECT_FALSE(plan.DirectPending());  // once per read
  plan.Begin({0});                     // the origins
  ASSERT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kTry);
  plan.Fail(core::UnavailableError("reset"), 0);
  EXPECT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kRefresh);
}

TEST(FailoverPlanTest, NoOriginWhenRefusedOrWhenTheObjectAnswered) {
  auto now = Clock::now();
  auto deadline = now + std::chrono::seconds(10);
  FailoverPlan refused;  // the director answered 405 to ?directread before
  refused.AllowDirect(false);
  refused.Begin({0});
  refused.Next("r", now, deadline);
  refused.Fail(core::UnavailableError("reset"), 0);
  EXPECT_EQ(refused.Next("r", now, deadline).kind, FailoverPlan::Step::kRefresh);

  FailoverPlan missing;  // 404 somewhere: the object's answer, not the servers' fault
  missing.AllowDirect(true);
  missing.Begin({0, 1});
  missing.Next("r", now, deadline);
  missing.Fail(core::UnavailableError("reset"), 0);
  missing.Next("r", now, deadline);
  missing.Fail(core::NotFoundError("HTTP 404"), 404);
  EXPECT_FALSE(missing.DirectPending());
  EXPECT_EQ(missing.Next("r", now, deadline).kind, FailoverPlan::Step::kFail);

  FailoverPlan taken;  // the read went to the origins first
  taken.AllowDirect(true);
  taken.TakeDirect();
  taken.Begin({0});
  taken.Next("r", now, deadline);
  taken.Fail(core::UnavailableError("reset"), 0);
  EXPECT_EQ(taken.Next("r", now, deadline).kind, FailoverPlan::Step::kRefresh);
}

// XRootD 5.5 answers some requests carrying Want-Digest with 404 for a file
// it has (docs/quirks.md): such a 404 leaves the origin to be asked; only
// when it says 404 too is the object missing.
TEST(FailoverPlanTest, A404ToWantDigestIsNotTheObjectsAnswerBeforeTheOrigin) {
  auto now = Clock::now();
  auto deadline = now + std::chrono::seconds(10);
  FailoverPlan plan;
  plan.AllowDirect(true);
  plan.Begin({0, 1});
  plan.Next("r", now, deadline);
  plan.Fail(core::CorruptError("the body does not match the object's digest"), 0, true);
  plan.Next("r", now, deadline);
  EXPECT_EQ(plan.Fail(core::NotFoundError("HTTP 404"), 404, /*asked_digest=*/true),
            FailureClass::kObject);
  EXPECT_TRUE(plan.DirectPending());
  ASSERT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kDirect);
  plan.Begin({0});  // the origins: 404 too
  ASSERT_EQ(plan.Next("r", now, deadline).kind, FailoverPlan::Step::kTry);
  plan.Fail(core::NotFoundError("HTTP 404"), 404, true);
  auto last = plan.Next("r", now, deadline);
  ASSERT_EQ(last.kind, FailoverPlan::Step::kFail);
  EXPECT_EQ(last.status.code(), StatusCode::kUnavailable);  // one server failed for its own reasons

  FailoverPlan all;  // every server and the origin said 404 to Want-Digest
  all.AllowDirect(true);
  all.Begin({0});
  all.Next("r", now, deadline);
  all.Fail(core::NotFoundError("HTTP 404"), 404, true);
  ASSERT_EQ(all.Next("r", now, deadline).kind, FailoverPlan::Step::kDirect);
  all.Begin({0});
  all.Next("r", now, deadline);
  all.Fail(core::NotFoundError("HTTP 404"), 404, true);
  auto missing = all.Next("r", now, deadline);
  ASSERT_EQ(missing.kind, FailoverPlan::Step::kFail);
  EXPECT_EQ(missing.status.code(), StatusCode::kNotFound);
}

TEST(FailoverPlanTest, ClassifiesCancellation) {
  EXPECT_EQ(Classify(core::Status(StatusCode::kCancelled, "x")), FailureClass::kCancelled);
  EXPECT_EQ(Classify(core::CorruptError("bad Content-Range")), FailureClass::kServer);
}

HttpResponse Redirect(std::vector<std::pair<std::string, std::string>> headers) {
  HttpResponse r;
  r.head.status = 307;
  r.head.headers = std::move(headers);
  return r;
}

TEST(ParseDirectorAnswerTest, GoEscapedLinkGeneralisesToTheNamespace) {
  // Go's url.URL.String() leaves $&+,:;=@ raw; perch's encoder escapes them.
  auto path = ObjectPath::Parse("/ns/d/a$b&c+d,e:f;g=h@i j.txt");
  ASSERT_TRUE(path.ok());
  auto r = Redirect({{"link",
                      "<http://cache:8443/ns/d/a$b&c+d,e:f;g=h@i%20j.txt>; rel=\"duplicate\"; "
                      "pri=1; depth=2"},
                     {"x-pelican-namespace", "namespace=/ns, require-token=false"}});
  auto e = ParseDirectorAnswer(*path, r, 6, Clock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_TRUE((*e)->cacheable);
  EXPECT_EQ((*e)->prefix.str(), "/ns");
  ASSERT_EQ((*e)->server_bases.size(), 1u);
  EXPECT_EQ((*e)->server_bases[0], "http://cache:8443/ns");
}

TEST(ParseDirectorAnswerTest, NestedNamespaceAndOriginBaseWithItsOwnPath) {
  auto path = ObjectPath::Parse("/a/b/x/y.bin");
  auto r =
      Redirect({{"link",
                 "<http://c1:1/a/b/x/y.bin>; rel=\"duplicate\"; pri=1; depth=2, "
                 "<http://origin:2/export/b/x/y.bin>; rel=\"duplicate\"; pri=2; depth=2"},
                {"x-pelican-namespace",
                 "namespace=/a/b, require-token=true, collections-url=http://origin:2/export"}});
  auto e = ParseDirectorAnswer(*path, r, 6, Clock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ((*e)->prefix.str(), "/a/b");
  EXPECT_TRUE((*e)->require_token);
  EXPECT_EQ((*e)->server_bases,
            (std::vector<std::string>{"http://c1:1/a/b", "http://origin:2/export/b"}));
  EXPECT_EQ((*e)->ServerUrl(1, *ObjectPath::Parse("/a/b/z w")), "http://origin:2/export/b/z%20w");
}

TEST(ParseDirectorAnswerTest, AnEscapedSlashIsNotASegmentBoundary) {
  auto path = ObjectPath::Parse("/ns/x/y");
  auto r = Redirect({{"link", "<http://c:1/ns%2Fx/y>; rel=\"duplicate\"; pri=1"},
                     {"x-pelican-namespace", "namespace=/ns"}});
  auto e = ParseDirectorAnswer(*path, r, 6, Clock::now());
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE((*e)->cacheable);  // used for this object only
  EXPECT_EQ((*e)->prefix.str(), "/ns/x/y");
}

TEST(ParseDirectorAnswerTest, AnAnswerForOneObjectKeepsEveryUrlWhole) {
  // The second server's depth disagrees with the path below the namespace: the
  // answer is for this object only, and the first server's URL, which would
  // generalise, must not be cut to the namespace root either.
  auto path = ObjectPath::Parse("/ns/d/small");
  auto r = Redirect({{"link",
                      "<http://c1:1/ns/d/small>; rel=\"duplicate\"; pri=1; depth=2, "
                      "<http://c2:2/ns/d/small>; rel=\"duplicate\"; pri=2; depth=1"},
                     {"x-pelican-namespace", "namespace=/ns, require-token=false"}});
  auto e = ParseDirectorAnswer(*path, r, 6, Clock::now() + std::chrono::seconds(60));
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_FALSE((*e)->cacheable);
  EXPECT_EQ((*e)->prefix.str(), "/ns/d/small");
  ASSERT_EQ((*e)->server_bases.size(), 2u);
  EXPECT_EQ((*e)->ServerUrl(0, *path), "http://c1:1/ns/d/small");
  EXPECT_EQ((*e)->ServerUrl(1, *path), "http://c2:2/ns/d/small");
}

TEST(ParseDirectorAnswerTest, ErrorsAreClassified) {
  HttpResponse r;
  r.head.status = 404;
  r.body = R"({"status":"error","msg":"No namespace found for path."})";
  auto e = ParseDirectorAnswer(*ObjectPath::Parse("/nope"), r, 6, Clock::now());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
  EXPECT_NE(e.status().message().find("No namespace found"), std::string::npos);
  r.head.status = 503;
  EXPECT_TRUE(
      ParseDirectorAnswer(*ObjectPath::Parse("/x"), r, 6, Clock::now()).status().retryable());
  r.head.status = 307;
  EXPECT_EQ(ParseDirectorAnswer(*ObjectPath::Parse("/x"), r, 6, Clock::now()).status().code(),
            StatusCode::kCorrupt);
}

}  // namespace
}  // namespace perch::http

// What each server did wrong is counted under its name, at most
// kMaxServers names (the rest under "other"), so a federation that names
// servers without end cannot grow perchd's memory or its metrics.
namespace perch::http {
namespace {

TEST(ServerTallyTest, CountsPerServerAndBoundsTheNames) {
  ServerTally tally;
  tally.DigestMismatch("https://a:8443");
  tally.DigestMismatch("https://a:8443");
  tally.Failure("https://a:8443");
  tally.Failure("https://b:8443");
  auto counts = tally.Take();
  ASSERT_EQ(counts.size(), 2u);
  EXPECT_EQ(counts["https://a:8443"].digest_mismatches, 2u);
  EXPECT_EQ(counts["https://a:8443"].failures, 1u);
  EXPECT_EQ(counts["https://b:8443"].digest_mismatches, 0u);
  for (size_t i = 0; i < 2 * ServerTally::kMaxServers; ++i)
    tally.Failure("https://s" + std::to_string(i) + ":1094");
  tally.DigestMismatch(std::string(300, 'x'));  // a name too long to be a label
  counts = tally.Take();
  EXPECT_LE(counts.size(), ServerTally::kMaxServers + 1);
  EXPECT_GT(counts["other"].failures, ServerTally::kMaxServers - 10);
  EXPECT_EQ(counts["other"].digest_mismatches, 1u);
  tally.Failure("https://a:8443");  // a name known already is still counted as itself
  EXPECT_EQ(tally.Take()["https://a:8443"].failures, 2u);
}

}  // namespace
}  // namespace perch::http
