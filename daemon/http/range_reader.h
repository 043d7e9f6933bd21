// RangeReader: reads a byte range of one federation object from the servers
// the director names, failing over down the list and resuming at the first
// missing byte (policy in failover.h).
//
// Every 206 is checked before its body is kept: Content-Range must start at
// the byte asked for and end within the range, its total must equal the size
// of the version being read, and a server's ETag must not change between its
// answers (XRootD's ETag is per host, so ETags are compared per server only).
//
// Thread-safety: Read runs on the CurlLoop's thread (callbacks too); ServedBy
// is safe from any thread.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "daemon/core/result.h"
#include "daemon/core/types.h"
#include "daemon/http/client_context.h"
#include "daemon/http/director_client.h"
#include "daemon/http/failover.h"
#include "daemon/http/token.h"

namespace perch::http {

class RangeReader : public std::enable_shared_from_this<RangeReader> {
 public:
  RangeReader(std::shared_ptr<ClientContext> ctx, std::shared_ptr<DirectorClient> director,
              std::shared_ptr<NamespaceAuth> auth)
      : ctx_(std::move(ctx)),
        director_(std::move(director)),
        auth_(std::move(auth)),
        health_(ctx_->options.server_penalty),
        first_byte_(ctx_->options.first_byte_min, ctx_->options.first_byte_max) {}

  // Yields exactly `range` (non-empty, within the object) of `fed_path`.
  void Read(const core::ObjectPath& fed_path, const core::ObjectVersion& version,
            core::ByteRange range, core::Deadline deadline,
            std::function<void(core::Result<core::Bytes>)> done);

  // The attributes of `fed_path` from a one-byte Range GET down the same
  // server list (for namespaces that offer no listings): a file's size from
  // Content-Range (206, or 416 for an empty file), ETag, mtime from
  // Last-Modified; a 200 (the server ignored the range, as XRootD does for a
  // directory, answering with an HTML listing) is a directory with a partial
  // listing. HEAD cannot tell: XRootD answers it for a directory with
  // Content-Length 4096. 404 everywhere is kNotFound.
  void Head(const core::ObjectPath& fed_path, core::Deadline deadline,
            std::function<void(core::Result<core::FileAttr>)> done);

  // The server that last delivered bytes of `fed_path`; "" if none. Any thread.
  std::string ServedBy(const std::string& fed_path) const;

  void SetProgressHook(std::function<void(const std::string& url, uint64_t bytes)> hook) {
    progress_hook_ = std::move(hook);
  }

 private:
  struct Op;
  void Start(std::shared_ptr<Op> op);
  void Attempt(std::shared_ptr<Op> op);
  bool AcceptHead(Op& op, const HttpHead& head, uint64_t last);
  bool ProbeDone(std::shared_ptr<Op> op, const HttpHead& head);
  void WatchFirstByte(std::shared_ptr<Op> op);
  void AttemptDone(std::shared_ptr<Op> op, core::Result<HttpResponse> r);
  void Finish(std::shared_ptr<Op> op, core::Result<core::Bytes> r);
  void NoteServer(const std::string& fed_path, const std::string& server);

  std::shared_ptr<ClientContext> ctx_;
  std::shared_ptr<DirectorClient> director_;
  std::shared_ptr<NamespaceAuth> auth_;
  ServerHealth health_;                                              // loop thread
  FirstByteTimer first_byte_;                                        // loop thread
  std::function<void(const std::string&, uint64_t)> progress_hook_;  // loop thread

  mutable std::mutex served_mu_;
  std::unordered_map<std::string, std::string> served_by_;  // Protected by served_mu_
};

}  // namespace perch::http
