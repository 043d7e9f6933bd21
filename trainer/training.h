// Training: one run of perch-train's training loop (the model, loaders, schedule, where training
// stands, this run's counters), used by Run() (trainer.h describes the behaviour). Internal to
// the trainer: training.cc holds setup, resume and checkpoint state, trainer.cc the step loop.
//
// Thread-safety: construct and call from the training thread only.
#ifndef PERCH_TRAINER_TRAINING_H_
#define PERCH_TRAINER_TRAINING_H_

#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "trainer/distributed.h"
#include "trainer/image_folder.h"
#include "trainer/loader.h"
#include "trainer/resnet.h"
#include "trainer/schedule.h"
#include "trainer/sgd.h"
#include "trainer/train_data.h"
#include "trainer/trainer.h"
#include "trainer/trainer_support.h"

namespace perch::trainer {

using json = nlohmann::json;

// What one step agreed on across the ranks (sums over the ranks where world_size > 1).
struct StepResult {
  int64_t contributions = 0;  // micro-batches with >= 2 images, over all ranks
  int64_t images = 0;         // images trained on, over all ranks
  double loss = 0;            // mean over the contributing micro-batches
  bool stop = false;          // a rank was signalled or ran out of time
  bool bad_data = false;      // a rank saw too many unreadable images
};

// One training run (one call of Run): the model, loaders, schedule, where training stands, and
// this run's counters. Methods are called from the training thread only.
class Training {
 public:
  Training(const TrainOptions& o, TrainData train_data, std::unique_ptr<ImageFolder> val_data,
           int workers, ProcessGroup* group);
  // Returns an exit code, or nullopt to go on training.
  std::optional<int> Resume();
  int Train();

 private:
  bool primary() const { return group_ == nullptr || group_->rank() == 0; }
  int Replicas() const { return (group_ ? group_->world_size() : 1) * o_.micro_batches; }
  bool StopRequested() const;
  bool TooManyUnreadable() const;
  StepResult Step(const Batch& batch, bool bad_data, double lr);
  void BroadcastResumeState(std::vector<double>* header);
  json CurrentTotals() const;
  void Save(const char* why);
  json Summary(const char* status);
  void LogProgress(double lr);
  void EpochDone(Clock::time_point start, int64_t images_before, double wait_before, double loss);
  int Checkpointed();
  Metrics Validate();
  int Finish();

  const TrainOptions& o_;
  const Clock::time_point run_start_ = Clock::now();
  TrainData train_data_;
  std::unique_ptr<ImageFolder> val_data_;
  ProcessGroup* group_;
  bool cuda_ = false;
  bool autocast_ = false;       // bf16 autocast on device_ (--precision)
  bool channels_last_ = false;  // --memory-format
  torch::Device device_{torch::kCPU};
  ResNet model_{nullptr};
  std::unique_ptr<Sgd> sgd_;
  std::unique_ptr<Loader> loader_;
  std::unique_ptr<Loader> val_loader_;
  Schedule schedule_;
  int64_t total_steps_ = 0;
  json config_;

  // Where training stands (checkpointed).
  json totals_ = json::object();
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  int64_t step_ = 0;
  int64_t images_seen_ = 0;
  bool finished_ = false;

  // This run's counters; added to totals_ when saving.
  double train_seconds_ = 0;
  double wait_at_start_ = 0;
  int64_t run_images_ = 0;
  int64_t run_steps_ = 0;
  double last_loss_ = 0;
  std::optional<Metrics> val_;
  Clock::time_point window_start_ = Clock::now();
  double window_wait0_ = 0;
  int64_t window_images_ = 0;
  double window_loss_ = 0;
  int64_t window_steps_ = 0;
  json epochs_ = json::array();  // this run's epochs: images, seconds, loss, data wait
};

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_TRAINING_H_
