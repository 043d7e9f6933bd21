#include "trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "trainer/checkpoint.h"
#include "trainer/distributed.h"
#include "trainer/image_folder.h"
#include "trainer/loader.h"
#include "trainer/resnet.h"
#include "trainer/sampler.h"
#include "trainer/schedule.h"
#include "trainer/sgd.h"
#include "trainer/trainer_support.h"

namespace perch::trainer {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

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
  Training(const TrainOptions& o, std::unique_ptr<ImageFolder> train_data,
           std::unique_ptr<ImageFolder> val_data, int workers, ProcessGroup* group);
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
  int Checkpointed();
  int Finish();

  const TrainOptions& o_;
  const Clock::time_point run_start_ = Clock::now();
  std::unique_ptr<ImageFolder> train_data_;
  std::unique_ptr<ImageFolder> val_data_;
  ProcessGroup* group_;
  bool cuda_ = false;
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
};

Training::Training(const TrainOptions& o, std::unique_ptr<ImageFolder> train_data,
                   std::unique_ptr<ImageFolder> val_data, int workers, ProcessGroup* group)
    : o_(o), train_data_(std::move(train_data)), val_data_(std::move(val_data)), group_(group) {
  cuda_ = o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available());
  const int gpu = group_ != nullptr ? o.dist.local_rank : 0;
  device_ = cuda_ ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu))
                  : torch::Device(torch::kCPU);
  if (cuda_) {
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
    at::globalContext().setBenchmarkCuDNN(true);
  }
  // Model, optimizer, schedule. The model's initial weights come from the seeded CPU generator
  // (identical on every rank; rank 0's are broadcast anyway).
  torch::manual_seed(o.seed);
  const int64_t num_classes = static_cast<int64_t>(train_data_->classes().size());
  model_ = ResNet(o.arch, num_classes);
  model_->to(device_);
  if (cuda_) {  // channels_last
    torch::NoGradGuard no_grad;
    for (auto& p : model_->parameters()) {
      if (p.dim() == 4) {
        p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
      }
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : model_->named_parameters()) {
    params.emplace_back(p.key(), p.value());
  }
  sgd_ = std::make_unique<Sgd>(params, o.momentum, o.weight_decay, o.norm_weight_decay);

  const int rank = group_ != nullptr ? group_->rank() : 0;
  LoaderOptions lo;
  lo.batch_size = o.batch_size * o.micro_batches;
  lo.workers = workers;
  lo.image_size = o.image_size;
  lo.train = true;
  lo.seed = o.seed;
  lo.prefetch = o.prefetch;
  lo.pin_memory = cuda_;
  lo.sampler = std::make_shared<DistributedSampler>(static_cast<int64_t>(train_data_->size()),
                                                    o.seed, Replicas(), rank * o.micro_batches,
                                                    o.micro_batches, o.batch_size);
  loader_ = std::make_unique<Loader>(*train_data_, lo);
  if (val_data_ && primary()) {
    LoaderOptions vo = lo;
    vo.train = false;
    vo.prefetch = 2;
    vo.batch_size = o.batch_size;
    vo.sampler = nullptr;
    val_loader_ = std::make_unique<Loader>(*val_data_, vo);
  }

  const int64_t steps_per_epoch = loader_->BatchesPerEpoch();
  total_steps_ = steps_per_epoch * o.epochs;
  if (o.max_steps > 0) {
    total_steps_ = std::min(total_steps_, o.max_steps);
  }
  const int64_t global_batch = static_cast<int64_t>(o.batch_size) * Replicas();
  schedule_.kind = o.lr_schedule == "step" ? Schedule::Kind::kStep : Schedule::Kind::kCosine;
  schedule_.base_lr = o.lr > 0 ? o.lr : 0.1 * static_cast<double>(global_batch) / 256.0;
  schedule_.warmup_steps =
      std::min<int64_t>(total_steps_ / 2, std::llround(o.warmup_epochs * steps_per_epoch));
  schedule_.total_steps = total_steps_;
  schedule_.step_size = std::max<int64_t>(1, o.lr_step_epochs * steps_per_epoch);

  // What a checkpoint must agree with to be resumed (workers, device, logging may change; so
  // may the split of the replicas between processes and micro-batches).
  config_ = {{"arch", o.arch},
             {"batch_size", o.batch_size},
             {"replicas", Replicas()},
             {"sampler", "torch.utils.data.DistributedSampler"},
             {"image_size", o.image_size},
             {"epochs", o.epochs},
             {"max_steps", o.max_steps},
             {"seed", o.seed},
             {"lr", schedule_.base_lr},
             {"lr_schedule", o.lr_schedule},
             {"warmup_steps", schedule_.warmup_steps},
             {"momentum", o.momentum},
             {"weight_decay", o.weight_decay},
             {"norm_weight_decay", o.norm_weight_decay},
             {"label_smoothing", o.label_smoothing},
             {"classes", num_classes},
             {"train_images", train_data_->size()}};
  wait_at_start_ = loader_->stats().wait_seconds;
  window_wait0_ = wait_at_start_;
}

// Rank 0 reads the checkpoint; `header` ([exit code + 1 or 0, epoch, position, step,
// images_seen, finished, then per parameter 1 if it has a momentum buffer]) and the tensors go
// to the other ranks, so that every rank starts from rank 0's state.
void Training::BroadcastResumeState(std::vector<double>* header) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (const auto& p : model_->named_parameters()) {
    named.emplace_back(p.key(), p.value());
  }
  std::map<std::string, at::Tensor> momentum = sgd_->State();
  if (primary()) {
    for (const auto& [name, t] : named) {
      header->push_back(momentum.count(name) ? 1 : 0);
    }
  } else {
    header->assign(6 + named.size(), 0);
  }
  *header = group_->AllReduceSum(*header);  // the others contribute zeros
  if ((*header)[0] != 0) {
    return;
  }
  std::vector<at::Tensor> tensors;
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : NamedState(model_)) {
      tensors.push_back(t);
    }
    for (size_t i = 0; i < named.size(); ++i) {
      if ((*header)[6 + i] != 0) {
        if (!primary()) {
          momentum[named[i].first] = torch::zeros_like(named[i].second);
        }
        tensors.push_back(momentum[named[i].first]);
      }
    }
    group_->Broadcast(tensors);
  }
  if (!primary()) {
    sgd_->LoadState(momentum);
    epoch_ = static_cast<int64_t>((*header)[1]);
    position_ = static_cast<int64_t>((*header)[2]);
    step_ = static_cast<int64_t>((*header)[3]);
    images_seen_ = static_cast<int64_t>((*header)[4]);
    finished_ = (*header)[5] != 0;
  }
}

std::optional<int> Training::Resume() {
  std::optional<int> rc;
  if (primary()) {
    try {
      fs::create_directories(o_.checkpoint_dir);
      Checkpoint ckpt;
      std::string error;
      if (LoadCheckpoint(o_.checkpoint_dir, &ckpt, &error)) {
        const json saved = json::parse(ckpt.config);
        if (saved != config_) {
          spdlog::error(
              "the checkpoint in {} was made with other settings; use the original arguments or "
              "another --checkpoint-dir.\n  checkpoint: {}\n  now:        {}",
              o_.checkpoint_dir, saved.dump(), config_.dump());
          rc = kExitConfigMismatch;
        } else {
          LoadInto(model_, ckpt.model);
          sgd_->LoadState(ckpt.momentum);
          if (ckpt.rng_cpu.numel() > 0) {
            auto gen = at::detail::getDefaultCPUGenerator();
            std::lock_guard<std::mutex> lock(gen.mutex());
            gen.set_state(ckpt.rng_cpu);
          }
          epoch_ = ckpt.epoch;
          position_ = ckpt.position;
          step_ = ckpt.step;
          images_seen_ = ckpt.images_seen;
          finished_ = ckpt.finished;
          totals_ = json::parse(ckpt.stats);
          totals_["restarts"] = JsonInt(totals_, "restarts") + 1;
          spdlog::info("resumed from {}: epoch {}, position {}, step {}", o_.checkpoint_dir, epoch_,
                       position_, step_);
        }
      } else if (!error.empty()) {
        spdlog::error("cannot load the checkpoint: {}", error);
        rc = 1;
      }
    } catch (const std::exception& e) {
      spdlog::error("checkpoint directory {}: {}", o_.checkpoint_dir, e.what());
      rc = 1;
    }
  }
  if (group_ != nullptr) {
    std::vector<double> header = {rc ? *rc + 1.0 : 0.0,
                                  static_cast<double>(epoch_),
                                  static_cast<double>(position_),
                                  static_cast<double>(step_),
                                  static_cast<double>(images_seen_),
                                  finished_ ? 1.0 : 0.0};
    BroadcastResumeState(&header);
    if (header[0] != 0) {
      rc = static_cast<int>(header[0]) - 1;
    }
  }
  if (totals_.contains("last_loss")) {
    last_loss_ = JsonDouble(totals_, "last_loss");
  }
  if (totals_.contains("val_top1")) {
    val_ = Metrics{JsonDouble(totals_, "val_loss"), JsonDouble(totals_, "val_top1"),
                   JsonDouble(totals_, "val_top5"), JsonInt(totals_, "val_images")};
  }
  return rc;
}

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
      if (cuda_) {
        x = x.contiguous(at::MemoryFormat::ChannelsLast);
        SetCudaAutocast(true);
      }
      torch::Tensor y = batch.labels.narrow(0, begin, n).to(device_, /*non_blocking=*/true);
      torch::Tensor logits = model_->forward(x);
      torch::Tensor loss = torch::nn::functional::cross_entropy(
          logits.to(torch::kFloat), y,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(o_.label_smoothing));
      if (cuda_) {
        SetCudaAutocast(false);
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

json Training::CurrentTotals() const {
  json t = totals_;
  const LoaderStats st = loader_->stats();
  t["train_seconds"] = JsonDouble(totals_, "train_seconds") + train_seconds_;
  t["wait_seconds"] = JsonDouble(totals_, "wait_seconds") + (st.wait_seconds - wait_at_start_);
  t["images"] = JsonInt(totals_, "images") + run_images_;
  t["skipped_images"] = JsonInt(totals_, "skipped_images") + st.skipped;
  t["last_loss"] = last_loss_;
  if (val_) {
    t["val_loss"] = val_->loss;
    t["val_top1"] = val_->top1;
    t["val_top5"] = val_->top5;
    t["val_images"] = val_->images;
  }
  return t;
}

void Training::Save(const char* why) {
  if (!primary()) {
    return;
  }
  const auto t0 = Clock::now();
  Checkpoint c;
  c.model = StateDictOrder(model_);
  c.momentum = sgd_->State();
  c.epoch = epoch_;
  c.position = position_;
  c.step = step_;
  c.images_seen = images_seen_;
  c.finished = finished_;
  c.config = config_.dump();
  c.stats = CurrentTotals().dump();
  c.rng_cpu = at::detail::getDefaultCPUGenerator().get_state();
  SaveCheckpoint(o_.checkpoint_dir, c);
  spdlog::info("checkpoint ({}) at epoch {} position {} step {} saved in {:.2f} s", why, epoch_,
               position_, step_, Seconds(t0));
}

json Training::Summary(const char* status) {
  const json t = CurrentTotals();
  const double wait = loader_->stats().wait_seconds - wait_at_start_;
  json s = {
      {"status", status},
      {"arch", o_.arch},
      {"device", cuda_ ? "cuda" : "cpu"},
      {"world_size", group_ != nullptr ? group_->world_size() : 1},
      {"epochs", o_.epochs},
      {"epoch", epoch_},
      {"step", step_},
      {"total_steps", total_steps_},
      {"images_seen", images_seen_},
      {"train_loss", last_loss_},
      {"run",
       {{"steps", run_steps_},
        {"images", run_images_},
        {"train_seconds", train_seconds_},
        {"images_per_second", run_images_ / std::max(train_seconds_, 1e-9)},
        {"data_wait_fraction", wait / std::max(train_seconds_, 1e-9)}}},
      {"images_per_second", JsonInt(t, "images") / std::max(JsonDouble(t, "train_seconds"), 1e-9)},
      {"data_wait_fraction",
       JsonDouble(t, "wait_seconds") / std::max(JsonDouble(t, "train_seconds"), 1e-9)},
      {"skipped_images", JsonInt(t, "skipped_images")},
      {"restarts", JsonInt(t, "restarts")},
      {"checkpoint_dir", o_.checkpoint_dir}};
  if (val_) {
    s["val"] = {
        {"top1", val_->top1}, {"top5", val_->top5}, {"loss", val_->loss}, {"images", val_->images}};
  }
  if (primary()) {
    WriteSummary(o_.summary_json, s);
  }
  return s;
}

void Training::LogProgress(double lr) {
  if (!primary() || o_.log_every <= 0 || step_ % o_.log_every != 0) {
    return;
  }
  const double secs = Seconds(window_start_);
  const double wait = loader_->stats().wait_seconds - window_wait0_;
  std::printf("epoch %lld step %lld/%lld lr %.4g loss %.4f %.1f images/s data wait %.0f%%\n",
              static_cast<long long>(epoch_), static_cast<long long>(step_),
              static_cast<long long>(total_steps_), lr, window_loss_ / window_steps_,
              window_images_ / std::max(secs, 1e-9), 100.0 * wait / std::max(secs, 1e-9));
  std::fflush(stdout);
  window_start_ = Clock::now();
  window_wait0_ = loader_->stats().wait_seconds;
  window_images_ = 0;
  window_loss_ = 0;
  window_steps_ = 0;
}

// Every rank returns 85 after rank 0 has saved (the barrier keeps a launcher such as torchrun
// from killing rank 0 mid-save when another rank exits first).
int Training::Checkpointed() {
  Save(o_.stop_signal != nullptr && o_.stop_signal->load() != 0 ? "signal" : "stop");
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

int Training::Train() {
  if (cuda_) {
    SetCudaAutocast(false);
  }
  const int64_t epoch_length = loader_->EpochLength();
  Batch batch;
  while (!finished_ && epoch_ < o_.epochs && step_ < total_steps_) {
    SendHints(o_.hint_command, *train_data_, loader_->EpochOrder(epoch_), position_);
    loader_->StartEpoch(epoch_, position_);
    model_->train();
    auto loop_start = Clock::now();
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
    ++epoch_;
    position_ = 0;
    if (val_loader_ && (epoch_ < o_.epochs && step_ < total_steps_)) {
      val_ = Evaluate(model_, *val_loader_, device_, cuda_, cuda_);
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
    val_ = Evaluate(model_, *val_loader_, device_, cuda_, cuda_);
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

}  // namespace

int Run(const TrainOptions& o) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int workers = o.workers > 0 ? o.workers : cores;
  if (o.threads > 0) {
    torch::set_num_threads(o.threads);
  }
  std::unique_ptr<ImageFolder> train_data;
  std::unique_ptr<ImageFolder> val_data;
  try {
    train_data = std::make_unique<ImageFolder>(o.data_dir);
    if (!o.val_dir.empty()) {
      val_data = std::make_unique<ImageFolder>(o.val_dir);
      if (val_data->classes() != train_data->classes()) {
        spdlog::error("--val-dir {} has different classes than --data-dir {}", o.val_dir,
                      o.data_dir);
        return 1;
      }
    }
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return 1;
  }
  spdlog::info("{}: {} images in {} classes{}", o.data_dir, train_data->size(),
               train_data->classes().size(),
               val_data ? fmt::format("; val {}: {} images", o.val_dir, val_data->size()) : "");
  if (o.loader_only) {
    return RunLoaderOnly(o, *train_data, workers);
  }
  if (o.device == "cuda" && !torch::cuda::is_available()) {
    spdlog::error("--device cuda, but this libtorch has no CUDA or no GPU is visible");
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
