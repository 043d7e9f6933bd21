// RocksDbIndex: core::Index on RocksDB. Keys and values are opaque here; the
// schema belongs to core (README "On-disk format"). Writes go through the
// WAL without an fsync per batch: a crash loses at most the last moments of
// access-time updates, never a record for a block whose file is incomplete
// (files are renamed into place before their record is written).
//
// Thread-safety: RocksDB's DB is thread-safe; so is this class.
#pragma once

#include <memory>
#include <string>

#include "daemon/core/index.h"

namespace rocksdb {
class DB;
}

namespace perch::store {

class RocksDbIndex : public core::Index {
 public:
  // Opens or creates the database in `dir`. kUnavailable if another process
  // holds it, kCorrupt if RocksDB reports corruption, kInternal otherwise.
  static core::Result<std::unique_ptr<RocksDbIndex>> Open(const std::string& dir);
  ~RocksDbIndex() override;

  core::Result<std::optional<std::string>> Get(std::string_view key) override;
  core::Status Apply(const std::vector<Write>& batch) override;
  core::Status Scan(std::string_view prefix,
                    const std::function<bool(std::string_view, std::string_view)>& fn) override;

 private:
  explicit RocksDbIndex(std::unique_ptr<rocksdb::DB> db);
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace perch::store
