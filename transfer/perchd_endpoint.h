// PerchdEndpoint: downloads through the node's perchd, over its loopback
// HTTP endpoint, so that a job's inputs come from (and land in) the node's
// one cache.
//
// The endpoint's contract (perchd side):
//   GET /.perch/mounts -> 200 application/json
//     {"mounts":[{"federation":"pelican://h:p/","discovery":"https://h:p",
//                 "prefix":"/ns","mountpoint":"/osdf"}]}
//     A mount serves URL u when ParseFederationUrl(u).discovery_url equals
//     its discovery and u's path is at or below its prefix.
//   GET /<federation path, percent-encoded per segment> [Range: bytes=N-]
//     -> 200/206 with Content-Length, Content-Range; 403 protected (the job
//     must read it with its own token); 404; 416; 503; 504. Answers carry
//     X-Perch-Federation: <federation>.
//   HEAD /<federation path> with Want-Digest -> 200 with a Digest header
//     (RFC 3230) when perchd has the object's digest checked.
//
// A download streams the body into the temporary file. A transfer that is
// cut resumes with "Range: bytes=N-" where it stopped; every 206 must start
// at N and report the same total as the first answer (the object is
// immutable; anything else is kCorrupt). Three attempts in a row without a
// new byte end the download (kUnavailable).
//
// No token is sent to perchd: it reads with its own credentials and refuses
// (403) what a job must not read through it. Nothing is sent to a server
// that is not perchd: before each request the loopback socket that answers
// must be root's (or this user's own), else kPermissionDenied (another local
// user holding the port).
//
// Thread-safety: one thread calls LoadMounts and Fetch; the body is written on
// the CurlLoop's thread, which carries one transfer at a time here.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/types.h"
#include "daemon/http/curl_loop.h"
#include "daemon/http/url.h"
#include "transfer/fetch.h"
#include "transfer/local_file.h"

namespace perch::transfer {

struct PerchdMount {
  std::string federation;  // as perchd shows it, e.g. "pelican://127.0.0.1:8443/"
  std::string discovery;   // FederationUrl::discovery_url
  core::ObjectPath prefix;
  std::string mountpoint;
};

// Parses the /.perch/mounts answer. kCorrupt for anything but the shape
// above, more than 1024 mounts, or a field longer than 4096 bytes.
core::Result<std::vector<PerchdMount>> ParseMounts(std::string_view json);

// The mount that serves `url` (the longest prefix if several do), or nullptr.
const PerchdMount* MountServing(const std::vector<PerchdMount>& mounts,
                                const http::FederationUrl& url);

class PerchdEndpoint {
 public:
  // `base`: "http://127.0.0.1:8480". `loop` outlives this object.
  PerchdEndpoint(http::CurlLoop& loop, std::string base) : loop_(loop), base_(std::move(base)) {}

  // Asks for the mount list. kUnavailable if perchd does not answer,
  // kCorrupt for a malformed answer.
  core::Result<std::vector<PerchdMount>> LoadMounts();

  // Downloads `url`, which `mount` serves, into `file`. kNotFound (perchd
  // says the object does not exist), kPermissionDenied (403), kUnavailable,
  // kDeadlineExceeded, kCorrupt, and kLocal errors of the file.
  core::Result<FetchReport> Fetch(const http::FederationUrl& url, const PerchdMount& mount,
                                  const TempFile& file);

  const std::string& base() const { return base_; }

 private:
  struct Attempt;
  // The object's digests perchd states (HEAD with Want-Digest, as Pelican's
  // client asks after a download); empty when it offers none. kCorrupt when
  // perchd answers 502: the bytes it holds do not match the server's digest.
  core::Result<std::vector<core::ObjectDigest>> AskDigests(const std::string& url);
  // One GET from `attempt.offset` on; fills `attempt`.
  void RunAttempt(const std::string& url, const PerchdMount& mount, Attempt& attempt);

  http::CurlLoop& loop_;
  std::string base_;
};

}  // namespace perch::transfer
