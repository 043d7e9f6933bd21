// Index: the cache's persistent metadata, an ordered key-value store with
// atomic batches (RocksDB in the daemon, MemIndex in tests). The index holds
// no bytes of objects, only what is needed to find and account for them:
// block records (length, checksum, last access), object records, pins, and
// the persisted namespace (attributes and listings with their expiry).
//
// The key schema belongs to core (see docs/design.md "On-disk format"); the adapter
// stores opaque keys and values and holds no policy.
//
// Thread-safety: all methods are safe from any thread. They may block on
// disk: never call them on the net loop.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"

namespace perch::core {

class Index {
 public:
  struct Write {
    std::string key;
    std::optional<std::string> value;  // nullopt deletes `key`
  };

  virtual ~Index() = default;

  // The value of `key`, nullopt if absent; kInternal/kCorrupt on a storage error.
  virtual Result<std::optional<std::string>> Get(std::string_view key) = 0;

  // Applies every write of `batch` atomically, in order, durably enough that a
  // crash after return keeps it (a write-ahead log; no fsync per batch).
  virtual Status Apply(const std::vector<Write>& batch) = 0;

  // Calls `fn` for every key starting with `prefix`, in key order, until it
  // returns false. `fn` must not call back into the Index.
  virtual Status Scan(
      std::string_view prefix,
      const std::function<bool(std::string_view key, std::string_view value)>& fn) = 0;
};

}  // namespace perch::core
