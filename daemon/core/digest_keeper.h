// DigestKeeper: the digests perch hands out for the objects it serves (the
// HTTP endpoint's `Digest` header, the mount's `user.perch.digest.*`
// extended attributes), one set per object version, shared by every mount.
//
// Where a digest comes from. perch asks a server the director named for the
// object's digest (Origin::Digests: one Range GET of one byte carrying
// Want-Digest) and takes that answer only as a claim: an XRootD 5.5 cache
// relays its origin's default digest under whatever name was asked, so the
// name may be wrong, and the bytes perch holds may differ from the origin's
// (a cache with a bad disk). perch therefore reads the whole object through
// its cache (fetching the blocks it lacks, as XRootD itself reads a file to
// digest it), computes every algorithm it knows over those bytes, and keeps
// the result only if one of them equals the server's claim. It then hands out
// what it computed, under each algorithm's true name: the bytes are the
// origin's, so their crc32c is the origin's crc32c even where the server
// could only say adler32. Nothing is handed out for an object whose claim is
// of no algorithm perch computes, nor when no server offers a digest
// (kNotFound): a digest is never made up from bytes nobody vouched for.
//
// When the bytes do not match: they are dropped from the cache and fetched
// once more; if they still do not match, kCorrupt (the caller answers with an
// error, never a digest of wrong bytes). A caller that has served some of
// those bytes already (the check of a completed object at a reader's last
// read) asks for kFail: dropped, kCorrupt at once, nothing fetched.
//
// Cost: nothing on the read path. A digest asked costs one small request to a
// server and one pass over the object's bytes, once per object version: the
// result is kept in memory (at most `max_remembered` objects, oldest dropped
// first) and asked again after a restart. At most `max_asks_in_flight`
// digest requests are out at once on the node: XRootD 5.5.3 crashes under a
// burst of concurrent Want-Digest requests (docs/quirks.md); a server that
// refuses them is remembered by the federation client (DigestRefusals).
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
#include "daemon/core/mutex.h"
#include "daemon/core/object_digest.h"
#include "daemon/core/origin.h"
#include "daemon/core/result.h"

namespace perch::core {

struct DigestKeeperOptions {
  size_t max_asks_in_flight = 4;  // node-wide
  size_t max_remembered = 16384;  // object versions whose digests are kept
};

struct DigestKeeperStats {
  std::atomic<uint64_t> asks{0};        // digest requests to servers
  std::atomic<uint64_t> verified{0};    // object versions whose bytes matched the claim
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
  // then no digest is ever handed out.
  explicit DigestKeeper(DigestHasherFactory hasher, DigestKeeperOptions options = {});
  DigestKeeper(const DigestKeeper&) = delete;
  DigestKeeper& operator=(const DigestKeeper&) = delete;

  // Every digest perch computes of object `object_id` (`path` at `attr`,
  // read with `reader` from `origin`), checked as above, in
  // DigestAlgorithms() order. kNotFound when no server offers a digest perch
  // can check; kCorrupt when the bytes do not match it; the read's error
  // (kUnavailable, kDeadlineExceeded, ...) otherwise.
  Result<std::vector<ObjectDigest>> Get(Origin& origin, BlockReader& reader, const ObjectPath& path,
                                        const FileAttr& attr, const std::string& object_id,
                                        Deadline deadline,
                                        OnMismatch on_mismatch = OnMismatch::kFetchAgain);

  // The digests already known of `object_id` (empty if none); no request.
  std::vector<ObjectDigest> Known(const std::string& object_id) const;

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
  // The bytes of the whole object through the cache, digested.
  Result<std::vector<ObjectDigest>> Digest(BlockReader& reader, const ObjectPath& path,
                                           const ObjectVersion& version,
                                           const std::string& object_id, Deadline deadline);
  void Remember(const std::string& object_id, std::vector<ObjectDigest> digests);

  const DigestHasherFactory hasher_;
  const DigestKeeperOptions options_;
  DigestKeeperStats stats_;

  // The slots of digest requests in flight (a leaf lock, never held with mu_).
  Mutex slots_mu_;
  CondVar slot_freed_;
  size_t asks_in_flight_ PERCH_GUARDED_BY(slots_mu_) = 0;

  mutable Mutex mu_;  // a leaf lock
  std::unordered_map<std::string, std::vector<ObjectDigest>> known_ PERCH_GUARDED_BY(mu_);
  std::deque<std::string> order_ PERCH_GUARDED_BY(mu_);  // known_'s keys, oldest first
};

}  // namespace perch::core
