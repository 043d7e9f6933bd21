// ResponseFaults on byte streams: what perch-devfed's proxies send a client
// for what a server sent, fed whole and in small pieces.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

#include "devfed/faults.h"

namespace perch::devfed {
namespace {

std::string Request(const std::string& method) {
  return method + " /test/f HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
}

std::string Response(int status, const std::string& body, const std::string& more = "") {
  return "HTTP/1.1 " + std::to_string(status) +
         " X\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" + more + "\r\n" + body;
}

// 1,000 bytes that differ from their neighbours.
std::string Body(size_t n = 1000) {
  std::string b(n, '\0');
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<char>('a' + i % 26);
  return b;
}

struct Sent {
  std::string bytes;
  Fault fault = Fault::kNone;
};

// Feeds `response` to `f` in pieces of `piece` bytes, then the server's end.
Sent Feed(ResponseFaults& f, std::string_view response, size_t piece) {
  Sent s;
  for (size_t at = 0; at < response.size() && s.fault == Fault::kNone; at += piece) {
    auto out = f.OnResponseBytes(response.substr(at, piece));
    s.bytes += out.bytes;
    s.fault = out.fault;
  }
  if (s.fault == Fault::kNone) s.bytes += f.OnResponseEnd();
  return s;
}

size_t Differences(const std::string& a, const std::string& b) {
  size_t n = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) n += a[i] != b[i];
  return n;
}

ResponseOptions Corrupt(double fraction) { return {{.corrupt = fraction}, ""}; }

TEST(ResponseFaultsTest, CorruptBodyDiffersInOneByteAndKeepsItsLength) {
  std::mt19937_64 rng(1);
  FaultCounters counters;
  ResponseFaults f(Corrupt(1), &rng, &counters);
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
  constexpr int kResponses = 20;
  for (int i = 0; i < kResponses; ++i) {  // on one keep-alive connection
    f.OnRequestBytes(Request("GET"));
    Sent s = Feed(f, head + Body(), 4096);
    EXPECT_EQ(s.fault, Fault::kNone);
    ASSERT_EQ(s.bytes.size(), head.size() + 1000);
    EXPECT_EQ(s.bytes.substr(0, head.size()), head);
    EXPECT_EQ(Differences(s.bytes.substr(head.size()), Body()), 1u) << i;
  }
  EXPECT_EQ(counters.corrupt, static_cast<uint64_t>(kResponses));
  EXPECT_EQ(counters.body_bytes, 1000u * kResponses);
}

TEST(ResponseFaultsTest, CorruptHitsOnlyTheBodiesOfGetAnswers) {
  std::mt19937_64 rng(2);
  FaultCounters counters;
  ResponseFaults f(Corrupt(1), &rng, &counters);
  // HEAD (Content-Length but no body), 304, a 404's body, a PROPFIND's body.
  std::string head = "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
  std::string not_modified = "HTTP/1.1 304 Not Modified\r\nContent-Length: 1000\r\n\r\n";
  std::string missing = Response(404, "<html>not found</html>");
  std::string listing = Response(207, "<multistatus/>");
  for (const auto& [method, response] :
       {std::pair{"HEAD", head}, std::pair{"GET", not_modified}, std::pair{"GET", missing},
        std::pair{"PROPFIND", listing}}) {
    f.OnRequestBytes(Request(method));
    Sent s = Feed(f, response, 4096);
    EXPECT_EQ(s.bytes, response) << method;
    EXPECT_EQ(s.fault, Fault::kNone);
  }
  EXPECT_EQ(counters.corrupt, 0u);
  // The connection is still followed: the next GET is corrupted.
  f.OnRequestBytes(Request("GET"));
  EXPECT_EQ(Differences(Feed(f, Response(206, Body()), 4096).bytes, Response(206, Body())), 1u);
}

TEST(ResponseFaultsTest, OneByteAtATimeEditsAsAWholeFeedDoes) {
  // Same seed, same draws: a response fed byte by byte comes out as it does fed whole.
  for (ResponseOptions options : {Corrupt(1), ResponseOptions{{.cut = 1}, "max-age=60"},
                                  ResponseOptions{{.reset = 0.5, .corrupt = 0.5}, "no-store"}}) {
    for (uint64_t seed = 1; seed <= 10; ++seed) {
      Sent whole, bytewise;
      for (auto [piece, sent] :
           {std::pair{size_t{1} << 20, &whole}, std::pair{size_t{1}, &bytewise}}) {
        std::mt19937_64 rng(seed);
        ResponseFaults f(options, &rng);
        f.OnRequestBytes(Request("GET"));
        f.OnRequestBytes(Request("GET"));
        *sent = Feed(f, Response(200, Body()) + Response(200, Body(300)), piece);
      }
      EXPECT_EQ(whole.bytes, bytewise.bytes) << seed;
      EXPECT_EQ(whole.fault, bytewise.fault) << seed;
    }
  }
  // And the byte-wise feed is edited right.
  std::mt19937_64 rng(3);
  ResponseFaults f({{.corrupt = 1}, "no-store"}, &rng);
  f.OnRequestBytes(Request("GET"));
  Sent s = Feed(f, Response(200, Body()), 1);
  std::string want = Response(200, Body(), "Cache-Control: no-store\r\n");
  ASSERT_EQ(s.bytes.size(), want.size());
  EXPECT_EQ(s.bytes.substr(0, want.size() - 1000), want.substr(0, want.size() - 1000));
  EXPECT_EQ(Differences(s.bytes, want), 1u);
}

TEST(ResponseFaultsTest, CutForwardsAPrefixThenBreaks) {
  std::mt19937_64 rng(4);
  FaultCounters counters;
  ResponseFaults f({{.cut = 1}, ""}, &rng, &counters);
  f.OnRequestBytes(Request("GET"));
  std::string response = Response(200, Body());
  Sent s = Feed(f, response, 7);
  EXPECT_EQ(s.fault, Fault::kCut);
  EXPECT_LT(s.bytes.size(), response.size());
  EXPECT_EQ(s.bytes, response.substr(0, s.bytes.size()));
  EXPECT_EQ(counters.cut, 1u);
}

TEST(ResponseFaultsTest, CacheControlOncePerResponseOnKeepAlive) {
  std::mt19937_64 rng(5);
  ResponseFaults f({{}, "no-store"}, &rng);
  // Pipelined requests, then their answers in one stream: a GET, a HEAD, a
  // 404, an interim 100 before a final answer.
  f.OnRequestBytes(Request("GET") + Request("HEAD") + Request("GET"));
  f.OnRequestBytes("PUT /test/f HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n");
  f.OnRequestBytes("abc");
  std::string cc = "Cache-Control: no-store\r\n";
  std::string in = Response(206, Body(), "Content-Range: bytes 0-999/5000\r\n") +
                   "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n\r\n" + Response(404, "gone") +
                   "HTTP/1.1 100 Continue\r\n\r\n" + Response(201, "");
  std::string want = Response(206, Body(), "Content-Range: bytes 0-999/5000\r\n" + cc) +
                     "HTTP/1.1 200 OK\r\nContent-Length: 5000\r\n" + cc + "\r\n" +
                     Response(404, "gone", cc) + "HTTP/1.1 100 Continue\r\n\r\n" +
                     Response(201, "", cc);
  for (size_t piece : {size_t{1}, size_t{5}, size_t{1} << 20}) {
    std::mt19937_64 rng2(5);
    ResponseFaults g({{}, "no-store"}, &rng2);
    g.OnRequestBytes(Request("GET") + Request("HEAD") + Request("GET"));
    g.OnRequestBytes(
        "PUT /test/f HTTP/1.1\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\nabc");
    EXPECT_EQ(Feed(g, in, piece).bytes, want) << piece;
  }
  EXPECT_EQ(Feed(f, in, 3).bytes, want);
}

TEST(ResponseFaultsTest, HeaderBlockOverTheLimitPassesUntouched) {
  std::string big = Response(200, Body(), "X-Pad: " + std::string(70 << 10, 'p') + "\r\n");
  std::string after = Response(200, Body());  // not followed any more: untouched too
  for (size_t piece : {size_t{1} << 20, size_t{1000}, size_t{1}}) {
    std::mt19937_64 rng(6);
    FaultCounters counters;
    ResponseFaults f({{.corrupt = 1}, "no-store"}, &rng, &counters);
    f.OnRequestBytes(Request("GET") + Request("GET"));
    Sent s = Feed(f, big + after, piece);
    EXPECT_EQ(s.bytes, big + after) << piece;
    EXPECT_EQ(counters.corrupt, 0u);
  }
}

TEST(ResponseFaultsTest, AnIncompleteHeaderBlockIsSentAtTheEnd) {
  std::mt19937_64 rng(7);
  ResponseFaults f({{}, "no-store"}, &rng);
  f.OnRequestBytes(Request("GET"));
  EXPECT_EQ(f.OnResponseBytes("HTTP/1.1 200 OK\r\nContent-Le").bytes, "");
  EXPECT_EQ(f.OnResponseBytes("ngth: 3\r\n").bytes, "");
  EXPECT_EQ(f.OnResponseEnd(), "HTTP/1.1 200 OK\r\nContent-Length: 3\r\n");
}

TEST(ResponseFaultsTest, ChunkedAnswersEndTheFollowing) {
  std::mt19937_64 rng(8);
  ResponseFaults f({{.corrupt = 1}, "private"}, &rng);
  f.OnRequestBytes(Request("GET") + Request("GET"));
  std::string chunked =
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n";
  std::string next = Response(200, Body());
  // The header block is complete, so it is edited; then everything passes.
  EXPECT_EQ(Feed(f, chunked + next, 4).bytes,
            "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nCache-Control: private\r\n\r\n"
            "3\r\nabc\r\n0\r\n\r\n" +
                next);
}

}  // namespace
}  // namespace perch::devfed
