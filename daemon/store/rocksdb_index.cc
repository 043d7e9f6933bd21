#include "daemon/store/rocksdb_index.h"

#include <rocksdb/db.h>
#include <rocksdb/table.h>
#include <rocksdb/write_batch.h>

namespace perch::store {

namespace {

core::Status Convert(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return core::Status::Ok();
  std::string msg = what + ": " + s.ToString();
  if (s.IsCorruption()) return core::CorruptError(msg, core::FailureSite::kLocal);
  if (s.IsNoSpace()) return core::Status(core::StatusCode::kNoSpace, msg, core::FailureSite::kLocal);
  return core::InternalError(msg);
}

}  // namespace

RocksDbIndex::RocksDbIndex(std::unique_ptr<rocksdb::DB> db) : db_(std::move(db)) {}
RocksDbIndex::~RocksDbIndex() = default;

core::Result<std::unique_ptr<RocksDbIndex>> RocksDbIndex::Open(const std::string& dir) {
  rocksdb::Options options;
  options.create_if_missing = true;
  options.max_open_files = 256;
  options.keep_log_file_num = 2;
  options.OptimizeForSmallDb();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(options, dir, &raw);
  if (!s.ok()) {
    if (s.IsIOError() && s.ToString().find("lock") != std::string::npos) {
      return core::UnavailableError("cache index " + dir + " is in use by another perchd (RocksDB lock held)",
                                    core::FailureSite::kLocal);
    }
    return Convert(s, "open cache index " + dir);
  }
  return std::unique_ptr<RocksDbIndex>(new RocksDbIndex(std::unique_ptr<rocksdb::DB>(raw)));
}

core::Result<std::optional<std::string>> RocksDbIndex::Get(std::string_view key) {
  std::string value;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), rocksdb::Slice(key.data(), key.size()), &value);
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
  return Convert(db_->Write(wo, &wb), "index write");
}

core::Status RocksDbIndex::Scan(std::string_view prefix,
                                const std::function<bool(std::string_view, std::string_view)>& fn) {
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
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
