// Trainer: trains a ResNet on an ImageFolder tree or WebDataset tar shards with the Loader,
// checkpointing so that an HTCondor job can be stopped at any time and restarted with the same
// command line.
//
// Run(): if the checkpoint directory holds a checkpoint, resume from it exactly (same sample
// order, same augmentation, same weights, momentum and schedule position), else start fresh.
// Stop conditions, checked after every step:
//   - the stop flag (set by SIGTERM/SIGINT) or --max-runtime elapsed: save, return
//     kExitCheckpointed (85, HTCondor's checkpoint_exit_code);
//   - all epochs (or --max-steps) done: evaluate, save checkpoint + model_final.pt, return 0.
// Restarting a finished run re-reports and returns 0 without training.
//
// Data parallel (distributed.h): with dist.world_size > 1 this process is one rank. Every rank
// reads its DistributedSampler share (sampler.h) in batches of batch_size, the gradients are
// averaged over the ranks before every step, BatchNorm keeps per-rank statistics (rank 0's
// running statistics are the ones saved), rank 0 alone checkpoints, writes the summary and
// prints progress; validation is split between the ranks (StridedSampler) and summed. All ranks
// resume from rank 0's checkpoint (rank 0 reads it and broadcasts it), and a stop (signal,
// --max-runtime, unreadable data, a non-finite loss) on any rank is agreed on at the next step, so
// all stop together with one checkpoint. micro_batches = M > 1 makes one process compute what M
// ranks compute: each step's M x batch_size images are M micro-batches, micro-batch i being virtual
// rank i's share, with BatchNorm statistics per micro-batch and the running statistics of the first
// (rank 0's). The global batch is batch_size x world_size x micro_batches.
//
// Single-threaded API: call Run once per process, from the main thread.
#ifndef PERCH_TRAINER_TRAINER_H_
#define PERCH_TRAINER_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <string>

#include "trainer/distributed.h"

namespace perch::trainer {

inline constexpr int kExitCheckpointed = 85;
inline constexpr int kExitConfigMismatch = 2;

struct TrainOptions {
  std::string data_dir;
  // Tar shards (WebDataset, shard_source.h) instead of an ImageFolder at data_dir: a pattern,
  // relative to data_dir unless absolute.
  std::string data_shards;
  bool class_tars = false;     // shards are per-class tars: label = rank of the tar's name
  int64_t epoch_samples = 0;   // samples per epoch over all ranks (required with shards)
  int64_t classes = 0;         // with .cls labels: class count (default: --val-dir's)
  int shuffle_buffer = 1000;   // samples per shard stream
  int shard_streams = 4;       // shard streams per rank (part of the data order)
  std::string val_dir;         // optional
  std::string checkpoint_dir;  // required unless loader_only
  std::string summary_json;    // optional
  std::string arch = "resnet50";
  int epochs = 90;
  int batch_size = 256;   // per rank and micro-batch
  int micro_batches = 1;  // micro-batches per step and rank (see above)
  int workers = 0;        // 0: one per core
  int prefetch = 3;       // batches in flight
  int image_size = 224;
  double lr = 0;  // 0: 0.1 * global batch / 256 (Goyal et al. linear scaling)
  double momentum = 0.9;
  double weight_decay = 1e-4;
  bool norm_weight_decay = true;       // false: no weight decay on BatchNorm parameters and biases
  std::string lr_schedule = "cosine";  // cosine | step (x0.1 every lr_step_epochs)
  double warmup_epochs = 1;
  int lr_step_epochs = 30;
  double label_smoothing = 0;
  int64_t max_steps = 0;               // 0: no limit beyond epochs
  double max_runtime_s = 0;            // 0: none
  double max_skipped_fraction = 0.1;   // stop when more of the images read are unreadable
  int64_t checkpoint_every_steps = 0;  // 0: at epoch ends and on stop only
  uint64_t seed = 0;
  std::string device = "auto";  // auto | cpu | cuda
  // "" (bf16 on CUDA, fp32 on the CPU) | fp32 | bf16: bf16 autocast for the forward pass, with
  // fp32 weights, gradients and optimizer state (no loss scaling: bf16 has fp32's range).
  std::string precision;
  // "" (channels-last on CUDA, contiguous on the CPU) | channels-last | contiguous: the layout of
  // the 4-d weights and of the images (channels-last is what cuDNN's tensor-core kernels want).
  std::string memory_format;
  int threads = 0;           // intra-op threads for libtorch; 0: its default
  int log_every = 50;        // steps
  std::string hint_command;  // gets each epoch's remaining file order on stdin
  bool loader_only = false;
  DistributedOptions dist;                        // world_size 1: no process group
  const std::atomic<int>* stop_signal = nullptr;  // nonzero: checkpoint and stop
};

// Returns the process exit code: 0 done, 85 checkpointed before the end, 2 the checkpoint
// belongs to a different configuration, 1 any other error (already logged), including "more
// than max_skipped_fraction of the images read (and at least 10) could not be read or decoded",
// which usually means the data source broke; training is checkpointed before the failing batch
// then, so a restart retries it.
int Run(const TrainOptions& options);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_TRAINER_H_
