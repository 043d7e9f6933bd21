#include "trainer/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "trainer/checkpoint.h"
#include "trainer/distributed.h"
#include "trainer/image_folder.h"
#include "trainer/sampler.h"
#include "trainer/train_data.h"
#include "trainer/training.h"

namespace perch::trainer {

namespace fs = std::filesystem;

bool Training::StopRequested() const {
  return (o_.stop_signal != nullptr && o_.stop_signal->load() != 0) ||
         (o_.max_runtime_s > 0 && Seconds(run_start_) >= o_.max_runtime_s);
}

// A broken mount or origin makes every read fail; training on through the epochs would only
// produce a useless model.
bool Training::TooManyUnreadable() const {
  if (o_.max_skipped_fraction >= 1) {
    return false;
  }
  const LoaderStats ls = loader_->stats();
  const int64_t attempted = ls.images + ls.skipped;
  if (ls.skipped >= 10 && ls.skipped > o_.max_skipped_fraction * attempted) {
    spdlog::error(
        "{} of {} images read so far could not be read or decoded (more than {:.0f} %); "
        "stopping. Is the data source healthy? (--max-skipped-fraction 1 disables this)",
        ls.skipped, attempted, 100 * o_.max_skipped_fraction);
    return true;
  }
  return false;
}

// Forward and backward over the batch's micro-batches, gradients summed over the micro-batches
// and ranks and divided by the number of micro-batches that trained, then the SGD step. A
// micro-batch of fewer than 2 images is left out: BatchNorm in training mode needs more than one
// value per channel, which one small image does not give at layer4 (1x1 at 32 px).
StepResult Training::Step(const Batch& batch, bool bad_data, double lr) {
  const int m = o_.micro_batches;
  const int64_t chunk = (batch.size + m - 1) / m;
  sgd_->ZeroGrad();
  std::vector<at::Tensor> buffers;  // running statistics after micro-batch 0 (rank 0's)
  int64_t contributions = 0;
  int64_t images = 0;
  double loss_sum = 0;
  for (int i = 0; i < m && !bad_data; ++i) {
    const int64_t begin = std::min(batch.size, i * chunk);
    const int64_t n = std::min(batch.size, begin + chunk) - begin;
    if (n >= 2) {
      torch::Tensor x = batch.images.narrow(0, begin, n).to(device_, /*non_blocking=*/true);
      if (channels_last_) {
        x = x.contiguous(at::MemoryFormat::ChannelsLast);
      }
      if (autocast_) {
        SetAutocast(device_.type(), true);
      }
      torch::Tensor y = batch.labels.narrow(0, begin, n).to(device_, /*non_blocking=*/true);
      torch::Tensor logits = model_->forward(x);
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          logits.to(torch::kFloat), y,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(o_.label_smoothing));
      if (autocast_) {
        SetAutocast(device_.type(), false);
      }
      loss.backward();
      // item() waits for the step, which also guarantees that the non_blocking copy out of the
      // loader's pinned buffer is complete before Next() reuses it.
      loss_sum += loss.item<double>();
      ++contributions;
      images += n;
    }
    if (i == 0 && m > 1) {
      torch::NoGradGuard no_grad;
      for (const auto& b : model_->named_buffers()) {
        buffers.push_back(b.value().clone());
      }
    }
  }
  if (!buffers.empty()) {
    torch::NoGradGuard no_grad;
    size_t i = 0;
    for (const auto& b : model_->named_buffers()) {
      b.value().copy_(buffers[i++]);
    }
  }
  StepResult r;
  r.stop = StopRequested();
  r.bad_data = bad_data;
  std::vector<double> control = {static_cast<double>(contributions), static_cast<double>(images),
                                 loss_sum, r.stop ? 1.0 : 0.0, bad_data ? 1.0 : 0.0};
  std::vector<at::Tensor> grads;
  if (group_ != nullptr) {
    for (auto& p : model_->parameters()) {
      if (!p.grad().defined()) {
        p.mutable_grad() = torch::zeros_like(p);
      }
      grads.push_back(p.grad());
    }
    control = group_->AllReduceSum(control);
    if (control[4] == 0 && control[0] > 0) {
      group_->AllReduceSum(grads);
    }
  }
  r.contributions = static_cast<int64_t>(control[0]);
  r.images = static_cast<int64_t>(control[1]);
  r.loss = r.contributions > 0 ? control[2] / r.contributions : 0;
  r.stop = control[3] > 0;
  r.bad_data = control[4] > 0;
  if (r.bad_data || r.contributions == 0) {
    return r;
  }
  if (r.contributions > 1) {
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.grad().defined()) {
        p.grad().div_(static_cast<double>(r.contributions));
      }
    }
  }
  sgd_->Step(lr);
  return r;
}

int Training::Checkpointed() {
  const bool signalled = o_.stop_signal != nullptr && o_.stop_signal->load() != 0;
  const bool timed_out = o_.max_runtime_s > 0 && Seconds(run_start_) >= o_.max_runtime_s;
  Save(signalled ? "signal" : timed_out ? "max-runtime" : "stop on another rank");
  Summary("checkpointed");
  if (group_ != nullptr) {
    group_->Barrier();
  }
  if (primary()) {
    std::printf("checkpointed at step %lld of %lld; exit %d (rerun the same command to resume)\n",
                static_cast<long long>(step_), static_cast<long long>(total_steps_),
                kExitCheckpointed);
  }
  return kExitCheckpointed;
}

// Every rank evaluates its part of the validation set with rank 0's BatchNorm statistics (the
// model rank 0 saves); the sums are all-reduced.
Metrics Training::Validate() {
  if (group_ != nullptr) {
    std::vector<at::Tensor> buffers;
    for (const auto& b : model_->named_buffers()) {
      buffers.push_back(b.value());
    }
    torch::NoGradGuard no_grad;
    group_->Broadcast(buffers);
  }
  const Metrics m = Evaluate(model_, *val_loader_, device_, autocast_, channels_last_);
  if (group_ == nullptr) {
    return m;
  }
  const double n = static_cast<double>(m.images);
  const std::vector<double> sums =
      group_->AllReduceSum({m.loss * n, std::round(m.top1 * n), std::round(m.top5 * n), n});
  Metrics all;
  all.images = static_cast<int64_t>(sums[3]);
  if (all.images > 0) {
    all.loss = sums[0] / sums[3];
    all.top1 = sums[1] / sums[3];
    all.top5 = sums[2] / sums[3];
  }
  return all;
}

int Training::Train() {
  if (autocast_) {
    SetAutocast(device_.type(), false);
  }
  const int64_t epoch_length = loader_->EpochLength();
  Batch batch;
  while (!finished_ && epoch_ < o_.epochs && step_ < total_steps_) {
    SendHints(o_.hint_command, loader_->HintPaths(epoch_, position_));
    loader_->StartEpoch(epoch_, position_);
    model_->train();
    auto loop_start = Clock::now();
    const auto epoch_start = loop_start;
    const int64_t epoch_images0 = run_images_;
    const double epoch_wait0 = loader_->stats().wait_seconds;
    double epoch_loss = 0;
    int64_t epoch_steps = 0;
    while (step_ < total_steps_ && loader_->Next(&batch)) {
      const double lr = schedule_.At(step_);
      const StepResult r = Step(batch, batch.skipped > 0 && TooManyUnreadable(), lr);
      if (r.bad_data) {  // checkpoint before this batch, so that a restart retries it
        train_seconds_ += Seconds(loop_start);
        Save("unreadable data");
        Summary("unreadable-data");
        return 1;
      }
      position_ = batch.end_position;
      if (r.contributions > 0) {
        last_loss_ = r.loss;
        ++step_;
        ++run_steps_;
        images_seen_ += r.images;
        run_images_ += r.images;
        window_images_ += r.images;
        window_loss_ += last_loss_;
        ++window_steps_;
        epoch_loss += last_loss_;
        ++epoch_steps;
        if (!std::isfinite(last_loss_)) {
          spdlog::error("loss is {} at step {}; stopping (lower --lr?)", last_loss_, step_);
          train_seconds_ += Seconds(loop_start);
          Summary("diverged");
          return 1;
        }
        LogProgress(lr);
      }
      if (r.stop) {
        train_seconds_ += Seconds(loop_start);
        if (position_ >= epoch_length) {
          ++epoch_;
          position_ = 0;
        }
        return Checkpointed();
      }
      if (r.contributions > 0 && o_.checkpoint_every_steps > 0 &&
          step_ % o_.checkpoint_every_steps == 0) {
        train_seconds_ += Seconds(loop_start);
        Save("periodic");
        loop_start = Clock::now();
      }
    }
    train_seconds_ += Seconds(loop_start);
    if (position_ < epoch_length) {
      break;  // max_steps reached mid-epoch
    }
    EpochDone(epoch_start, epoch_images0, epoch_wait0,
              epoch_loss / std::max<int64_t>(1, epoch_steps));
    ++epoch_;
    position_ = 0;
    if (val_loader_ && (epoch_ < o_.epochs && step_ < total_steps_)) {
      val_ = Validate();
    }
    if (val_loader_ && primary() && (epoch_ < o_.epochs && step_ < total_steps_)) {
      std::printf("epoch %lld val top-1 %.2f%% top-5 %.2f%% loss %.4f (%lld images)\n",
                  static_cast<long long>(epoch_ - 1), 100 * val_->top1, 100 * val_->top5,
                  val_->loss, static_cast<long long>(val_->images));
      std::fflush(stdout);
    }
    if (epoch_ < o_.epochs && step_ < total_steps_) {
      Save("epoch");
    }
  }
  return Finish();
}

int Training::Finish() {
  finished_ = true;
  if (val_loader_ && (run_steps_ > 0 || !val_)) {
    val_ = Validate();
  }
  if (primary()) {
    Save("finished");
    SaveStateDict((fs::path(o_.checkpoint_dir) / "model_final.pt").string(),
                  StateDictOrder(model_));
  }
  if (group_ != nullptr) {
    group_->Barrier();
  }
  const json s = Summary("finished");
  if (!primary()) {
    return 0;
  }
  std::printf("finished: %lld steps, %lld images; this run %.1f images/s, data wait %.1f%%\n",
              static_cast<long long>(step_), static_cast<long long>(images_seen_),
              s["run"]["images_per_second"].get<double>(),
              100 * s["run"]["data_wait_fraction"].get<double>());
  if (val_) {
    std::printf("val top-1 %.2f%% top-5 %.2f%% loss %.4f (%lld images)\n", 100 * val_->top1,
                100 * val_->top5, val_->loss, static_cast<long long>(val_->images));
  }
  std::printf("weights: %s\n", (fs::path(o_.checkpoint_dir) / "model_final.pt").c_str());
  return 0;
}

int Run(const TrainOptions& o) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int workers = o.workers > 0 ? o.workers : cores;
  if (o.threads > 0) {
    torch::set_num_threads(o.threads);
  }
  TrainData train_data;
  std::unique_ptr<ImageFolder> val_data;
  try {
    if (!o.val_dir.empty()) {
      val_data = std::make_unique<ImageFolder>(o.val_dir);
    }
    train_data = LoadTrainData(o, val_data.get());
    bool same = true;
    if (val_data && train_data.classes.empty()) {  // .cls labels: only the count is known
      same = static_cast<int64_t>(val_data->classes().size()) == train_data.num_classes;
    } else if (val_data) {
      same = val_data->classes() == train_data.classes;
    }
    if (!same) {
      spdlog::error("--val-dir {} has different classes than the training data", o.val_dir);
      return 1;
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  spdlog::info("{}{}", train_data.Describe(o),
               val_data ? fmt::format("; val {}: {} images", o.val_dir, val_data->size()) : "");
  if (o.loader_only) {
    try {
      std::shared_ptr<const Sampler> sampler;
      if (!train_data.sharded()) {
        sampler =
            std::make_shared<DistributedSampler>(train_data.EpochSamples(o), o.seed, 1, 0, 1, 1);
      }
      return RunLoaderOnly(o, MakeTrainSource(o, train_data, sampler, 0, 1), workers);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      return 1;
    }
  }
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    spdlog::error("--device cuda, but this libtorch has no CUDA or no GPU is visible");
    return 1;
  }
  // Each rank trains on the GPU of its local rank (CUDA_VISIBLE_DEVICES narrows what it sees).
  if (o.dist.world_size > 1 && o.device != "cpu" && torch::cuda::is_available() &&
      o.dist.local_rank >= static_cast<int>(torch::cuda::device_count())) {
    spdlog::error(
        "rank {} would train on GPU {} (its local rank), but this node shows {} CUDA device(s): "
        "start at most that many ranks per node, or train with --device cpu",
        o.dist.rank, o.dist.local_rank, torch::cuda::device_count());
    return 1;
  }
  try {
    std::unique_ptr<ProcessGroup> group;
    if (o.dist.world_size > 1) {
      group = std::make_unique<ProcessGroup>(o.dist);
      spdlog::info("rank {} of {} joined the process group at {}:{}", o.dist.rank,
                   o.dist.world_size, o.dist.master_addr, o.dist.master_port);
    }
    Training training(o, std::move(train_data), std::move(val_data), workers, group.get());
    if (auto rc = training.Resume()) {
      return *rc;
    }
    return training.Train();
  } catch (const std::exception& e) {
    spdlog::error("training failed: {}", e.what());
    return 1;
  }
}

}  // namespace perch::trainer
