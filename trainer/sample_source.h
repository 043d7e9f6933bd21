// SampleSource: where the Loader (loader.h) gets the encoded image and the label of each
// position of an epoch. Two implementations: FolderSource (an ImageFolder read in a Sampler's
// order, one file per sample) and ShardSource (shard_source.h: WebDataset tar shards read as
// streams through shuffle buffers).
//
// Contract. An epoch is EpochLength() positions. BeginEpoch(epoch, start) is called by the
// loader's consumer thread while no Read is in flight; after it, Read(p) may be called for each
// position p >= start of that epoch exactly once, from any thread and in any order, though
// loaders call in about increasing order. What Read(p) yields depends only on the source's
// construction and (epoch, p): never on which thread asks or when, so resuming at `start`
// reproduces the rest of an epoch.
#ifndef PERCH_TRAINER_SAMPLE_SOURCE_H_
#define PERCH_TRAINER_SAMPLE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/image_folder.h"
#include "trainer/sampler.h"

namespace perch::trainer {

struct SampleBytes {
  std::vector<uint8_t> data;  // grown, never shrunk: reused from sample to sample
  size_t size = 0;            // bytes of data that hold the encoded image
  int64_t label = 0;
  uint64_t key = 0;  // seeds the sample's augmentation with (seed, epoch)
  std::string name;  // for messages: the file's path, or the shard sample's key
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t EpochLength() const = 0;
  virtual void BeginEpoch(int64_t epoch, int64_t start) = 0;
  // The sample at `position` of the epoch begun last: true, or false with `error` (the sample is
  // skipped and counted by the loader). Sets out->name when it knows it, also on failure.
  virtual bool Read(int64_t position, SampleBytes* out, std::string* error) = 0;
  // The files the rest of `epoch` from `start` reads, in the order they are read (hints).
  virtual std::vector<std::string> HintPaths(int64_t epoch, int64_t start) const = 0;
  // Items the source dropped before they had a position (corrupt tar members and shards).
  virtual int64_t Dropped() const { return 0; }
};

// An ImageFolder in a Sampler's order; the augmentation key is the dataset index.
class FolderSource : public SampleSource {
 public:
  // Throws std::out_of_range when the sampler names an index outside `data`, at BeginEpoch.
  FolderSource(const ImageFolder& data, std::shared_ptr<const Sampler> sampler)
      : data_(data), sampler_(std::move(sampler)) {}
  int64_t EpochLength() const override { return sampler_->EpochLength(); }
  void BeginEpoch(int64_t epoch, int64_t start) override;
  bool Read(int64_t position, SampleBytes* out, std::string* error) override;
  std::vector<std::string> HintPaths(int64_t epoch, int64_t start) const override;
  // The epoch's order of dataset indices, checked against the dataset's size.
  std::vector<int64_t> EpochOrder(int64_t epoch) const;

 private:
  const ImageFolder& data_;
  const std::shared_ptr<const Sampler> sampler_;
  std::vector<int64_t> order_;  // written by BeginEpoch only, while no Read runs
};

// Reads all of `path` into out->data (grown as needed); false with `error`.
bool ReadWholeFile(const std::string& path, SampleBytes* out, std::string* error);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_SAMPLE_SOURCE_H_
