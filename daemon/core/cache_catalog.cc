#include "daemon/core/cache_catalog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "daemon/core/codec.h"

namespace perch::core {

CacheCatalog::CacheCatalog(Index& index, BlockStore& store, Executor& disk, CatalogOptions options,
                           std::function<bool(const BlockKey&)> in_use)
    : index_(index),
      store_(store),
      disk_(disk),
      options_(std::move(options)),
      in_use_(std::move(in_use)),
      capacity_(options_.capacity_bytes) {}

bool WarningLimiter::Allow(uint64_t* suppressed) {
  std::lock_guard<std::mutex> l(mu_);
  const Clock::time_point now = Clock::now();
  if (logged_ && now - last_ < period_) {
    dropped_++;
    return false;
  }
  logged_ = true;
  last_ = now;
  *suppressed = dropped_;
  dropped_ = 0;
  return true;
}

std::string CacheCatalog::Key(const BlockKey& key) {
  char idx[17];
  std::snprintf(idx, sizeof(idx), "%016llx", static_cast<unsigned long long>(key.index));
  return "b/" + key.object_id + "/" + idx;
}

std::string CacheCatalog::ObjectKey(const std::string& object_id) { return "o/" + object_id; }

std::string CacheCatalog::PinKey(const ObjectPath& path) { return "pin" + path.str(); }

std::string CacheCatalog::Encode(const Record& r) {
  std::string v;
  codec::PutU64(&v, r.length);
  codec::PutU64(&v, r.seq);
  return v;
}

std::string CacheCatalog::EncodeObject(const ObjectInfo& o) {
  std::string v;
  codec::PutString(&v, o.path.str());
  codec::PutU64(&v, o.size);
  codec::PutString(&v, o.etag);
  return v;
}

Status CacheCatalog::Load() {
  uint64_t total = 0, max_seq = 0;
  std::map<BlockKey, Record> loaded;
  std::map<std::string, ObjectInfo> objects;
  std::set<ObjectPath> pins;
  size_t bad = 0;
  Status s = index_.Scan("o/", [&](std::string_view k, std::string_view v) {
    codec::Reader reader(v);
    std::string path;
    ObjectInfo o;
    if (!reader.GetString(&path) || !reader.GetU64(&o.size) || !reader.GetString(&o.etag)) {
      ++bad;
      return true;
    }
    auto parsed = ObjectPath::Parse(path);
    if (!parsed.ok()) {
      ++bad;
      return true;
    }
    o.path = *parsed;
    objects.emplace(std::string(k.substr(2)), std::move(o));
    return true;
  });
  if (!s.ok()) return s;
  s = index_.Scan("pin/", [&](std::string_view k, std::string_view) {
    auto parsed = ObjectPath::Parse(k.substr(3));
    if (parsed.ok()) {
      pins.insert(*parsed);
    } else {
      ++bad;
    }
    return true;
  });
  if (!s.ok()) return s;
  s = index_.Scan("b/", [&](std::string_view k, std::string_view v) {
    std::string_view rest = k.substr(2);
    size_t slash = rest.rfind('/');
    Record r;
    codec::Reader reader(v);
    if (slash == std::string_view::npos || !reader.GetU64(&r.length) || !reader.GetU64(&r.seq)) {
      ++bad;
      return true;
    }
    BlockKey key{std::string(rest.substr(0, slash)),
                 std::strtoull(std::string(rest.substr(slash + 1)).c_str(), nullptr, 16)};
    total += r.length;
    max_seq = std::max(max_seq, r.seq);
    if (auto o = objects.find(key.object_id); o != objects.end()) {
      o->second.cached_bytes += r.length;
      o->second.blocks++;
    }
    loaded.emplace(std::move(key), r);
    return true;
  });
  if (!s.ok()) return s;
  if (bad > 0) spdlog::warn("cache: {} undecodable index records ignored", bad);
  size_t count = loaded.size();
  {
    std::lock_guard<std::mutex> l(mu_);
    records_ = std::move(loaded);
    objects_.clear();
    ids_by_path_.clear();
    for (auto& [id, o] : objects) {
      if (o.blocks == 0) continue;  // its blocks went before it (a crash): forgotten
      ids_by_path_[o.path.str()].insert(id);
      objects_.emplace(id, std::move(o));
    }
    pins_ = std::move(pins);
    next_seq_ = max_seq + 1;
    cached_bytes_ = total;
  }
  spdlog::info("cache: {} blocks, {} bytes of {} capacity", count, total, options_.capacity_bytes);
  UpdateCapacity();  // not under mu_: eviction takes it
  return Status::Ok();
}

void CacheCatalog::Stored(const BlockKey& key, uint64_t length, const ObjectPath& path,
                          const ObjectVersion& version) {
  std::vector<Index::Write> batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto [it, inserted] = records_.try_emplace(key);
    if (!inserted) cached_bytes_ -= it->second.length;
    auto [obj, new_object] = objects_.try_emplace(key.object_id);
    if (new_object) {
      obj->second.path = path;
      obj->second.size = version.size;
      obj->second.etag = version.etag;
      ids_by_path_[path.str()].insert(key.object_id);
      batch.push_back({ObjectKey(key.object_id), EncodeObject(obj->second)});
    }
    if (inserted) {
      obj->second.blocks++;
    } else {
      obj->second.cached_bytes -= it->second.length;
    }
    obj->second.cached_bytes += length;
    it->second.length = length;
    it->second.seq = next_seq_++;
    cached_bytes_ += length;
    dirty_.erase(key);
    batch.push_back({Key(key), Encode(it->second)});
  }
  Status s = index_.Apply(batch);
  uint64_t more = 0;
  if (!s.ok() && index_warnings_.Allow(&more)) {
    spdlog::warn("cache: could not record block {}#{}: {} ({} more since the last warning)",
                 key.object_id, key.index, s.ToString(), more);
  }
  MaybeScheduleEviction();
}

void CacheCatalog::Touched(const BlockKey& key, uint64_t length) {
  bool flush = false;
  bool adopted = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = records_.find(key);
    if (it == records_.end()) {
      // A block file without a record (crash between rename and record): adopt it.
      it = records_.emplace(key, Record{length, 0}).first;
      cached_bytes_ += length;
      if (auto o = objects_.find(key.object_id); o != objects_.end()) {
        o->second.cached_bytes += length;
        o->second.blocks++;
      }
      adopted = true;
    }
    it->second.seq = next_seq_++;
    dirty_.insert(key);
    flush = dirty_.size() >= options_.flush_every;
  }
  if (adopted) MaybeScheduleEviction();
  if (flush) Flush().IgnoreError();
}

bool CacheCatalog::Forget(const BlockKey& key, std::vector<Index::Write>* batch) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) return false;
  cached_bytes_ -= it->second.length;
  if (auto o = objects_.find(key.object_id); o != objects_.end()) {
    o->second.cached_bytes -= std::min(o->second.cached_bytes, it->second.length);
    if (--o->second.blocks == 0) {
      auto ids = ids_by_path_.find(o->second.path.str());
      if (ids != ids_by_path_.end()) {
        ids->second.erase(key.object_id);
        if (ids->second.empty()) ids_by_path_.erase(ids);
      }
      objects_.erase(o);
      batch->push_back({ObjectKey(key.object_id), std::nullopt});
    }
  }
  records_.erase(it);
  dirty_.erase(key);
  batch->push_back({Key(key), std::nullopt});
  return true;
}

void CacheCatalog::Dropped(const BlockKey& key) {
  std::vector<Index::Write> batch;
  if (Forget(key, &batch)) index_.Apply(batch).IgnoreError();
}

bool CacheCatalog::IsPinnedLocked(const ObjectPath& path) const {
  for (const ObjectPath& p : pins_) {
    if (path.HasPrefix(p)) return true;
  }
  return false;
}

Status CacheCatalog::Pin(const ObjectPath& prefix) {
  {
    std::lock_guard<std::mutex> l(mu_);
    pins_.insert(prefix);
  }
  return index_.Apply({{PinKey(prefix), std::string()}});
}

Status CacheCatalog::Unpin(const ObjectPath& prefix) {
  {
    std::lock_guard<std::mutex> l(mu_);
    if (pins_.erase(prefix) == 0)
      return NotFoundError(prefix.str() + " is not pinned", FailureSite::kLocal);
  }
  Status s = index_.Apply({{PinKey(prefix), std::nullopt}});
  MaybeScheduleEviction();  // what the pin held may now be over the watermark
  return s;
}

std::vector<ObjectPath> CacheCatalog::Pins() const {
  std::lock_guard<std::mutex> l(mu_);
  return {pins_.begin(), pins_.end()};
}

bool CacheCatalog::Contains(const BlockKey& key) const {
  std::lock_guard<std::mutex> l(mu_);
  return records_.count(key) > 0;
}

bool CacheCatalog::MayContain(const BlockKey& key) const {
  return !reconciled_.load() || Contains(key);
}

uint64_t CacheCatalog::CachedBytes(const std::string& object_id) const {
  std::lock_guard<std::mutex> l(mu_);
  auto it = objects_.find(object_id);
  return it == objects_.end() ? 0 : it->second.cached_bytes;
}

uint64_t CacheCatalog::pinned_bytes() const {
  std::lock_guard<std::mutex> l(mu_);
  uint64_t total = 0;
  if (pins_.empty()) return 0;
  for (const auto& [id, o] : objects_) {
    if (IsPinnedLocked(o.path)) total += o.cached_bytes;
  }
  return total;
}

std::vector<CachedObject> CacheCatalog::List(const ObjectPath& prefix, const std::string& after,
                                             size_t limit) const {
  std::vector<CachedObject> out;
  std::lock_guard<std::mutex> l(mu_);
  // Paths under `prefix` sort at or after it (every path below starts with it).
  std::string start = std::max(after, prefix.str());
  for (auto it = ids_by_path_.lower_bound(start); it != ids_by_path_.end() && out.size() < limit;
       ++it) {
    if (it->first == after) continue;
    auto path = ObjectPath::Parse(it->first);
    if (!path.ok()) continue;
    if (!path->HasPrefix(prefix)) {
      // "/a/b" < "/a/b c" < "/a/b/x": a sibling with a longer name may sort
      // between the prefix and its children, so skip it rather than stop.
      if (it->first.compare(0, prefix.str().size(), prefix.str()) != 0) break;
      continue;
    }
    for (const std::string& id : it->second) {
      const ObjectInfo& o = objects_.at(id);
      out.push_back(
          CachedObject{o.path, id, o.size, o.cached_bytes, o.blocks, IsPinnedLocked(o.path)});
    }
  }
  return out;
}

void CacheCatalog::RemoveBlocks(const std::vector<BlockKey>& keys, EvictResult* result) {
  std::vector<Index::Write> batch;
  std::set<std::string> objects;
  for (const BlockKey& key : keys) {
    if (in_use_ && in_use_(key)) {
      result->busy_blocks++;
      continue;
    }
    uint64_t length = 0;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = records_.find(key);
      if (it == records_.end()) continue;  // went meanwhile
      length = it->second.length;
    }
    Status s = store_.Remove(key);  // the file first, then the record
    if (!s.ok()) {
      spdlog::warn("cache: could not evict block {}#{}: {}", key.object_id, key.index,
                   s.ToString());
      continue;
    }
    if (!Forget(key, &batch)) continue;
    // Counted as the bytes leave cached_bytes, so that no stats snapshot
    // shows the cache shrunk by an eviction it does not count.
    evictions_.fetch_add(1);
    result->blocks++;
    result->bytes += length;
    objects.insert(key.object_id);
  }
  result->objects += objects.size();
  if (!batch.empty()) {
    Status s = index_.Apply(batch);
    if (!s.ok()) spdlog::warn("cache: eviction records not written: {}", s.ToString());
  }
}

Result<EvictResult> CacheCatalog::Evict(const ObjectPath& prefix) {
  EvictResult result;
  std::vector<BlockKey> keys;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [id, o] : objects_) {
      if (!o.path.HasPrefix(prefix)) continue;
      if (IsPinnedLocked(o.path)) {
        result.pinned_objects++;
        continue;
      }
      for (auto it = records_.lower_bound(BlockKey{id, 0});
           it != records_.end() && it->first.object_id == id; ++it) {
        keys.push_back(it->first);
      }
    }
  }
  RemoveBlocks(keys, &result);
  spdlog::info("cache: evicted {} ({} objects, {} blocks, {} bytes; {} pinned objects kept)",
               prefix.str(), result.objects, result.blocks, result.bytes, result.pinned_objects);
  return result;
}

Status CacheCatalog::Flush() {
  std::vector<Index::Write> batch;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const BlockKey& k : dirty_) {
      auto it = records_.find(k);
      if (it != records_.end()) batch.push_back({Key(k), Encode(it->second)});
    }
    dirty_.clear();
  }
  if (batch.empty()) return Status::Ok();
  return index_.Apply(batch);
}

size_t CacheCatalog::blocks() const {
  std::lock_guard<std::mutex> l(mu_);
  return records_.size();
}

void CacheCatalog::MaybeScheduleEviction() {
  if (cached_bytes_.load() <= capacity_.load() * options_.high_watermark) return;
  if (eviction_scheduled_.exchange(true)) return;
  disk_.Post([this] {
    size_t evicted = EvictIfNeeded();
    eviction_scheduled_ = false;
    // Blocks in use were skipped. If that left the cache over its high
    // watermark and nothing else triggers a pass (no more blocks arrive),
    // look again shortly, a bounded number of times without progress.
    const bool over = cached_bytes_.load() > capacity_.load() * options_.high_watermark;
    if (evicted > 0 || !over) eviction_retries_ = 0;
    if (over && eviction_retries_++ < 40) {
      disk_.PostAfter(std::chrono::milliseconds(250), [this] { MaybeScheduleEviction(); });
    }
  });
}

size_t CacheCatalog::EvictIfNeeded(uint64_t room) {
  const uint64_t capacity = capacity_.load();
  const uint64_t high = static_cast<uint64_t>(capacity * options_.high_watermark);
  const uint64_t low_mark = static_cast<uint64_t>(capacity * options_.low_watermark);
  const uint64_t low = low_mark > room ? low_mark - room : 0;
  if (cached_bytes_.load() + room <= high || cached_bytes_.load() <= low) return 0;
  std::vector<std::pair<uint64_t, BlockKey>> lru;
  {
    std::lock_guard<std::mutex> l(mu_);
    lru.reserve(records_.size());
    for (const auto& [k, r] : records_) {
      if (!pins_.empty()) {
        auto o = objects_.find(k.object_id);
        if (o != objects_.end() && IsPinnedLocked(o->second.path)) continue;
      }
      lru.emplace_back(r.seq, k);
    }
  }
  std::sort(lru.begin(), lru.end());
  // Take the oldest blocks until enough bytes would be freed, then remove them.
  std::vector<BlockKey> victims;
  const uint64_t cached = cached_bytes_.load();  // may have dropped since the check above
  const uint64_t to_free = cached > low ? cached - low : 0;
  uint64_t planned = 0;
  for (const auto& [seq, key] : lru) {
    if (planned >= to_free) break;
    if (in_use_ && in_use_(key)) continue;  // not under mu_: a leaf lock calls nothing
    std::lock_guard<std::mutex> l(mu_);
    auto it = records_.find(key);
    if (it == records_.end()) continue;
    planned += it->second.length;
    victims.push_back(key);
  }
  EvictResult result;
  RemoveBlocks(victims, &result);
  if (result.blocks > 0) {
    spdlog::info("cache: evicted {} blocks; {} of {} bytes used", result.blocks,
                 cached_bytes_.load(), capacity);
  } else if (planned < to_free) {
    spdlog::warn(
        "cache: over the high watermark but nothing more can be evicted ({} bytes pinned or in "
        "use)",
        cached_bytes_.load());
  }
  return result.blocks;
}

void CacheCatalog::UpdateCapacity() {
  if (options_.disk_space) {
    uint64_t total = 0, free = 0;
    if (Status s = options_.disk_space(&total, &free); !s.ok()) {
      spdlog::warn("cache: cannot read the cache filesystem's free space: {}", s.message());
    } else {
      constexpr uint64_t kMinReserve = 8ULL << 20, kMaxReserve = 1ULL << 30;
      const uint64_t reserve = std::clamp(total / 50, kMinReserve, kMaxReserve);
      const uint64_t room = cached_bytes_.load() + free;
      const uint64_t holds = room > reserve ? room - reserve : 0;
      const uint64_t cap = std::min(options_.capacity_bytes, holds);
      const uint64_t old = capacity_.exchange(cap);
      // Transitions only: the cap moves a little with every block.
      if (cap < options_.capacity_bytes && old == options_.capacity_bytes) {
        spdlog::warn(
            "cache: the filesystem of the cache holds only {} bytes for it; quota capped from {} "
            "to {}",
            holds, options_.capacity_bytes, cap);
      } else if (cap == options_.capacity_bytes && old < cap) {
        spdlog::info("cache: the filesystem has room again; quota back to {} bytes", cap);
      }
    }
  }
  MaybeScheduleEviction();
}

void CacheCatalog::StoreFailed(const BlockKey& /*key*/, uint64_t length, const Status& why) {
  store_errors_++;
  {
    std::lock_guard<std::mutex> l(mu_);
    last_store_error_ = why.message();
    last_store_error_at_ = Clock::now();
  }
  if (why.code() != StatusCode::kNoSpace) return;
  // The disk is fuller than the quota thought: cap it, and make room for the
  // next block now rather than failing every write until a pass comes.
  UpdateCapacity();
  EvictIfNeeded(length);
}

std::string CacheCatalog::StoreProblem() const {
  std::lock_guard<std::mutex> l(mu_);
  if (store_errors_.load() == 0 || Clock::now() - last_store_error_at_ > std::chrono::minutes(5))
    return "";
  auto ago = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - last_store_error_at_);
  std::string out = std::to_string(store_errors_.load()) + " block writes failed, the last " +
                    std::to_string(ago.count()) + " s ago: " + last_store_error_;
  if (capacity_.load() < options_.capacity_bytes) {
    out += "; quota capped to " + std::to_string(capacity_.load()) + " of " +
           std::to_string(options_.capacity_bytes) + " bytes by the filesystem";
  }
  return out;
}

bool CacheCatalog::Adopt(const BlockKey& key, uint64_t length) {
  Record r{length, 0};  // seq 0: its last use is unknown, so it goes first
  {
    std::lock_guard<std::mutex> l(mu_);
    if (!records_.emplace(key, r).second) return false;
    cached_bytes_ += length;
    if (auto o = objects_.find(key.object_id); o != objects_.end()) {
      o->second.cached_bytes += length;
      o->second.blocks++;
    }
  }
  index_.Apply({{Key(key), Encode(r)}})
      .IgnoreError();  // without it, the next start adopts it again
  return true;
}

void CacheCatalog::Reconcile() {
  disk_.Post([this] { ReconcileNow(); });
}

void CacheCatalog::ReconcileNow() {
  std::set<BlockKey> unseen;  // records whose file the walk has not found (yet)
  {
    std::lock_guard<std::mutex> l(mu_);
    for (const auto& [k, r] : records_) unseen.insert(unseen.end(), k);
  }
  uint64_t adopted = 0, adopted_bytes = 0;
  auto scan = store_.ForEachBlock([&](const BlockKey& key, uint64_t length) {
    if (unseen.erase(key) > 0) return;
    // A block being written now gets its record from Stored().
    if (in_use_ && in_use_(key)) return;
    if (Adopt(key, length)) {
      adopted++;
      adopted_bytes += length;
    }
  });
  if (!scan.ok()) {
    spdlog::warn("cache: start-up walk of the block store failed: {}", scan.status().ToString());
    reconciled_ = true;
    return;
  }
  // Records without a file (or whose file came after the walk passed: checked again).
  std::vector<Index::Write> batch;
  uint64_t dropped = 0;
  for (const BlockKey& key : unseen) {
    if (in_use_ && in_use_(key)) continue;
    auto r = store_.Read(key, 0, 0);
    if (r.ok() || r.status().code() != StatusCode::kNotFound) continue;
    if (Forget(key, &batch)) dropped++;
  }
  if (!batch.empty()) index_.Apply(batch).IgnoreError();
  if (adopted > 0 || dropped > 0 || scan->leftovers_removed > 0) {
    spdlog::warn(
        "cache: start-up walk of {} block files: adopted {} blocks without a record ({} bytes), "
        "removed {} leftover files ({} bytes), dropped {} records without a file",
        scan->blocks, adopted, adopted_bytes, scan->leftovers_removed, scan->leftover_bytes,
        dropped);
  } else {
    spdlog::info("cache: start-up walk of {} block files: index and files agree", scan->blocks);
  }
  reconciled_ = true;
  MaybeScheduleEviction();
}

}  // namespace perch::core
