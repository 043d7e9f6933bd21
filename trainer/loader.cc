#include "trainer/loader.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstring>

#include "trainer/jpeg_decoder.h"
#include "trainer/transforms.h"

namespace perch::trainer {

namespace {

// Paths of the first bad files are logged one by one; after that only the count grows (it is
// reported with the loader's stats), so a tree full of bad files cannot flood the log.
constexpr int64_t kMaxLoggedWarnings = 20;

// The order an ImageFolder is read in when the options name no sampler.
std::shared_ptr<const Sampler> DefaultSampler(const ImageFolder& data, const LoaderOptions& o) {
  const auto size = static_cast<int64_t>(data.size());
  if (o.sampler != nullptr) {
    return o.sampler;
  }
  if (o.train) {
    return std::make_shared<DistributedSampler>(size, o.seed, 1, 0, 1, 1);
  }
  return std::make_shared<SequentialSampler>(size);
}

}  // namespace

struct WorkerState {
  JpegDecoder decoder;
  SampleBytes sample;
};

Loader::Loader(const ImageFolder& data, LoaderOptions options)
    : Loader(std::make_shared<FolderSource>(data, DefaultSampler(data, options)), options) {}

Loader::Loader(std::shared_ptr<SampleSource> source, LoaderOptions options)
    : options_(std::move(options)), source_(std::move(source)) {
  if (options_.batch_size < 1 || options_.workers < 1 || options_.image_size < 1 ||
      options_.prefetch < 1) {
    throw std::invalid_argument(
        "loader: batch size, workers, image size and prefetch must be >= 1");
  }
  const int64_t s = options_.image_size;
  auto opts = at::TensorOptions().dtype(at::kFloat).pinned_memory(options_.pin_memory);
  slots_.resize(options_.prefetch);
  for (Slot& slot : slots_) {
    slot.images = at::empty({options_.batch_size, 3, s, s}, opts);
    slot.labels.resize(options_.batch_size);
    slot.label_tensor = at::empty({options_.batch_size}, opts.dtype(at::kLong));
    slot.ok.resize(options_.batch_size);
  }
  for (int i = 0; i < options_.workers; ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
  }
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) {
    t.join();
  }
}

int64_t Loader::BatchesPerEpoch() const {
  return (source_->EpochLength() + options_.batch_size - 1) / options_.batch_size;
}

int64_t Loader::BatchLength(int64_t batch) const {
  const int64_t first = start_ + batch * options_.batch_size;
  return std::min<int64_t>(options_.batch_size, length_ - first);
}

void Loader::StopWorkersFromEpoch(std::unique_lock<std::mutex>& lock) {
  active_ = false;
  // Workers finishing a sample of the old epoch still write into the slots; wait for them.
  done_cv_.wait(lock, [this] { return in_flight_ == 0; });
}

void Loader::StartEpoch(int64_t epoch, int64_t start) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    StopWorkersFromEpoch(lock);
    length_ = source_->EpochLength();
    epoch_ = epoch;
    start_ = std::clamp<int64_t>(start, 0, length_);
    // No Read is in flight (StopWorkersFromEpoch), as SampleSource requires.
    source_->BeginEpoch(epoch, start_);
    next_position_ = start_;
    released_ = 0;
    next_batch_ = 0;
    for (Slot& slot : slots_) {
      slot.batch = -1;
      slot.remaining = 0;
    }
    active_ = true;
  }
  work_cv_.notify_all();
}

void Loader::WorkerLoop() {
  WorkerState ws;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] {
      return stop_ ||
             (active_ && next_position_ < length_ &&
              (next_position_ - start_) / options_.batch_size < released_ + options_.prefetch);
    });
    if (stop_) {
      return;
    }
    const int64_t position = next_position_++;
    const int64_t batch = (position - start_) / options_.batch_size;
    const int64_t row = (position - start_) % options_.batch_size;
    Slot& slot = slots_[batch % options_.prefetch];
    if (slot.batch != batch) {
      // First sample of this batch: the slot's previous batch was released (checked above).
      slot.batch = batch;
      slot.remaining = BatchLength(batch);
    }
    const int64_t epoch = epoch_;
    float* dst = slot.images.data_ptr<float>() +
                 row * 3 * static_cast<int64_t>(options_.image_size) * options_.image_size;
    ++in_flight_;
    lock.unlock();

    const bool ok = LoadSample(position, epoch, dst, ws);

    lock.lock();
    --in_flight_;
    slot.labels[row] = ws.sample.label;
    slot.ok[row] = ok ? 1 : 0;
    if (--slot.remaining == 0 || in_flight_ == 0) {
      done_cv_.notify_all();
    }
  }
}

bool Loader::LoadSample(int64_t position, int64_t epoch, float* dst, WorkerState& ws) {
  std::string error;
  const int s = options_.image_size;
  ws.sample.name.clear();
  bool ok = source_->Read(position, &ws.sample, &error);
  const size_t size = ws.sample.size;
  if (ok) {
    bytes_.fetch_add(static_cast<int64_t>(size), std::memory_order_relaxed);
    Rng rng(MixSeed(options_.seed, static_cast<uint64_t>(epoch), ws.sample.key));
    const bool train = options_.train;
    auto region = [&](int w, int h) {
      return train ? RandomResizedCropRegion(w, h, rng)
                   : ResizeCenterCropRegion(w, h, ValResizeFor(s), s);
    };
    DecodedRegion decoded;
    ok = ws.decoder.Decode(ws.sample.data.data(), size, s, s, region, &decoded, &error);
    if (ok) {
      // torchvision's RandomHorizontalFlip: torch.rand(1) < 0.5, drawn after the crop.
      const bool flip = train && rng.Uniform(0, 1) < 0.5;
      ResampleNormalize(decoded, s, s, flip, dst);
    }
  }
  if (ok) {
    images_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  const int64_t n = skipped_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (warnings_logged_.fetch_add(1, std::memory_order_relaxed) < kMaxLoggedWarnings) {
    spdlog::warn(
        "skipping unreadable image {} ({}); {} skipped so far",
        ws.sample.name.empty() ? "at position " + std::to_string(position) : ws.sample.name, error,
        n);
  }
  return false;
}

bool Loader::Next(Batch* batch) {
  std::unique_lock<std::mutex> lock(mu_);
  // The batch returned last time is no longer used by the caller.
  if (released_ < next_batch_) {
    released_ = next_batch_;
    work_cv_.notify_all();
  }
  const int64_t first = start_ + next_batch_ * options_.batch_size;
  if (!active_ || first >= length_) {
    return false;
  }
  Slot& slot = slots_[next_batch_ % options_.prefetch];
  const int64_t length = BatchLength(next_batch_);
  auto t0 = std::chrono::steady_clock::now();
  done_cv_.wait(lock, [&] { return slot.batch == next_batch_ && slot.remaining == 0; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Close the gaps left by skipped samples, keeping the order of the others. Only this thread
  // touches a completed slot, so the copy runs without the lock.
  lock.unlock();
  const int64_t row_floats = 3 * static_cast<int64_t>(options_.image_size) * options_.image_size;
  float* base = slot.images.data_ptr<float>();
  int64_t n = 0;
  int64_t* labels = slot.label_tensor.data_ptr<int64_t>();
  for (int64_t r = 0; r < length; ++r) {
    if (!slot.ok[r]) {
      continue;
    }
    if (n != r) {
      std::memcpy(base + n * row_floats, base + r * row_floats, row_floats * sizeof(float));
    }
    labels[n] = slot.labels[r];
    ++n;
  }
  batch->images = slot.images.narrow(0, 0, n);
  batch->labels = slot.label_tensor.narrow(0, 0, n);
  batch->size = n;
  batch->skipped = length - n;
  batch->end_position = first + length;
  lock.lock();
  ++next_batch_;
  return true;
}

LoaderStats Loader::stats() const {
  LoaderStats s;
  s.images = images_.load();
  s.skipped = skipped_.load() + source_->Dropped();
  s.bytes = bytes_.load();
  std::lock_guard<std::mutex> lock(mu_);
  s.wait_seconds = wait_seconds_;
  return s;
}

}  // namespace perch::trainer
