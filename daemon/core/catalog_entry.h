// CatalogEntry: one cached object as CacheCatalog keeps it in memory: its
// description (path, ETag, size, from its "o/" record) and its blocks (length
// and last-access sequence number, from its "b/" records) in one record.
//
// Memory (issue 14). Most objects of a training set are smaller than a block,
// so the first block lives inline and only the others go to a map of their
// own: a small object costs this record (48 bytes, in one map node of the
// catalog) plus one heap block holding its path and ETag together.
//
// An entry whose blocks were adopted from the store without an "o/" record
// (see CacheCatalog's Design) has no description: path() is "".
//
// Thread-safety: none; the catalog uses it under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <utility>

#include "daemon/core/object_ids.h"

namespace perch::core {

class CatalogEntry {
 public:
  struct Block {
    uint64_t length = 0;
    uint64_t seq = 0;  // last access; 0: unknown (adopted), evicted first
  };

  CatalogEntry() = default;
  CatalogEntry(CatalogEntry&&) noexcept = default;
  CatalogEntry& operator=(CatalogEntry&&) noexcept = default;
  CatalogEntry(const CatalogEntry&) = delete;
  CatalogEntry& operator=(const CatalogEntry&) = delete;
  ~CatalogEntry() = default;

  // True once the object has a path (from its record or Describe).
  bool described() const { return !names_.view().empty(); }
  std::string_view path() const;
  std::string_view etag() const;
  uint64_t size() const { return size_; }
  // Sets path, ETag and size. REQUIRES: `path` is a valid ObjectPath (no NUL).
  void Describe(std::string_view path, std::string_view etag, uint64_t size);

  // The record of block `index`, null if the object has no such block.
  Block* Find(uint64_t index);
  const Block* Find(uint64_t index) const;
  // The record of block `index`, added (zeroed) if absent; second: whether
  // it was added.
  std::pair<Block*, bool> Add(uint64_t index);
  // Removes block `index`: its record, nullopt if there was none.
  std::optional<Block> Remove(uint64_t index);

  size_t blocks() const { return (first_index_ != kNone ? 1 : 0) + (more_ ? more_->size() : 0); }
  bool empty() const { return blocks() == 0; }
  uint64_t cached_bytes() const;

  // Calls fn(index, const Block&) for every block, the inline one first,
  // then the others in index order.
  template <typename Fn>
  void ForEach(Fn&& fn) const {
    if (first_index_ != kNone) fn(first_index_, first_);
    if (more_) {
      for (const auto& [index, block] : *more_) fn(index, block);
    }
  }

 private:
  // No block index reaches it (objects are at most 2^50 bytes, blocks at least 64 KiB).
  static constexpr uint64_t kNone = ~uint64_t{0};

  PackedString names_;  // path, '\0', ETag (paths hold no NUL); empty: not described
  uint64_t size_ = 0;
  uint64_t first_index_ = kNone;  // the inline block's index; kNone: none
  Block first_;
  std::unique_ptr<std::map<uint64_t, Block>> more_;  // the others; null when none
};

}  // namespace perch::core
