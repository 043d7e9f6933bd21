#include "daemon/core/cache_catalog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "daemon/core/codec.h"
#include "daemon/core/mutex.h"

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
  MutexLock l(mu_);
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
  codec::PutString(&v, o.path.view());
  codec::PutU64(&v, o.size);
  codec::PutString(&v, o.etag.view());
  return v;
}

Status CacheCatalog::Load() {
  uint64_t total = 0, max_seq = 0;
  ObjectIds ids;
  std::map<RecordKey, Record> loaded;
  std::map<Id, ObjectInfo> objects;
  std::set<ObjectPath> pins;
  size_t bad = 0;
  Status s = index_.Scan("o/", [&](std::string_view k, std::string_view v) {
    codec::Reader reader(v);
    std::string path, etag;
    ObjectInfo o;
    if (!reader.GetString(&path) || !reader.GetU64(&o.size) || !reader.GetString(&etag)) {
      ++bad;
      return true;
    }
    auto parsed = ObjectPath::Parse(path);
    if (!parsed.ok()) {
      ++bad;
      return true;
    }
    o.path = PackedString(parsed->str());
    o.etag = PackedString(etag);
    const Id id = ids.Intern(k.substr(2));
    if (!objects.emplace(id, std::move(o)).second) ids.Release(id);
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
    RecordKey key{ids.Intern(rest.substr(0, slash)),
                  std::strtoull(std::string(rest.substr(slash + 1)).c_str(), nullptr, 16)};
    if (!loaded.emplace(key, r).second) {
      ids.Release(key.id);
      return true;
    }
    total += r.length;
    max_seq = std::max(max_seq, r.seq);
    if (auto o = objects.find(key.id); o != objects.end()) {
      o->second.cached_bytes += r.length;
      o->second.blocks++;
    }
    return true;
  });
  if (!s.ok()) return s;
  if (bad > 0) spdlog::warn("cache: {} undecodable index records ignored", bad);
  size_t count = loaded.size();
  for (auto it = objects.begin(); it != objects.end();) {
    if (it->second.blocks > 0) {
      ++it;
      continue;
    }
    ids.Release(it->first);  // its blocks went before it (a crash): forgotten
    it = objects.erase(it);
  }
  {
    MutexLock l(mu_);
    ids_ = std::move(ids);
    records_ = std::move(loaded);
    objects_ = std::move(objects);
    by_path_.clear();
    for (const ObjectEntry& e : objects_) by_path_.insert(&e);
    pins_ = std::move(pins);
    next_seq_ = max_seq + 1;
    cached_bytes_ = total;
  }
  spdlog::info("cache: {} blocks, {} bytes of {} capacity", count, total, options_.capacity_bytes);
  UpdateCapacity();  // not under mu_: eviction takes it
  return Status::Ok();
}

std::optional<CacheCatalog::RecordKey> CacheCatalog::FindLocked(const BlockKey& key) const {
  auto id = ids_.Find(key.object_id);
  if (!id) return std::nullopt;
  return RecordKey{*id, key.index};
}

BlockKey CacheCatalog::BlockKeyLocked(const RecordKey& key) const {
  return BlockKey{ids_.Name(key.id), key.index};
}

std::pair<std::map<CacheCatalog::RecordKey, CacheCatalog::Record>::iterator, bool>
CacheCatalog::EmplaceLocked(const BlockKey& key, Record r) {
  if (auto found = FindLocked(key)) {
    if (auto it = records_.find(*found); it != records_.end()) return {it, false};
  }
  const RecordKey k{ids_.Intern(key.object_id), key.index};
  return records_.emplace(k, r);
}

void CacheCatalog::CountBlockLocked(const Id& id, uint64_t length) {
  cached_bytes_ += length;
  if (auto o = objects_.find(id); o != objects_.end()) {
    o->second.cached_bytes += length;
    o->second.blocks++;
  }
}

void CacheCatalog::Stored(const BlockKey& key, uint64_t length, const ObjectPath& path,
                          const ObjectVersion& version) {
  std::vector<Index::Write> batch;
  {
    MutexLock l(mu_);
    auto [it, inserted] = EmplaceLocked(key, Record{});
    const Id id = it->first.id;
    const uint64_t old_length = it->second.length;
    if (!inserted) cached_bytes_ -= old_length;
    auto obj = objects_.find(id);
    if (obj == objects_.end()) {
      obj = objects_
                .emplace(ids_.Intern(key.object_id),
                         ObjectInfo{PackedString(path.str()), PackedString(version.etag),
                                    version.size, 0, 0})
                .first;
      by_path_.insert(&*obj);
      batch.push_back({ObjectKey(key.object_id), EncodeObject(obj->second)});
      obj->second.blocks = 1;  // this block, also when it was adopted before
    } else if (inserted) {
      obj->second.blocks++;
    } else {
      obj->second.cached_bytes -= std::min(obj->second.cached_bytes, old_length);
    }
    obj->second.cached_bytes += length;
    it->second.length = length;
    it->second.seq = next_seq_++;
    cached_bytes_ += length;
    dirty_.erase(it->first);
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
    MutexLock l(mu_);
    // A block file without a record (crash between rename and record) is adopted.
    auto [it, inserted] = EmplaceLocked(key, Record{length, 0});
    if (inserted) {
      CountBlockLocked(it->first.id, length);
      adopted = true;
    }
    it->second.seq = next_seq_++;
    dirty_.insert(it->first);
    flush = dirty_.size() >= options_.flush_every;
  }
  if (adopted) MaybeScheduleEviction();
  if (flush) Flush().IgnoreError();
}

bool CacheCatalog::Forget(const BlockKey& key, std::vector<Index::Write>* batch) {
  MutexLock l(mu_);
  auto found = FindLocked(key);
  if (!found) return false;
  auto it = records_.find(*found);
  if (it == records_.end()) return false;
  cached_bytes_ -= it->second.length;
  if (auto o = objects_.find(found->id); o != objects_.end()) {
    o->second.cached_bytes -= std::min(o->second.cached_bytes, it->second.length);
    if (o->second.blocks <= 1) {
      by_path_.erase(&*o);
      objects_.erase(o);
      ids_.Release(found->id);
      batch->push_back({ObjectKey(key.object_id), std::nullopt});
    } else {
      o->second.blocks--;
    }
  }
  records_.erase(it);
  dirty_.erase(*found);
  ids_.Release(found->id);
  batch->push_back({Key(key), std::nullopt});
  return true;
}

void CacheCatalog::Dropped(const BlockKey& key) {
  std::vector<Index::Write> batch;
  if (Forget(key, &batch)) index_.Apply(batch).IgnoreError();
}

bool CacheCatalog::Under(std::string_view path, const ObjectPath& prefix) {
  const std::string& p = prefix.str();
  if (prefix.IsRoot()) return true;
  return path.size() >= p.size() && path.compare(0, p.size(), p) == 0 &&
         (path.size() == p.size() || path[p.size()] == '/');
}

bool CacheCatalog::IsPinnedLocked(std::string_view path) const {
  for (const ObjectPath& p : pins_) {
    if (Under(path, p)) return true;
  }
  return false;
}

Status CacheCatalog::Pin(const ObjectPath& prefix) {
  {
    MutexLock l(mu_);
    pins_.insert(prefix);
  }
  return index_.Apply({{PinKey(prefix), std::string()}});
}

Status CacheCatalog::Unpin(const ObjectPath& prefix) {
  {
    MutexLock l(mu_);
    if (pins_.erase(prefix) == 0)
      return NotFoundError(prefix.str() + " is not pinned", FailureSite::kLocal);
  }
  Status s = index_.Apply({{PinKey(prefix), std::nullopt}});
  MaybeScheduleEviction();  // what the pin held may now be over the watermark
  return s;
}

std::vector<ObjectPath> CacheCatalog::Pins() const {
  MutexLock l(mu_);
  return {pins_.begin(), pins_.end()};
}

bool CacheCatalog::Contains(const BlockKey& key) const {
  MutexLock l(mu_);
  auto found = FindLocked(key);
  return found && records_.count(*found) > 0;
}

bool CacheCatalog::MayContain(const BlockKey& key) const {
  return !reconciled_.load() || Contains(key);
}

uint64_t CacheCatalog::CachedBytes(const std::string& object_id) const {
  MutexLock l(mu_);
  auto id = ids_.Find(object_id);
  if (!id) return 0;
  auto it = objects_.find(*id);
  return it == objects_.end() ? 0 : it->second.cached_bytes;
}

uint64_t CacheCatalog::pinned_bytes() const {
  MutexLock l(mu_);
  uint64_t total = 0;
  if (pins_.empty()) return 0;
  for (const auto& [id, o] : objects_) {
    if (IsPinnedLocked(o.path.view())) total += o.cached_bytes;
  }
  return total;
}

std::vector<CachedObject> CacheCatalog::List(const ObjectPath& prefix, const std::string& after,
                                             size_t limit) const {
  std::vector<CachedObject> out;
  MutexLock l(mu_);
  // Paths under `prefix` sort at or after it (every path below starts with it).
  const std::string start = std::max(after, prefix.str());
  std::string_view last;  // all objects of one path go in one page
  for (auto it = by_path_.lower_bound(std::string_view(start)); it != by_path_.end(); ++it) {
    const ObjectInfo& o = (*it)->second;
    const std::string_view path = o.path.view();
    if (path == after) continue;
    if (out.size() >= limit && path != last) break;
    if (!Under(path, prefix)) {
      // "/a/b" < "/a/b c" < "/a/b/x": a sibling with a longer name may sort
      // between the prefix and its children, so skip it rather than stop.
      if (path.compare(0, prefix.str().size(), prefix.str()) != 0) break;
      continue;
    }
    auto parsed = ObjectPath::Parse(path);  // checked when it was stored or loaded
    if (!parsed.ok()) continue;
    last = path;
    out.push_back(CachedObject{*std::move(parsed), ids_.Name((*it)->first), o.size, o.cached_bytes,
                               o.blocks, IsPinnedLocked(path)});
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
      MutexLock l(mu_);
      auto found = FindLocked(key);
      auto it = found ? records_.find(*found) : records_.end();
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
    evicted_bytes_.fetch_add(length);
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
    MutexLock l(mu_);
    for (const auto& [id, o] : objects_) {
      if (!Under(o.path.view(), prefix)) continue;
      if (IsPinnedLocked(o.path.view())) {
        result.pinned_objects++;
        continue;
      }
      for (auto it = records_.lower_bound(RecordKey{id, 0});
           it != records_.end() && it->first.id == id; ++it) {
        keys.push_back(BlockKeyLocked(it->first));
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
    MutexLock l(mu_);
    for (const RecordKey& k : dirty_) {
      auto it = records_.find(k);
      if (it != records_.end()) batch.push_back({Key(BlockKeyLocked(k)), Encode(it->second)});
    }
    dirty_.clear();
  }
  if (batch.empty()) return Status::Ok();
  return index_.Apply(batch);
}

size_t CacheCatalog::blocks() const {
  MutexLock l(mu_);
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
  // Oldest first: (seq, key) of every unpinned block, 40 bytes each while
  // this pass runs; ids become strings only for the blocks taken.
  std::vector<std::pair<uint64_t, RecordKey>> lru;
  {
    MutexLock l(mu_);
    lru.reserve(records_.size());
    for (const auto& [k, r] : records_) {
      if (!pins_.empty()) {
        auto o = objects_.find(k.id);
        if (o != objects_.end() && IsPinnedLocked(o->second.path.view())) continue;
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
  for (const auto& [seq, rkey] : lru) {
    if (planned >= to_free) break;
    BlockKey key;
    {
      MutexLock l(mu_);
      if (records_.count(rkey) == 0) continue;  // went meanwhile (its id may be reused)
      key = BlockKeyLocked(rkey);
    }
    if (in_use_ && in_use_(key)) continue;  // not under mu_: a leaf lock calls nothing
    MutexLock l(mu_);
    auto it = records_.find(rkey);
    if (it == records_.end()) continue;
    planned += it->second.length;
    victims.push_back(std::move(key));
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
    MutexLock l(mu_);
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
  MutexLock l(mu_);
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

}  // namespace perch::core
