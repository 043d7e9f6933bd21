// CacheCatalog's start-up walk (Reconcile, see cache_catalog.h "Design"):
// block files without a record are adopted, records without a file dropped.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "daemon/core/cache_catalog.h"
#include "daemon/core/mutex.h"

namespace perch::core {

bool CacheCatalog::Adopt(const BlockKey& key, uint64_t length) {
  Record r{length, 0};  // seq 0: its last use is unknown, so it goes first
  {
    MutexLock l(mu_);
    auto [rec, added] = AddBlockLocked(ObjectForLocked(key), key.index);
    if (!added) return false;
    *rec = r;
    cached_bytes_ += length;
  }
  index_.Apply({{BlockIndexKey(key), Encode(r)}})
      .IgnoreError();  // without it, the next start adopts it again
  return true;
}

void CacheCatalog::Reconcile() {
  disk_.Post([this] {
    ReconcileNow();
    if (options_.after_walk) options_.after_walk();
  });
}

void CacheCatalog::ReconcileNow() {
  // The records at the start, sorted (32 bytes each), and which the walk has found.
  std::vector<RecordKey> known;
  {
    MutexLock l(mu_);
    known.reserve(blocks_);
    for (const auto& entry : objects_) {
      entry.second.ForEach([&](uint64_t index, const Record&) {
        known.push_back(RecordKey{entry.first, index});
      });
    }
  }
  std::sort(known.begin(), known.end());  // ForEach lists an object's inline block first
  std::vector<bool> seen(known.size());
  uint64_t adopted = 0, adopted_bytes = 0;
  // True (and seen) if block `key` has a record: the store then lists it by
  // its file name only, without reading its header.
  auto recorded = [&](const BlockKey& key) {
    std::optional<Id> found;
    {
      MutexLock l(mu_);
      found = ids_.Find(key.object_id);
    }
    if (!found) return false;
    const RecordKey rkey{*found, key.index};
    auto it = std::lower_bound(known.begin(), known.end(), rkey);
    if (it == known.end() || *it != rkey) return false;
    seen[it - known.begin()] = true;
    return true;
  };
  auto scan = store_.ForEachBlock(
      [&](const BlockKey& key, uint64_t length) {
        if (recorded(key)) return;
        // A block being written now gets its record from Stored().
        if (in_use_ && in_use_(key)) return;
        if (Adopt(key, length)) {
          adopted++;
          adopted_bytes += length;
        }
      },
      recorded);
  if (!scan.ok()) {
    spdlog::warn("cache: start-up walk of the block store failed: {}", scan.status().ToString());
    reconciled_ = true;
    return;
  }
  // Records without a file (or whose file came after the walk passed: checked again).
  std::vector<Index::Write> batch;
  uint64_t dropped = 0;
  for (size_t i = 0; i < known.size(); ++i) {
    if (seen[i]) continue;
    BlockKey key;
    {
      MutexLock l(mu_);
      if (FindBlockLocked(known[i]) == nullptr) continue;  // went meanwhile
      key = BlockKeyLocked(known[i]);
    }
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
