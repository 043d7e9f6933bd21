// TrainData: what perch-train trains on, an ImageFolder tree (--data-dir) or WebDataset tar
// shards (--data-shards), with the class names or count, and the SampleSource a rank reads.
//
// Thread-safety: construct and use from the training thread.
#ifndef PERCH_TRAINER_TRAIN_DATA_H_
#define PERCH_TRAINER_TRAIN_DATA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainer/image_folder.h"
#include "trainer/sample_source.h"
#include "trainer/trainer.h"

namespace perch::trainer {

struct TrainData {
  std::unique_ptr<ImageFolder> folder;  // a tree, or else:
  std::vector<std::string> shards;      // tar shards, in the pattern's order
  std::vector<int64_t> shard_labels;    // per shard, with class tars
  std::vector<std::string> classes;     // names (tree, class tars); empty for .cls shards
  int64_t num_classes = 0;

  bool sharded() const { return folder == nullptr; }
  // Samples per epoch over all ranks.
  int64_t EpochSamples(const TrainOptions& o) const;
  // A description for logs: "<dir>: N images in C classes" or "S tar shards ...".
  std::string Describe(const TrainOptions& o) const;
};

// Scans the tree or resolves the shard pattern. With class tars the classes are the shards'
// names without ".tar" (sorted) and each shard's label is its name's index; with .cls labels
// the class count is o.classes, else `val`'s. Throws std::runtime_error / invalid_argument.
TrainData LoadTrainData(const TrainOptions& o, const ImageFolder* val);

// The name of a per-class tar's class: its basename without ".tar" (or ".tar.gz", ".tgz").
std::string ClassTarName(const std::string& path);

// The source rank `rank` of `world_size` reads: the tree in `sampler`'s order, or the shards
// (shard_source.h). `data` must outlive the source.
std::shared_ptr<SampleSource> MakeTrainSource(const TrainOptions& o, const TrainData& data,
                                              std::shared_ptr<const Sampler> sampler, int rank,
                                              int world_size);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_TRAIN_DATA_H_
