#include "daemon/store/rocksdb_index.h"

#include <rocksdb/db.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>
#include <spdlog/spdlog.h>

#include <filesystem>

namespace perch::store {

namespace {

core::Status Convert(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return core::Status::Ok();
  std::string msg = what + ": " + s.ToString();
  if (s.IsCorruption()) return core::CorruptError(msg, core::FailureSite::kLocal);
  if (s.IsNoSpace())
    return core::Status(core::StatusCode::kNoSpace, msg, core::FailureSite::kLocal);
  return core::InternalError(msg);
}

}  // namespace

RocksDbIndex::RocksDbIndex(std::string dir, std::unique_ptr<rocksdb::DB> db)
    : dir_(std::move(dir)), db_(std::move(db)) {}
RocksDbIndex::~RocksDbIndex() = default;

core::Result<std::unique_ptr<RocksDbIndex>> RocksDbIndex::Open(const std::string& dir) {
  auto db = OpenDb(dir);
  if (!db.ok() && db.status().code() == core::StatusCode::kCorrupt) {
    PERCH_RETURN_IF_ERROR(MoveAside(dir, db.status()));
    db = OpenDb(dir);
  }
  if (!db.ok()) return db.status();
  return std::unique_ptr<RocksDbIndex>(new RocksDbIndex(dir, *std::move(db)));
}

core::Result<std::unique_ptr<RocksDbIndex>> RocksDbIndex::OpenReadOnly(const std::string& dir) {
  rocksdb::Options options;
  options.max_open_files = 256;
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::OpenForReadOnly(options, dir, &raw);
  if (!s.ok()) return Convert(s, "open cache index " + dir + " to read");
  return std::unique_ptr<RocksDbIndex>(new RocksDbIndex(dir, std::unique_ptr<rocksdb::DB>(raw)));
}

core::Status RocksDbIndex::Reset(const core::Status& why) {
  db_.reset();  // closes it (and releases its lock) before the rename
  PERCH_RETURN_IF_ERROR(MoveAside(dir_, why));
  auto db = OpenDb(dir_);
  if (!db.ok()) return db.status();
  db_ = *std::move(db);
  return core::Status::Ok();
}

core::Status RocksDbIndex::MoveAside(const std::string& dir, const core::Status& why) {
  const std::string aside = dir + ".corrupt";
  std::error_code ec;
  std::filesystem::remove_all(aside, ec);  // only the latest is kept, for a post-mortem
  std::filesystem::rename(dir, aside, ec);
  if (ec)
    return core::InternalError("cannot move corrupt cache index " + dir +
                               " aside: " + ec.message());
  // Once per corruption: the rest of the start-up goes on with a new index.
  spdlog::error(
      "cache index {} is corrupt ({}); moved it to {} and started a new one (cached blocks are "
      "re-adopted from their files in the background)",
      dir, why.message(), aside);
  return core::Status::Ok();
}

core::Result<std::unique_ptr<rocksdb::DB>> RocksDbIndex::OpenDb(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 2;
  options.OptimizeForSmallDb();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return core::UnavailableError(
          "cache index " + dir + " is in use by another perchd (RocksDB lock held)",
          core::FailureSite::kLocal);
    }
    return Convert(s, "open cache index " + dir);
  }
  return std::unique_ptr<rocksdb::DB>(raw);
}

core::Result<std::optional<std::string>> RocksDbIndex::Get(std::string_view key) {
  std::string value;
  rocksdb::Status s =
      db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
  if (s.IsNotFound()) return std::optional<std::string>();
  if (!s.ok()) return Convert(s, "index get");
  return std::optional<std::string>(std::move(value));
}

core::Status RocksDbIndex::Apply(const std::vector<Write>& batch) {
  rocksdb::WriteBatch wb;
  for (const Write& w : batch) {
    rocksdb::Status s = w.value ? wb.Put(w.key, *w.value) : wb.Delete(w.key);
    if (!s.ok()) return Convert(s, "index batch");
  }
  rocksdb::WriteOptions wo;
  wo.sync = false;
  rocksdb::Status s = db_->Write(wo, &wb);
  if (s.IsNoSpace() || s.IsIOError()) {
    // A full disk puts RocksDB in a stopped state that every later write
    // would report; the catalog has evicted by now, so ask it to go on.
    if (db_->Resume().ok()) s = db_->Write(wo, &wb);
  }
  return Convert(s, "index write");
}

core::Status RocksDbIndex::Scan(std::string_view prefix,
                                const std::function<bool(std::string_view, std::string_view)>& fn) {
  // A scan reads a whole key range once (the catalog's load at start): its
  // blocks would only push the entries that lookups use out of the block cache.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  rocksdb::Slice p(prefix.data(), prefix.size());
  for (it->Seek(p); it->Valid() && it->key().starts_with(p); it->Next()) {
    if (!fn(std::string_view(it->key().data(), it->key().size()),
            std::string_view(it->value().data(), it->value().size()))) {
      break;
    }
  }
  return Convert(it->status(), "index scan");
}

}  // namespace perch::store
