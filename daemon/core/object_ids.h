// ObjectIds: object ids as the cache catalog keeps them in memory, in 24
// bytes without a heap allocation, instead of a 32-byte std::string plus a
// 48-byte heap block (ids are 32 hex digits, beyond the small-string buffer).
//
// An id of exactly 32 lowercase hex digits (what ObjectIdFor makes, and so
// every id perchd writes) is kept as its 16 bytes; any other id (tests,
// tools, a block file header from elsewhere) is interned in a table and kept
// as its position there. Ids compare as their Keys: the hex ids in the order
// of their strings, all of them before the interned ones.
//
// Thread-safety: none; the catalog calls it under its lock. Interned ids
// stay until Release() drops their last reference (Intern and Release pair).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/types.h"

namespace perch::core {

// The store id of `path` at version `attr` in federation `federation_id`:
// a new version of an object (size, modification time or ETag) is a new id.
std::string ObjectIdFor(const std::string& federation_id, const ObjectPath& path,
                        const FileAttr& attr);

class ObjectIds {
 public:
  struct Key {
    uint64_t hi = 0;
    uint64_t lo = 0;
    uint32_t interned = 0;  // 0: hi/lo are the id's 16 bytes; n: names_[n - 1]
    friend bool operator==(const Key&, const Key&) = default;
    friend auto operator<=>(const Key& a, const Key& b) {
      if (auto c = a.interned <=> b.interned; c != 0) return c;
      if (auto c = a.hi <=> b.hi; c != 0) return c;
      return a.lo <=> b.lo;
    }
  };

  // The key of `id`; an id that is not 32 lowercase hex digits is interned
  // (one more reference if it already is).
  Key Intern(std::string_view id);
  // The key of `id` if it has one now (hex, or interned), without interning.
  std::optional<Key> Find(std::string_view id) const;
  // Drops one reference taken by Intern; the last one forgets the id.
  void Release(const Key& key);
  // The id as a string. REQUIRES: `key` is hex or interned now.
  std::string Name(const Key& key) const;
  // Ids interned now (for tests and memory accounting).
  size_t interned() const { return by_name_.size(); }

 private:
  static bool ParseHex(std::string_view id, Key* key);

  struct Entry {
    std::string name;
    uint64_t refs = 0;
  };
  std::vector<Entry> names_;  // by interned - 1; free slots have refs 0
  std::vector<uint32_t> free_;
  std::map<std::string, uint32_t, std::less<>> by_name_;
};

// PackedString: an immutable string in one pointer (its length in front of
// the bytes, one heap block; empty: no block), for the catalog's paths and
// ETags, which std::string would keep in 32 bytes plus a heap block.
// Thread-safety: as a std::string. Strings up to 4 GiB.
class PackedString {
 public:
  PackedString() = default;
  explicit PackedString(std::string_view s);
  // `a` then `b`, with a NUL between them if `nul_between`, in one block.
  PackedString(std::string_view a, std::string_view b, bool nul_between);
  PackedString(PackedString&&) noexcept = default;
  PackedString& operator=(PackedString&&) noexcept = default;
  std::string_view view() const;

 private:
  std::unique_ptr<char[]> p_;
};

}  // namespace perch::core
