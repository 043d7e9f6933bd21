#include "daemon/http/federation_client.h"

#include <algorithm>

#include "daemon/core/check.h"
#include "daemon/http/director_client.h"
#include "daemon/http/lister.h"
#include "daemon/http/range_reader.h"
#include "daemon/http/token.h"

namespace perch::http {

using core::Deadline;
using core::ObjectPath;
using core::Result;

FederationClient::FederationClient(const std::vector<CurlLoop*>& loops, FederationUrl url,
                                   FederationClientOptions options)
    : url_(url), answers_(std::make_shared<NamespaceAnswers>()) {
  PERCH_CHECK(!loops.empty());
  auto answers = answers_;                             // one shard's answer serves every shard
  auto refusals = std::make_shared<DigestRefusals>();  // a server refuses digests to all shards
  auto slots = std::make_shared<DigestSlots>(options.digest_requests_per_origin,
                                             options.digest_requests_per_server);
  for (CurlLoop* loop : loops) {
    Shard shard{loop, std::make_shared<ClientContext>(*loop, url, options), nullptr, nullptr,
                nullptr};
    shard.director = std::make_shared<DirectorClient>(shard.ctx, answers);
    auto auth = std::make_shared<NamespaceAuth>(
        TokenFinder(options.token_file, options.opaque_tokens), url_.token_name, options.token_ttl,
        options.namespace_token_files);
    shard.reader = std::make_shared<RangeReader>(shard.ctx, shard.director, auth, refusals, slots);
    shard.lister = std::make_shared<Lister>(shard.ctx, shard.director, auth, shard.reader);
    shards_.push_back(std::move(shard));
  }
}

FederationClient::~FederationClient() = default;

FederationCounters::Values FederationClient::counters() const {
  FederationCounters::Values sum;
  for (const Shard& s : shards_) sum += s.ctx->counters.Take();
  return sum;
}

std::map<std::string, ServerTally::Counts> FederationClient::servers() const {
  std::map<std::string, ServerTally::Counts> sum;
  for (const Shard& s : shards_) {
    for (const auto& [server, c] : s.ctx->servers.Take()) sum[server] += c;
  }
  return sum;
}

ObjectPath FederationClient::NamespaceOf(const ObjectPath& path) const {
  std::optional<ObjectPath> ns = answers_->Named(ToFederation(path));
  if (!ns) return ObjectPath();
  return ns->RelativeTo(url_.path).value_or(ObjectPath());
}

ObjectPath FederationClient::ToFederation(const ObjectPath& rel) const {
  if (url_.path.IsRoot()) return rel;
  if (rel.IsRoot()) return url_.path;
  return PERCH_CHECKED(ObjectPath::Parse(url_.path.str() + rel.str()));
}

const FederationClient::Shard& FederationClient::ReaderOf(const ObjectPath& fed) const {
  if (shards_.size() == 1) return shards_[0];
  return shards_[std::hash<std::string>{}(fed.str()) % shards_.size()];
}

std::string FederationClient::LastServer(const ObjectPath& path) const {
  const ObjectPath fed = ToFederation(path);
  return ReaderOf(fed).reader->ServedBy(fed.str());
}

void FederationClient::Stat(const ObjectPath& path, Deadline deadline,
                            std::function<void(Result<core::FileAttr>)> done) {
  const Shard& s = shards_[0];
  s.loop->Post(
      [lister = s.lister, fed = ToFederation(path), deadline, done = std::move(done)]() mutable {
        lister->Stat(fed, deadline, std::move(done));
      });
}

void FederationClient::List(const ObjectPath& path, Deadline deadline,
                            std::function<void(Result<std::vector<core::DirEntry>>)> done) {
  const Shard& s = shards_[0];
  s.loop->Post(
      [lister = s.lister, fed = ToFederation(path), deadline, done = std::move(done)]() mutable {
        lister->List(fed, deadline, std::move(done));
      });
}

void FederationClient::ReadRange(const ObjectPath& path, const core::ObjectVersion& version,
                                 core::ByteRange range, Deadline deadline,
                                 std::function<void(Result<core::FetchedBytes>)> done) {
  if (version.size > 0) {
    if (range.offset >= version.size) range.length = 0;
    range.length = std::min(range.length, version.size - std::min(range.offset, version.size));
  }
  ObjectPath fed = ToFederation(path);
  const Shard& s = ReaderOf(fed);
  if (range.length == 0) {
    s.loop->Post([done = std::move(done)] { done(core::FetchedBytes()); });
    return;
  }
  s.loop->Post([reader = s.reader, fed = std::move(fed), version, range, deadline,
                done = std::move(done)]() mutable {
    reader->Read(fed, version, range, deadline, std::move(done));
  });
}

void FederationClient::Distrust(const ObjectPath& path) {
  ObjectPath fed = ToFederation(path);
  const Shard& s = ReaderOf(fed);
  s.loop->Post([reader = s.reader, fed = std::move(fed)] { reader->Distrust(fed); });
}

void FederationClient::Blame(const ObjectPath& path) {
  ObjectPath fed = ToFederation(path);
  const Shard& s = ReaderOf(fed);
  s.loop->Post([reader = s.reader, fed = std::move(fed)] { reader->Blame(fed); });
}

void FederationClient::Digests(const ObjectPath& path, const core::ObjectVersion& version,
                               const std::vector<std::string>& algorithms, Deadline deadline,
                               std::function<void(Result<std::vector<core::ObjectDigest>>)> done) {
  ObjectPath fed = ToFederation(path);
  const Shard& s = ReaderOf(fed);
  if (version.size == 0) {
    s.loop->Post([done = std::move(done), fed] {
      done(core::NotFoundError(fed.str() + " is empty: no byte to ask a digest with"));
    });
    return;
  }
  s.loop->Post(
      [reader = s.reader, fed, version, algorithms, deadline, done = std::move(done)]() mutable {
        reader->Vouch(fed, version, algorithms, deadline, std::move(done));
      });
}

void FederationClient::SetProgressHookForTest(
    std::function<void(const std::string&, uint64_t)> hook) {
  for (const Shard& s : shards_) {
    s.loop->Post([reader = s.reader, hook]() mutable { reader->SetProgressHook(std::move(hook)); });
  }
}

void FederationClient::InvalidateForTest() {
  for (const Shard& s : shards_) {
    s.loop->Post([director = s.director] { director->InvalidateAll(); });
  }
}

}  // namespace perch::http
