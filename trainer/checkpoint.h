// Checkpoints that make preemption harmless, and weight files Python can read.
//
// Format: one file written by torch::pickle_save, i.e. the format of Python's torch.save, so
// `torch.load("checkpoint.pt")` opens it too. It is a dict:
//   "format": "perch-train-checkpoint/1"
//   "model": {name: tensor}      parameters and buffers (BatchNorm running stats,
//                                num_batches_tracked) under torchvision's names, on the CPU
//   "momentum": {name: tensor}   SGD momentum buffers by parameter name
//   "epoch", "position", "step", "images_seen": int   where training stands; position is the
//                                number of samples of the epoch's order already trained on
//   "finished": bool
//   "config": str                JSON of the settings a resume must match
//   "stats": str                 JSON of counters accumulated over all runs
//   "rng_cpu": tensor            libtorch's default CPU generator state
//
// Writes go to a temporary file in the same directory, are fsync'd, and renamed over
// checkpoint.pt after the previous one has been renamed to checkpoint.prev.pt; the directory is
// fsync'd too. A crash at any point leaves a loadable checkpoint.pt or checkpoint.prev.pt,
// and LoadCheckpoint falls back to the latter when the former is unreadable.
//
// Functions are independent and thread-compatible (no shared state).
#ifndef PERCH_TRAINER_CHECKPOINT_H_
#define PERCH_TRAINER_CHECKPOINT_H_

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace perch::trainer {

using TensorMap = std::vector<std::pair<std::string, at::Tensor>>;  // ordered, like a state_dict

struct Checkpoint {
  TensorMap model;
  std::map<std::string, at::Tensor> momentum;
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t step = 0;
  int64_t images_seen = 0;
  bool finished = false;
  std::string config;
  std::string stats;
  at::Tensor rng_cpu;
};

inline constexpr char kCheckpointFile[] = "checkpoint.pt";
inline constexpr char kPreviousCheckpointFile[] = "checkpoint.prev.pt";

// Saves `ckpt` as dir/checkpoint.pt (see above). Throws std::runtime_error on I/O errors.
void SaveCheckpoint(const std::string& dir, const Checkpoint& ckpt);

// Loads dir/checkpoint.pt, else dir/checkpoint.prev.pt. Returns false if neither exists or
// loads; `error` then says why (empty when there simply is none).
bool LoadCheckpoint(const std::string& dir, Checkpoint* ckpt, std::string* error);

// Saves a {name: tensor} dict (a state_dict) that torch.load reads; atomically, as above but
// without keeping a previous version.
void SaveStateDict(const std::string& path, const TensorMap& tensors);

// Reads a file written by SaveStateDict (or torch.save of a dict of tensors).
TensorMap LoadStateDict(const std::string& path);

// Writes `bytes` to `path` through a temporary file + fsync + rename + directory fsync.
void WriteFileAtomically(const std::string& path, const std::vector<char>& bytes);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_CHECKPOINT_H_
