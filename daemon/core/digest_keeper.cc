#include "daemon/core/digest_keeper.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/core/index_keys.h"
#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/wait.h"

namespace perch::core {

const ObjectDigest* CheapestDigest(const std::vector<ObjectDigest>& digests) {
  if (digests.empty()) return nullptr;
  auto crc32c = std::find_if(digests.begin(), digests.end(),
                             [](const ObjectDigest& d) { return d.algorithm == "crc32c"; });
  return crc32c != digests.end() ? &*crc32c : &digests.front();
}

namespace {

// An index record's value: per digest, its algorithm, a NUL, the raw
// digest's length in one byte and the raw digest.
std::string EncodeDigests(const std::vector<ObjectDigest>& digests) {
  std::string out;
  for (const ObjectDigest& d : digests) {
    out.append(d.algorithm).push_back('\0');
    out.push_back(static_cast<char>(d.raw.size()));
    out.append(d.raw);
  }
  return out;
}

// The digests of a record; empty when it is damaged (the digest is then
// asked again) or names no algorithm perch computes.
std::vector<ObjectDigest> DecodeDigests(std::string_view v) {
  std::vector<ObjectDigest> out;
  while (!v.empty() && out.size() < 8) {
    size_t nul = v.find('\0');
    if (nul == std::string_view::npos || nul + 2 > v.size()) return {};
    std::string algorithm(v.substr(0, nul));
    size_t len = static_cast<unsigned char>(v[nul + 1]);
    if (nul + 2 + len > v.size() || DigestLength(algorithm) != len) return {};
    out.push_back({std::move(algorithm), std::string(v.substr(nul + 2, len))});
    v.remove_prefix(nul + 2 + len);
  }
  return v.empty() ? out : std::vector<ObjectDigest>{};
}

}  // namespace

DigestKeeper::DigestKeeper(DigestHasherFactory hasher, DigestKeeperOptions options, Index* index)
    : hasher_(std::move(hasher)), options_(options), index_(index) {}

std::vector<ObjectDigest> DigestKeeper::Known(const std::string& object_id) const {
  {
    MutexLock l(mu_);
    auto it = known_.find(object_id);
    if (it != known_.end()) return it->second;
  }
  if (index_ == nullptr) return {};
  auto record = index_->Get(index_keys::Digest(object_id));
  if (!record.ok() || !record->has_value()) return {};
  std::vector<ObjectDigest> digests = DecodeDigests(**record);
  if (!digests.empty()) Keep(object_id, digests);
  return digests;
}

void DigestKeeper::Vouched(const std::string& object_id, std::vector<ObjectDigest> digests) {
  if (digests.empty()) return;
  stats_.vouched++;
  Remember(object_id, std::move(digests), /*persist=*/true);
}

void DigestKeeper::Unverified(const std::string& object_id, std::string why, bool count) {
  if (count) stats_.unverified++;
  Note(object_id, {DigestVerdict::kUnverified, std::move(why)});
}

DigestVerdict DigestKeeper::Verdict(const std::string& object_id) const {
  {
    MutexLock l(mu_);
    auto it = verdicts_.find(object_id);
    if (it != verdicts_.end()) return it->second;
  }
  std::vector<ObjectDigest> known = Known(object_id);
  if (const ObjectDigest* d = CheapestDigest(known))
    return {DigestVerdict::kVerified, DigestText(*d)};
  return {};
}

void DigestKeeper::Note(const std::string& object_id, DigestVerdict v) {
  MutexLock l(mu_);
  if (v.kind == DigestVerdict::kUnknown) {
    verdicts_.erase(object_id);  // its key stays in verdict_order_ until its turn
    return;
  }
  auto [it, inserted] = verdicts_.insert_or_assign(object_id, std::move(v));
  if (inserted) verdict_order_.push_back(object_id);
  while (verdicts_.size() > options_.max_remembered && !verdict_order_.empty()) {
    verdicts_.erase(verdict_order_.front());
    verdict_order_.pop_front();
  }
  // Keys forgotten meanwhile pile up at most to twice the bound.
  if (verdict_order_.size() > 2 * options_.max_remembered + 16) {
    std::deque<std::string> live;
    for (std::string& k : verdict_order_) {
      if (verdicts_.count(k) > 0) live.push_back(std::move(k));
    }
    verdict_order_ = std::move(live);
  }
}

void DigestKeeper::Remember(const std::string& object_id, std::vector<ObjectDigest> digests,
                            bool persist) {
  Note(object_id, {});  // vouched for now: an earlier verdict is stale
  if (persist && index_ != nullptr) {
    Status s = index_->Apply({{index_keys::Digest(object_id), EncodeDigests(digests)}});
    if (!s.ok()) {
      spdlog::debug("digest of {} not kept in the index: {}", object_id, s.ToString());
    }
  }
  Keep(object_id, std::move(digests));
}

void DigestKeeper::Keep(const std::string& object_id, std::vector<ObjectDigest> digests) const {
  MutexLock l(mu_);
  auto [it, inserted] = known_.try_emplace(object_id);
  it->second = std::move(digests);
  if (inserted) order_.push_back(object_id);
  while (known_.size() > options_.max_remembered && !order_.empty()) {
    known_.erase(order_.front());
    order_.pop_front();
  }
}

Status DigestKeeper::Feed(BlockReader& reader, const ObjectPath& path, const ObjectVersion& version,
                          const std::string& object_id, Deadline deadline, DigestHasher& hasher) {
  const uint64_t block = reader.block_size();
  for (uint64_t offset = 0; offset < version.size; offset += block) {
    uint64_t length = std::min(block, version.size - offset);
    auto bytes = WaitFor<Bytes>(deadline, [&](auto cb) {
      reader.Read(path, version, object_id, ByteRange{offset, length}, deadline, cb,
                  FetchClass{Priority::kDemand, "", /*counted=*/false});
    });
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() != length) {
      return CorruptError(path.str() + ": the cache read " + std::to_string(bytes->size()) +
                              " bytes at " + std::to_string(offset) + ", not " +
                              std::to_string(length),
                          FailureSite::kLocal);
    }
    hasher.Update(*bytes);
  }
  return Status::Ok();
}

Result<std::vector<ObjectDigest>> DigestKeeper::Digest(BlockReader& reader, const ObjectPath& path,
                                                       const ObjectVersion& version,
                                                       const std::string& object_id,
                                                       const std::vector<std::string>& algorithms,
                                                       Deadline deadline) {
  std::unique_ptr<DigestHasher> hasher = hasher_(algorithms);
  if (Status s = Feed(reader, path, version, object_id, deadline, *hasher); !s.ok()) return s;
  return hasher->Finish();
}

Result<std::vector<ObjectDigest>> DigestKeeper::Get(Origin& origin, BlockReader& reader,
                                                    const ObjectPath& path, const FileAttr& attr,
                                                    const std::string& object_id, Deadline deadline,
                                                    OnMismatch on_mismatch,
                                                    const std::vector<std::string>& wanted) {
  if (attr.is_dir) return InvalidArgumentError(path.str() + " is a directory: no digest");
  std::vector<ObjectDigest> known = Known(object_id);
  auto has_wanted = [&] {
    if (wanted.empty()) return !known.empty();
    return std::any_of(known.begin(), known.end(), [&](const ObjectDigest& d) {
      return std::find(wanted.begin(), wanted.end(), d.algorithm) != wanted.end();
    });
  };
  if (has_wanted()) return known;
  if (!hasher_) return NotFoundError("no digests: perch computes none here", FailureSite::kLocal);
  const ObjectVersion version{attr.size, attr.etag};
  if (attr.size == 0) {
    // No bytes to be wrong: the digests of nothing are those of the object.
    auto empty = hasher_(DigestAlgorithms())->Finish();
    Remember(object_id, empty, /*persist=*/false);
    return empty;
  }
  // perch's list in one request; or each algorithm wanted in turn (XRootD
  // answers the first one a request names), at most three, until one is known.
  std::vector<std::vector<std::string>> asks;
  if (wanted.empty()) asks.push_back({});
  for (const std::string& a : wanted) {
    if (IsDigestAlgorithm(a) && asks.size() < 3) asks.push_back({a});
  }
  Status last = NotFoundError(path.str() + ": no server states a digest perch computes");
  for (const std::vector<std::string>& ask : asks) {
    Result<ObjectDigest> got =
        Ask(origin, reader, path, version, object_id, ask, known, deadline, on_mismatch);
    if (!got.ok()) {
      if (got.status().code() == StatusCode::kCorrupt) return got.status();
      last = got.status();
      continue;
    }
    if (std::find(known.begin(), known.end(), *got) == known.end()) known.push_back(*got);
    Remember(object_id, known, /*persist=*/true);
    if (has_wanted()) break;
  }
  if (known.empty()) return last;
  return known;  // what is known, if not what was wanted: the caller picks
}

Result<ObjectDigest> DigestKeeper::Ask(Origin& origin, BlockReader& reader, const ObjectPath& path,
                                       const ObjectVersion& version, const std::string& object_id,
                                       const std::vector<std::string>& ask,
                                       const std::vector<ObjectDigest>& known, Deadline deadline,
                                       OnMismatch on_mismatch) {
  stats_.asks++;
  auto claims = WaitFor<std::vector<ObjectDigest>>(
      deadline, [&](auto cb) { origin.Digests(path, version, ask, deadline, cb); });
  if (!claims.ok()) return claims.status();
  std::vector<std::string> algorithms = AlgorithmsFor(*claims);
  if (algorithms.empty()) {
    return NotFoundError(path.str() + ": the server's digest is of no algorithm perch computes");
  }
  // A digest of this version verified already is computed in the same pass:
  // when the new claim disagrees with bytes that still match it, the claim
  // is wrong (a cache that lies about another algorithm), not the copy.
  const ObjectDigest* vouched = CheapestDigest(known);
  if (vouched != nullptr &&
      std::find(algorithms.begin(), algorithms.end(), vouched->algorithm) == algorithms.end()) {
    algorithms.push_back(vouched->algorithm);
  }
  bool distrusted = false;
  for (int attempt = 0;; attempt++) {
    auto computed = Digest(reader, path, version, object_id, algorithms, deadline);
    if (!computed.ok()) return computed.status();
    ObjectDigest matched;
    DigestMatch match = MatchDigests(*claims, *computed, &matched);
    bool confirmed = false;
    if (match != DigestMatch::kMatch && vouched != nullptr &&
        std::find(computed->begin(), computed->end(), *vouched) != computed->end()) {
      return NotFoundError(path.str() + ": a server states a digest (" +
                           (claims->empty() ? std::string() : DigestText(claims->front())) +
                           ") that the copy verified against " + DigestText(*vouched) +
                           " does not have: not handed out");
    }
    if (match == DigestMatch::kMismatch && attempt == 0) {
      // The claim or the copy is wrong. A second opinion, the origins' where
      // the federation allows (a distrusted path asks them first): if the
      // copy has it, the first claim was the wrong one (a cache that lies).
      origin.Distrust(path);
      distrusted = true;
      stats_.asks++;
      auto second = WaitFor<std::vector<ObjectDigest>>(
          deadline, [&](auto cb) { origin.Digests(path, version, ask, deadline, cb); });
      if (second.ok() && !AlgorithmsFor(*second).empty()) {
        if (MatchDigests(*second, *computed, &matched) == DigestMatch::kMatch) {
          match = DigestMatch::kMatch;
        } else {
          claims = std::move(second);  // the origins' claim judges the copy from now on
          confirmed = true;
          for (const std::string& a : AlgorithmsFor(*claims)) {
            if (std::find(algorithms.begin(), algorithms.end(), a) == algorithms.end())
              algorithms.push_back(a);
          }
        }
      }
    }
    switch (match) {
      case DigestMatch::kMatch:
        stats_.verified++;
        return matched;
      case DigestMatch::kNone:
        return NotFoundError(path.str() +
                             ": the server's digest is of no algorithm perch computes");
      case DigestMatch::kMismatch:
        break;
    }
    stats_.mismatches++;
    if (!distrusted) origin.Distrust(path);  // fetched again from the origin where it may be
    distrusted = true;
    if (confirmed) origin.Blame(path);  // two claims the copy did not have
    size_t dropped = reader.DropObject(version, object_id);
    std::string claim = claims->empty() ? "" : DigestText(claims->front());
    Note(object_id, {DigestVerdict::kMismatched,
                     "the cached copy did not match " + claim + " stated by a server; dropped"});
    if (attempt == 0) {
      spdlog::warn("{}: the cached copy does not match its server's digest ({}); {} blocks dropped",
                   EscapeForLog(path.str()), EscapeForLog(claim), dropped);
      if (on_mismatch == OnMismatch::kFail) {
        return CorruptError(path.str() + ": the cached copy does not match the server's digest (" +
                            claim + "); dropped, the next read fetches it again");
      }
      continue;  // fetched again
    }
    return CorruptError(path.str() + ": the bytes fetched do not match the server's digest (" +
                        claim + ")");
  }
}

Status DigestKeeper::CheckCopy(Origin& origin, BlockReader& reader, const ObjectPath& path,
                               const FileAttr& attr, const std::string& object_id,
                               Deadline deadline) {
  std::vector<ObjectDigest> known = Known(object_id);
  if (known.empty() || !hasher_) {
    return Get(origin, reader, path, attr, object_id, deadline, OnMismatch::kFail).status();
  }
  const ObjectDigest* pick = CheapestDigest(known);
  const ObjectVersion version{attr.size, attr.etag};
  std::unique_ptr<DigestHasher> hasher = hasher_({pick->algorithm});
  if (Status s = Feed(reader, path, version, object_id, deadline, *hasher); !s.ok()) return s;
  std::vector<ObjectDigest> got = hasher->Finish();
  if (got.size() == 1 && got.front() == *pick) {
    Note(object_id, {});  // a mismatch of an earlier copy is past
    return Status::Ok();
  }
  stats_.mismatches++;
  origin.Distrust(path);
  origin.Blame(path);  // a digest its bytes matched before
  size_t dropped = reader.DropObject(version, object_id);
  Note(object_id, {DigestVerdict::kMismatched,
                   "the cached copy did not match " + DigestText(*pick) + "; dropped"});
  spdlog::warn("{}: the cached copy does not match the object's digest ({}); {} blocks dropped",
               EscapeForLog(path.str()), EscapeForLog(DigestText(*pick)), dropped);
  return CorruptError(path.str() + ": the cached copy does not match the object's digest (" +
                      DigestText(*pick) + "); dropped, the next read fetches it again");
}

}  // namespace perch::core
