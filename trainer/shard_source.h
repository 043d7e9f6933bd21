// ShardSource: an epoch of WebDataset tar shards (tar_shards.h) for one rank, with WebDataset's
// semantics and a deterministic order.
//
// Design. Epoch e permutes the shard list with a generator seeded by (seed, e); rank r of W
// takes the permuted shards r, r + W, r + 2W, ... (whole shards; at least one per rank). The
// rank's shards are dealt the same way to K streams (K = min(streams, the rank's shard count)):
// stream k reads its shards one after the other, start to end, and passes their samples
// through its own shuffle buffer of `shuffle_buffer` samples (WebDataset's shuffle: the first
// emission waits for 100 samples, after which the buffer grows by one per emission until full;
// each emission is a uniformly drawn buffered sample; at the end of the stream's shards the rest
// is emitted in random order). Position p of the rank's epoch is the (p / K)-th sample
// stream p % K emits. An epoch is ceil(epoch_samples / W) positions on every rank, so that all
// ranks take the same number of steps: a stream that runs out starts over on its shards (with
// its buffer's generator going on), and samples a stream has not emitted when the epoch's
// positions are used up are not seen in that epoch (WebDataset's with_epoch does the same).
//
// Everything is a function of (seed, epoch, rank, W, K, shuffle_buffer, the shards' content):
// not of the loader's threads or timing. Resuming at position `start` replays each stream up
// to its first position >= start: the replayed samples are read again (the tar bytes) but not
// decoded, and the buffers then hold exactly what they held before the stop.
//
// Corrupt or truncated shards and bad members are dropped and counted (Dropped()); a stream
// whose shards yield no sample in a whole pass fails every later Read (the loader counts those
// as skipped, which stops training when too many are), so nothing loops or hangs.
//
// Reading. Each stream has a reader thread that reads its shards in order, ahead of the buffer
// (up to 1,024 samples or 32 MiB), so that K shards are read at once whatever the number of
// loader workers, and reading overlaps decoding. The samples' order is the reader's order, so
// the threads change nothing about it.
//
// Thread-safety: BeginEpoch as SampleSource says (it stops and joins the previous epoch's
// readers); Read from any thread (one mutex per stream, never held across I/O).
#ifndef PERCH_TRAINER_SHARD_SOURCE_H_
#define PERCH_TRAINER_SHARD_SOURCE_H_

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "trainer/sample_source.h"
#include "trainer/tar_shards.h"
#include "trainer/transforms.h"

namespace perch::trainer {

struct ShardSourceOptions {
  std::vector<std::string> shards;  // in the pattern's order
  // true: label = shard_labels[i] for every sample of shard i (per-class tars); else .cls.
  bool class_tars = false;
  std::vector<int64_t> shard_labels;
  int64_t classes = 0;
  int64_t epoch_samples = 0;  // over all ranks
  int world_size = 1;
  int rank = 0;
  int streams = 4;
  int shuffle_buffer = 1000;  // 1: no shuffling within streams
  uint64_t seed = 0;
  ShardLimits limits;
};

class ShardSource : public SampleSource {
 public:
  // Throws std::invalid_argument on an empty shard list, fewer shards than ranks,
  // epoch_samples < 1, streams < 1, shuffle_buffer < 1, or rank outside [0, world_size).
  explicit ShardSource(ShardSourceOptions options);
  ~ShardSource() override;

  int64_t EpochLength() const override;
  void BeginEpoch(int64_t epoch, int64_t start) override;
  bool Read(int64_t position, SampleBytes* out, std::string* error) override;
  // The rank's shards of `epoch` in the order the streams start them (all of them: a resumed
  // epoch rereads the started ones).
  std::vector<std::string> HintPaths(int64_t epoch, int64_t start) const override;
  int64_t Dropped() const override { return dropped_.load(); }

  // The shard indices rank `rank` reads in `epoch`, in the order HintPaths gives.
  std::vector<size_t> RankShards(int64_t epoch) const;
  // How many streams the rank's epoch has.
  int Streams() const;

 private:
  struct Stream;
  // Emits the stream's next sample; false (with `error`) when its shards yield none.
  // REQUIRES: `lock` holds s.mu (released while waiting for the reader thread).
  bool Emit(Stream& s, std::unique_lock<std::mutex>& lock, ShardSample* out, std::string* error);
  // The reader thread's next raw item; false when it is done and nothing is left.
  bool Pop(Stream& s, std::unique_lock<std::mutex>& lock, struct RawItem* item);
  // The reader thread of `s`: reads its shards in order, pass after pass, into s.raw.
  void ReadAhead(Stream& s);
  bool NextRaw(Stream& s, ShardSample* out);
  // Stops and joins the reader threads and drops the streams.
  void StopStreams();

  const ShardSourceOptions o_;
  std::atomic<int64_t> dropped_{0};
  std::atomic<int64_t> errors_logged_{0};
  int64_t epoch_ = 0;
  std::vector<std::unique_ptr<Stream>> streams_;  // rebuilt by BeginEpoch
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_SHARD_SOURCE_H_
