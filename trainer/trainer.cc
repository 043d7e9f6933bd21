#include "trainer/trainer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <torch/nn/functional/loss.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "trainer/checkpoint.h"
#include "trainer/image_folder.h"
#include "trainer/loader.h"
#include "trainer/resnet.h"
#include "trainer/schedule.h"
#include "trainer/sgd.h"

namespace perch::trainer {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// bf16 autocast for CUDA. PyTorch 2.4 replaced the CUDA-specific calls with device-typed ones.
void SetCudaAutocast(bool enabled) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
  at::autocast::set_autocast_enabled(at::kCUDA, enabled);
#else
  at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  at::autocast::set_enabled(enabled);
#endif
  if (!enabled) {
    // As leaving Python's outermost autocast region does: drop the cached bf16 weight copies.
    at::autocast::clear_cache();
  }
}

struct Metrics {
  double loss = 0;
  double top1 = 0;
  double top5 = 0;
  int64_t images = 0;
};

// Runs the model over `loader`'s epoch 0 in eval mode.
Metrics Evaluate(ResNet& model, Loader& loader, const torch::Device& device, bool autocast,
                 bool channels_last) {
  torch::NoGradGuard no_grad;
  model->eval();
  loader.StartEpoch(0, 0);
  Metrics m;
  double loss_sum = 0;
  int64_t correct1 = 0;
  int64_t correct5 = 0;
  Batch batch;
  while (loader.Next(&batch)) {
    if (batch.size == 0) {
      continue;
    }
    torch::Tensor x = batch.images.to(device, /*non_blocking=*/true);
    if (channels_last) {
      x = x.contiguous(at::MemoryFormat::ChannelsLast);
    }
    torch::Tensor y = batch.labels.to(device, /*non_blocking=*/true);
    if (autocast) {
      SetCudaAutocast(true);
    }
    torch::Tensor logits = model->forward(x).to(torch::kFloat);
    if (autocast) {
      SetCudaAutocast(false);
    }
    loss_sum += torch::nn::functional::cross_entropy(logits, y).item<double>() * batch.size;
    const int64_t k = std::min<int64_t>(5, logits.size(1));
    torch::Tensor topk = std::get<1>(logits.topk(k, 1));
    torch::Tensor hits = topk.eq(y.unsqueeze(1));
    correct1 += hits.narrow(1, 0, 1).sum().item<int64_t>();
    correct5 += hits.sum().item<int64_t>();
    m.images += batch.size;
  }
  if (m.images > 0) {
    m.loss = loss_sum / m.images;
    m.top1 = static_cast<double>(correct1) / m.images;
    m.top5 = static_cast<double>(correct5) / m.images;
  }
  return m;
}

TensorMap NamedState(ResNet& model) {
  TensorMap out;
  for (const auto& p : model->named_parameters()) {
    out.emplace_back(p.key(), p.value());
  }
  for (const auto& b : model->named_buffers()) {
    out.emplace_back(b.key(), b.value());
  }
  return out;
}

// torchvision's state_dict order: each module's parameters then its buffers, module by module.
// named_parameters() + named_buffers() above groups all parameters first; Python does not care
// about order, but a state_dict printed next to torchvision's reads better in module order.
TensorMap StateDictOrder(ResNet& model) {
  TensorMap out;
  for (const auto& item : model->named_modules()) {
    const std::string prefix = item.key().empty() ? "" : item.key() + ".";
    for (const auto& p : item.value()->named_parameters(/*recurse=*/false)) {
      out.emplace_back(prefix + p.key(), p.value());
    }
    for (const auto& b : item.value()->named_buffers(/*recurse=*/false)) {
      out.emplace_back(prefix + b.key(), b.value());
    }
  }
  return out;
}

void LoadInto(ResNet& model, const TensorMap& saved) {
  std::map<std::string, at::Tensor> by_name(saved.begin(), saved.end());
  torch::NoGradGuard no_grad;
  for (auto& [name, t] : NamedState(model)) {
    auto it = by_name.find(name);
    if (it == by_name.end() || it->second.sizes() != t.sizes()) {
      throw std::runtime_error("checkpoint lacks or mis-shapes " + name);
    }
    t.copy_(it->second);
  }
}

int64_t JsonInt(const json& j, const char* key) {
  return j.contains(key) ? j[key].get<int64_t>() : 0;
}
double JsonDouble(const json& j, const char* key) {
  return j.contains(key) ? j[key].get<double>() : 0;
}

void WriteSummary(const std::string& path, const json& summary) {
  if (path.empty()) {
    return;
  }
  std::string text = summary.dump(2) + "\n";
  WriteFileAtomically(path, std::vector<char>(text.begin(), text.end()));
}

// Pipes the paths of order[from...] to `command`, one per line: with
// "perchctl hint --job NAME --file -" perchd then fetches the files in the order the loader will
// read them, ahead of it. Hints only speed things up, so a failing command is logged and
// training goes on.
void SendHints(const std::string& command, const ImageFolder& data,
               const std::vector<int64_t>& order, int64_t from) {
  if (command.empty()) {
    return;
  }
  const auto t0 = Clock::now();
  FILE* pipe = popen(command.c_str(), "w");
  if (pipe == nullptr) {
    spdlog::warn("cannot run the hint command '{}'; going on without hints", command);
    return;
  }
  bool ok = true;
  int64_t sent = 0;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, from)); i < order.size() && ok; ++i) {
    const std::string& path = data.samples()[order[i]].path;
    ok = std::fwrite(path.data(), 1, path.size(), pipe) == path.size() &&
         std::fputc('\n', pipe) != EOF;
    sent += ok ? 1 : 0;
  }
  const int status = pclose(pipe);  // SIGPIPE is ignored (main.cc): a dead reader is an error here
  if (!ok || status != 0) {
    spdlog::warn("the hint command '{}' failed ({} {}); going on without hints", command,
                 WIFEXITED(status) ? "exit" : "status",
                 WIFEXITED(status) ? WEXITSTATUS(status) : status);
    return;
  }
  spdlog::info("hinted the next {} files in {:.2f} s", sent, Seconds(t0));
}

int RunLoaderOnly(const TrainOptions& o, const ImageFolder& train_data, int workers) {
  LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.workers = workers;
  lo.image_size = o.image_size;
  lo.train = true;
  lo.seed = o.seed;
  lo.prefetch = o.prefetch;
  Loader loader(train_data, lo);
  auto t0 = Clock::now();
  int64_t batches = 0;
  int64_t images = 0;
  bool stopped = false;
  for (int epoch = 0; epoch < o.epochs && !stopped; ++epoch) {
    SendHints(o.hint_command, train_data, loader.EpochOrder(epoch), 0);
    loader.StartEpoch(epoch, 0);
    Batch batch;
    while (loader.Next(&batch)) {
      ++batches;
      images += batch.size;
      if ((o.max_steps > 0 && batches >= o.max_steps) ||
          (o.stop_signal != nullptr && o.stop_signal->load() != 0)) {
        stopped = true;
        break;
      }
    }
  }
  const double secs = Seconds(t0);
  const LoaderStats st = loader.stats();
  const double ips = images / std::max(secs, 1e-9);
  std::printf(
      "loader-only: %lld images in %.2f s = %.0f images/s with %d workers (%.0f images/s per "
      "worker), %.1f MB/s read, %lld skipped, image size %d\n",
      static_cast<long long>(images), secs, ips, workers, ips / workers,
      st.bytes / 1e6 / std::max(secs, 1e-9), static_cast<long long>(st.skipped), o.image_size);
  json s = {{"mode", "loader-only"},
            {"images", images},
            {"seconds", secs},
            {"images_per_second", ips},
            {"workers", workers},
            {"images_per_second_per_worker", ips / workers},
            {"bytes_read", st.bytes},
            {"skipped_images", st.skipped},
            {"image_size", o.image_size},
            {"batch_size", o.batch_size},
            {"data_dir", o.data_dir}};
  WriteSummary(o.summary_json, s);
  return 0;
}

}  // namespace

int Run(const TrainOptions& o) {
  const auto run_start = Clock::now();
  auto stop_requested = [&] {
    return (o.stop_signal != nullptr && o.stop_signal->load() != 0) ||
           (o.max_runtime_s > 0 && Seconds(run_start) >= o.max_runtime_s);
  };
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

  // Device and the CUDA-only speedups.
  bool cuda = false;
  if (o.device == "cuda") {
    if (!torch::cuda::is_available()) {
      spdlog::error("--device cuda, but this libtorch has no CUDA or no GPU is visible");
      return 1;
    }
    cuda = true;
  } else if (o.device == "auto") {
    cuda = torch::cuda::is_available();
  } else if (o.device != "cpu") {
    spdlog::error("--device must be auto, cpu or cuda");
    return 1;
  }
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  if (cuda) {
    at::globalContext().setAllowTF32CuBLAS(true);
    at::globalContext().setAllowTF32CuDNN(true);
    at::globalContext().setBenchmarkCuDNN(true);
  }
  const bool autocast = cuda;
  const bool channels_last = cuda;

  // Model, optimizer, schedule. The model's initial weights come from the seeded CPU generator.
  torch::manual_seed(o.seed);
  const int64_t num_classes = static_cast<int64_t>(train_data->classes().size());
  ResNet model(o.arch, num_classes);
  model->to(device);
  if (channels_last) {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) {
      if (p.dim() == 4) {
        p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
      }
    }
  }
  std::vector<std::pair<std::string, at::Tensor>> params;
  for (const auto& p : model->named_parameters()) {
    params.emplace_back(p.key(), p.value());
  }
  Sgd sgd(params, o.momentum, o.weight_decay, o.norm_weight_decay);

  LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.workers = workers;
  lo.image_size = o.image_size;
  lo.train = true;
  lo.seed = o.seed;
  lo.prefetch = o.prefetch;
  lo.pin_memory = cuda;
  Loader loader(*train_data, lo);
  std::unique_ptr<Loader> val_loader;
  if (val_data) {
    LoaderOptions vo = lo;
    vo.train = false;
    vo.prefetch = 2;
    val_loader = std::make_unique<Loader>(*val_data, vo);
  }

  const int64_t steps_per_epoch = loader.BatchesPerEpoch();
  int64_t total_steps = steps_per_epoch * o.epochs;
  if (o.max_steps > 0) {
    total_steps = std::min(total_steps, o.max_steps);
  }
  Schedule schedule;
  schedule.kind = o.lr_schedule == "step" ? Schedule::Kind::kStep : Schedule::Kind::kCosine;
  schedule.base_lr = o.lr > 0 ? o.lr : 0.1 * o.batch_size / 256.0;
  schedule.warmup_steps =
      std::min<int64_t>(total_steps / 2, std::llround(o.warmup_epochs * steps_per_epoch));
  schedule.total_steps = total_steps;
  schedule.step_size = std::max<int64_t>(1, o.lr_step_epochs * steps_per_epoch);

  // What a checkpoint must agree with to be resumed (workers, device, logging may change).
  const json config = {{"arch", o.arch},
                       {"batch_size", o.batch_size},
                       {"image_size", o.image_size},
                       {"epochs", o.epochs},
                       {"max_steps", o.max_steps},
                       {"seed", o.seed},
                       {"lr", schedule.base_lr},
                       {"lr_schedule", o.lr_schedule},
                       {"warmup_steps", schedule.warmup_steps},
                       {"momentum", o.momentum},
                       {"weight_decay", o.weight_decay},
                       {"norm_weight_decay", o.norm_weight_decay},
                       {"label_smoothing", o.label_smoothing},
                       {"classes", num_classes},
                       {"train_images", train_data->size()}};

  // Resume.
  Checkpoint ckpt;
  json totals = json::object();
  int64_t epoch = 0;
  int64_t position = 0;
  int64_t step = 0;
  int64_t images_seen = 0;
  bool finished = false;
  try {
    fs::create_directories(o.checkpoint_dir);
    std::string error;
    if (LoadCheckpoint(o.checkpoint_dir, &ckpt, &error)) {
      const json saved = json::parse(ckpt.config);
      if (saved != config) {
        spdlog::error(
            "the checkpoint in {} was made with other settings; use the original arguments or "
            "another --checkpoint-dir.\n  checkpoint: {}\n  now:        {}",
            o.checkpoint_dir, saved.dump(), config.dump());
        return kExitConfigMismatch;
      }
      LoadInto(model, ckpt.model);
      sgd.LoadState(ckpt.momentum);
      if (ckpt.rng_cpu.numel() > 0) {
        auto gen = at::detail::getDefaultCPUGenerator();
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(ckpt.rng_cpu);
      }
      epoch = ckpt.epoch;
      position = ckpt.position;
      step = ckpt.step;
      images_seen = ckpt.images_seen;
      finished = ckpt.finished;
      totals = json::parse(ckpt.stats);
      totals["restarts"] = JsonInt(totals, "restarts") + 1;
      spdlog::info("resumed from {}: epoch {}, position {}, step {}", o.checkpoint_dir, epoch,
                   position, step);
    } else if (!error.empty()) {
      spdlog::error("cannot load the checkpoint: {}", error);
      return 1;
    }
  } catch (const std::exception& e) {
    spdlog::error("checkpoint directory {}: {}", o.checkpoint_dir, e.what());
    return 1;
  }

  // Counters of this run; added to `totals` when saving.
  double train_seconds = 0;
  double wait_at_start = loader.stats().wait_seconds;
  int64_t run_images = 0;
  int64_t run_steps = 0;
  double last_loss = JsonDouble(totals, "last_loss");
  std::optional<Metrics> val;
  if (totals.contains("val_top1")) {
    val = Metrics{JsonDouble(totals, "val_loss"), JsonDouble(totals, "val_top1"),
                  JsonDouble(totals, "val_top5"), JsonInt(totals, "val_images")};
  }

  auto current_totals = [&] {
    json t = totals;
    const LoaderStats st = loader.stats();
    t["train_seconds"] = JsonDouble(totals, "train_seconds") + train_seconds;
    t["wait_seconds"] = JsonDouble(totals, "wait_seconds") + (st.wait_seconds - wait_at_start);
    t["images"] = JsonInt(totals, "images") + run_images;
    t["skipped_images"] = JsonInt(totals, "skipped_images") + st.skipped;
    t["last_loss"] = last_loss;
    if (val) {
      t["val_loss"] = val->loss;
      t["val_top1"] = val->top1;
      t["val_top5"] = val->top5;
      t["val_images"] = val->images;
    }
    return t;
  };
  auto save = [&](const char* why) {
    const auto t0 = Clock::now();
    Checkpoint c;
    c.model = StateDictOrder(model);
    c.momentum = sgd.State();
    c.epoch = epoch;
    c.position = position;
    c.step = step;
    c.images_seen = images_seen;
    c.finished = finished;
    c.config = config.dump();
    c.stats = current_totals().dump();
    c.rng_cpu = at::detail::getDefaultCPUGenerator().get_state();
    SaveCheckpoint(o.checkpoint_dir, c);
    spdlog::info("checkpoint ({}) at epoch {} position {} step {} saved in {:.2f} s", why, epoch,
                 position, step, Seconds(t0));
  };
  auto summary = [&](const char* status) {
    const json t = current_totals();
    const double wait = loader.stats().wait_seconds - wait_at_start;
    json s = {{"status", status},
              {"arch", o.arch},
              {"device", cuda ? "cuda" : "cpu"},
              {"epochs", o.epochs},
              {"epoch", epoch},
              {"step", step},
              {"total_steps", total_steps},
              {"images_seen", images_seen},
              {"train_loss", last_loss},
              {"run",
               {{"steps", run_steps},
                {"images", run_images},
                {"train_seconds", train_seconds},
                {"images_per_second", run_images / std::max(train_seconds, 1e-9)},
                {"data_wait_fraction", wait / std::max(train_seconds, 1e-9)}}},
              {"images_per_second",
               JsonInt(t, "images") / std::max(JsonDouble(t, "train_seconds"), 1e-9)},
              {"data_wait_fraction",
               JsonDouble(t, "wait_seconds") / std::max(JsonDouble(t, "train_seconds"), 1e-9)},
              {"skipped_images", JsonInt(t, "skipped_images")},
              {"restarts", JsonInt(t, "restarts")},
              {"checkpoint_dir", o.checkpoint_dir}};
    if (val) {
      s["val"] = {
          {"top1", val->top1}, {"top5", val->top5}, {"loss", val->loss}, {"images", val->images}};
    }
    WriteSummary(o.summary_json, s);
    return s;
  };

  try {
    if (cuda) {
      SetCudaAutocast(false);
    }
    Batch batch;
    auto window_start = Clock::now();
    double window_wait0 = loader.stats().wait_seconds;
    int64_t window_images = 0;
    double window_loss = 0;
    int64_t window_steps = 0;
    while (!finished) {
      if (epoch >= o.epochs || step >= total_steps) {
        finished = true;
        break;
      }
      SendHints(o.hint_command, *train_data, loader.EpochOrder(epoch), position);
      loader.StartEpoch(epoch, position);
      model->train();
      auto loop_start = Clock::now();
      bool epoch_done = true;
      while (step < total_steps) {
        if (!loader.Next(&batch)) {
          break;
        }
        if (batch.skipped > 0 && o.max_skipped_fraction < 1) {
          // A broken mount or origin makes every read fail; training on through the epochs
          // would only produce a useless model. Stop before this batch, so a restart retries it.
          const LoaderStats ls = loader.stats();
          const int64_t attempted = ls.images + ls.skipped;
          if (ls.skipped >= 10 && ls.skipped > o.max_skipped_fraction * attempted) {
            spdlog::error(
                "{} of {} images read so far could not be read or decoded (more than {:.0f} %); "
                "stopping. Is the data source healthy? (--max-skipped-fraction 1 disables this)",
                ls.skipped, attempted, 100 * o.max_skipped_fraction);
            train_seconds += Seconds(loop_start);
            save("unreadable data");
            summary("unreadable-data");
            return 1;
          }
        }
        position = batch.end_position;
        if (batch.size < 2) {
          // Nothing to learn from, or a single image: BatchNorm in training mode needs more than
          // one value per channel, which one small image does not give at layer4 (1x1 at 32 px).
          // Happens only after skipped images or when the epoch's last batch holds one sample.
          continue;
        }
        torch::Tensor x = batch.images.to(device, /*non_blocking=*/true);
        if (channels_last) {
          x = x.contiguous(at::MemoryFormat::ChannelsLast);
        }
        torch::Tensor y = batch.labels.to(device, /*non_blocking=*/true);
        const double lr = schedule.At(step);
        if (autocast) {
          SetCudaAutocast(true);
        }
        torch::Tensor logits = model->forward(x);
        torch::Tensor loss = torch::nn::functional::cross_entropy(
            logits.to(torch::kFloat), y,
            torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(o.label_smoothing));
        if (autocast) {
          SetCudaAutocast(false);
        }
        sgd.ZeroGrad();
        loss.backward();
        sgd.Step(lr);
        // item() waits for the step to finish, which also guarantees that the non_blocking copy
        // out of the loader's pinned buffer is complete before Next() reuses it.
        last_loss = loss.item<double>();
        ++step;
        ++run_steps;
        images_seen += batch.size;
        run_images += batch.size;
        window_images += batch.size;
        window_loss += last_loss;
        ++window_steps;
        if (!std::isfinite(last_loss)) {
          spdlog::error("loss is {} at step {}; stopping (lower --lr?)", last_loss, step);
          train_seconds += Seconds(loop_start);
          summary("diverged");
          return 1;
        }
        if (o.log_every > 0 && step % o.log_every == 0) {
          const double secs = Seconds(window_start);
          const double wait = loader.stats().wait_seconds - window_wait0;
          std::printf(
              "epoch %lld step %lld/%lld lr %.4g loss %.4f %.1f images/s data wait %.0f%%\n",
              static_cast<long long>(epoch), static_cast<long long>(step),
              static_cast<long long>(total_steps), lr, window_loss / window_steps,
              window_images / std::max(secs, 1e-9), 100.0 * wait / std::max(secs, 1e-9));
          std::fflush(stdout);
          window_start = Clock::now();
          window_wait0 = loader.stats().wait_seconds;
          window_images = 0;
          window_loss = 0;
          window_steps = 0;
        }
        if (stop_requested()) {
          epoch_done = position >= static_cast<int64_t>(train_data->size());
          train_seconds += Seconds(loop_start);
          if (epoch_done) {
            ++epoch;
            position = 0;
          }
          save(o.stop_signal != nullptr && o.stop_signal->load() != 0 ? "signal" : "max-runtime");
          summary("checkpointed");
          std::printf(
              "checkpointed at step %lld of %lld; exit %d (rerun the same command to "
              "resume)\n",
              static_cast<long long>(step), static_cast<long long>(total_steps), kExitCheckpointed);
          return kExitCheckpointed;
        }
        if (o.checkpoint_every_steps > 0 && step % o.checkpoint_every_steps == 0) {
          train_seconds += Seconds(loop_start);
          save("periodic");
          loop_start = Clock::now();
        }
      }
      train_seconds += Seconds(loop_start);
      epoch_done = position >= static_cast<int64_t>(train_data->size());
      if (!epoch_done) {
        break;  // max_steps reached mid-epoch
      }
      ++epoch;
      position = 0;
      if (val_loader && (epoch < o.epochs && step < total_steps)) {
        val = Evaluate(model, *val_loader, device, autocast, channels_last);
        std::printf("epoch %lld val top-1 %.2f%% top-5 %.2f%% loss %.4f (%lld images)\n",
                    static_cast<long long>(epoch - 1), 100 * val->top1, 100 * val->top5, val->loss,
                    static_cast<long long>(val->images));
        std::fflush(stdout);
      }
      if (epoch < o.epochs && step < total_steps) {
        save("epoch");
      }
    }
    finished = true;
    if (val_loader && (run_steps > 0 || !val)) {
      val = Evaluate(model, *val_loader, device, autocast, channels_last);
    }
    save("finished");
    SaveStateDict((fs::path(o.checkpoint_dir) / "model_final.pt").string(), StateDictOrder(model));
  } catch (const std::exception& e) {
    spdlog::error("training failed: {}", e.what());
    return 1;
  }

  const json s = summary("finished");
  std::printf("finished: %lld steps, %lld images; this run %.1f images/s, data wait %.1f%%\n",
              static_cast<long long>(step), static_cast<long long>(images_seen),
              s["run"]["images_per_second"].get<double>(),
              100 * s["run"]["data_wait_fraction"].get<double>());
  if (val) {
    std::printf("val top-1 %.2f%% top-5 %.2f%% loss %.4f (%lld images)\n", 100 * val->top1,
                100 * val->top5, val->loss, static_cast<long long>(val->images));
  }
  std::printf("weights: %s\n", (fs::path(o.checkpoint_dir) / "model_final.pt").c_str());
  return 0;
}

}  // namespace perch::trainer
