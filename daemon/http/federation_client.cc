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

FederationClient::FederationClient(CurlLoop& loop, FederationUrl url,
                                   FederationClientOptions options)
    : url_(url), loop_(loop) {
  auto token_file = options.token_file;
  auto token_ttl = options.token_ttl;
  auto by_prefix = options.namespace_token_files;
  ctx_ = std::make_shared<ClientContext>(loop, std::move(url), std::move(options));
  director_ = std::make_shared<DirectorClient>(ctx_);
  auto auth = std::make_shared<NamespaceAuth>(TokenFinder(token_file), url_.token_name, token_ttl,
                                              std::move(by_prefix));
  reader_ = std::make_shared<RangeReader>(ctx_, director_, auth);
  lister_ = std::make_shared<Lister>(ctx_, director_, auth, reader_);
}

FederationClient::~FederationClient() = default;

const FederationCounters& FederationClient::counters() const { return ctx_->counters; }

ObjectPath FederationClient::ToFederation(const ObjectPath& rel) const {
  if (url_.path.IsRoot()) return rel;
  if (rel.IsRoot()) return url_.path;
  return PERCH_CHECKED(ObjectPath::Parse(url_.path.str() + rel.str()));
}

std::string FederationClient::LastServer(const ObjectPath& path) const {
  return reader_->ServedBy(ToFederation(path).str());
}

void FederationClient::Stat(const ObjectPath& path, Deadline deadline,
                            std::function<void(Result<core::FileAttr>)> done) {
  loop_.Post([lister = lister_, fed = ToFederation(path), deadline,
              done = std::move(done)]() mutable { lister->Stat(fed, deadline, std::move(done)); });
}

void FederationClient::List(const ObjectPath& path, Deadline deadline,
                            std::function<void(Result<std::vector<core::DirEntry>>)> done) {
  loop_.Post([lister = lister_, fed = ToFederation(path), deadline,
              done = std::move(done)]() mutable { lister->List(fed, deadline, std::move(done)); });
}

void FederationClient::ReadRange(const ObjectPath& path, const core::ObjectVersion& version,
                                 core::ByteRange range, Deadline deadline,
                                 std::function<void(Result<core::Bytes>)> done) {
  if (version.size > 0) {
    if (range.offset >= version.size) range.length = 0;
    range.length = std::min(range.length, version.size - std::min(range.offset, version.size));
  }
  if (range.length == 0) {
    loop_.Post([done = std::move(done)] { done(core::Bytes()); });
    return;
  }
  loop_.Post([reader = reader_, fed = ToFederation(path), version, range, deadline,
              done = std::move(done)]() mutable {
    reader->Read(fed, version, range, deadline, std::move(done));
  });
}

void FederationClient::SetProgressHookForTest(
    std::function<void(const std::string&, uint64_t)> hook) {
  loop_.Post([reader = reader_, hook = std::move(hook)]() mutable {
    reader->SetProgressHook(std::move(hook));
  });
}

void FederationClient::InvalidateForTest() {
  loop_.Post([director = director_] { director->InvalidateAll(); });
}

}  // namespace perch::http
