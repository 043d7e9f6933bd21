// CacheCatalog::Load: the catalog read back from the index at start.
//
// Start-up cost (issue 14): one pass over the "o/" records (on the calling
// thread) and one over the "b/" records (on a thread of its own, at the same
// time: the mount serves only once both are done), both in key order. Ids
// order like their keys, so each object goes at the end of the map and each
// block finds its object by a cursor moving forward, with no search; the path
// index is left to the first List.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <charconv>
#include <string>
#include <thread>
#include <vector>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/codec.h"
#include "daemon/core/index_keys.h"
#include "daemon/core/mutex.h"

namespace perch::core {

namespace {

// The block number of a "b/<id>/<16 hex digits>" key's last part.
bool ParseBlockIndex(std::string_view hex, uint64_t* index) {
  if (hex.empty() || hex.size() > 16) return false;
  auto [end, ec] = std::from_chars(hex.data(), hex.data() + hex.size(), *index, 16);
  return ec == std::errc() && end == hex.data() + hex.size();
}

// The "b/" records as the block scan decodes them, before they meet their
// objects: 48 bytes each, for the length of Load().
struct BlockRow {
  ObjectIds::Key id;   // a hex id (ObjectIds keeps no table for those)
  uint32_t other = 0;  // n > 0: the id is not hex, it is BlockRows::other_ids[n - 1]
  uint64_t index = 0;
  CatalogEntry::Block block;
};

struct BlockRows {
  std::vector<BlockRow> rows;  // in key order
  std::vector<std::string> other_ids;
  size_t bad = 0;
  Status status;
};

BlockRows ScanBlocks(Index& index) {
  BlockRows out;
  const ObjectIds hex;  // interns nothing: Find() answers for hex ids only
  out.status = index.Scan(index_keys::kBlock, [&](std::string_view k, std::string_view v) {
    std::string_view rest = k.substr(index_keys::kBlock.size());
    const size_t slash = rest.rfind('/');
    BlockRow row;
    codec::Reader reader(v);
    if (slash == std::string_view::npos || !ParseBlockIndex(rest.substr(slash + 1), &row.index) ||
        !reader.GetU64(&row.block.length) || !reader.GetU64(&row.block.seq)) {
      ++out.bad;
      return true;
    }
    const std::string_view id = rest.substr(0, slash);
    if (auto key = hex.Find(id)) {
      row.id = *key;
    } else {
      out.other_ids.emplace_back(id);
      row.other = static_cast<uint32_t>(out.other_ids.size());
    }
    out.rows.push_back(row);
    return true;
  });
  return out;
}

}  // namespace

Status CacheCatalog::Load() {
  BlockRows block_rows;
  std::thread block_scan([&] { block_rows = ScanBlocks(index_); });
  uint64_t total = 0, max_seq = 0;
  size_t blocks = 0, bad = 0;
  size_t described = 0, described_with_blocks = 0;  // objects with an "o/" record
  ObjectIds ids;
  std::map<Id, CatalogEntry> objects;
  std::set<ObjectPath> pins;
  Status s = index_.Scan(index_keys::kObject, [&](std::string_view k, std::string_view v) {
    codec::Reader reader(v);
    std::string_view path, etag;
    uint64_t size = 0;
    if (!reader.GetView(&path) || !reader.GetU64(&size) || !reader.GetView(&etag)) {
      ++bad;
      return true;
    }
    auto parsed = ObjectPath::Parse(path);
    if (!parsed.ok()) {
      ++bad;
      return true;
    }
    const Id id = ids.Intern(k.substr(index_keys::kObject.size()));
    const size_t before = objects.size();
    auto it = objects.try_emplace(objects.end(), id);
    if (objects.size() == before) {
      ids.Release(id);
      return true;
    }
    it->second.Describe(parsed->str(), etag, size);
    described++;
    return true;
  });
  if (s.ok()) {
    s = index_.Scan(std::string(index_keys::kPin) + "/", [&](std::string_view k, std::string_view) {
      auto parsed = ObjectPath::Parse(k.substr(index_keys::kPin.size()));
      if (parsed.ok()) {
        pins.insert(*parsed);
      } else {
        ++bad;
      }
      return true;
    });
  }
  block_scan.join();
  if (!s.ok()) return s;
  if (!block_rows.status.ok()) return block_rows.status;
  bad += block_rows.bad;
  auto cursor = objects.begin();  // the first object not before the last block's
  for (const BlockRow& row : block_rows.rows) {
    ObjectEntry* e = nullptr;
    const std::string* other = row.other > 0 ? &block_rows.other_ids[row.other - 1] : nullptr;
    if (auto id = other ? ids.Find(*other) : std::optional<Id>(row.id)) {
      while (cursor != objects.end() && cursor->first < *id) ++cursor;
      if (cursor != objects.end() && cursor->first == *id) {
        e = &*cursor;
      } else if (auto it = objects.find(*id); it != objects.end()) {
        e = &*it;  // an interned id out of key order (ids that are not hex)
      }
    }
    if (e == nullptr) {  // a block without an object record
      const Id id = other ? ids.Intern(*other) : row.id;
      e = &*objects.try_emplace(cursor, id);
    }
    auto [rec, added] = e->second.Add(row.index);
    if (!added) continue;
    if (e->second.blocks() == 1 && e->second.described()) described_with_blocks++;
    *rec = row.block;
    blocks++;
    total += row.block.length;
    max_seq = std::max(max_seq, row.block.seq);
  }
  block_rows = BlockRows();  // 48 bytes a block, not kept
  if (bad > 0) spdlog::warn("cache: {} undecodable index records ignored", bad);
  for (auto it = objects.begin(); described_with_blocks < described && it != objects.end();) {
    if (!it->second.empty()) {
      ++it;
      continue;
    }
    ids.Release(it->first);  // its blocks went before it (a crash): forgotten
    it = objects.erase(it);
  }
  {
    MutexLock l(mu_);
    ids_ = std::move(ids);
    objects_ = std::move(objects);
    blocks_ = blocks;
    dirty_.clear();
    by_path_.clear();
    by_path_built_ = false;
    pins_ = std::move(pins);
    next_seq_ = max_seq + 1;
    cached_bytes_ = total;
  }
  spdlog::info("cache: {} blocks, {} bytes of {} capacity", blocks, total, options_.capacity_bytes);
  UpdateCapacity();  // not under mu_: eviction takes it
  return Status::Ok();
}

}  // namespace perch::core
