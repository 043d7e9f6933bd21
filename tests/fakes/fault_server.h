// FaultServer: a tiny HTTP/1.1 server (Boost.Beast, a thread per connection)
// that plays a Pelican federation whose servers misbehave on purpose, for
// tests of failover and of malformed answers. It serves:
//
//   GET /.well-known/pelican-configuration   discovery naming itself as director
//   GET /ns/<name>                            director: 307 + Link to the
//                                             behaviours set by SetLinks()
//   GET /ns/<name>?directread                 director, for direct reads: 307 +
//                                             Link to SetDirectReads()'s server,
//                                             or 405 (as Pelican's without the
//                                             DirectReads capability)
//   GET /srv/<behaviour>/ns/<name>            a data server behaving as asked
//
//   PROPFIND /srv/<behaviour>/ns[/<dir>]      WebDAV listings set by SetListing()
//                                             (the director then names
//                                             <base>/srv/dav as collections-url)
//
// Behaviours: ok, 500, 404, 403, silent (accepts, never answers), stall
// (headers then silence), short (closes
// after half the body), badrange (wrong Content-Range start), wrongsize
// (Content-Range total off by one), norange (200 with the whole object),
// refuse (no such server: the port is closed), corrupt (one byte of the body
// flipped, under the true digest), nodigest (405 to a request carrying
// Want-Digest, as XRootD without checksums answers), digest404 (404 to a
// request carrying Want-Digest, as XRootD 5.5 answers some under concurrent
// ones for a file it has; served otherwise). Hostile caches, whose copy has
// one byte of the object flipped in every answer: lies (states the digest
// of its own wrong bytes), lies-405 (refuses Want-Digest), lies-none (states
// no digest), lies-junk (states unparsable ones: adler32=zzzzzzzz,
// sha-512=AAAA, foo=bar and a 60 KB md5: Beast takes no longer field).
// slowdigest takes 50 ms to answer
// a request carrying Want-Digest (a checksum job); trickle answers every
// range with a clean 206 of its first byte alone; any other name serves
// as ok does, from a server of its own ("ok2").
//
// A request carrying Want-Digest gets the whole object's adler32 (of the
// bytes that server serves), as XRootD's origins answer it on any Range GET.
//
// Thread-safety: setters may be called while serving; state is under a mutex.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace perch::testing {

class FaultServer {
 public:
  FaultServer();
  ~FaultServer();
  FaultServer(const FaultServer&) = delete;
  FaultServer& operator=(const FaultServer&) = delete;

  std::string BaseUrl() const;  // "http://127.0.0.1:PORT"

  // Objects served below /ns.
  void AddObject(const std::string& name, std::string bytes);
  // The data servers the director names, best first, e.g. {"500", "short", "ok"}.
  void SetLinks(std::vector<std::string> behaviours);
  // One entry of a listing, as a hostile server may write it: `size` is put
  // verbatim into getcontentlength (e.g. "18446744073709551615"), `name` may
  // hold any byte (it is percent-encoded in the href).
  struct ListingEntry {
    std::string name;
    std::string size;
    bool is_dir = false;
  };
  // Serves a PROPFIND listing of directory `dir` below /ns ("" = /ns itself).
  void SetListing(const std::string& dir, std::vector<ListingEntry> entries);

  // Makes /ns a protected namespace (require-token=true) whose director names
  // these token issuers, one X-Pelican-Authorization line each, as Pelican's.
  void SetProtected(std::vector<std::string> issuers);
  // The Authorization header of every request the data servers got (GET and
  // PROPFIND), "" for one without; in order.
  std::vector<std::string> Authorizations() const;
  // Each of those requests: what was asked and with which Authorization, in
  // order. One call is one consistent list (the data servers may be asked
  // more between two calls).
  struct Request {
    std::string method;         // "GET", "PROPFIND"
    std::string target;         // "/srv/ok/ns/x.txt"
    std::string authorization;  // "" for none
  };
  std::vector<Request> Requests() const;
  // The User-Agent header of each of those requests, in order.
  std::vector<std::string> UserAgents() const;

  // Replaces the director's answer with this raw header set (status, headers).
  void SetDirectorOverride(int status, std::vector<std::pair<std::string, std::string>> headers,
                           int times = -1);

  // How the director answers `?directread`: a 307 naming the data server of
  // `behaviour` (e.g. "ok": the origin, where the namespace has the
  // DirectReads capability), or, for "" (the default), 405 with Pelican's
  // JSON error, as its director answers when no origin supports direct reads.
  void SetDirectReads(std::string behaviour);
  // How many `?directread` questions the director got (also in DirectorHits).
  int DirectReadHits() const { return direct_read_hits_.load(); }

  // How many requests each behaviour's server got; how many of them carried Want-Digest.
  int Hits(const std::string& behaviour) const;
  int DigestAsks(const std::string& behaviour) const;
  // The most requests carrying Want-Digest answered at once, by all servers.
  int MaxDigestsInFlight() const;
  int DirectorHits() const { return director_hits_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<int> director_hits_{0};
  std::atomic<int> direct_read_hits_{0};
};

}  // namespace perch::testing
