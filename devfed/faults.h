// ResponseFaults: what perch-devfed's proxies do to the responses of an
// origin or cache: break or corrupt a fraction of the bodies (the
// fault-economy benchmark, perch's integrity checks) and add a Cache-Control
// header (an export with a caching policy). A WanProxy connection in front of
// a server feeds it both directions of plain HTTP/1.1; it follows the
// requests (to know which answers have no body: HEAD) and the responses
// (status, Content-Length), holds each response's header block until it is
// complete (to add the header), and for each response body draws at most one
// fault, and where it hits:
//
//   cut      the proxy forwards the body up to that point, then closes the
//            connection cleanly: the client sees a short body (fewer bytes
//            than Content-Length);
//   reset    the same, but the connection is reset (RST): a network error;
//   stall    the proxy stops forwarding there and keeps the connection open:
//            only the client's own timeout ends it;
//   corrupt  the byte there is flipped (XOR 0xFF); length and connection stay
//            intact. Only 2xx answers to GET: the bytes of an object.
//
// One uniform draw per body picks the fault, the four fractions being shares
// of [0, 1) (so their sum is at most 1), and the point is uniform over the
// body. A body with no bytes (HEAD, 204, 304, Content-Length 0) is never
// drawn for. A response it cannot follow (no Content-Length, chunked, 101, a
// header block over 64 KiB) ends the tracking of that connection: the rest of
// its bytes, that header block included, pass untouched. Bounded: at most
// 64 KiB (plus one read) of header bytes are held per direction.
//
// Thread-safety: one instance per connection; all of a link's instances are
// used by the link's one thread (they share its generator and counters).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <random>
#include <string>
#include <string_view>
#include <utility>

namespace perch::devfed {

// Fractions of response bodies, each in [0, 1], together at most 1.
struct FaultOptions {
  double cut = 0, reset = 0, stall = 0, corrupt = 0;
  bool any() const { return cut > 0 || reset > 0 || stall > 0 || corrupt > 0; }
};

// What one proxy does to the responses of its server.
struct ResponseOptions {
  FaultOptions faults;
  std::string cache_control;  // "": none; else every response carries `Cache-Control: <this>`
  bool any() const { return faults.any() || !cache_control.empty(); }
};

enum class Fault { kNone, kCut, kReset, kStall, kCorrupt };

// What the fault proxies of one link did, for tests that compare the bytes a
// client fetched with the bytes it needed. Updated on the link's thread, read
// from any thread.
struct FaultCounters {
  std::atomic<uint64_t> body_bytes{0};  // response body bytes forwarded (headers not counted)
  std::atomic<uint64_t> cut{0}, reset{0}, stall{0};
  std::atomic<uint64_t> corrupt{0};  // bodies forwarded with one byte flipped
};

class ResponseFaults {
 public:
  // `rng`: the link's generator (one for all connections, so that draws are
  // independent; consecutive seeds of mt19937_64 are not). `counters`, if
  // not null, the link's. Both outlive this.
  ResponseFaults(ResponseOptions options, std::mt19937_64* rng, FaultCounters* counters = nullptr)
      : options_(std::move(options)), rng_(*rng), counters_(counters) {}

  // Bytes the client sent to the server (they pass untouched).
  void OnRequestBytes(std::string_view data);

  // What to send the client for bytes the server sent: `bytes` (edited; may
  // be empty while a header block is incomplete, or hold header bytes held
  // from earlier calls), then `fault` (kCut, kReset or kStall: the proxy
  // breaks the connection after `bytes`, and no later call is made; kNone: go
  // on). Never kCorrupt: a corrupt body is in `bytes`.
  struct Output {
    std::string bytes;
    Fault fault = Fault::kNone;
  };
  Output OnResponseBytes(std::string_view data);

  // The server closed its side: the bytes still held (an incomplete header
  // block, untouched), to send before passing the end on.
  std::string OnResponseEnd();

 private:
  static constexpr size_t kMaxHeader = 64 << 10;

  void Count(uint64_t body_bytes, Fault fault);
  // Takes a complete header block: edits it and sets up its body. False if
  // the rest of the connection cannot be followed.
  bool StartResponse(std::string& head);
  // Draws the fault of a body of body_left_ bytes.
  void Draw(bool corruptible);

  const ResponseOptions options_;
  std::mt19937_64& rng_;
  FaultCounters* const counters_;
  bool lost_ = false;  // stopped following this connection

  // Requests.
  std::string req_head_;
  uint64_t req_body_left_ = 0;
  std::deque<std::string> methods_;  // of requests not yet answered

  // Responses.
  std::string resp_head_;  // held until complete
  uint64_t body_left_ = 0;
  uint64_t fault_at_ = 0;  // body bytes left when the fault hits
  Fault pending_ = Fault::kNone;
};

}  // namespace perch::devfed
