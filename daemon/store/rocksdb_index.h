// RocksDbIndex: core::Index on RocksDB. Keys and values are opaque here; the
// schema belongs to core (docs/design.md "On-disk format"). Writes go through the
// WAL without an fsync per batch: a crash loses at most the last moments of
// access-time updates, never a record for a block whose file is incomplete
// (files are renamed into place before their record is written).
//
// Corruption never stops the daemon: a database RocksDB calls corrupt is
// moved aside to <dir>.corrupt (the previous one there is removed) and a new,
// empty one takes its place; the cache catalog then re-adopts the block files
// from their headers. Logged once, as an error.
//
// Files are created with the process umask (perchd sets 077).
//
// Thread-safety: RocksDB's DB is thread-safe; so is this class, except Reset.
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
  // Opens or creates the database in `dir`; a corrupt one is moved aside and
  // replaced by an empty one. kUnavailable if another process holds it,
  // kInternal otherwise.
  static core::Result<std::unique_ptr<RocksDbIndex>> Open(const std::string& dir);

  // Opens the database in `dir` to read it as it is now, beside the perchd
  // that may be writing it (tests and tools); Apply then fails.
  static core::Result<std::unique_ptr<RocksDbIndex>> OpenReadOnly(const std::string& dir);

  // For corruption found after Open (e.g. by the first scan): moves the
  // database aside (logging `why`) and continues with an empty one.
  // REQUIRES: no other call on this index in flight or later concurrent.
  core::Status Reset(const core::Status& why);
  ~RocksDbIndex() override;

  core::Result<std::optional<std::string>> Get(std::string_view key) override;
  core::Status Apply(const std::vector<Write>& batch) override;
  core::Status Scan(std::string_view prefix,
                    const std::function<bool(std::string_view, std::string_view)>& fn) override;

 private:
  RocksDbIndex(std::string dir, std::unique_ptr<rocksdb::DB> db);
  static core::Result<std::unique_ptr<rocksdb::DB>> OpenDb(const std::string& dir);
  static core::Status MoveAside(const std::string& dir, const core::Status& why);

  const std::string dir_;
  std::unique_ptr<rocksdb::DB> db_;
};

}  // namespace perch::store
