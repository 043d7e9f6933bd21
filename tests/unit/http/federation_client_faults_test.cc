// Failover and malformed answers, against FaultServer (a misbehaving fake
// federation on loopback): each failure class moves to the next server and
// resumes at the first missing byte; nothing wrong is ever delivered.
#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <random>

#include "daemon/http/failover.h"
#include "daemon/http/federation_client.h"
#include "tests/fakes/fault_server.h"
#include "tests/unit/http/faults_fixture.h"

namespace perch::http {
namespace {

using core::Result;
using core::StatusCode;
using testing::FaultServer;

TEST_F(FaultsTest, EachServerFailureFailsOverToTheNext) {
  server_.SetLinks({"500", "badrange", "wrongsize", "norange", "refuse", "ok"});
  auto r = Read(1000, 50000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == object_.substr(1000, 50000));
  EXPECT_EQ(client_->counters().failovers, 5u);
  EXPECT_EQ(server_.Hits("ok"), 1);
  // Nothing from the bad servers was delivered as data.
  EXPECT_EQ(client_->counters().body_bytes, 50000u);
}

TEST_F(FaultsTest, ShortBodyResumesAtTheFirstMissingByte) {
  server_.SetLinks({"short", "ok"});
  auto r = Read(0, object_.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == object_);
  EXPECT_EQ(client_->counters().resumes, 1u);
  // Half came from the first server, the rest from the second: no byte twice.
  EXPECT_EQ(client_->counters().body_bytes, object_.size());
}

// Issue #42 item 3: a cache that answers every range with one byte (a clean,
// short 206) is left after a few pieces, not asked for the rest forever.
TEST_F(FaultsTest, AServerThatAnswersAByteAtATimeIsLeftForTheNext) {
  server_.SetLinks({"trickle", "ok"});
  auto start = std::chrono::steady_clock::now();
  auto r = Read(0, 65536);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == object_.substr(0, 65536));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(server_.Hits("trickle"), FailoverPlan::kMaxContinuations + 1);
  EXPECT_EQ(server_.Hits("ok"), 1);
  EXPECT_EQ(client_->counters().failovers, 1u);
  // What it did send is kept: the next server is asked for the rest only.
  EXPECT_EQ(client_->counters().body_bytes, 65536u);
}

TEST_F(FaultsTest, StalledServerIsAbandoned) {
  server_.SetLinks({"stall", "ok"});
  auto start = std::chrono::steady_clock::now();
  auto r = Read(0, 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == object_.substr(0, 4096));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

TEST_F(FaultsTest, ASilentServerIsLeftAfterTheFirstByteTimeNotTheLowSpeedLimit) {
  // Accepted but never answered (a SIGSTOPped cache); low-speed limit 20 s.
  FederationClientOptions opts;
  client_ = std::make_unique<FederationClient>(
      loop_, *ParseFederationUrl(server_.BaseUrl() + "/ns"), opts);
  server_.SetLinks({"silent", "ok"});
  auto start = std::chrono::steady_clock::now();
  auto r = Read(0, 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == object_.substr(0, 4096));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(client_->counters().failovers, 1u);
  // The silent server now sorts last: the next read goes straight to the good one.
  start = std::chrono::steady_clock::now();
  r = Read(4096, 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900));
  EXPECT_EQ(client_->counters().failovers, 1u);
}

TEST_F(FaultsTest, AListingWhoseOriginMovedAsksTheDirectorAgain) {
  // The director's first answer names an origin that is gone (a closed
  // port); its next answer names where the origin is now.
  server_.SetListing("", {{"a.txt", "5"}});
  server_.SetDirectorOverride(
      307,
      {{"Link", "<" + server_.BaseUrl() + "/srv/ok/ns/>; rel=\"duplicate\"; pri=1; depth=0"},
       {"X-Pelican-Namespace",
        "namespace=/ns, require-token=false, collections-url=http://127.0.0.1:1"}},
      /*times=*/1);
  std::promise<Result<std::vector<core::DirEntry>>> p;
  client_->List(*core::ObjectPath::Parse("/"), core::DeadlineAfter(std::chrono::seconds(10)),
                [&](Result<std::vector<core::DirEntry>> r) { p.set_value(std::move(r)); });
  auto r = p.get_future().get();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ(r->front().name, "a.txt");
  EXPECT_EQ(server_.DirectorHits(), 2);
}

TEST_F(FaultsTest, ExhaustedListIsUnavailableAndNamesTheLastError) {
  server_.SetLinks({"500", "refuse"});
  auto r = Read(0, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_TRUE(r.status().retryable());
  EXPECT_NE(r.status().message().find("failed on all"), std::string::npos);
  // The director was asked for direct reads once (405: the default), then
  // again three times (after 0, 0.5 and 1.5 s) before giving up.
  EXPECT_EQ(server_.DirectReadHits(), 1);
  EXPECT_EQ(server_.DirectorHits(), 5);
}

// Issue #30 item 6: a director that names only a hung cache (accepts, never
// answers) while the origin serves ?directread.
TEST_F(FaultsTest, WhenEveryNamedServerHangsTheOriginServesTheRead) {
  FederationClientOptions opts;  // default first-byte time (1 s on loopback) and low-speed limit
  client_ = std::make_unique<FederationClient>(
      loop_, *ParseFederationUrl(server_.BaseUrl() + "/ns"), opts);
  server_.SetLinks({"silent"});
  server_.SetDirectReads("ok");
  auto start = std::chrono::steady_clock::now();
  auto r = Read(0, 4096, std::chrono::seconds(5));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(*r == object_.substr(0, 4096));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
  EXPECT_EQ(server_.DirectReadHits(), 1);
  EXPECT_EQ(client_->counters().origin_fallbacks, 1u);
  // The hung cache is penalised and the origin known: the next reads go to
  // the origin at once, without asking the director again.
  start = std::chrono::steady_clock::now();
  for (uint64_t off = 4096; off < 5 * 4096; off += 4096) {
    r = Read(off, 4096, std::chrono::seconds(5));
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(*r == object_.substr(off, 4096));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900));
  EXPECT_EQ(server_.Hits("silent"), 1);
  EXPECT_EQ(server_.DirectReadHits(), 1);
  EXPECT_EQ(client_->counters().origin_fallbacks, 5u);
}

TEST_F(FaultsTest, ADistrustedObjectIsReadFromItsOriginFirst) {
  server_.SetLinks({"ok"});
  server_.SetDirectReads("ok");
  auto r = Read(0, 4096);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(server_.Hits("ok"), 1);
  EXPECT_EQ(server_.DirectReadHits(), 0);
  // Its bytes failed the object's digest (core::Origin::Distrust): the
  // origins are asked for once, and serve this read and the next ones.
  client_->Distrust(*core::ObjectPath::Parse("/obj"));
  for (uint64_t off = 0; off < 3 * 4096; off += 4096) {
    r = Read(off, 4096);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_TRUE(*r == object_.substr(off, 4096));
  }
  EXPECT_EQ(server_.DirectReadHits(), 1);
  EXPECT_EQ(client_->counters().origin_fallbacks, 3u);
  EXPECT_EQ(client_->counters().failovers, 0u);
}

TEST_F(FaultsTest, ARefusedDirectReadIsAskedOnceAndTheReadEndsAtItsDeadline) {
  FederationClientOptions opts;
  client_ = std::make_unique<FederationClient>(
      loop_, *ParseFederationUrl(server_.BaseUrl() + "/ns"), opts);
  server_.SetLinks({"silent"});  // SetDirectReads not called: 405
  for (int i = 0; i < 2; ++i) {
    auto start = std::chrono::steady_clock::now();
    auto r = Read(0, 10, std::chrono::seconds(3));
    auto took = std::chrono::steady_clock::now() - start;
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
    EXPECT_LT(took, std::chrono::milliseconds(3500));
  }
  EXPECT_EQ(server_.DirectReadHits(), 1);
  EXPECT_EQ(client_->counters().origin_fallbacks, 0u);
}

TEST_F(FaultsTest, DeadlineIsHonouredWhenEveryServerStalls) {
  server_.SetLinks({"stall"});
  FederationClientOptions opts;  // default low-speed limits: 20 s, longer than the deadline
  client_ = std::make_unique<FederationClient>(
      loop_, *ParseFederationUrl(server_.BaseUrl() + "/ns"), opts);
  auto start = std::chrono::steady_clock::now();
  auto r = Read(0, 10, std::chrono::seconds(2));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kDeadlineExceeded) << r.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

TEST_F(FaultsTest, NotFoundEverywhereIsNotFound) {
  server_.SetLinks({"404", "404"});
  auto r = Read(0, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound) << r.status().ToString();
}

TEST_F(FaultsTest, ForbiddenIsPermissionDenied) {
  server_.SetLinks({"403"});
  auto r = Read(0, 10);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied) << r.status().ToString();
}

TEST_F(FaultsTest, DirectorThrottlingIsRetried) {
  server_.SetDirectorOverride(429, {}, /*times=*/2);
  auto r = Read(0, 100);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(server_.DirectorHits(), 3);
}

TEST_F(FaultsTest, MalformedDirectorAnswersAreClearErrors) {
  struct Case {
    int status;
    std::vector<std::pair<std::string, std::string>> headers;
    const char* needle;
  };
  for (const Case& c : std::vector<Case>{
           {307, {{"Link", "<http://x/ns/obj; rel=\"duplicate\""}}, "unterminated"},
           {307, {}, "neither Link nor Location"},
           {307,
            {{"Location", "http://127.0.0.1:1/ns/obj"},
             {"X-Pelican-Namespace", "namespace=/other"}},
            "does not contain the object"},
           {307, {{"Link", "<ftp://x/ns/obj>; rel=\"duplicate\"; pri=1"}}, "not an http"},
           {404, {}, "injected"},
       }) {
    server_.SetDirectorOverride(c.status, c.headers, 1);
    client_->InvalidateForTest();
    auto r = Read(0, 10);
    ASSERT_FALSE(r.ok()) << c.needle;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().ToString();
  }
}

}  // namespace
}  // namespace perch::http

namespace perch::http {
namespace {

// peak = max(peak, now), from any thread.
template <typename T>
void RaisePeak(std::atomic<T>& peak, T now) {
  T seen = peak.load();
  while (now > seen && !peak.compare_exchange_weak(seen, now)) {
  }
}

// Requests say what the program set (perchd: "perch/<version>").
TEST(CurlLoopTest, RequestsCarryTheUserAgentOfTheOptions) {
  testing::FaultServer server;
  server.AddObject("obj", "abc");
  CurlLoop::Options opts;
  opts.user_agent = "perch/9.8.7";
  CurlLoop loop(opts);
  std::promise<bool> got;
  HttpRequest r;
  r.url = server.BaseUrl() + "/srv/ok/ns/obj";
  loop.Submit(std::move(r), [&](core::Result<HttpResponse> res) {
    got.set_value(res.ok() && res->body == "abc");
  });
  ASSERT_TRUE(got.get_future().get());
  const std::vector<std::string> agents = server.UserAgents();
  ASSERT_EQ(agents.size(), 1u);
  EXPECT_EQ(agents[0], "perch/9.8.7");
}

TEST(CurlLoopBudgetTest, InFlightBudgetIsNeverExceeded) {
  testing::FaultServer server;
  server.AddObject("obj", std::string(200000, 'x'));
  CurlLoop::Options opts;
  opts.max_in_flight = 3;
  CurlLoop loop(opts);
  std::atomic<size_t> peak{0};
  loop.SetRequestObserverForTest([&](const HttpRequest&) {
    RaisePeak(peak, loop.InFlight() + 1);  // the transfer being started
  });
  std::atomic<int> done{0}, ok{0};
  for (int i = 0; i < 30; ++i) {
    HttpRequest r;
    r.url = server.BaseUrl() + "/srv/stall/ns/obj";  // holds the connection ~5 s unless cancelled
    r.deadline = core::DeadlineAfter(std::chrono::milliseconds(300));
    loop.Submit(std::move(r), [&](core::Result<HttpResponse> res) {
      done++;
      if (!res.ok() && res.status().code() == core::StatusCode::kDeadlineExceeded) ok++;
    });
  }
  for (int i = 0; i < 200 && done.load() < 30; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(done.load(), 30);
  EXPECT_EQ(ok.load(), 30);  // every one hit its own deadline; none hung in the queue
  EXPECT_EQ(peak.load(), 3u);
  EXPECT_EQ(loop.InFlight(), 0u);
  EXPECT_EQ(loop.Queued(), 0u);
}

// Requests to one server beyond its connections wait in the loop, in order, and
// leave the other servers' requests alone.
TEST(CurlLoopBudgetTest, AServerGetsAtMostItsConnectionsAndOthersGoOn) {
  testing::FaultServer slow, fast;
  slow.AddObject("obj", std::string(200000, 'x'));
  fast.AddObject("obj", std::string(1000, 'y'));
  CurlLoop::Options opts;
  opts.max_in_flight = 10;
  opts.max_host_connections = 2;
  CurlLoop loop(opts);
  std::atomic<int> slow_running{0}, slow_peak{0}, slow_done{0}, fast_ok{0};
  std::atomic<int> slow_done_when_fast_done{-1};
  const std::string slow_url = slow.BaseUrl() + "/srv/stall/ns/obj";  // holds ~5 s
  loop.SetRequestObserverForTest([&](const HttpRequest& r) {
    if (r.url == slow_url) RaisePeak(slow_peak, ++slow_running);
  });
  for (int i = 0; i < 6; ++i) {
    HttpRequest r;
    r.url = slow_url;
    r.deadline = core::DeadlineAfter(std::chrono::seconds(3));
    loop.Submit(std::move(r), [&](core::Result<HttpResponse>) {
      --slow_running;
      ++slow_done;
    });
  }
  std::promise<void> fast_finished;
  std::atomic<int> fast_done{0};
  for (int i = 0; i < 2; ++i) {
    HttpRequest r;
    r.url = fast.BaseUrl() + "/srv/ok/ns/obj";
    loop.Submit(std::move(r), [&](core::Result<HttpResponse> res) {
      if (res.ok() && res->body == std::string(1000, 'y')) ++fast_ok;
      if (++fast_done == 2) {  // the two run at once: either may end last
        slow_done_when_fast_done = slow_done.load();
        fast_finished.set_value();
      }
    });
  }
  fast_finished.get_future().wait();
  EXPECT_EQ(fast_ok.load(), 2);
  EXPECT_EQ(slow_done_when_fast_done.load(), 0);  // not behind the slow server's queue
  for (int i = 0; i < 200 && slow_done.load() < 6; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(slow_done.load(), 6);
  EXPECT_EQ(slow_peak.load(), 2);
  EXPECT_EQ(loop.InFlight(), 0u);
  EXPECT_EQ(loop.Queued(), 0u);
}

// A request waiting for its server's only connection ends at its own deadline,
// or when cancelled, not when the connection frees.
TEST(CurlLoopBudgetTest, AWaitingRequestEndsAtItsDeadlineOrWhenCancelled) {
  testing::FaultServer server;
  server.AddObject("obj", std::string(200000, 'x'));
  CurlLoop::Options opts;
  opts.max_host_connections = 1;
  CurlLoop loop(opts);
  const std::string url = server.BaseUrl() + "/srv/stall/ns/obj";  // holds ~5 s
  std::atomic<bool> first_done{false};
  HttpRequest first;
  first.url = url;
  first.deadline = core::DeadlineAfter(std::chrono::seconds(4));
  uint64_t first_id =
      loop.Submit(std::move(first), [&](core::Result<HttpResponse>) { first_done = true; });

  std::promise<std::pair<core::StatusCode, bool>> expired, cancelled;
  HttpRequest late;
  late.url = url;
  late.deadline = core::DeadlineAfter(std::chrono::milliseconds(200));
  loop.Submit(std::move(late), [&](core::Result<HttpResponse> res) {
    expired.set_value({res.status().code(), first_done.load()});
  });
  HttpRequest dropped;
  dropped.url = url;
  dropped.deadline = core::DeadlineAfter(std::chrono::seconds(4));
  uint64_t dropped_id = loop.Submit(std::move(dropped), [&](core::Result<HttpResponse> res) {
    cancelled.set_value({res.status().code(), first_done.load()});
  });

  auto [code, first_was_done] = expired.get_future().get();
  EXPECT_EQ(code, core::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(first_was_done);
  EXPECT_EQ(loop.Queued(), 1u);
  loop.Cancel(dropped_id);
  std::tie(code, first_was_done) = cancelled.get_future().get();
  EXPECT_EQ(code, core::StatusCode::kCancelled);
  EXPECT_FALSE(first_was_done);
  loop.Cancel(first_id);
  for (int i = 0; i < 100 && !first_done.load(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(first_done.load());
  EXPECT_EQ(loop.InFlight(), 0u);
  EXPECT_EQ(loop.Queued(), 0u);
}

}  // namespace
}  // namespace perch::http

namespace perch::http {
namespace {

// docs/security.md: a token never goes over plain http to another host. The
// request fails at once (kPermissionDenied, the server's failure: the next
// server may be https), nothing is sent, and the same request without a
// token, or to this node, goes out as before.
// The first step of perchd's orderly end (a stop, a handoff): every transfer ends now, and so
// does every one asked for later, while tasks posted to the loop still run. Before, work still
// running in perchd's job pool (a prefetch listing) that asked after the loops were shut down
// waited for its deadline (30 s) and held the handoff that long.
TEST(CurlLoopStopTest, AfterStopTransfersEveryRequestEndsAtOnceCancelled) {
  testing::FaultServer server;
  server.AddObject("obj", std::string(200000, 'x'));
  // Before the loop: its end cancels what a failed test left, into these.
  std::promise<core::Status> running, later, posted;
  CurlLoop loop{CurlLoop::Options{}};
  const std::string stall = server.BaseUrl() + "/srv/stall/ns/obj";  // holds ~5 s
  HttpRequest r;
  r.url = stall;
  r.deadline = core::DeadlineAfter(std::chrono::seconds(30));
  loop.Submit(std::move(r),
              [&](core::Result<HttpResponse> res) { running.set_value(res.status()); });
  for (int i = 0; i < 200 && loop.InFlight() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_EQ(loop.InFlight(), 1u);
  const auto started = std::chrono::steady_clock::now();
  loop.StopTransfers();
  auto f = running.get_future();
  ASSERT_EQ(f.wait_for(std::chrono::seconds(0)), std::future_status::ready);
  EXPECT_EQ(f.get().code(), core::StatusCode::kCancelled);
  // Asked later, from a task on the loop (as the director client asks) and from outside.
  loop.Post([&] {
    HttpRequest r2;
    r2.url = stall;
    r2.deadline = core::DeadlineAfter(std::chrono::seconds(30));
    loop.Submit(std::move(r2),
                [&](core::Result<HttpResponse> res) { posted.set_value(res.status()); });
  });
  HttpRequest r3;
  r3.url = stall;
  r3.deadline = core::DeadlineAfter(std::chrono::seconds(30));
  loop.Submit(std::move(r3),
              [&](core::Result<HttpResponse> res) { later.set_value(res.status()); });
  auto fl = later.get_future(), fp = posted.get_future();
  ASSERT_EQ(fl.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  ASSERT_EQ(fp.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  EXPECT_EQ(fl.get().code(), core::StatusCode::kCancelled);
  EXPECT_EQ(fp.get().code(), core::StatusCode::kCancelled);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2));
  EXPECT_EQ(loop.InFlight(), 0u);
  loop.Shutdown();
}

TEST(CurlLoopTokenTest, ATokenIsNeverSentOverPlainHttpToAnotherHost) {
  testing::FaultServer local;
  local.AddObject("obj", "bytes");
  CurlLoop loop{CurlLoop::Options{}};
  std::mutex mu;
  std::vector<std::string> sent;
  loop.SetRequestObserverForTest([&](const HttpRequest& r) {
    std::lock_guard<std::mutex> l(mu);
    sent.push_back(r.url);
  });
  auto submit = [&](const std::string& url, bool token) {
    HttpRequest r;
    r.url = url;
    if (token) r.headers.push_back("Authorization: Bearer secret");
    r.deadline = core::DeadlineAfter(std::chrono::milliseconds(300));
    r.connect_timeout = std::chrono::milliseconds(200);
    std::promise<core::Status> p;
    loop.Submit(std::move(r), [&p](core::Result<HttpResponse> res) { p.set_value(res.status()); });
    return p.get_future().get();
  };
  const std::string remote = "http://192.0.2.1:9/ns/obj";  // TEST-NET-1: no such host
  core::Status held = submit(remote, true);
  EXPECT_EQ(held.code(), core::StatusCode::kPermissionDenied) << held.ToString();
  EXPECT_EQ(held.where(), core::FailureSite::kCache);
  EXPECT_EQ(held.message().find("secret"), std::string::npos);
  core::Status plain = submit(remote, false);  // tried: times out connecting
  EXPECT_NE(plain.code(), core::StatusCode::kPermissionDenied) << plain.ToString();
  EXPECT_TRUE(submit(local.BaseUrl() + "/srv/ok/ns/obj", true).ok());
  std::lock_guard<std::mutex> l(mu);
  ASSERT_EQ(sent.size(), 2u);
  EXPECT_EQ(sent[0], remote);  // the one without a token
}

}  // namespace
}  // namespace perch::http
