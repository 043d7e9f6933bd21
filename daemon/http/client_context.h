// What the parts of a FederationClient share: the net loop, the options and
// the counters. See federation_client.h for the whole.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "daemon/core/mutex.h"
#include "daemon/http/curl_loop.h"
#include "daemon/http/token.h"
#include "daemon/http/url.h"

namespace perch::http {

struct FederationClientOptions {
  std::string token_file;  // explicit token location (step 0 of the search order)
  // Token files for namespaces at or below a federation path prefix; they
  // come before every other source and are never sent to another namespace.
  std::map<std::string, std::string> namespace_token_files;
  // Whether an opaque token found by discovery may be sent (token.h): only a
  // client that runs as the job itself (perch-transfer) says so; perchd never.
  OpaqueTokens opaque_tokens = OpaqueTokens::kRefuse;
  // Whole objects are checked against a digest that vouches for them
  // (range_reader.h), with at most this many digest requests out per origin
  // (digest_slots.h).
  bool verify_digests = true;
  size_t digest_requests_per_origin = 3;
  size_t digest_requests_per_server = 1;
  std::chrono::seconds namespace_ttl{300};         // director answers, per namespace prefix
  std::chrono::seconds discovery_ttl{1800};        // discovery document
  std::chrono::seconds discovery_failure_ttl{15};  // a failed discovery is remembered this long
  std::chrono::seconds server_penalty{30};         // a failed server sorts last this long
  std::chrono::seconds token_ttl{30};              // how long a found token is reused
  std::chrono::milliseconds connect_timeout{5000};
  // A server whose answer has not begun within this time is left for the
  // next one in the list (a stalled or overloaded cache): an adaptive
  // multiple of the first-byte times seen, within these bounds. The last
  // server of a list is waited for until the read's deadline.
  std::chrono::milliseconds first_byte_min{1000};
  std::chrono::milliseconds first_byte_max{10000};
  long low_speed_bytes = 1024;                       // abort a transfer slower than this ...
  std::chrono::seconds low_speed_time{10};           // ... for this long
  int director_attempts = 4;                         // for 429 and proxy errors
  std::chrono::milliseconds director_backoff{1000};  // backoff unit: n * unit + unit
  size_t max_servers = 6;
};

// Monotonic counters; read from any thread.
struct FederationCounters {
  std::atomic<uint64_t> discovery_queries{0};
  std::atomic<uint64_t> director_queries{0};
  std::atomic<uint64_t> propfinds{0};
  std::atomic<uint64_t> range_gets{0};
  std::atomic<uint64_t> body_bytes{0};          // every body byte of a range GET that arrived
  std::atomic<uint64_t> bytes_delivered{0};     // bytes handed to callers
  std::atomic<uint64_t> failovers{0};           // moves to the next server after a failure
  std::atomic<uint64_t> resumes{0};             // attempts that started past the range's first byte
  std::atomic<uint64_t> digests_verified{0};    // whole objects that matched the server's digest
  std::atomic<uint64_t> digest_mismatches{0};   // bodies that did not: fetched again elsewhere
  std::atomic<uint64_t> digests_unverified{0};  // whole objects no other server vouched for
  std::atomic<uint64_t> digest_asks{0};         // digest requests sent
  std::atomic<uint64_t> origin_fallbacks{0};    // reads sent to the origins (?directread)

  // The counters at one moment; summed over a FederationClient's shards.
  struct Values {
    uint64_t discovery_queries = 0, director_queries = 0, propfinds = 0, range_gets = 0,
             body_bytes = 0, bytes_delivered = 0, failovers = 0, resumes = 0, digests_verified = 0,
             digest_mismatches = 0, digests_unverified = 0, digest_asks = 0, origin_fallbacks = 0;
    Values& operator+=(const Values& o) {
      discovery_queries += o.discovery_queries;
      director_queries += o.director_queries;
      propfinds += o.propfinds;
      range_gets += o.range_gets;
      body_bytes += o.body_bytes;
      bytes_delivered += o.bytes_delivered;
      failovers += o.failovers;
      resumes += o.resumes;
      digests_verified += o.digests_verified;
      digest_mismatches += o.digest_mismatches;
      digests_unverified += o.digests_unverified;
      digest_asks += o.digest_asks;
      origin_fallbacks += o.origin_fallbacks;
      return *this;
    }
  };
  Values Take() const {
    return Values{discovery_queries.load(),  director_queries.load(),
                  propfinds.load(),          range_gets.load(),
                  body_bytes.load(),         bytes_delivered.load(),
                  failovers.load(),          resumes.load(),
                  digests_verified.load(),   digest_mismatches.load(),
                  digests_unverified.load(), digest_asks.load(),
                  origin_fallbacks.load()};
  }
};

// What each server (scheme://host:port) did wrong, so that an operator can
// tell which cache is bad: bodies that did not match the object's digest and
// attempts that failed for the server's own reasons (each also sorts it last
// for server_penalty). At most kMaxServers are named; the rest are counted
// under "other". Safe from any thread.
class ServerTally {
 public:
  struct Counts {
    uint64_t digest_mismatches = 0;
    uint64_t failures = 0;
    Counts& operator+=(const Counts& o) {
      digest_mismatches += o.digest_mismatches;
      failures += o.failures;
      return *this;
    }
  };
  void DigestMismatch(const std::string& server) { Add(server, Counts{1, 0}); }
  void Failure(const std::string& server) { Add(server, Counts{0, 1}); }
  std::map<std::string, Counts> Take() const {
    core::MutexLock l(mu_);
    return by_server_;
  }
  static constexpr size_t kMaxServers = 256;

 private:
  void Add(const std::string& server, const Counts& c) {
    core::MutexLock l(mu_);
    const bool named =
        server.size() <= 256 && (by_server_.size() < kMaxServers || by_server_.count(server) > 0);
    by_server_[named ? server : std::string("other")] += c;
  }
  mutable core::Mutex mu_;  // a leaf lock
  std::map<std::string, Counts> by_server_ PERCH_GUARDED_BY(mu_);
};

struct ClientContext {
  ClientContext(CurlLoop& l, FederationUrl u, FederationClientOptions o)
      : loop(l), url(std::move(u)), options(std::move(o)) {}
  CurlLoop& loop;
  const FederationUrl url;
  const FederationClientOptions options;
  FederationCounters counters;
  ServerTally servers;
};

}  // namespace perch::http
