// Transferer: one download as perch-transfer does it, and the ClassAd that
// reports it to HTCondor.
//
// The path: through the node's perchd when its loopback endpoint serves the
// URL's federation (PerchdEndpoint), so that the bytes come from and land in
// the node's cache; otherwise, or when perchd refuses (403: a protected
// namespace the job must read with its own token) or cannot serve it, straight
// from the federation (DirectFetcher), with one line on stderr saying why.
// A 404 from perchd is the answer (the object does not exist), not a reason
// to ask again.
//
// The bytes go to a temporary file next to the destination, renamed into
// place when complete (local_file.h). The result ad holds what HTCondor's
// plugin protocol names (TransferSuccess, TransferError, TransferUrl,
// TransferFileName, TransferFileBytes, TransferTotalBytes: bytes received,
// TransferStartTime, TransferEndTime, TransferProtocol, TransferType,
// TransferRetryable, TransferLocalMachineName), a TransferErrorData list on
// failure and a DeveloperData ad (path taken, server, resumes, failovers,
// fallback reason).
//
// Thread-safety: one thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/http/curl_loop.h"
#include "transfer/classad.h"
#include "transfer/direct_fetch.h"
#include "transfer/node_config.h"
#include "transfer/perchd_endpoint.h"

namespace perch::transfer {

inline constexpr char kSupportedMethods[] = "osdf, pelican, stash";

struct TransferOutcome {
  ClassAd ad;
  bool success = false;
  bool retryable = false;
  std::string error;        // TransferError, "" on success
  std::string destination;  // the file written
  FetchReport report;
};

class Transferer {
 public:
  // `version` goes into User-Agent ("perch-transfer/<version>") and the ads.
  Transferer(NodeConfig node, std::string version);
  ~Transferer();
  Transferer(const Transferer&) = delete;
  Transferer& operator=(const Transferer&) = delete;

  TransferOutcome Download(const std::string& url, const std::string& local_name);

 private:
  // Fetches into `file`, through perchd if it can; `fallback` gets why not,
  // `via` the path of the last attempt ("perchd" or "federation").
  core::Result<FetchReport> Fetch(const http::FederationUrl& fu, const std::string& url,
                                  const TempFile& file, std::string* fallback, std::string* via);
  // The perchd endpoint's mounts, asked for once; nullptr (and `why`) if none.
  const std::vector<PerchdMount>* Mounts(std::string* why);

  NodeConfig node_;
  std::string version_;
  std::unique_ptr<http::CurlLoop> loop_;
  std::unique_ptr<DirectFetcher> direct_;
  std::unique_ptr<PerchdEndpoint> endpoint_;
  bool endpoint_asked_ = false;
  std::string endpoint_problem_;
  bool endpoint_problem_said_ = false;
  std::vector<PerchdMount> mounts_;
};

// The result ad of a transfer that never started (a bad input file, an upload).
ClassAd FailureAd(const std::string& url, const std::string& local_name, const std::string& type,
                  const std::string& error, const std::string& version);

// This machine's name, for TransferLocalMachineName.
std::string LocalMachineName();

}  // namespace perch::transfer
