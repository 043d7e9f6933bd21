// Limits on what a server may tell perch, in one place. Everything a
// federation server sends (sizes, counts, names, paths) is checked against
// these where it enters (the PROPFIND and header parsers, NamespaceCache),
// and the consumers (prefetcher, warmer) use the checked arithmetic below
// anyway, so that a value that slips past a parser still cannot wrap a total
// or drive an unbounded loop or allocation. docs/security.md ("What servers say") lists them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

namespace perch::core {

// The largest object size perch accepts: 1 PiB. Larger (or unparsable) sizes
// are a server bug or an attack; such entries are skipped.
inline constexpr uint64_t kMaxObjectSize = 1ULL << 50;
// Entries in one directory listing; a larger PROPFIND answer is kCorrupt.
inline constexpr size_t kMaxListingEntries = 1u << 20;
// One path segment, as the kernel (NAME_MAX) and tools accept it.
inline constexpr size_t kMaxNameBytes = 255;
// A whole path (PATH_MAX).
inline constexpr size_t kMaxPathBytes = 4096;
// Elements of one Link header, and X-Pelican-Authorization lines/issuers.
inline constexpr size_t kMaxLinkEntries = 64;
inline constexpr size_t kMaxAuthorizationIssuers = 64;

// True if `name` can be a directory entry on the mount: 1..255 bytes, not "."
// or "..", no '/' or NUL. Any other byte is the name's (control characters
// too, as on a local disk: the origin serves them, logs escape them and the
// HTTP endpoint percent-encodes them).
inline bool IsServableName(std::string_view name) {
  if (name.empty() || name.size() > kMaxNameBytes || name == "." || name == "..") return false;
  return name.find('/') == std::string_view::npos && name.find('\0') == std::string_view::npos;
}

// a + b, or UINT64_MAX where that would wrap (totals shown to users).
inline uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}

// a + b in *out; false (and *out untouched) where that would wrap.
inline bool CheckedAdd(uint64_t a, uint64_t b, uint64_t* out) {
  if (a > std::numeric_limits<uint64_t>::max() - b) return false;
  *out = a + b;
  return true;
}

// The number of `block_size` blocks covering `size` bytes, without the
// overflow of (size + block_size - 1) / block_size. REQUIRES: block_size > 0.
inline uint64_t BlockCount(uint64_t size, uint64_t block_size) {
  return size / block_size + (size % block_size != 0 ? 1 : 0);
}

}  // namespace perch::core
