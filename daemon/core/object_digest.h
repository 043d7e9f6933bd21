// Object digests (RFC 3230 instance digests) as perch hands them out: in the
// HTTP endpoint's `Digest` header and in the mount's `user.perch.digest.*`
// extended attributes (README "Digests").
//
// Spelling, as Pelican's client reads them (client/handle_http.go
// parseDigestHeader): adler32, crc32c and crc32 as 8 lower-case hex digits
// of the big-endian value; md5, sha (SHA-1) and sha-256 in base64. XRootD
// sends crc32c in base64, which Pelican also accepts; perch sends hex.
//
// Thread-safety: pure functions; a DigestHasher is used by one thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace perch::core {

// One digest of one object: the algorithm's name (lower case, RFC 3230 /
// IANA: "adler32", "crc32c", "crc32", "md5", "sha", "sha-256") and the raw
// digest bytes (4 for the checksums, 16 for md5, 20 for sha, 32 for sha-256).
struct ObjectDigest {
  std::string algorithm;
  std::string raw;
  friend bool operator==(const ObjectDigest&, const ObjectDigest&) = default;
};

// The algorithms perch computes and hands out, in the order it lists them.
const std::vector<std::string>& DigestAlgorithms();
bool IsDigestAlgorithm(std::string_view algorithm);
// The length of `algorithm`'s raw digest; 0 for one perch does not know.
size_t DigestLength(std::string_view algorithm);

// What must be computed to check `claims` (MatchDigests): every algorithm
// of a claim's length (a claim's name may be wrong), in DigestAlgorithms()
// order; nothing for claims of no length perch computes. The checksums of
// 4 bytes cost little; md5 and the shas are computed only for a claim of
// their length.
std::vector<std::string> AlgorithmsFor(const std::vector<ObjectDigest>& claims);

// "crc32c=0a1b2c3d", "md5=XrY7u+Ae7tCTyyK7j1rNww==": the value as above.
std::string DigestText(const ObjectDigest& digest);
// DigestText's value part alone.
std::string DigestValueText(const ObjectDigest& digest);
// The `Digest` header's value for `digests`: DigestText joined by ", ".
std::string DigestHeaderValue(const std::vector<ObjectDigest>& digests);

// The algorithms a `Want-Digest` header asks for that perch knows, in the
// order the header lists them (q-values only exclude: q=0 is "not this");
// "sha1" is read as "sha". Unknown names, malformed entries and entries past
// the 16th are ignored; no algorithm twice.
std::vector<std::string> ParseWantDigest(std::string_view header);

// Computes the digests of a byte stream under several algorithms at once.
class DigestHasher {
 public:
  virtual ~DigestHasher() = default;
  virtual void Update(std::string_view bytes) = 0;
  // The digests of all bytes given, one per algorithm asked. Call once.
  virtual std::vector<ObjectDigest> Finish() = 0;
};
// Makes a hasher for `algorithms` (each one of DigestAlgorithms()).
using DigestHasherFactory =
    std::function<std::unique_ptr<DigestHasher>(const std::vector<std::string>& algorithms)>;

enum class DigestMatch {
  kMatch,     // a claim equals the digest of the bytes under some algorithm
  kMismatch,  // claims of a length perch computes, none equal
  kNone,      // no claim perch can check
};

// Whether the bytes whose digests are `computed` are the object the
// `claims` (a server's, raw) describe. A claim is compared with every
// computed digest of its length, not only the one of its name: an XRootD 5.5
// cache labels its origin's default digest with whatever name was asked
// (docs/quirks.md). `matched`, if given, gets the computed digest that
// equalled a claim (its true algorithm).
DigestMatch MatchDigests(const std::vector<ObjectDigest>& claims,
                         const std::vector<ObjectDigest>& computed,
                         ObjectDigest* matched = nullptr);

// What is known of an object's copy (DigestKeeper::Verdict): what `perchctl verify` and
// the xattr user.perch.digest say of it.
struct DigestVerdict {
  enum Kind {
    kUnknown,     // nothing checked yet (never read whole since it was cached)
    kVerified,    // its bytes matched a digest a server other than their sender stated
    kUnverified,  // served with no such digest: `detail` says why
    kMismatched,  // its cached copy did not match: dropped; `detail` says which digest
  } kind = kUnknown;
  std::string detail;  // kVerified: "adler32=1e720467"
};

// "verified", "unverified", "mismatched" ("unknown" for kUnknown).
const char* ToString(DigestVerdict::Kind kind);

}  // namespace perch::core
