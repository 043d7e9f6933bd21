#include "trainer/train_data.h"

#include <algorithm>
#include <map>
#include <stdexcept>

#include "trainer/shard_source.h"
#include "trainer/tar_shards.h"

namespace perch::trainer {

std::string ClassTarName(const std::string& path) {
  const size_t slash = path.rfind('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  for (const char* ext : {".tar.gz", ".tgz", ".tar"}) {
    const std::string e = ext;
    if (name.size() > e.size() && name.compare(name.size() - e.size(), e.size(), e) == 0) {
      return name.substr(0, name.size() - e.size());
    }
  }
  return name;
}

TrainData LoadTrainData(const TrainOptions& o, const ImageFolder* val) {
  TrainData d;
  if (o.data_shards.empty()) {
    d.folder = std::make_unique<ImageFolder>(o.data_dir);
    d.classes = d.folder->classes();
    d.num_classes = static_cast<int64_t>(d.classes.size());
    return d;
  }
  if (o.epoch_samples < 1) {
    throw std::invalid_argument("--data-shards needs --epoch-samples (samples per epoch)");
  }
  d.shards = ResolveShardPattern(o.data_shards, o.data_dir);
  if (o.class_tars) {
    std::map<std::string, int64_t> index;
    for (const std::string& s : d.shards) {
      index.emplace(ClassTarName(s), 0);
    }
    for (auto& [name, label] : index) {
      label = static_cast<int64_t>(d.classes.size());
      d.classes.push_back(name);
    }
    for (const std::string& s : d.shards) {
      d.shard_labels.push_back(index[ClassTarName(s)]);
    }
    d.num_classes = static_cast<int64_t>(d.classes.size());
  } else {
    d.num_classes = o.classes > 0    ? o.classes
                    : val != nullptr ? static_cast<int64_t>(val->classes().size())
                                     : 0;
    if (d.num_classes < 1) {
      throw std::invalid_argument("shards with .cls labels need --classes N (or --val-dir)");
    }
  }
  return d;
}

int64_t TrainData::EpochSamples(const TrainOptions& o) const {
  return folder != nullptr ? static_cast<int64_t>(folder->size()) : o.epoch_samples;
}

std::string TrainData::Describe(const TrainOptions& o) const {
  if (folder != nullptr) {
    return o.data_dir + ": " + std::to_string(folder->size()) + " images in " +
           std::to_string(num_classes) + " classes";
  }
  return std::to_string(shards.size()) + (o.class_tars ? " per-class tars" : " tar shards") + " (" +
         shards.front() + " ...), " + std::to_string(o.epoch_samples) + " samples per epoch, " +
         std::to_string(num_classes) + " classes";
}

std::shared_ptr<SampleSource> MakeTrainSource(const TrainOptions& o, const TrainData& data,
                                              std::shared_ptr<const Sampler> sampler, int rank,
                                              int world_size) {
  if (!data.sharded()) {
    return std::make_shared<FolderSource>(*data.folder, std::move(sampler));
  }
  ShardSourceOptions so;
  so.shards = data.shards;
  so.class_tars = o.class_tars;
  so.shard_labels = data.shard_labels;
  so.classes = data.num_classes;
  so.epoch_samples = o.epoch_samples;
  so.world_size = world_size;
  so.rank = rank;
  so.streams = o.shard_streams;
  so.shuffle_buffer = o.shuffle_buffer;
  so.seed = o.seed;
  return std::make_shared<ShardSource>(std::move(so));
}

}  // namespace perch::trainer
