#include "trainer/training.h"

#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>

#include <filesystem>
#include <map>

#include "trainer/checkpoint.h"
#include "trainer/sampler.h"

namespace perch::trainer {

namespace fs = std::filesystem;

// Entries of the resume header before the per-parameter momentum flags.
constexpr size_t kHeader = 7;

Training::Training(const TrainOptions& o, TrainData train_data,
                   std::unique_ptr<ImageFolder> val_data, int workers, ProcessGroup* group)
    : o_(o), train_data_(std::move(train_data)), val_data_(std::move(val_data)), group_(group) {
  cuda_ = o.device == "cuda" || (o.device == "auto" && torch::cuda::is_available());
  const int gpu = group_ != nullptr ? o.dist.local_rank : 0;
  device_ = cuda_ ? torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(gpu))
                  : torch::Device(torch::kCPU);
  autocast_ = o.precision.empty() ? cuda_ : o.precision == "bf16";
  channels_last_ = o.memory_format.empty() ? cuda_ : o.memory_format == "channels-last";
  if (cuda_) {
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
    at::globalContext().setBenchmarkCuDNN(true);
  }
  // Model, optimizer, schedule. The model's initial weights come from the seeded CPU generator
  // (identical on every rank; rank 0's are broadcast anyway).
  torch::manual_seed(o.seed);
  const int64_t num_classes = train_data_.num_classes;
  model_ = ResNet(o.arch, num_classes);
  model_->to(device_);
  if (channels_last_) {
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
  const int world = group_ != nullptr ? group_->world_size() : 1;
  const int64_t epoch_samples = train_data_.EpochSamples(o);
  std::shared_ptr<const Sampler> sampler;
  if (!train_data_.sharded()) {
    sampler = std::make_shared<DistributedSampler>(
        epoch_samples, o.seed, Replicas(), rank * o.micro_batches, o.micro_batches, o.batch_size);
  }
  loader_ = std::make_unique<Loader>(MakeTrainSource(o, train_data_, sampler, rank, world), lo);
  if (val_data_) {  // every rank evaluates its strided part of the validation set
    LoaderOptions vo = lo;
    vo.train = false;
    vo.prefetch = 2;
    vo.batch_size = o.batch_size;
    vo.sampler = nullptr;
    if (group_ != nullptr) {
      vo.sampler = std::make_shared<StridedSampler>(static_cast<int64_t>(val_data_->size()),
                                                    group_->world_size(), rank);
    }
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
             {"sampler",
              train_data_.sharded() ? "webdataset shards" : "torch.utils.data.DistributedSampler"},
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
             {"train_images", epoch_samples}};
  if (train_data_.sharded()) {  // what the shard streams' order depends on (shard_source.h)
    config_["shards"] = train_data_.shards.size();
    config_["class_tars"] = o.class_tars;
    config_["world_size"] = world;
    config_["shard_streams"] = o.shard_streams;
    config_["shuffle_buffer"] = o.shuffle_buffer;
  }
  wait_at_start_ = loader_->stats().wait_seconds;
  window_wait0_ = wait_at_start_;
}

// Rank 0 reads the checkpoint; `header` ([exit code + 1 or 0, epoch, position, step,
// images_seen, finished, has validation results, then per parameter 1 if it has a momentum
// buffer]) and the tensors go to the other ranks, so that every rank starts from rank 0's state.
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
    header->assign(kHeader + named.size(), 0);
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
      if ((*header)[kHeader + i] != 0) {
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
    if ((*header)[6] != 0) {
      val_ = Metrics{};  // rank 0's figures; what matters here is that there are some
    }
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
  if (totals_.contains("last_loss")) {
    last_loss_ = JsonDouble(totals_, "last_loss");
  }
  if (totals_.contains("val_top1")) {
    val_ = Metrics{JsonDouble(totals_, "val_loss"), JsonDouble(totals_, "val_top1"),
                   JsonDouble(totals_, "val_top5"), JsonInt(totals_, "val_images")};
  }
  if (group_ != nullptr) {
    std::vector<double> header = {rc ? *rc + 1.0 : 0.0,
                                  static_cast<double>(epoch_),
                                  static_cast<double>(position_),
                                  static_cast<double>(step_),
                                  static_cast<double>(images_seen_),
                                  finished_ ? 1.0 : 0.0,
                                  val_ ? 1.0 : 0.0};
    BroadcastResumeState(&header);
    if (header[0] != 0) {
      rc = static_cast<int>(header[0]) - 1;
    }
  }
  return rc;
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
      {"precision", autocast_ ? "bf16" : "fp32"},
      {"memory_format", channels_last_ ? "channels-last" : "contiguous"},
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
        {"data_wait_fraction", wait / std::max(train_seconds_, 1e-9)},
        {"epochs", epochs_}}},
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

// One line and one summary entry per epoch that ended in this run: its images, the wall time from
// its start to its last step, the part of that spent waiting for the loader, and the mean training
// loss of its steps (a resumed epoch counts from the resume).
void Training::EpochDone(Clock::time_point start, int64_t images_before, double wait_before,
                         double loss) {
  const double secs = std::max(Seconds(start), 1e-9);
  const int64_t images = run_images_ - images_before;
  const double wait = loader_->stats().wait_seconds - wait_before;
  epochs_.push_back({{"epoch", epoch_},
                     {"images", images},
                     {"seconds", secs},
                     {"loss", loss},
                     {"images_per_second", images / secs},
                     {"data_wait_fraction", wait / secs}});
  if (primary()) {
    std::printf(
        "epoch %lld done: %lld images in %.2f s, %.1f images/s, data wait %.1f%%, loss %.4f\n",
        static_cast<long long>(epoch_), static_cast<long long>(images), secs, images / secs,
        100.0 * wait / secs, loss);
    std::fflush(stdout);
  }
}

// Every rank returns 85 after rank 0 has saved (the barrier keeps a launcher such as torchrun
// from killing rank 0 mid-save when another rank exits first).
}  // namespace perch::trainer
