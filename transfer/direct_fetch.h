// DirectFetcher: downloads an object straight from its federation with
// perch's own client (http::FederationClient): the director's caches with
// failover, resume at the first missing byte, and a token from the job's
// environment when the namespace requires one (http::TokenFinder's order,
// HTCondor's $_CONDOR_CREDS included).
//
// A download is a Stat, then Range reads of kChunkBytes, kChunksInFlight at a
// time, written into the temporary file at their offsets as they arrive. A
// chunk that fails with a retryable error is read again, at most
// kChunkAttempts times in all; any other failure ends the download.
//
// One FederationClient per (discovery URL, token name) is made on first use
// and kept, so that the director's answers and connections are reused across
// the transfers of one run.
//
// Thread-safety: Fetch is called from one thread at a time; the clients'
// callbacks run on the CurlLoop's thread and only hand results back.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>

#include "daemon/core/result.h"
#include "daemon/http/curl_loop.h"
#include "daemon/http/federation_client.h"
#include "daemon/http/url.h"
#include "transfer/fetch.h"
#include "transfer/local_file.h"

namespace perch::transfer {

class DirectFetcher {
 public:
  static constexpr uint64_t kChunkBytes = 8 << 20;
  static constexpr int kChunksInFlight = 4;
  static constexpr int kChunkAttempts = 3;

  // `loop` outlives this object.
  explicit DirectFetcher(http::CurlLoop& loop,
                         std::chrono::seconds chunk_timeout = std::chrono::seconds(300));
  ~DirectFetcher();
  DirectFetcher(const DirectFetcher&) = delete;
  DirectFetcher& operator=(const DirectFetcher&) = delete;

  // Downloads `url` into `file` (written from offset 0). kNotFound,
  // kPermissionDenied, kInvalidArgument (a directory), kUnavailable /
  // kDeadlineExceeded (retryable), kCorrupt, kNoSpace (local).
  core::Result<FetchReport> Fetch(const http::FederationUrl& url, const TempFile& file);

 private:
  http::FederationClient& ClientFor(const http::FederationUrl& url);

  http::CurlLoop& loop_;
  std::chrono::seconds chunk_timeout_;
  std::map<std::string, std::unique_ptr<http::FederationClient>> clients_;
};

}  // namespace perch::transfer
