// The Index's key schema in one place (as LevelDB's dbformat.h): every kind of
// record, the prefix that sets it apart, who writes it and how its key is
// built. Values are described in docs/design.md ("RocksDB keys"); whoever owns
// a kind encodes its values. A new kind of record takes a prefix here, one
// that no other prefix starts with and that starts no other prefix, so that
// a Scan of one kind never yields another.
//
// Writers: the catalog (cache_catalog.h) owns kBlock, kObject and kPin; the
// namespace cache (namespace_cache.h) kAttr and kListing; the scrubber
// kScrubCursor; the digest keeper kDigest (the catalog drops it with the
// object's last block); the block store kPackRecord, which names where the store put
// a small object's bytes and is read by nothing else (block_store.h).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "daemon/core/types.h"

namespace perch::core::index_keys {

// "b/<object id>/<block number as 16 hex digits>": a stored block's length
// and last-access sequence number.
inline constexpr std::string_view kBlock = "b/";
// "o/<object id>": an object with at least one stored block (path, size, ETag).
inline constexpr std::string_view kObject = "o/";
// "pin" + catalog path ("/<tag>/..."), so "pin/...": a pinned prefix.
inline constexpr std::string_view kPin = "pin";
// "na" + key prefix ("/<tag>") + path: a path's attributes or its absence.
inline constexpr std::string_view kAttr = "na";
// "nl" + key prefix + path: a directory listing.
inline constexpr std::string_view kListing = "nl";
// "sp/<object id>": the pack record holding a small object's block.
inline constexpr std::string_view kPackRecord = "sp/";
// "dg/<object id>": the object version's digest, as a server other than
// the one that sent its bytes stated it and its bytes matched (DigestKeeper).
inline constexpr std::string_view kDigest = "dg/";
// The background scrub's position, one record.
inline constexpr std::string_view kScrubCursor = "scrub/cursor";

// Digits of the block number in a kBlock key: fixed width, so that the
// records of one object sort by block number.
inline constexpr size_t kBlockNumberDigits = 16;

inline std::string Block(std::string_view object_id, uint64_t index) {
  char n[kBlockNumberDigits + 1];
  std::snprintf(n, sizeof(n), "%016llx", static_cast<unsigned long long>(index));
  std::string k(kBlock);
  k.append(object_id).append("/").append(n, kBlockNumberDigits);
  return k;
}
inline std::string Object(std::string_view object_id) {
  return std::string(kObject).append(object_id);
}
inline std::string Pin(const ObjectPath& path) { return std::string(kPin).append(path.str()); }
// `key_prefix`: "" or "/<tag>" (NamespaceOptions::key_prefix).
inline std::string Attr(std::string_view key_prefix, const ObjectPath& path) {
  return std::string(kAttr).append(key_prefix).append(path.str());
}
inline std::string Listing(std::string_view key_prefix, const ObjectPath& path) {
  return std::string(kListing).append(key_prefix).append(path.str());
}
inline std::string Digest(std::string_view object_id) {
  return std::string(kDigest).append(object_id);
}
inline std::string PackRecord(std::string_view object_id) {
  return std::string(kPackRecord).append(object_id);
}

}  // namespace perch::core::index_keys
