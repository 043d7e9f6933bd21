#include "trainer/trainer_support.h"

#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/nn/functional/loss.h>
#include <torch/version.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "trainer/launch.h"

namespace perch::trainer {

using json = nlohmann::json;

double Seconds(Clock::time_point since) {
  return std::chrono::duration<double>(Clock::now() - since).count();
}

// bf16 autocast. PyTorch 2.4 replaced the per-device calls (CUDA: set_enabled, CPU:
// set_cpu_enabled) with device-typed ones.
void SetAutocast(c10::DeviceType device, bool enabled) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  at::autocast::set_autocast_dtype(device, at::kBFloat16);
  at::autocast::set_autocast_enabled(device, enabled);
#else
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    at::autocast::set_cpu_enabled(enabled);
  }
#endif
  if (!enabled) {
    // As leaving Python's outermost autocast region does: drop the cached bf16 weight copies.
    at::autocast::clear_cache();
  }
}

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
      SetAutocast(device.type(), true);
    }
    torch::Tensor logits = model->forward(x).to(torch::kFloat);
    if (autocast) {
      SetAutocast(device.type(), false);
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

// utime + stime of this process, from getrusage (what /proc/self/stat says).
double ProcessCpuSeconds() {
  struct rusage ru = {};
  getrusage(RUSAGE_SELF, &ru);
  auto secs = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return secs(ru.ru_utime) + secs(ru.ru_stime);
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

// Pipes `paths` to `command`, one per line: with "perchctl hint --job NAME --file -" perchd then
// fetches the files (image files, or whole tar shards) in the order the loader will read them,
// ahead of it. Hints only speed things up, so a failing command is logged and training goes on.
void SendHints(const std::string& command, const std::vector<std::string>& paths) {
  if (command.empty()) {
    return;
  }
  const auto t0 = Clock::now();
  // perch-train blocks SIGTERM/SIGINT outside its signal thread (main.cc); the command must not
  // inherit that, or stopping the job would not stop it.
  const sigset_t stop = StopSignals();
  sigset_t old;
  pthread_sigmask(SIG_UNBLOCK, &stop, &old);
  FILE* pipe = popen(command.c_str(), "w");
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  if (pipe == nullptr) {
    spdlog::warn("cannot run the hint command '{}'; going on without hints", command);
    return;
  }
  bool ok = true;
  int64_t sent = 0;
  for (size_t i = 0; i < paths.size() && ok; ++i) {
    const std::string& path = paths[i];
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

int RunLoaderOnly(const TrainOptions& o, std::shared_ptr<SampleSource> source, int workers) {
  LoaderOptions lo;
  lo.batch_size = o.batch_size;
  lo.workers = workers;
  lo.image_size = o.image_size;
  lo.train = true;
  lo.seed = o.seed;
  lo.prefetch = o.prefetch;
  Loader loader(std::move(source), lo);
  auto t0 = Clock::now();
  const double cpu0 = ProcessCpuSeconds();
  int64_t batches = 0;
  int64_t images = 0;
  bool stopped = false;
  for (int epoch = 0; epoch < o.epochs && !stopped; ++epoch) {
    SendHints(o.hint_command, loader.HintPaths(epoch, 0));
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
  const double cpu = ProcessCpuSeconds() - cpu0;
  std::printf(
      "loader-only: %lld images in %.2f s = %.0f images/s with %d workers (%.0f images/s per "
      "worker), %.1f MB/s read, %lld skipped, image size %d, %.2f ms CPU per image\n",
      static_cast<long long>(images), secs, ips, workers, ips / workers,
      st.bytes / 1e6 / std::max(secs, 1e-9), static_cast<long long>(st.skipped), o.image_size,
      1e3 * cpu / static_cast<double>(std::max<int64_t>(images, 1)));
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
            {"cpu_seconds", cpu},
            {"cpu_ms_per_image", 1e3 * cpu / static_cast<double>(std::max<int64_t>(images, 1))},
            {"data_dir", o.data_dir},
            {"data_shards", o.data_shards}};
  WriteSummary(o.summary_json, s);
  return 0;
}

}  // namespace perch::trainer
