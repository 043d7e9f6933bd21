#include "daemon/core/block_reader.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <type_traits>

#include "daemon/core/limits.h"
#include "daemon/core/mutex.h"

namespace perch::core {

namespace {

// A part of a read: a fetched block's bytes copied out of it (Read) or shared
// with every other reader of that block (ReadPieces).
template <typename Part>
Part PartOf(const std::shared_ptr<const Bytes>& block, uint64_t from, uint64_t to);
template <>
Bytes PartOf<Bytes>(const std::shared_ptr<const Bytes>& block, uint64_t from, uint64_t to) {
  return block->substr(from, to - from);
}
template <>
ReadPiece PartOf<ReadPiece>(const std::shared_ptr<const Bytes>& block, uint64_t from, uint64_t to) {
  return ReadPiece(SharedBytes{block, static_cast<size_t>(from), static_cast<size_t>(to - from)});
}

// The parts of one read as its caller wants them: one string, or the pieces.
Bytes Joined(std::vector<Bytes>& parts) {
  if (parts.size() == 1) return std::move(parts[0]);
  size_t total = 0;
  for (const Bytes& p : parts) total += p.size();
  Bytes all;
  all.reserve(total);
  for (Bytes& p : parts) all += p;
  return all;
}
std::vector<ReadPiece> Joined(std::vector<ReadPiece>& parts) { return std::move(parts); }

}  // namespace

// The pieces of one read, filled in by block completions in any order.
template <typename Part, typename Out>
struct BlockReader::Assembly {
  Assembly(size_t blocks, std::function<void(Result<Out>)> d)
      : parts(blocks), remaining(blocks), done(std::move(d)) {}

  Mutex mu;
  std::vector<Part> parts PERCH_GUARDED_BY(mu);
  size_t remaining PERCH_GUARDED_BY(mu) = 0;
  Status error PERCH_GUARDED_BY(mu);  // the first error
  std::function<void(Result<Out>)> done;

  void Complete(size_t i, Result<Part> r) {
    std::function<void(Result<Out>)> finish;
    Result<Out> out = InternalError("unset");
    {
      MutexLock l(mu);
      if (r.ok()) {
        parts[i] = *std::move(r);
      } else if (error.ok()) {
        error = r.status();
      }
      if (--remaining > 0) return;
      if (!error.ok()) {
        out = error;
      } else {
        out = Joined(parts);
      }
      finish = std::move(done);
    }
    finish(std::move(out));
  }
};

BlockReader::BlockReader(Origin& origin, BlockStore& store, Executor& disk,
                         BlockReaderOptions options, BlockListener* listener,
                         FetchScheduler* scheduler, VersionGuard* guard)
    : origin_(origin),
      store_(store),
      disk_(disk),
      options_(options),
      listener_(listener),
      scheduler_(scheduler),
      guard_(guard) {}

Result<Bytes> BlockReader::StoreRead(const BlockKey& key, uint64_t from, uint64_t to) {
  {
    MutexLock l(mu_);
    reading_[key]++;
  }
  Result<Bytes> hit = store_.Read(key, from, to - from);
  MutexLock l(mu_);
  if (--reading_[key] == 0) reading_.erase(key);
  return hit;
}

template <>
std::optional<Bytes> BlockReader::StoreHit<Bytes>(const BlockKey& key, uint64_t from, uint64_t to) {
  if (listener_ != nullptr && !listener_->MayContain(key)) return std::nullopt;
  Result<Bytes> hit = StoreRead(key, from, to);
  if (hit.ok() && hit->size() == to - from) return *std::move(hit);
  if (!hit.ok() && hit.status().code() == StatusCode::kCorrupt) {
    NoteCorrupt(key, hit.status());
  } else if (hit.ok()) {
    DropWrongLength(key);
  }
  return std::nullopt;
}

template <>
std::optional<ReadPiece> BlockReader::StoreHit<ReadPiece>(const BlockKey& key, uint64_t from,
                                                          uint64_t to) {
  if (listener_ != nullptr && !listener_->MayContain(key)) return std::nullopt;
  // The slice is a use of the block (BlockStore::InUse) as soon as the store
  // made it: no count of ours is needed to keep the evictor off it.
  Result<BlockSlice> slice = store_.Slice(key, from, to - from);
  if (slice.ok() && slice->length() == to - from) return ReadPiece(*std::move(slice));
  if (!slice.ok() && slice.status().code() == StatusCode::kInvalidArgument) {
    // A store that keeps no files: its bytes, once, in memory.
    Result<Bytes> hit = StoreRead(key, from, to);
    if (hit.ok() && hit->size() == to - from) {
      const size_t n = hit->size();
      return ReadPiece(SharedBytes{std::make_shared<const Bytes>(*std::move(hit)), 0, n});
    }
    if (!hit.ok() && hit.status().code() == StatusCode::kCorrupt) {
      NoteCorrupt(key, hit.status());
    } else if (hit.ok()) {
      DropWrongLength(key);
    }
    return std::nullopt;
  }
  if (!slice.ok() && slice.status().code() == StatusCode::kCorrupt) {
    NoteCorrupt(key, slice.status());
  } else if (slice.ok()) {
    slice = InternalError("wrong length");  // let go of the block before it is removed
    DropWrongLength(key);
  }
  return std::nullopt;
}

void BlockReader::DropWrongLength(const BlockKey& key) {
  stats_.corrupt_blocks++;
  store_.Remove(key).IgnoreError();
  if (listener_) listener_->Dropped(key);
}

void BlockReader::Read(const ObjectPath& path, const ObjectVersion& version,
                       const std::string& object_id, ByteRange range, Deadline deadline,
                       std::function<void(Result<Bytes>)> done, const FetchClass& cls) {
  ReadParts<Bytes>(path, version, object_id, range, deadline, std::move(done), nullptr, cls);
}

void BlockReader::ReadPieces(const ObjectPath& path, const ObjectVersion& version,
                             const std::string& object_id, ByteRange range, Deadline deadline,
                             PiecesDone done, const std::function<Status()>& may_fetch,
                             const FetchClass& cls) {
  ReadParts<ReadPiece>(path, version, object_id, range, deadline, std::move(done), may_fetch, cls);
}

template <typename Part, typename Out>
void BlockReader::ReadParts(const ObjectPath& path, const ObjectVersion& version,
                            const std::string& object_id, ByteRange range, Deadline deadline,
                            std::function<void(Result<Out>)> done,
                            const std::function<Status()>& may_fetch, const FetchClass& cls) {
  const uint64_t bs = options_.block_size;
  if (range.offset >= version.size) range.length = 0;
  range.length = std::min(range.length, version.size - std::min(range.offset, version.size));
  if (range.length == 0) {
    done(Out());
    return;
  }
  const uint64_t first = range.offset / bs;
  const uint64_t last = (range.end() - 1) / bs;
  // Where block b's part of the range lies within it.
  auto part = [&](uint64_t b) {
    const uint64_t block_start = b * bs;
    const uint64_t block_len = std::min(bs, version.size - block_start);
    const uint64_t from = std::max(range.offset, block_start) - block_start;
    const uint64_t to = std::min(range.end(), block_start + block_len) - block_start;
    return std::tuple{block_len, from, to};
  };
  // Each block is asked of the store once; what it has is served from that.
  std::vector<std::optional<Part>> hits(last - first + 1);
  bool misses = false;
  for (uint64_t b = first; b <= last; ++b) {
    auto [block_len, from, to] = part(b);
    hits[b - first] = StoreHit<Part>(BlockKey{object_id, b}, from, to);
    misses = misses || !hits[b - first];
  }
  if (misses && may_fetch) {
    if (Status s = may_fetch(); !s.ok()) {
      done(std::move(s));
      return;
    }
  }
  for (uint64_t b = first; b <= last && cls.counted; ++b) {
    if (!hits[b - first]) continue;
    auto [block_len, from, to] = part(b);
    CountHit(path, to - from);
    if (listener_) listener_->Touched(BlockKey{object_id, b}, block_len);
  }
  if (!misses) {  // all hits: answered here, nothing to assemble
    std::vector<Part> parts;
    parts.reserve(hits.size());
    for (std::optional<Part>& h : hits) parts.push_back(*std::move(h));
    done(Joined(parts));
    return;
  }
  auto assembly = std::make_shared<Assembly<Part, Out>>(hits.size(), std::move(done));
  for (uint64_t b = first; b <= last; ++b) {
    const size_t slot = b - first;
    if (hits[slot]) {
      assembly->Complete(slot, *std::move(hits[slot]));
      continue;
    }
    auto [block_len, from, to] = part(b);
    Fetch(path, version, BlockKey{object_id, b}, block_len, to - from, deadline, cls,
          [assembly, slot, from = from, to = to](Result<std::shared_ptr<const Bytes>> block) {
            if (!block.ok()) {
              assembly->Complete(slot, block.status());
              return;
            }
            assembly->Complete(slot, PartOf<Part>(*block, from, to));
          });
  }
}

std::string BlockReader::FlowOf(const ObjectPath& path) {
  auto segments = path.Segments();
  if (segments.size() <= 1) return "/";
  return "/" + std::string(segments.front());
}

void BlockReader::CountHit(const ObjectPath& path, uint64_t bytes) {
  stats_.hits++;
  stats_.bytes_from_cache += bytes;
  ReadCounters& ns = by_namespace_.Get(origin_.NamespaceOf(path).str());
  ns.hits++;
  ns.bytes_from_cache += bytes;
}

void BlockReader::NoteCorrupt(const BlockKey& key, const Status& why) {
  stats_.corrupt_blocks++;
  spdlog::warn("cache block {}#{} failed its check ({}); fetching it again", key.object_id,
               key.index, why.message());
  if (listener_) listener_->Dropped(key);
}

Result<std::shared_ptr<const BlockFd>> BlockReader::WholeFile(const ObjectVersion& version,
                                                              const std::string& object_id) {
  const uint64_t bs = options_.block_size;
  const uint64_t blocks = BlockCount(version.size, bs);
  if (version.size < bs) return InvalidArgumentError("shorter than a block: a block file");
  if (listener_ != nullptr) {  // nothing to open for an object not all cached
    for (uint64_t b = 0; b < blocks; ++b) {
      if (!listener_->MayContain(BlockKey{object_id, b}))
        return NotFoundError("not all cached", FailureSite::kLocal);
    }
  }
  // The store checks each block as a read of it would; one that fails was
  // dropped and is told, as a read's would be.
  BlockKey failed{object_id, 0};
  auto file = store_.WholeFile(object_id, version.size, &failed);
  if (!file.ok()) {
    if (file.status().code() == StatusCode::kCorrupt) NoteCorrupt(failed, file.status());
    return file.status();
  }
  stats_.whole_files++;
  if (listener_) {
    for (uint64_t b = 0; b < blocks; ++b)
      listener_->Touched(BlockKey{object_id, b}, std::min(bs, version.size - b * bs));
  }
  return file;
}

bool BlockReader::AllCached(const ObjectVersion& version, const std::string& object_id) {
  if (listener_ == nullptr) return false;
  for (uint64_t b = 0; b < BlockCount(version.size, options_.block_size); ++b) {
    BlockKey key{object_id, b};
    if (listener_->Contains(key)) continue;
    MutexLock l(mu_);  // fetched, waiting for its batch: read from memory
    if (unwritten_.count(key) == 0) return false;
  }
  return true;
}

size_t BlockReader::DropObject(const ObjectVersion& version, const std::string& object_id) {
  size_t dropped = 0;
  for (uint64_t i = 0; i < BlockCount(version.size, options_.block_size); i++) {
    BlockKey key{object_id, i};
    {
      MutexLock l(mu_);
      unwritten_.erase(key);  // a copy waiting for its write is not written (DrainWrites)
    }
    // The store keeps a block a reply still uses until that use ends (it
    // refuses to punch it, or punches it later); the listener forgets it
    // now, so that no read takes it from the store: the next one fetches it.
    store_.Remove(key).IgnoreError();
    if (listener_) listener_->Dropped(key);
    dropped++;
  }
  return dropped;
}

bool BlockReader::InUse(const BlockKey& key) {
  if (store_.InUse(key)) return true;  // before mu_: never held across the store
  MutexLock l(mu_);
  return reading_.count(key) > 0 || inflight_.count(key) > 0 || unwritten_.count(key) > 0;
}

void BlockReader::Fetch(const ObjectPath& path, const ObjectVersion& version, const BlockKey& key,
                        uint64_t block_len, uint64_t part_len, Deadline deadline,
                        const FetchClass& cls, BlockCallback done) {
  std::shared_ptr<const Bytes> fresh;
  {
    MutexLock l(mu_);
    if (auto u = unwritten_.find(key); u != unwritten_.end()) fresh = u->second;
  }
  if (fresh) {
    if (done) {
      // Served from memory without a fetch: a hit, of the part the reader
      // wants (counting the whole block inflated bytes_from_cache).
      if (cls.counted) CountHit(path, part_len);
      done(std::move(fresh));
    }
    return;
  }
  // Written and recorded since the caller looked in the store (its write
  // batch ended in between: a block is recorded before it leaves unwritten_,
  // so it is always in one of them): read it there, never fetch it again.
  if (listener_ != nullptr && listener_->Contains(key)) {
    if (!done) return;  // a prefetch: nothing to do
    if (auto stored = StoreRead(key, 0, block_len); stored.ok() && stored->size() == block_len) {
      if (cls.counted) CountHit(path, part_len);
      done(std::make_shared<const Bytes>(*std::move(stored)));
      return;
    }
  }
  uint64_t generation = 0;
  {
    MutexLock l(mu_);
    auto [it, inserted] = inflight_.try_emplace(key);
    Inflight& f = it->second;
    if (done) f.waiters.push_back(std::move(done));
    if (!inserted) {
      if (cls.priority == Priority::kDemand) stats_.shared_fetches++;
      if (cls.priority < f.priority) {
        // A more urgent reader joined a queued fetch: move it up (outside
        // mu_, since Boost may start the fetch, which takes mu_).
        f.priority = cls.priority;
        uint64_t ticket = f.ticket;
        l.Unlock();
        if (scheduler_ != nullptr && ticket != 0) scheduler_->Boost(ticket, cls.priority);
      }
      return;
    }
    f.priority = cls.priority;
    f.generation = generation = next_generation_++;
  }
  ReadCounters* ns = &by_namespace_.Get(origin_.NamespaceOf(path).str());
  ByteRange range{key.index * options_.block_size, block_len};
  auto start = [this, key, path, version, ns, range, deadline](std::function<void()> release) {
    stats_.misses++;
    ns->misses++;
    auto started = Clock::now();
    auto fetch = [this, key, path, version, ns, range, deadline, started,
                  release = std::move(release)](Status go) {
      if (!go.ok()) {  // the object changed at the origin (VersionGuard)
        release();
        Complete(key, path, version, *ns, std::move(go));
        return;
      }
      origin_.ReadRange(path, version, range, deadline,
                        [this, key, path, version, ns, started,
                         release = std::move(release)](Result<FetchedBytes> r) {
                          release();  // the next queued fetch may start
                          fetch_latency_.Observe(Clock::now() - started);
                          if (r.ok() && federation_answered_) federation_answered_();
                          Complete(key, path, version, *ns, std::move(r));
                        });
    };
    // An object of one block cannot be a mix of versions: no question.
    if (guard_ == nullptr || version.size <= options_.block_size) {
      fetch(Status::Ok());
    } else {
      guard_->BeforeFetch(path, key.object_id, deadline, std::move(fetch));
    }
  };
  if (scheduler_ == nullptr) {
    start([] {});
    return;
  }
  const std::string flow = options_.flow_prefix + (cls.flow.empty() ? FlowOf(path) : cls.flow);
  uint64_t ticket = scheduler_->Submit(cls.priority, flow, block_len, std::move(start));
  MutexLock l(mu_);
  auto it = inflight_.find(key);
  if (it != inflight_.end() && it->second.generation == generation) it->second.ticket = ticket;
}

void BlockReader::Complete(const BlockKey& key, const ObjectPath& path,
                           const ObjectVersion& version, ReadCounters& ns, Result<FetchedBytes> r) {
  std::vector<BlockCallback> waiters;
  std::shared_ptr<const Bytes> copy;
  const bool keep = r.ok() && r->may_store;
  if (r.ok()) copy = std::make_shared<const Bytes>(std::move(r->bytes));
  if (r.ok() && !r->vouched.empty() && listener_ != nullptr) {
    listener_->Vouched(key.object_id, r->vouched);
  }
  if (r.ok() && !r->unverified.empty() && listener_ != nullptr) {
    listener_->Unverified(key.object_id, r->unverified);
  }
  if (r.ok() && !keep) stats_.uncacheable_blocks++;
  bool schedule = false;
  {
    MutexLock l(mu_);
    auto it = inflight_.find(key);
    if (it != inflight_.end()) {
      waiters = std::move(it->second.waiters);
      inflight_.erase(it);
    }
    if (keep) {
      unwritten_[key] = copy;
      pending_writes_.push_back(PendingWrite{key, copy, path, version});
      schedule = !drain_scheduled_;
      drain_scheduled_ = true;
    }
  }
  if (copy) {
    stats_.bytes_from_network += copy->size();
    ns.bytes_from_network += copy->size();
  }
  // Persist on the disk executor, with whatever else comes meanwhile; the
  // waiters need not wait for the disk.
  if (schedule) {
    if (options_.write_behind.count() > 0) {
      disk_.PostAfter(options_.write_behind, [this] { DrainWrites(); });
    } else {
      disk_.Post([this] { DrainWrites(); });
    }
  }
  // Every waiter shares the one copy of the block.
  for (auto& w : waiters) w(copy ? Result<std::shared_ptr<const Bytes>>(copy) : r.status());
}

void BlockReader::DrainWrites() {
  std::vector<PendingWrite> batch;
  {
    MutexLock l(mu_);
    batch.swap(pending_writes_);
    // Blocks that come while these are written start a batch of their own
    // (on another disk thread if one is free).
    drain_scheduled_ = false;
    // A block dropped while it waited (DropObject) is not written.
    std::vector<PendingWrite> live;
    live.reserve(batch.size());
    for (PendingWrite& w : batch) {
      if (Unwritten(w)) live.push_back(std::move(w));
    }
    batch.swap(live);
  }
  if (batch.empty()) return;
  std::vector<BlockStore::BlockWrite> writes;
  writes.reserve(batch.size());
  for (const PendingWrite& w : batch) writes.push_back({w.key, *w.data});
  std::vector<Status> written = store_.WriteMany(writes);
  std::vector<BlockListener::StoredBlock> stored;
  stored.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const PendingWrite& w = batch[i];
    Status s = i < written.size() ? written[i] : InternalError("not written");
    if (!s.ok()) {
      stats_.store_errors++;
      uint64_t more = 0;
      if (store_warnings_.Allow(&more)) {
        spdlog::warn(
            "cache: block {}#{} served but not cached: {} ({} more since the last warning)",
            w.key.object_id, w.key.index, s.ToString(), more);
      }
      if (listener_ != nullptr) listener_->StoreFailed(w.key, w.data->size(), s);
      // A full disk: the listener has made room; one more try keeps the
      // next reader of this block off the network.
      if (s.code() == StatusCode::kNoSpace) s = store_.Write(w.key, *w.data);
    }
    if (s.ok()) stored.push_back({w.key, w.data->size(), w.path, w.version});
  }
  // One index batch for all of them; each block stays in memory until its
  // record is written (MayContain says "not in the store" until then).
  if (listener_ != nullptr && !stored.empty()) listener_->StoredMany(stored);
  std::vector<BlockKey> dropped;
  {
    MutexLock l(mu_);
    for (const PendingWrite& w : batch) {
      if (Unwritten(w)) {
        unwritten_.erase(w.key);
      } else if (unwritten_.count(w.key) == 0) {
        dropped.push_back(w.key);  // dropped while it was written: it goes again
      }
    }
  }
  for (const BlockKey& key : dropped) {
    store_.Remove(key).IgnoreError();
    if (listener_) listener_->Dropped(key);
  }
}

bool BlockReader::Unwritten(const PendingWrite& w) {
  auto it = unwritten_.find(w.key);
  return it != unwritten_.end() && it->second == w.data;
}

void BlockReader::FlushWrites() {
  for (;;) {
    {
      MutexLock l(mu_);
      if (pending_writes_.empty()) return;
    }
    DrainWrites();
  }
}

void BlockReader::Prefetch(const ObjectPath& path, const ObjectVersion& version,
                           const std::string& object_id, uint64_t block, const FetchClass& cls) {
  const uint64_t bs = options_.block_size;
  if (block * bs >= version.size) return;
  BlockKey key{object_id, block};
  if (listener_ != nullptr && listener_->Contains(key)) return;
  const uint64_t block_len = std::min(bs, version.size - block * bs);
  Fetch(path, version, key, block_len, block_len, DeadlineAfter(options_.prefetch_timeout), cls,
        nullptr);
}

bool BlockReader::CancelPrefetch(const BlockKey& key) {
  uint64_t ticket = 0;
  {
    MutexLock l(mu_);
    auto it = inflight_.find(key);
    // Only a fetch nobody waits for, and only while it is still queued.
    if (it == inflight_.end() || !it->second.waiters.empty() || it->second.ticket == 0)
      return false;
    ticket = it->second.ticket;
    if (scheduler_ == nullptr || !scheduler_->Cancel(ticket)) return false;
    inflight_.erase(it);
  }
  return true;
}

}  // namespace perch::core
