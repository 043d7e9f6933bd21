#include "daemon/core/cache_catalog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "daemon/core/codec.h"
#include "daemon/core/index_keys.h"
#include "daemon/core/mutex.h"

namespace perch::core {

namespace {

// Eviction ranks (EvictIfNeeded): an access sequence number below the first,
// a distance ahead below the second. Both are far beyond what a run reaches.
constexpr uint64_t kMaxSeqRank = uint64_t{1} << 62;
constexpr uint64_t kMaxAhead = uint64_t{1} << 61;

}  // namespace

CacheCatalog::CacheCatalog(Index& index, BlockStore& store, Executor& disk, CatalogOptions options,
                           std::function<bool(const BlockKey&)> in_use)
    : index_(index),
      store_(store),
      disk_(disk),
      options_(std::move(options)),
      in_use_(std::move(in_use)),
      capacity_(options_.capacity_bytes) {}

std::string CacheCatalog::Encode(const Record& r) {
  std::string v;
  codec::PutU64(&v, r.length);
  codec::PutU64(&v, r.seq);
  return v;
}

std::string CacheCatalog::EncodeObject(const CatalogEntry& o) {
  std::string v;
  codec::PutString(&v, o.path());
  codec::PutU64(&v, o.size());
  codec::PutString(&v, o.etag());
  return v;
}

CacheCatalog::ObjectEntry* CacheCatalog::FindLocked(const BlockKey& key) {
  auto id = ids_.Find(key.object_id);
  if (!id) return nullptr;
  auto it = objects_.find(*id);
  return it == objects_.end() ? nullptr : &*it;
}

const CacheCatalog::ObjectEntry* CacheCatalog::FindLocked(const BlockKey& key) const {
  auto id = ids_.Find(key.object_id);
  if (!id) return nullptr;
  auto it = objects_.find(*id);
  return it == objects_.end() ? nullptr : &*it;
}

const CacheCatalog::Record* CacheCatalog::FindBlockLocked(const BlockKey& key) const {
  const ObjectEntry* e = FindLocked(key);
  return e == nullptr ? nullptr : e->second.Find(key.index);
}

const CacheCatalog::Record* CacheCatalog::FindBlockLocked(const RecordKey& key) const {
  auto it = objects_.find(key.id);
  return it == objects_.end() ? nullptr : it->second.Find(key.index);
}

BlockKey CacheCatalog::BlockKeyLocked(const RecordKey& key) const {
  return BlockKey{ids_.Name(key.id), key.index};
}

CacheCatalog::ObjectEntry& CacheCatalog::ObjectForLocked(const BlockKey& key) {
  if (ObjectEntry* e = FindLocked(key)) return *e;
  return *objects_.try_emplace(ids_.Intern(key.object_id)).first;
}

std::pair<CacheCatalog::Record*, bool> CacheCatalog::AddBlockLocked(ObjectEntry& object,
                                                                    uint64_t index) {
  auto added = object.second.Add(index);
  if (added.second) blocks_++;
  return added;
}

void CacheCatalog::IndexPathsLocked() const {
  if (by_path_built_) return;
  std::vector<const ObjectEntry*> sorted;
  sorted.reserve(objects_.size());
  for (const ObjectEntry& e : objects_) {
    if (e.second.described()) sorted.push_back(&e);
  }
  std::sort(sorted.begin(), sorted.end(), ByPath());
  for (const ObjectEntry* e : sorted) by_path_.insert(by_path_.end(), e);
  by_path_built_ = true;
}

void CacheCatalog::Stored(const BlockKey& key, uint64_t length, const ObjectPath& path,
                          const ObjectVersion& version) {
  StoredMany({StoredBlock{key, length, path, version}});
}

void CacheCatalog::StoredMany(const std::vector<StoredBlock>& blocks) {
  if (blocks.empty()) return;
  std::vector<Index::Write> batch;
  batch.reserve(blocks.size() + 1);
  {
    MutexLock l(mu_);
    for (const StoredBlock& b : blocks) {
      ObjectEntry& obj = ObjectForLocked(b.key);
      if (!obj.second.described()) {  // new, or its blocks were adopted without a record
        obj.second.Describe(b.path.str(), b.version.etag, b.version.size);
        if (by_path_built_) by_path_.insert(&obj);
        batch.push_back({index_keys::Object(b.key.object_id), EncodeObject(obj.second)});
      }
      auto [rec, added] = AddBlockLocked(obj, b.key.index);
      if (!added) cached_bytes_ -= rec->length;
      rec->length = b.length;
      rec->seq = next_seq_++;
      cached_bytes_ += b.length;
      dirty_.erase(RecordKey{obj.first, b.key.index});
      batch.push_back({BlockIndexKey(b.key), Encode(*rec)});
    }
  }
  Status s = index_.Apply(batch);
  uint64_t more = 0;
  if (!s.ok() && index_warnings_.Allow(&more)) {
    spdlog::warn(
        "cache: could not record {} block(s), the first {}#{}: {} ({} more since the "
        "last warning)",
        blocks.size(), blocks[0].key.object_id, blocks[0].key.index, s.ToString(), more);
  }
  MaybeScheduleEviction();
}

void CacheCatalog::Touched(const BlockKey& key, uint64_t length) {
  bool flush = false;
  bool adopted = false;
  {
    MutexLock l(mu_);
    // A block file without a record (crash between rename and record) is adopted.
    ObjectEntry& obj = ObjectForLocked(key);
    auto [rec, added] = AddBlockLocked(obj, key.index);
    if (added) {
      rec->length = length;
      cached_bytes_ += length;
      adopted = true;
    }
    rec->seq = next_seq_++;
    dirty_.insert(RecordKey{obj.first, key.index});
    flush = dirty_.size() >= options_.flush_every;
  }
  if (adopted) MaybeScheduleEviction();
  if (flush) Flush().IgnoreError();
}

bool CacheCatalog::Forget(const BlockKey& key, std::vector<Index::Write>* batch) {
  MutexLock l(mu_);
  ObjectEntry* obj = FindLocked(key);
  if (obj == nullptr) return false;
  auto removed = obj->second.Remove(key.index);
  if (!removed) return false;
  blocks_--;
  cached_bytes_ -= removed->length;
  dirty_.erase(RecordKey{obj->first, key.index});
  if (obj->second.empty()) {
    if (obj->second.described()) {
      if (by_path_built_) by_path_.erase(obj);
      batch->push_back({index_keys::Object(key.object_id), std::nullopt});
    }
    batch->push_back({index_keys::Digest(key.object_id), std::nullopt});
    const Id id = obj->first;
    objects_.erase(id);
    ids_.Release(id);
  }
  batch->push_back({BlockIndexKey(key), std::nullopt});
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
  return index_.Apply({{index_keys::Pin(prefix), std::string()}});
}

Status CacheCatalog::Unpin(const ObjectPath& prefix) {
  {
    MutexLock l(mu_);
    if (pins_.erase(prefix) == 0)
      return NotFoundError(prefix.str() + " is not pinned", FailureSite::kLocal);
  }
  Status s = index_.Apply({{index_keys::Pin(prefix), std::nullopt}});
  MaybeScheduleEviction();  // what the pin held may now be over the watermark
  return s;
}

std::vector<ObjectPath> CacheCatalog::Pins() const {
  MutexLock l(mu_);
  return {pins_.begin(), pins_.end()};
}

bool CacheCatalog::Contains(const BlockKey& key) const {
  MutexLock l(mu_);
  return FindBlockLocked(key) != nullptr;
}

bool CacheCatalog::MayContain(const BlockKey& key) const {
  return !reconciled_.load() || Contains(key);
}

uint64_t CacheCatalog::CachedBytes(const std::string& object_id) const {
  MutexLock l(mu_);
  const ObjectEntry* obj = FindLocked(BlockKey{object_id, 0});
  return obj == nullptr ? 0 : obj->second.cached_bytes();
}

uint64_t CacheCatalog::pinned_bytes() const {
  MutexLock l(mu_);
  uint64_t total = 0;
  if (pins_.empty()) return 0;
  for (const auto& [id, o] : objects_) {
    if (o.described() && IsPinnedLocked(o.path())) total += o.cached_bytes();
  }
  return total;
}

std::vector<CachedObject> CacheCatalog::List(const ObjectPath& prefix, const std::string& after,
                                             size_t limit) const {
  std::vector<CachedObject> out;
  MutexLock l(mu_);
  IndexPathsLocked();
  // Paths under `prefix` sort at or after it (every path below starts with it).
  const std::string start = std::max(after, prefix.str());
  std::string_view last;  // all objects of one path go in one page
  for (auto it = by_path_.lower_bound(std::string_view(start)); it != by_path_.end(); ++it) {
    const CatalogEntry& o = (*it)->second;
    const std::string_view path = o.path();
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
    out.push_back(CachedObject{*std::move(parsed), ids_.Name((*it)->first), o.size(),
                               o.cached_bytes(), o.blocks(), IsPinnedLocked(path)});
  }
  return out;
}

bool CacheCatalog::ScrubPage(const ObjectPath& prefix, ScrubCursor* cursor, size_t max_blocks,
                             size_t max_objects, std::vector<ScrubItem>* out) const {
  MutexLock l(mu_);
  if (!cursor->key && !cursor->object_id.empty()) cursor->key = ids_.Find(cursor->object_id);
  auto it = cursor->key ? objects_.lower_bound(*cursor->key) : objects_.begin();
  size_t looked = 0, taken = 0;
  std::vector<std::pair<uint64_t, uint64_t>> blocks;  // (index, length) of one object
  for (; it != objects_.end(); ++it) {
    if (looked++ >= max_objects || taken >= max_blocks) break;
    const CatalogEntry& o = it->second;
    // Blocks before the cursor's index were walked already (same object).
    const uint64_t from = cursor->key && *cursor->key == it->first ? cursor->index : 0;
    if (!prefix.IsRoot() && (!o.described() || !Under(o.path(), prefix))) continue;
    blocks.clear();
    o.ForEach([&](uint64_t index, const Record& r) {
      if (index >= from) blocks.emplace_back(index, r.length);
    });
    std::sort(blocks.begin(), blocks.end());
    const std::string name = ids_.Name(it->first);
    for (const auto& [index, length] : blocks) {
      if (taken >= max_blocks) {
        // The page is full in the middle of this object: go on from here.
        cursor->key = it->first;
        cursor->index = index;
        cursor->object_id = name;
        return true;
      }
      out->push_back(ScrubItem{BlockKey{name, index}, length, o.size(), o.blocks()});
      ++taken;
    }
  }
  if (it == objects_.end()) {
    cursor->key.reset();
    cursor->object_id.clear();
    cursor->index = 0;
    return false;
  }
  cursor->key = it->first;
  cursor->index = 0;
  cursor->object_id = ids_.Name(it->first);
  return true;
}

std::string CacheCatalog::PathOf(const std::string& object_id) const {
  MutexLock l(mu_);
  const ObjectEntry* e = FindLocked(BlockKey{object_id, 0});
  return e == nullptr ? "" : std::string(e->second.path());
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
      const Record* rec = FindBlockLocked(key);
      if (rec == nullptr) continue;  // went meanwhile
      length = rec->length;
    }
    Status s = store_.Remove(key);  // the file first, then the record
    if (s.code() == StatusCode::kUnavailable) {
      // Came into use since the look above (a reply took a slice): kept.
      result->busy_blocks++;
      continue;
    }
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
      if (!o.described() || !Under(o.path(), prefix)) continue;
      if (IsPinnedLocked(o.path())) {
        result.pinned_objects++;
        continue;
      }
      const std::string name = ids_.Name(id);
      o.ForEach([&](uint64_t index, const Record&) { keys.push_back(BlockKey{name, index}); });
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
      if (const Record* rec = FindBlockLocked(k)) {
        batch.push_back({BlockIndexKey(BlockKeyLocked(k)), Encode(*rec)});
      }
    }
    dirty_.clear();
  }
  if (batch.empty()) return Status::Ok();
  return index_.Apply(batch);
}

size_t CacheCatalog::blocks() const {
  MutexLock l(mu_);
  return blocks_;
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
  // What announced reads need, and how soon (see Design); empty without hints.
  const FutureUses future = options_.future_uses ? options_.future_uses() : FutureUses();
  // The order to take blocks in: (rank, key) of every unpinned block, 48
  // bytes each while this pass runs; ids become strings only for the blocks
  // taken. Rank: blocks no announced read needs by age (their seq), then
  // the others, farthest ahead first.
  std::vector<std::pair<uint64_t, RecordKey>> lru;
  {
    MutexLock l(mu_);
    lru.reserve(blocks_);
    for (const auto& entry : objects_) {
      const auto& o = entry.second;
      if (!pins_.empty() && o.described() && IsPinnedLocked(o.path())) continue;
      uint64_t ahead = UINT64_MAX;  // needed by no announced read
      if (!future.empty() && o.described()) {
        auto it = future.find(o.path());
        if (it != future.end()) ahead = std::min<uint64_t>(it->second, kMaxAhead);
      }
      o.ForEach([&](uint64_t index, const Record& r) {
        const uint64_t rank = ahead == UINT64_MAX ? std::min(r.seq, kMaxSeqRank)
                                                  : kMaxSeqRank + 1 + (kMaxAhead - ahead);
        lru.emplace_back(rank, RecordKey{entry.first, index});
      });
    }
  }
  std::sort(lru.begin(), lru.end());
  // Take the oldest blocks until enough bytes would be freed, then remove them.
  std::vector<BlockKey> victims;
  const uint64_t cached = cached_bytes_.load();  // may have dropped since the check above
  const uint64_t to_free = cached > low ? cached - low : 0;
  // What announced reads need goes only as far as it must: a hundredth of
  // the quota under the high watermark (with room for `room`; so that a
  // pass, a walk of every block, is not run for every block stored), not
  // down to the low one, so that a dataset read in a known order keeps all
  // it can of its next reads.
  const uint64_t must_free = (cached + room > high ? cached + room - high : 0) + capacity / 100;
  uint64_t planned = 0;
  for (const auto& [rank, rkey] : lru) {
    if (planned >= to_free || (rank > kMaxSeqRank && planned >= must_free)) break;
    BlockKey key;
    {
      MutexLock l(mu_);
      if (FindBlockLocked(rkey) == nullptr) continue;  // went meanwhile (its id may be reused)
      key = BlockKeyLocked(rkey);
    }
    if (in_use_ && in_use_(key)) continue;  // not under mu_: a leaf lock calls nothing
    MutexLock l(mu_);
    const Record* rec = FindBlockLocked(rkey);
    if (rec == nullptr) continue;
    planned += rec->length;
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
