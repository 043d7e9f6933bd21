#include "daemon/core/cache_catalog.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "daemon/core/codec.h"

namespace perch::core {

CacheCatalog::CacheCatalog(Index& index, BlockStore& store, Executor& disk, CatalogOptions options,
                           std::function<bool(const BlockKey&)> in_use)
    : index_(index), store_(store), disk_(disk), options_(options), in_use_(std::move(in_use)) {}

std::string CacheCatalog::Key(const BlockKey& key) {
  char idx[17];
  std::snprintf(idx, sizeof(idx), "%016llx", static_cast<unsigned long long>(key.index));
  return "b/" + key.object_id + "/" + idx;
}

std::string CacheCatalog::Encode(const Record& r) {
  std::string v;
  codec::PutU64(&v, r.length);
  codec::PutU64(&v, r.seq);
  return v;
}

Status CacheCatalog::Load() {
  uint64_t total = 0, max_seq = 0;
  std::map<BlockKey, Record> loaded;
  size_t bad = 0;
  Status s = index_.Scan("b/", [&](std::string_view k, std::string_view v) {
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
    loaded.emplace(std::move(key), r);
    return true;
  });
  if (!s.ok()) return s;
  if (bad > 0) spdlog::warn("cache: {} undecodable block records ignored", bad);
  size_t count = loaded.size();
  {
    std::lock_guard<std::mutex> l(mu_);
    records_ = std::move(loaded);
    next_seq_ = max_seq + 1;
    cached_bytes_ = total;
  }
  spdlog::info("cache: {} blocks, {} bytes of {} capacity", count, total, options_.capacity_bytes);
  MaybeScheduleEviction();  // not under mu_: eviction takes it
  return Status::Ok();
}

void CacheCatalog::Stored(const BlockKey& key, uint64_t length) {
  Record r;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto [it, inserted] = records_.try_emplace(key);
    if (!inserted) cached_bytes_ -= it->second.length;
    it->second.length = length;
    it->second.seq = next_seq_++;
    cached_bytes_ += length;
    dirty_.erase(key);
    r = it->second;
  }
  Status s = index_.Apply({{Key(key), Encode(r)}});
  if (!s.ok()) spdlog::warn("cache: could not record block {}#{}: {}", key.object_id, key.index, s.ToString());
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
      adopted = true;
    }
    it->second.seq = next_seq_++;
    dirty_.insert(key);
    flush = dirty_.size() >= options_.flush_every;
  }
  if (adopted) MaybeScheduleEviction();
  if (flush) Flush().IgnoreError();
}

bool CacheCatalog::Forget(const BlockKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = records_.find(key);
  if (it == records_.end()) return false;
  cached_bytes_ -= it->second.length;
  records_.erase(it);
  dirty_.erase(key);
  return true;
}

void CacheCatalog::Dropped(const BlockKey& key) {
  if (Forget(key)) index_.Apply({{Key(key), std::nullopt}}).IgnoreError();
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
  if (cached_bytes_.load() <= options_.capacity_bytes * options_.high_watermark) return;
  if (eviction_scheduled_.exchange(true)) return;
  disk_.Post([this] {
    EvictIfNeeded();
    eviction_scheduled_ = false;
  });
}

size_t CacheCatalog::EvictIfNeeded() {
  const uint64_t high = static_cast<uint64_t>(options_.capacity_bytes * options_.high_watermark);
  const uint64_t low = static_cast<uint64_t>(options_.capacity_bytes * options_.low_watermark);
  if (cached_bytes_.load() <= high) return 0;
  std::vector<std::pair<uint64_t, BlockKey>> lru;
  {
    std::lock_guard<std::mutex> l(mu_);
    lru.reserve(records_.size());
    for (const auto& [k, r] : records_) lru.emplace_back(r.seq, k);
  }
  std::sort(lru.begin(), lru.end());
  size_t evicted = 0;
  std::vector<Index::Write> batch;
  for (const auto& [seq, key] : lru) {
    if (cached_bytes_.load() <= low) break;
    if (in_use_ && in_use_(key)) continue;
    Status s = store_.Remove(key);  // the file first, then the record
    if (!s.ok()) {
      spdlog::warn("cache: could not evict block {}#{}: {}", key.object_id, key.index, s.ToString());
      continue;
    }
    if (!Forget(key)) continue;
    batch.push_back({Key(key), std::nullopt});
    ++evicted;
  }
  if (!batch.empty()) {
    Status s = index_.Apply(batch);
    if (!s.ok()) spdlog::warn("cache: eviction records not written: {}", s.ToString());
  }
  evictions_ += evicted;
  if (evicted > 0) {
    spdlog::info("cache: evicted {} blocks; {} of {} bytes used", evicted, cached_bytes_.load(),
                 options_.capacity_bytes);
  }
  return evicted;
}

}  // namespace perch::core
