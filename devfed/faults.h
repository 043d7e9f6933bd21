// ResponseFaults: perch-devfed's fault injection for the fault-economy
// benchmark. A WanProxy connection in front of an origin or cache feeds it
// both directions of plain HTTP/1.1; it follows the requests (to know which
// answers have no body: HEAD) and the responses (status, Content-Length),
// and for each response body it draws whether to break it and where:
//
//   cut    the proxy forwards part of the body, then closes the connection
//          cleanly: the client sees a short body (fewer bytes than
//          Content-Length);
//   reset  the same, but the connection is reset (RST): a network error;
//   stall  the proxy stops forwarding mid-body and keeps the connection open:
//          only the client's own timeout ends it.
//
// The break point is uniform over the body. A response it cannot follow (no
// Content-Length, chunked, oversized headers) ends the tracking of that
// connection: its bytes then pass untouched. Bounded: at most 64 KiB of
// header bytes are held per direction.
//
// Thread-safety: one instance per connection; all of a link's instances are
// used by the link's one thread (they share its generator).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <string_view>

namespace perch::devfed {

struct FaultOptions {
  double cut = 0, reset = 0, stall = 0;  // fractions of response bodies, each in [0, 1], sum <= 1
  bool any() const { return cut > 0 || reset > 0 || stall > 0; }
};

enum class Fault { kNone, kCut, kReset, kStall };

// What the fault proxies of one link did, for tests that compare the bytes a
// client fetched with the bytes it needed. Updated on the link's thread, read
// from any thread.
struct FaultCounters {
  std::atomic<uint64_t> body_bytes{0};  // response body bytes forwarded (headers not counted)
  std::atomic<uint64_t> cut{0}, reset{0}, stall{0};
};

class ResponseFaults {
 public:
  // `rng`: the link's generator (one for all connections, so that draws are
  // independent; consecutive seeds of mt19937_64 are not). `counters`, if
  // not null, the link's. Both outlive this.
  ResponseFaults(FaultOptions options, std::mt19937_64* rng, FaultCounters* counters = nullptr)
      : options_(options), rng_(*rng), counters_(counters) {}

  // Bytes the client sent to the server.
  void OnRequestBytes(std::string_view data);

  // Bytes the server sent: forward the first `pass` of them, then apply
  // `fault` (kNone: all of them pass).
  struct Decision {
    size_t pass;
    Fault fault;
  };
  Decision OnResponseBytes(std::string_view data);

 private:
  static constexpr size_t kMaxHeader = 64 << 10;

  void Count(uint64_t body_bytes, Fault fault);
  // Parses a header block; false if it cannot be followed.
  bool StartResponse(const std::string& head);

  FaultOptions options_;
  std::mt19937_64& rng_;
  FaultCounters* counters_;
  bool lost_ = false;  // stopped following this connection

  // Requests.
  std::string req_head_;
  uint64_t req_body_left_ = 0;
  std::deque<std::string> methods_;  // of requests not yet answered

  // Responses.
  std::string resp_head_;
  uint64_t body_left_ = 0;
  uint64_t fault_at_ = 0;  // body bytes left when the fault hits
  Fault pending_ = Fault::kNone;
};

}  // namespace perch::devfed
