#include "transfer/direct_fetch.h"

#include <algorithm>
#include <deque>
#include <unordered_map>
#include <utility>

#include "daemon/core/limits.h"
#include "daemon/core/mutex.h"
#include "daemon/core/wait.h"

namespace perch::transfer {
namespace {

using core::Result;
using core::Status;
using namespace std::chrono_literals;

// Completed chunk reads, handed from the loop thread to the writer.
struct Completions {
  core::Mutex mu;
  core::CondVar cv;
  std::deque<std::pair<core::ByteRange, Result<core::Bytes>>> done PERCH_GUARDED_BY(mu);
};

}  // namespace

DirectFetcher::DirectFetcher(http::CurlLoop& loop, std::chrono::seconds chunk_timeout)
    : loop_(loop), chunk_timeout_(chunk_timeout) {}

DirectFetcher::~DirectFetcher() = default;

http::FederationClient& DirectFetcher::ClientFor(const http::FederationUrl& url) {
  std::string key = url.discovery_url + "\n" + url.token_name;
  auto it = clients_.find(key);
  if (it == clients_.end()) {
    http::FederationUrl root = url;
    root.path = core::ObjectPath();  // paths given to the client are federation paths
    // perch-transfer runs as the job: like Pelican's plugin it may send the
    // job's own opaque token (a macaroon) where the namespace requires one.
    http::FederationClientOptions options;
    options.opaque_tokens = http::OpaqueTokens::kSendDiscovered;
    it =
        clients_.emplace(key, std::make_unique<http::FederationClient>(loop_, root, options)).first;
  }
  return *it->second;
}

Result<FetchReport> DirectFetcher::Fetch(const http::FederationUrl& url, const TempFile& file) {
  http::FederationClient& client = ClientFor(url);
  const http::FederationCounters::Values before = client.counters();

  core::Deadline stat_deadline = core::DeadlineAfter(60s);
  auto attr = core::WaitFor<core::FileAttr>(
      stat_deadline, [&](auto done) { client.Stat(url.path, stat_deadline, std::move(done)); });
  if (!attr.ok()) return attr.status();
  if (attr->is_dir) {
    return core::InvalidArgumentError(url.path.str() +
                                      " is a directory; perch-transfer downloads single objects");
  }
  if (attr->size > core::kMaxObjectSize) {
    return core::CorruptError("the federation reports a size of " + std::to_string(attr->size) +
                              " bytes for " + url.path.str());
  }
  const uint64_t size = attr->size;
  const core::ObjectVersion version{size, attr->etag};

  auto completions = std::make_shared<Completions>();
  std::unordered_map<uint64_t, int> attempts;  // chunk offset -> reads started
  int in_flight = 0;
  auto issue = [&](core::ByteRange r) {
    ++in_flight;
    ++attempts[r.offset];
    client.ReadRange(url.path, version, r, core::DeadlineAfter(chunk_timeout_),
                     [completions, r](Result<core::FetchedBytes> fetched) {
                       // The job's file is the download, not a cache: may_store is moot.
                       Result<core::Bytes> bytes =
                           fetched.ok() ? Result<core::Bytes>(std::move(fetched->bytes))
                                        : Result<core::Bytes>(fetched.status());
                       core::MutexLock l(completions->mu);
                       completions->done.emplace_back(r, std::move(bytes));
                       completions->cv.NotifyOne();
                     });
  };

  uint64_t next = 0, written = 0;
  while (written < size) {
    while (in_flight < kChunksInFlight && next < size) {
      uint64_t len = std::min(kChunkBytes, size - next);
      issue({next, len});
      next += len;
    }
    const core::Deadline wait_until = core::Clock::now() + chunk_timeout_ + 30s;
    core::MutexLock l(completions->mu);
    while (completions->done.empty()) {
      if (!completions->cv.WaitUntil(completions->mu, wait_until) && completions->done.empty()) {
        return core::DeadlineExceededError("no chunk of " + url.path.str() + " arrived in time",
                                           core::FailureSite::kCache);
      }
    }
    auto [range, bytes] = std::move(completions->done.front());
    completions->done.pop_front();
    l.Unlock();
    --in_flight;
    if (!bytes.ok()) {
      if (bytes.status().retryable() && attempts[range.offset] < kChunkAttempts) {
        issue(range);
        continue;
      }
      return bytes.status();  // reads still in flight complete into `completions`, unread
    }
    if (bytes->size() != range.length) {
      return core::CorruptError("a read of " + std::to_string(range.length) + " bytes returned " +
                                std::to_string(bytes->size()));
    }
    PERCH_RETURN_IF_ERROR(file.WriteAt(range.offset, *bytes));
    written += range.length;
    attempts.erase(range.offset);
  }

  FetchReport report;
  report.via = "federation";
  report.file_bytes = size;
  const http::FederationCounters::Values after = client.counters();
  report.network_bytes = after.body_bytes - before.body_bytes;
  report.resumes = after.resumes - before.resumes;
  report.failovers = after.failovers - before.failovers;
  report.server = client.LastServer(url.path);
  // The digest, as Pelican's plugin asks for it once the bytes are in hand:
  // one request; none offered (or no answer) leaves the file unchecked.
  core::Deadline digest_deadline = core::DeadlineAfter(60s);
  auto digests = core::WaitFor<std::vector<core::ObjectDigest>>(digest_deadline, [&](auto done) {
    client.Digests(url.path, version, {}, digest_deadline, std::move(done));
  });
  if (digests.ok()) report.digests = *std::move(digests);
  return report;
}

}  // namespace perch::transfer
