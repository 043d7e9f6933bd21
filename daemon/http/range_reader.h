// RangeReader: reads a byte range of one federation object from the servers
// the director names, failing over down the list and resuming at the first
// missing byte (policy in failover.h). When every one of them failed, the
// origin is the last resort: the servers the director names for
// `?directread` (DirectorClient::ResolveDirect), tried within the same
// deadline; while every named server is penalised and those origins are
// known, reads go to the origins first, and to the named servers after them
// when the origins fail the read (a 404 too: see failover.h).
//
// An answer with `Cache-Control: no-store` or `private` makes the range
// uncacheable (FetchedBytes::may_store false): the block reader serves it and
// keeps nothing.
//
// Every 206 is checked before its body is kept: Content-Range must start at
// the byte asked for and end within the range, its total must equal the size
// of the version being read, and a server's ETag must not change between its
// answers (XRootD's ETag is per host, so ETags are compared per server only).
//
// With verify_digests (the default), a read of a whole object (every object
// of one block) is delivered only once its bytes match a digest that vouches
// for them: one stated by a server other than the one that sent them (another
// server the director named, else the namespace's origin, where `?directread`
// is allowed), or by the origin that sent them. The request for it (a
// one-byte Range GET carrying Want-Digest) goes out beside the body's, so it
// adds no round trip, within DigestSlots' bound per origin. A body that does
// not match is its server's failure (a digest mismatch: the next server
// sends the object again, checked against the same digest); a server whose
// answer states no digest, an unparsable one or one of no algorithm perch
// computes (or refuses Want-Digest) vouches for nothing, and the next one is
// asked. Only when no server of the namespace but the sender states a digest
// is a body delivered unchecked by another source (FetchedBytes::unverified;
// the sender's own claim must still match). The digest the body matched
// comes back in FetchedBytes::vouched, under its true algorithm.
//
// Thread-safety: Read runs on the CurlLoop's thread (callbacks too); ServedBy
// is safe from any thread.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <unordered_map>

#include "daemon/core/mutex.h"
#include "daemon/core/result.h"
#include "daemon/core/types.h"
#include "daemon/http/client_context.h"
#include "daemon/http/digest.h"
#include "daemon/http/digest_slots.h"
#include "daemon/http/director_client.h"
#include "daemon/http/failover.h"
#include "daemon/http/token.h"

namespace perch::http {

// The servers that refused Want-Digest lately, shared by every RangeReader of
// a FederationClient (one per net loop), so each such server is asked once.
// Thread-safety: safe from any thread.
class DigestRefusals {
 public:
  static constexpr std::chrono::minutes kFor{10};
  // Whether `server` may be asked for digests at `now`.
  bool MayAsk(const std::string& server, core::Clock::time_point now);
  // `server` refused at `now`: not asked again for kFor.
  void Refused(const std::string& server, core::Clock::time_point now);

 private:
  core::Mutex mu_;
  std::map<std::string, core::Clock::time_point> until_ PERCH_GUARDED_BY(mu_);
};

class RangeReader : public std::enable_shared_from_this<RangeReader> {
 public:
  RangeReader(std::shared_ptr<ClientContext> ctx, std::shared_ptr<DirectorClient> director,
              std::shared_ptr<NamespaceAuth> auth,
              std::shared_ptr<DigestRefusals> refusals = std::make_shared<DigestRefusals>(),
              std::shared_ptr<DigestSlots> slots = nullptr)
      : ctx_(std::move(ctx)),
        director_(std::move(director)),
        auth_(std::move(auth)),
        digest_refusals_(std::move(refusals)),
        digest_slots_(
            slots ? std::move(slots)
                  : std::make_shared<DigestSlots>(ctx_->options.digest_requests_per_origin,
                                                  ctx_->options.digest_requests_per_server)),
        health_(ctx_->options.server_penalty),
        first_byte_(ctx_->options.first_byte_min, ctx_->options.first_byte_max) {}

  // Yields exactly `range` (non-empty, within the object) of `fed_path`,
  // a whole object checked as above.
  void Read(const core::ObjectPath& fed_path, const core::ObjectVersion& version,
            core::ByteRange range, core::Deadline deadline,
            std::function<void(core::Result<core::FetchedBytes>)> done);

  // The digest of the whole object `fed_path` at `version` as a server that
  // did not send this process its bytes states it (Origin::Digests): the
  // named servers that did not (ServedBy), then the origins; the raw
  // readings of the first usable answer. `algorithms`: what Want-Digest
  // names (empty: kWantDigest). kNotFound when none states one.
  void Vouch(const core::ObjectPath& fed_path, const core::ObjectVersion& version,
             const std::vector<std::string>& algorithms, core::Deadline deadline,
             std::function<void(core::Result<std::vector<core::ObjectDigest>>)> done);

  // The attributes of `fed_path` from a one-byte Range GET down the same
  // server list (for namespaces that offer no listings): a file's size from
  // Content-Range (206, or 416 for an empty file), ETag, mtime from
  // Last-Modified; a 200 (the server ignored the range, as XRootD does for a
  // directory, answering with an HTML listing) is a directory with a partial
  // listing. HEAD cannot tell: XRootD answers it for a directory with
  // Content-Length 4096. 404 everywhere is kNotFound.
  void Head(const core::ObjectPath& fed_path, core::Deadline deadline,
            std::function<void(core::Result<core::FileAttr>)> done);

  // The bytes served for `fed_path` failed the object's digest
  // (core::Origin::Distrust): for kDistrustFor its reads go to the origins
  // first (`?directread`, where the namespace allows), the named servers
  // only if those fail. At most kMaxDistrusted paths (past it the oldest
  // is trusted again). Loop thread.
  void Distrust(const core::ObjectPath& fed_path);
  // The copy of `fed_path` servers sent is proven wrong (core::Origin::Blame):
  // those that sent its bytes (SentBy) are penalised, and counted
  // (ServerTally::DigestMismatch) when there is only one. Loop thread.
  void Blame(const core::ObjectPath& fed_path);
  static constexpr std::chrono::minutes kDistrustFor{10};
  static constexpr size_t kMaxDistrusted = 4096;

  // The server that last delivered bytes of `fed_path`; "" if none. Any thread.
  std::string ServedBy(const std::string& fed_path) const;
  // Every server that delivered bytes of `fed_path` lately (at most
  // kMaxSenders, the latest last). Any thread.
  std::vector<std::string> SentBy(const std::string& fed_path) const;
  static constexpr size_t kMaxSenders = 4;

  void SetProgressHook(std::function<void(const std::string& url, uint64_t bytes)> hook) {
    progress_hook_ = std::move(hook);
  }

 private:
  struct Op;
  void Start(std::shared_ptr<Op> op);
  void Attempt(std::shared_ptr<Op> op);
  // Plans the read over `servers`' servers that it has not seen fail, with
  // their credentials; false, with the plan unchanged, when there are none
  // (or no credential for them). Used for the origins and, after them, to go
  // back to the named servers.
  bool BeginOn(Op& op, const NamespaceEntry& servers);
  // Goes on with `direct`'s servers (BeginOn) and attempts the first; false,
  // with nothing started, when there are none.
  bool UseDirect(const std::shared_ptr<Op>& op, std::shared_ptr<const NamespaceEntry> direct);
  // Whether the direct read may still bring a server this read has not tried.
  bool DirectMayHelp(const Op& op);
  bool AcceptHead(Op& op, const HttpHead& head, uint64_t last);
  bool ProbeDone(std::shared_ptr<Op> op, const HttpHead& head);
  void WatchFirstByte(std::shared_ptr<Op> op);
  void AttemptDone(std::shared_ptr<Op> op, core::Result<HttpResponse> r);
  // The attempt failed with `failure`: the next server (or the plan's end).
  void Failed(std::shared_ptr<Op> op, core::Status failure, long http_status);
  void Finish(std::shared_ptr<Op> op, core::Result<core::Bytes> r);

  // The whole-object check (range_reader_vouch.cc). StartVouch asks the next
  // server that may vouch for the bytes `sender` sends (false: none is
  // left); Decide judges a whole body once no request is out.
  bool StartVouch(const std::shared_ptr<Op>& op, const std::string& sender);
  void AskVoucher(const std::shared_ptr<Op>& op, std::shared_ptr<const NamespaceEntry> entry,
                  size_t index, bool origin);
  void AwaitSlot(const std::shared_ptr<Op>& op, uint64_t seq, const std::string& server,
                 bool origin, std::shared_ptr<bool> waiting);
  void SendVouch(const std::shared_ptr<Op>& op, std::shared_ptr<const NamespaceEntry> entry,
                 size_t index, bool origin, uint64_t seq);
  void VouchAnswered(const std::shared_ptr<Op>& op, uint64_t seq, const std::string& server,
                     bool origin, std::vector<core::ObjectDigest> claims);
  void VouchExhausted(const std::shared_ptr<Op>& op);
  // Asks the servers whose digest request failed again, after a pause;
  // false when that is over (or they are none).
  bool RetryVouch(const std::shared_ptr<Op>& op, const std::string& sender);
  void Decide(const std::shared_ptr<Op>& op);
  void BodyMismatch(const std::shared_ptr<Op>& op);
  void Unverified(const std::shared_ptr<Op>& op, const std::string& why);
  // Whether `server` is one of the namespace's origins, as far as `op` knows.
  static bool IsOrigin(const Op& op, const std::string& server);
  void NoteServer(const std::string& fed_path, const std::string& server);
  // Whether an answer with `http_status` to a request carrying Want-Digest
  // may be XRootD refusing the digest rather than the read.
  static bool RefusesDigests(long http_status);
  bool Distrusted(const std::string& fed_path, core::Clock::time_point now);

  std::shared_ptr<ClientContext> ctx_;
  std::shared_ptr<DirectorClient> director_;
  std::shared_ptr<NamespaceAuth> auth_;
  std::shared_ptr<DigestRefusals> digest_refusals_;
  std::shared_ptr<DigestSlots> digest_slots_;
  std::set<std::string> unverified_said_;  // loop thread: namespaces told of unchecked reads
  ServerHealth health_;                    // loop thread
  FirstByteTimer first_byte_;              // loop thread
  std::function<void(const std::string&, uint64_t)> progress_hook_;  // loop thread
  std::map<std::string, core::Clock::time_point> distrusted_;        // loop thread: until when

  mutable core::Mutex served_mu_;
  std::unordered_map<std::string, std::vector<std::string>> served_by_ PERCH_GUARDED_BY(served_mu_);
};

}  // namespace perch::http
