// Pieces of the trainer used by Run (trainer.cc): evaluation, the model's state under
// torchvision's names, JSON helpers, prefetch hints, and the loader-only benchmark.
//
// Thread-safety: call from the training thread.
#ifndef PERCH_TRAINER_TRAINER_SUPPORT_H_
#define PERCH_TRAINER_TRAINER_SUPPORT_H_

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainer/checkpoint.h"
#include "trainer/image_folder.h"
#include "trainer/loader.h"
#include "trainer/resnet.h"
#include "trainer/sample_source.h"
#include "trainer/trainer.h"

namespace perch::trainer {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point since);

// bf16 autocast on `device` (CUDA or the CPU), on or off; off also drops the cached bf16 weight
// copies.
void SetAutocast(c10::DeviceType device, bool enabled);

struct Metrics {
  double loss = 0;
  double top1 = 0;
  double top5 = 0;
  int64_t images = 0;
};

// Runs the model over `loader`'s epoch 0 in eval mode.
Metrics Evaluate(ResNet& model, Loader& loader, const torch::Device& device, bool autocast,
                 bool channels_last);

// Parameters, then buffers (the order every rank uses for collectives).
TensorMap NamedState(ResNet& model);
// torchvision's state_dict order: each module's parameters then its buffers, module by module.
TensorMap StateDictOrder(ResNet& model);
// Copies `saved` into the model; throws std::runtime_error if a tensor is missing or mis-shaped.
void LoadInto(ResNet& model, const TensorMap& saved);

// utime + stime of this process so far.
double ProcessCpuSeconds();

int64_t JsonInt(const nlohmann::json& j, const char* key);
double JsonDouble(const nlohmann::json& j, const char* key);
// Writes `summary` to `path` atomically; nothing when `path` is empty.
void WriteSummary(const std::string& path, const nlohmann::json& summary);

// Pipes `paths` to `command`, one per line (perchctl hint). A failing command is logged as a
// warning; training goes on.
void SendHints(const std::string& command, const std::vector<std::string>& paths);

// --loader-only: runs a loader over `source` for o.epochs (or o.max_steps batches); returns the
// exit code.
int RunLoaderOnly(const TrainOptions& o, std::shared_ptr<SampleSource> source, int workers);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_TRAINER_SUPPORT_H_
