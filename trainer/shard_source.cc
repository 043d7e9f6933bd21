#include "trainer/shard_source.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <stdexcept>
#include <thread>

namespace perch::trainer {

namespace {

// Shard failures are logged one by one up to this many; after that only counted.
constexpr int64_t kMaxLoggedErrors = 20;

// Salts keeping the shard permutation and the buffers' generators apart from the
// augmentation's MixSeed(seed, epoch, key) streams.
constexpr uint64_t kShardOrderSalt = 0x7368617264ULL;  // "shard"
constexpr uint64_t kBufferSalt = 0x627566666572ULL;    // "buffer"

// Samples a shuffle buffer holds before its first emission (WebDataset's default `initial`).
constexpr size_t kInitialBuffer = 100;

// How far a stream's reader thread reads ahead of its buffer (at least one sample).
constexpr size_t kReadAheadSamples = 1024;
constexpr size_t kReadAheadBytes = 32 << 20;

}  // namespace

// What a stream's reader thread hands over: a sample, or the end of a pass over its shards.
struct RawItem {
  ShardSample sample;
  bool pass_end = false;
};

struct ShardSource::Stream {
  // Constant after BeginEpoch.
  std::vector<size_t> shards;
  int64_t skip = 0;  // emissions before the epoch's start: replayed, not returned
  // The reader thread's own.
  size_t next_shard = 0;
  std::unique_ptr<TarShardReader> reader;
  int64_t pass_samples = 0;  // samples read in the current pass over the shards
  std::thread thread;        // ReadAhead; joined by StopStreams
  // Protected by mu.
  std::mutex mu;
  std::condition_variable cv;  // raw gained an item or room, reader_done, or stop
  std::deque<RawItem> raw;     // the stream's samples in read order
  size_t raw_bytes = 0;
  bool reader_done = false;  // nothing more comes (a pass gave nothing, or stopped)
  bool stop = false;
  std::vector<ShardSample> buffer;
  Rng rng{0};
  int64_t emitted = 0;                   // samples emitted this epoch, replayed ones included
  std::map<int64_t, ShardSample> ready;  // emitted for a position another thread has taken
  bool pass_over = false;                // the current pass's samples are all in the buffer
  bool emitting = false;  // a thread is in Emit (which releases mu while it waits for raw)
  bool dead = false;
};

ShardSource::ShardSource(ShardSourceOptions options) : o_(std::move(options)) {
  if (o_.shards.empty() || o_.world_size < 1 || o_.rank < 0 || o_.rank >= o_.world_size ||
      o_.shards.size() < static_cast<size_t>(o_.world_size) || o_.epoch_samples < 1 ||
      o_.streams < 1 || o_.shuffle_buffer < 1 ||
      (o_.class_tars && o_.shard_labels.size() != o_.shards.size())) {
    throw std::invalid_argument(
        "tar shards: need at least one shard per rank, --epoch-samples >= 1, streams >= 1 and a "
        "shuffle buffer >= 1 (" +
        std::to_string(o_.shards.size()) + " shards, " + std::to_string(o_.world_size) + " ranks)");
  }
}

ShardSource::~ShardSource() { StopStreams(); }

void ShardSource::StopStreams() {
  for (auto& s : streams_) {
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->stop = true;
    }
    s->cv.notify_all();
  }
  for (auto& s : streams_) {
    if (s->thread.joinable()) {
      s->thread.join();  // a read in progress finishes first
    }
  }
  streams_.clear();
}

int64_t ShardSource::EpochLength() const {
  return (o_.epoch_samples + o_.world_size - 1) / o_.world_size;
}

int ShardSource::Streams() const {
  const size_t n = o_.shards.size();
  const size_t w = static_cast<size_t>(o_.world_size);
  const size_t mine = (n - static_cast<size_t>(o_.rank) + w - 1) / w;
  return static_cast<int>(std::min<size_t>(static_cast<size_t>(o_.streams), mine));
}

std::vector<size_t> ShardSource::RankShards(int64_t epoch) const {
  std::vector<size_t> perm(o_.shards.size());
  for (size_t i = 0; i < perm.size(); ++i) {
    perm[i] = i;
  }
  Rng rng(MixSeed(o_.seed, static_cast<uint64_t>(epoch), kShardOrderSalt));
  for (size_t i = perm.size(); i > 1; --i) {  // Fisher-Yates
    std::swap(perm[i - 1], perm[rng.Below(i)]);
  }
  std::vector<size_t> mine;
  for (size_t i = static_cast<size_t>(o_.rank); i < perm.size();
       i += static_cast<size_t>(o_.world_size)) {
    mine.push_back(perm[i]);
  }
  return mine;
}

std::vector<std::string> ShardSource::HintPaths(int64_t epoch, int64_t /*start*/) const {
  std::vector<std::string> paths;
  for (size_t i : RankShards(epoch)) {
    paths.push_back(o_.shards[i]);
  }
  return paths;
}

void ShardSource::BeginEpoch(int64_t epoch, int64_t start) {
  epoch_ = epoch;
  const std::vector<size_t> mine = RankShards(epoch);
  const int k_count = Streams();
  StopStreams();
  for (int k = 0; k < k_count; ++k) {
    auto s = std::make_unique<Stream>();
    for (size_t i = static_cast<size_t>(k); i < mine.size(); i += static_cast<size_t>(k_count)) {
      s->shards.push_back(mine[i]);
    }
    s->skip = start > k ? (start - k + k_count - 1) / k_count : 0;
    s->rng = Rng(MixSeed(o_.seed ^ kBufferSalt, static_cast<uint64_t>(epoch),
                         static_cast<uint64_t>(o_.rank) * 65536 + static_cast<uint64_t>(k)));
    s->buffer.reserve(static_cast<size_t>(o_.shuffle_buffer));
    Stream* raw = s.get();
    streams_.push_back(std::move(s));
    raw->thread = std::thread([this, raw] { ReadAhead(*raw); });
  }
}

void ShardSource::ReadAhead(Stream& s) {
  try {
    while (true) {
      RawItem item;
      item.pass_end = !NextRaw(s, &item.sample);
      if (item.pass_end) {
        const bool empty = s.pass_samples == 0;  // every further pass would be empty too
        s.pass_samples = 0;
        s.next_shard = 0;
        if (empty) {
          break;
        }
      }
      std::unique_lock<std::mutex> lock(s.mu);
      s.cv.wait(lock, [&] {
        return s.stop || s.raw.empty() ||
               (s.raw.size() < kReadAheadSamples && s.raw_bytes < kReadAheadBytes);
      });
      if (s.stop) {
        break;
      }
      s.raw_bytes += item.sample.image.size();
      s.raw.push_back(std::move(item));
      s.cv.notify_all();
    }
  } catch (const std::exception& e) {
    spdlog::error("tar shard stream: {}", e.what());
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.reader_done = true;
  s.cv.notify_all();
}

bool ShardSource::Pop(Stream& s, std::unique_lock<std::mutex>& lock, RawItem* item) {
  s.cv.wait(lock, [&] { return !s.raw.empty() || s.reader_done; });
  if (s.raw.empty()) {
    return false;
  }
  *item = std::move(s.raw.front());
  s.raw.pop_front();
  s.raw_bytes -= item->sample.image.size();
  s.cv.notify_all();
  return true;
}

bool ShardSource::NextRaw(Stream& s, ShardSample* out) {
  while (true) {
    if (s.reader == nullptr) {
      if (s.next_shard >= s.shards.size()) {
        return false;  // this pass is over
      }
      const size_t i = s.shards[s.next_shard++];
      s.reader = std::make_unique<TarShardReader>(
          o_.shards[i], o_.limits, o_.class_tars ? o_.shard_labels[i] : -1, o_.classes);
    }
    if (s.reader->Next(out)) {
      ++s.pass_samples;
      return true;
    }
    dropped_.fetch_add(s.reader->bad(), std::memory_order_relaxed);
    if (!s.reader->error().empty() &&
        errors_logged_.fetch_add(1, std::memory_order_relaxed) < kMaxLoggedErrors) {
      spdlog::warn("tar shard {}: {}; the rest of it is skipped", s.reader->path(),
                   s.reader->error());
    }
    s.reader.reset();
  }
}

bool ShardSource::Emit(Stream& s, std::unique_lock<std::mutex>& lock, ShardSample* out,
                       std::string* error) {
  const auto cap = static_cast<size_t>(o_.shuffle_buffer);
  const size_t initial = std::min(cap, kInitialBuffer);
  while (true) {
    // Fill up to `initial` samples, then grow by one per emission (two in, one out) until full,
    // as WebDataset's shuffle(bufsize, initial) does: the first sample does not wait for a
    // whole buffer's worth of reading. A pass's samples are drained before the next pass's join.
    for (int added = 0; !s.dead && !s.pass_over && s.buffer.size() < cap &&
                        (s.buffer.size() < initial || added < 2);
         ++added) {
      RawItem r;
      if (!Pop(s, lock, &r)) {
        s.dead = true;  // a pass gave nothing: every further pass would give nothing too
      } else if (r.pass_end) {
        s.pass_over = true;
      } else {
        s.buffer.push_back(std::move(r.sample));
      }
    }
    if (!s.buffer.empty()) {
      const size_t k = static_cast<size_t>(s.rng.Below(s.buffer.size()));
      *out = std::move(s.buffer[k]);
      if (k + 1 != s.buffer.size()) {
        s.buffer[k] = std::move(s.buffer.back());
      }
      s.buffer.pop_back();
      return true;
    }
    if (s.dead) {
      break;
    }
    s.pass_over = false;  // drained: the next pass's samples follow in `raw`
  }
  *error = "tar shards " + o_.shards[s.shards.front()] + " (" + std::to_string(s.shards.size()) +
           " shard(s) of one stream) hold no usable sample";
  return false;
}

bool ShardSource::Read(int64_t position, SampleBytes* out, std::string* error) {
  const auto k_count = static_cast<int64_t>(streams_.size());
  Stream& s = *streams_[static_cast<size_t>(position % k_count)];
  const int64_t j = position / k_count;
  ShardSample sample;
  {
    std::unique_lock<std::mutex> lock(s.mu);
    while (true) {
      auto it = s.ready.find(j);
      if (it != s.ready.end()) {
        sample = std::move(it->second);
        s.ready.erase(it);
        break;
      }
      if (s.emitted > j) {
        *error = "position " + std::to_string(position) + " of a shard epoch read twice";
        return false;
      }
      if (s.emitting) {  // another thread emits (and may wait for the reader): wait for it
        s.cv.wait(lock, [&] { return !s.emitting; });
        continue;
      }
      ShardSample x;
      s.emitting = true;
      const bool ok = Emit(s, lock, &x, error);
      s.emitting = false;
      s.cv.notify_all();
      if (!ok) {
        return false;
      }
      const int64_t e = s.emitted++;
      if (e == j) {
        sample = std::move(x);
        break;
      }
      if (e >= s.skip) {
        s.ready.emplace(e, std::move(x));
      }
    }
  }
  out->data.swap(sample.image);
  out->size = out->data.size();
  out->label = sample.label;
  out->key = (static_cast<uint64_t>(o_.rank) << 40) + static_cast<uint64_t>(position);
  out->name = std::move(sample.key);
  return true;
}

}  // namespace perch::trainer
