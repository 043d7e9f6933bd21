// BlockStore: where cached bytes live. A block is one fixed-size piece of one
// version of one object (the last block of an object may be shorter; a small
// object is one block). Writes are all-or-nothing: a reader sees a whole,
// checksummed block or none (the file implementation writes a temp file,
// fsyncs and renames it into place).
//
// Thread-safety: all methods are safe from any thread. They do disk I/O and
// may block: never call them on the net loop.
//
// Extending: the store knows bytes and keys, not paths, namespaces or LRU
// order; those live in the Index.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::core {

struct BlockKey {
  std::string object_id;  // stable id of (federation, path, version); hex, filesystem-safe
  uint64_t index = 0;     // block number within the object
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // Reads `length` bytes at `offset` within block `key`. kNotFound if the
  // block is absent; kCorrupt if its header or checksum does not match (the
  // block is removed before returning, so the next read refetches it).
  virtual Result<Bytes> Read(const BlockKey& key, uint64_t offset, uint64_t length) = 0;

  // Stores the whole block `data` under `key`, replacing any older copy.
  // kNoSpace when the volume is full (nothing is left behind).
  virtual Status Write(const BlockKey& key, std::string_view data) = 0;

  // Removes block `key`; OK if it was absent.
  virtual Status Remove(const BlockKey& key) = 0;
};

}  // namespace perch::core
