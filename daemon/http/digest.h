// Instance digests (RFC 3230) as XRootD answers `Want-Digest` and Pelican's
// client checks them: the whole object's digest, on a HEAD and on any Range
// GET (docs/quirks.md, "XRootD's digests").
//
// perch lists adler32 first: XRootD 5.5 takes the first algorithm a request
// lists (ignoring q-values) and answers 500 when it lacks it, and its caches
// can relay adler32 but not crc32c.
//
// Thread-safety: pure functions.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/object_digest.h"

namespace perch::http {

// The request header perch sends to ask for an object's digest.
inline constexpr char kWantDigest[] = "Want-Digest: adler32, crc32c;q=0.5, md5;q=0.3";

struct InstanceDigest {
  std::string algorithm;  // lower case, as named: "adler32", "crc32c", "md5", "sha-256", ...
  std::string value;      // as sent: hex for adler32 and crc32, base64 for the others
  friend bool operator==(const InstanceDigest&, const InstanceDigest&) = default;
};

// The digests a Digest header lists ("adler32=1e720467, md5=b1kCrC..."), at
// most 8, in order; entries without '=' or with an empty side are skipped.
std::vector<InstanceDigest> ParseDigestHeader(std::string_view header);

enum class DigestCheck {
  kMatch,      // the bytes have this digest
  kMismatch,   // they do not
  kUnchecked,  // the value is no digest perch can compute (unknown length or encoding)
};

// Whether `bytes` are the object `digest` describes. The value is decoded
// (hex, else base64) and compared with the bytes' digest under the named
// algorithm and, only when that differs, under the other algorithms whose
// digests have the value's length (adler32, crc32c and crc32 for 4 bytes;
// md5 16; sha1 20; sha-256 32): an XRootD 5.5 cache labels its origin's
// default digest with whatever name was asked. A value that matches none is
// a mismatch (a chance match of random bytes is one in 2^30 or less).
DigestCheck CheckDigest(const InstanceDigest& digest, std::string_view bytes);

// The raw digests `digest`'s value may be, as claims of its algorithm: its
// hex reading and its base64 reading, each only if it has the length of a
// digest perch computes (4, 16, 20 or 32 bytes). Empty if neither has.
std::vector<core::ObjectDigest> Readings(const InstanceDigest& digest);

// Whether `bytes` are the object the raw `claims` (Readings) describe,
// computing only what the claims need: each claim's named algorithm first,
// the others of its length only when that fails (an XRootD 5.5 cache's
// label may be wrong), each at most once. `matched` gets the digest that
// equalled a claim, under its true algorithm.
core::DigestMatch VerifyAgainst(const std::vector<core::ObjectDigest>& claims,
                                std::string_view bytes, core::ObjectDigest* matched = nullptr);

// A hasher of core::DigestAlgorithms() (ISA-L for the checksums, OpenSSL for
// md5, sha and sha-256); algorithms it does not know are left out.
std::unique_ptr<core::DigestHasher> NewDigestHasher(const std::vector<std::string>& algorithms);

// "adler32=1e720467" for logs (values are not secret; the algorithm escaped).
std::string ToString(const InstanceDigest& digest);

}  // namespace perch::http
