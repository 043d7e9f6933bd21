// DigestKeeper: the digests perch hands out for the objects it serves (the
// HTTP endpoint's `Digest` header, the mount's `user.perch.digest.*`
// extended attributes), one set per object version, shared by every mount.
//
// Where a digest comes from. A digest vouches for bytes only when a server
// other than the one that sent them states it (or the origin does): for an
// object of one block the federation client checks its bytes so as they
// arrive and tells what they matched (FetchedBytes::vouched → Vouched); for
// a larger object perch asks for the digest (Origin::Digests: a server that
// did not send this process the bytes, else the origin), takes the answer
// only as a claim (an XRootD 5.5 cache relays its origin's default digest
// under whatever name was asked), reads the whole object through its cache
// (fetching the blocks it lacks, as XRootD itself reads a file to digest
// it), computes the algorithms of the claim's length only, and keeps the
// digest that equalled the claim, under its true name. perch hands out
// only such digests: never one computed over bytes no server vouched for,
// nor one of an algorithm no server stated.
//
// When the bytes do not match: they are dropped from the cache and fetched
// once more; if they still do not match, kCorrupt (the caller answers with an
// error, never a digest of wrong bytes). A caller that has served some of
// those bytes already (the check of a completed object at a reader's last
// read) asks for kFail: dropped, kCorrupt at once, nothing fetched.
//
// Cost: nothing on the read path. A digest is found once per object version
// and kept with the object: in memory (at most `max_remembered` objects,
// oldest dropped first) and in the index (index_keys::kDigest, dropped with
// the object's last block), so that a restart, or a federation gone offline,
// asks for nothing. The federation client bounds the digest requests per
// origin (http/digest_slots.h).
//
// Thread-safety: safe from any thread; Get blocks its caller (a FUSE worker,
// an endpoint connection) up to the deadline.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/block_reader.h"
#include "daemon/core/index.h"
#include "daemon/core/mutex.h"
#include "daemon/core/object_digest.h"
#include "daemon/core/origin.h"
#include "daemon/core/result.h"

namespace perch::core {

struct DigestKeeperOptions {
  size_t max_remembered = 16384;  // object versions whose digests are kept in memory
};

struct DigestKeeperStats {
  std::atomic<uint64_t> asks{0};        // digest requests to servers
  std::atomic<uint64_t> verified{0};    // object versions whose bytes matched the claim
  std::atomic<uint64_t> unverified{0};  // copies served with no server stating a digest
  std::atomic<uint64_t> vouched{0};     // objects of one block checked as fetched (Vouched)
  std::atomic<uint64_t> mismatches{0};  // cached copies that did not (dropped, fetched again)
};

// The digest of `digests` cheapest to compute again: crc32c if there, else
// the first; null when empty.
const ObjectDigest* CheapestDigest(const std::vector<ObjectDigest>& digests);

// What Get does when the cached bytes do not match the server's digest
// (after dropping them).
enum class OnMismatch {
  kFetchAgain,  // fetch them once more and check again
  kFail,        // kCorrupt at once
};

class DigestKeeper {
 public:
  // `hasher` computes digests (the daemon passes http's); may be empty, and
  // then no digest is ever handed out. `index`, if given, keeps them across
  // restarts.
  explicit DigestKeeper(DigestHasherFactory hasher, DigestKeeperOptions options = {},
                        Index* index = nullptr);
  DigestKeeper(const DigestKeeper&) = delete;
  DigestKeeper& operator=(const DigestKeeper&) = delete;

  // The digests known of object `object_id` (`path` at `attr`, read with
  // `reader` from `origin`), each one a server stated and the bytes matched
  // (as above). When none of `wanted` (algorithm names; empty: any) is known
  // yet, servers are asked for them, one request per algorithm (at most
  // three), and what they state is checked and kept. kNotFound when no
  // server states a digest perch can check; kCorrupt when the bytes do not
  // match one; the read's error (kUnavailable, kDeadlineExceeded, ...)
  // otherwise.
  Result<std::vector<ObjectDigest>> Get(Origin& origin, BlockReader& reader, const ObjectPath& path,
                                        const FileAttr& attr, const std::string& object_id,
                                        Deadline deadline,
                                        OnMismatch on_mismatch = OnMismatch::kFetchAgain,
                                        const std::vector<std::string>& wanted = {});

  // The digests already known of `object_id` (empty if none); no request.
  std::vector<ObjectDigest> Known(const std::string& object_id) const;

  // The bytes of object `object_id` matched `digests`, stated by a server
  // other than the one that sent them (FetchedBytes::vouched): kept.
  void Vouched(const std::string& object_id, std::vector<ObjectDigest> digests);

  // A copy of `object_id` was served with no server but its sender stating
  // a digest, for reason `why`: remembered (Verdict); `count`: counted too
  // (stats().unverified; the federation client counts its own).
  void Unverified(const std::string& object_id, std::string why, bool count);

  // The cached copy of `object_id` did not match its digest (`what`; the
  // scrub found it): remembered (Verdict) until its bytes are vouched for.
  void Mismatched(const std::string& object_id, std::string what) {
    Note(object_id, {DigestVerdict::kMismatched, std::move(what)});
  }

  // What is known of `object_id`'s copy: the last verdict met (a mismatch
  // or an unverified copy, until its bytes are vouched for), else verified
  // when a digest is known, else kUnknown. No request.
  DigestVerdict Verdict(const std::string& object_id) const;

  // Checks the copy of object `object_id` the cache holds now (`path` at
  // `attr`, read with `reader`) against the object's digest: Get with
  // OnMismatch::kFail when none is known yet (a request to a server), else
  // one pass over the copy's bytes against the known crc32c (or the first
  // known digest), no request. A mismatch drops the copy's blocks, is
  // counted (stats().mismatches) and logged, and is kCorrupt. Errors as Get's.
  Status CheckCopy(Origin& origin, BlockReader& reader, const ObjectPath& path,
                   const FileAttr& attr, const std::string& object_id, Deadline deadline);

  const DigestKeeperStats& stats() const { return stats_; }

 private:
  // The bytes of the whole object through the cache, in order, into `hasher`.
  static Status Feed(BlockReader& reader, const ObjectPath& path, const ObjectVersion& version,
                     const std::string& object_id, Deadline deadline, DigestHasher& hasher);
  // The bytes of the whole object through the cache, digested under
  // `algorithms`.
  Result<std::vector<ObjectDigest>> Digest(BlockReader& reader, const ObjectPath& path,
                                           const ObjectVersion& version,
                                           const std::string& object_id,
                                           const std::vector<std::string>& algorithms,
                                           Deadline deadline);
  // One request for the digest (Want-Digest naming `ask`; empty: perch's
  // list) and the check of the cached bytes against it: the digest they
  // matched, under its true algorithm. A claim that bytes still matching a
  // digest of `known` (verified before) do not have is the claim's fault:
  // kNotFound, the copy kept.
  Result<ObjectDigest> Ask(Origin& origin, BlockReader& reader, const ObjectPath& path,
                           const ObjectVersion& version, const std::string& object_id,
                           const std::vector<std::string>& ask,
                           const std::vector<ObjectDigest>& known, Deadline deadline,
                           OnMismatch on_mismatch);
  // Kept in memory; `persist`: in the index too.
  void Remember(const std::string& object_id, std::vector<ObjectDigest> digests, bool persist);
  // Kept in memory (a cache of the index: Known may fill it).
  void Keep(const std::string& object_id, std::vector<ObjectDigest> digests) const;
  // The verdict of `object_id` is `v` (kUnknown: forgotten).
  void Note(const std::string& object_id, DigestVerdict v);

  const DigestHasherFactory hasher_;
  const DigestKeeperOptions options_;
  Index* const index_;
  DigestKeeperStats stats_;

  mutable Mutex mu_;  // a leaf lock
  mutable std::unordered_map<std::string, std::vector<ObjectDigest>> known_ PERCH_GUARDED_BY(mu_);
  mutable std::deque<std::string> order_ PERCH_GUARDED_BY(mu_);  // known_'s keys, oldest first
  // Copies found unverified or mismatched (at most max_remembered; oldest
  // dropped first).
  std::unordered_map<std::string, DigestVerdict> verdicts_ PERCH_GUARDED_BY(mu_);
  std::deque<std::string> verdict_order_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core
