// Loader: turns a SampleSource (an ImageFolder, or tar shards) into batches of normalized float
// images, with its own thread pool (not torch::data).
//
// Design. An epoch is the positions of a SampleSource (sample_source.h). For an ImageFolder that
// is the order a Sampler gives (sampler.h): by default torch's DistributedSampler with one
// replica, a permutation seeded by seed + epoch, for training and the identity order for
// validation; a rank of a distributed run reads its share. Tar shards are streams through
// shuffle buffers (shard_source.h). Batch b of an epoch
// that starts at position `start` holds the samples at positions [start + b * B, start + (b + 1) *
// B). Workers take positions one at a time, in order, read the file, decode only the region the
// crop needs (JpegDecoder) and resample it straight into its row of a preallocated batch buffer
// (pinned when feeding a GPU). At most `prefetch` batches are in flight: a worker does not start a
// sample of batch b before the consumer has released batch b - prefetch, which bounds memory and
// makes the buffers reusable. Each sample's random crop and flip come from Rng(MixSeed(seed, epoch,
// key)), key being the sample's dataset index (or, for shards, its rank and position), so a
// batch's content is a function of (seed, epoch, position) alone, independent of
// thread count and timing; resuming at a position reproduces the rest of the epoch exactly.
//
// A sample that cannot be read or decoded is skipped: it is counted, logged (the first few
// with their path), and its batch comes out with one image fewer (the others keep their
// order). Training never stops because of a bad file.
//
// Thread-safety: StartEpoch, Next and the destructor are called from one consumer thread.
// stats() may be called from any thread.
#ifndef PERCH_TRAINER_LOADER_H_
#define PERCH_TRAINER_LOADER_H_

#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "trainer/image_folder.h"
#include "trainer/sample_source.h"
#include "trainer/sampler.h"

namespace perch::trainer {

struct LoaderOptions {
  int batch_size = 256;
  int workers = 4;
  int image_size = 224;  // output is image_size x image_size
  bool train = true;     // random crops + flips + shuffling; else resize + centre crop
  uint64_t seed = 0;
  int prefetch = 3;         // batches in flight, >= 1
  bool pin_memory = false;  // allocate batch buffers in page-locked memory (needs CUDA)
  // The epoch order; null: DistributedSampler(size, seed, 1 replica) when training, else
  // SequentialSampler.
  std::shared_ptr<const Sampler> sampler;
};

struct Batch {
  at::Tensor images;         // [n, 3, S, S] float32, a view of the loader's buffer
  at::Tensor labels;         // [n] int64
  int64_t size = 0;          // n: samples that decoded
  int64_t skipped = 0;       // samples of this batch that could not be read or decoded
  int64_t end_position = 0;  // epoch position after this batch (the resume point)
};

struct LoaderStats {
  int64_t images = 0;       // decoded successfully
  int64_t skipped = 0;      // unreadable or corrupt (files, or tar members and shards)
  int64_t bytes = 0;        // read from files
  double wait_seconds = 0;  // time Next() spent waiting for workers
};

class Loader {
 public:
  // Reads `data` (which must outlive the loader) in options.sampler's order.
  Loader(const ImageFolder& data, LoaderOptions options);
  // Reads `source`; options.sampler is not used.
  Loader(std::shared_ptr<SampleSource> source, LoaderOptions options);
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // Begins `epoch` at `start` (samples of the epoch's order already consumed, 0 for a fresh
  // epoch). Abandons the epoch in progress, if any.
  void StartEpoch(int64_t epoch, int64_t start);

  // Fills `batch` with the next batch of the epoch and returns true, or returns false at the
  // epoch's end. Blocks until the batch is ready. The batch's tensors are views of the
  // loader's buffer: they stay valid until the next call of Next or StartEpoch, after which
  // the memory is reused (a non_blocking device copy must have completed by then).
  bool Next(Batch* batch);

  // Number of batches in an epoch started at 0.
  int64_t BatchesPerEpoch() const;
  // Number of samples in an epoch (the dataset's size unless a sampler says otherwise).
  int64_t EpochLength() const { return source_->EpochLength(); }

  // The files the rest of `epoch` from `start` reads, in order (for hints).
  std::vector<std::string> HintPaths(int64_t epoch, int64_t start) const {
    return source_->HintPaths(epoch, start);
  }

  LoaderStats stats() const;
  const LoaderOptions& options() const { return options_; }

 private:
  struct Slot {
    at::Tensor images;            // [B, 3, S, S]
    std::vector<int64_t> labels;  // per row
    at::Tensor label_tensor;      // [B] int64, the compacted labels handed out
    std::vector<char> ok;         // per row: decoded
    int64_t batch = -1;           // which batch of the epoch occupies the slot
    int64_t remaining = 0;        // rows not finished yet
  };

  void WorkerLoop();
  // Reads, decodes and transforms the sample at `position` into `dst`; false if it could not.
  bool LoadSample(int64_t position, int64_t epoch, float* dst, struct WorkerState& ws);
  void StopWorkersFromEpoch(std::unique_lock<std::mutex>& lock);
  int64_t BatchLength(int64_t batch) const;

  // Constant after construction.
  const LoaderOptions options_;
  const std::shared_ptr<SampleSource> source_;
  std::vector<std::thread> threads_;

  std::atomic<int64_t> images_{0};
  std::atomic<int64_t> skipped_{0};
  std::atomic<int64_t> bytes_{0};
  std::atomic<int64_t> warnings_logged_{0};

  // Protected by mu_.
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // workers wait here for positions to take
  std::condition_variable done_cv_;  // the consumer waits here for a batch; StartEpoch for idle
  bool stop_ = false;
  bool active_ = false;
  int64_t epoch_ = 0;
  int64_t start_ = 0;
  int64_t length_ = 0;         // the epoch's positions
  int64_t next_position_ = 0;  // next position a worker takes
  int64_t released_ = 0;       // batches the consumer is done with
  int64_t next_batch_ = 0;     // batch Next() returns next
  int64_t in_flight_ = 0;      // samples being processed outside the lock
  std::vector<Slot> slots_;
  double wait_seconds_ = 0;
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_LOADER_H_
