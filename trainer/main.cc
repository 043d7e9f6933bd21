// perch-train: trains ResNet-18/50 on an ImageFolder tree or tar shards (e.g. ImageNet read
// through a perch mount) with checkpoints that survive HTCondor preemption. See trainer/README.md.
#include <malloc.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "perch/cli_exit.h"
#include "perch/version.h"
#include "trainer/distributed.h"
#include "trainer/launch.h"
#include "trainer/trainer.h"

namespace {

// The only process-wide state: a signal handler can reach nothing else.
std::atomic<int> g_stop_signal{0};

void OnStopSignal(int sig) { g_stop_signal.store(sig); }

// SIGTERM/SIGINT set the stop flag, which training polls between steps; a hint command that
// exits early must not kill the trainer with SIGPIPE.
//
// The two stop signals are blocked in this thread, and so in every thread started after it
// (they inherit the mask: loader workers, libtorch's and CUDA's threads), and one thread takes
// them with sigwait. No library call is interrupted by them then: on an H200, SIGTERMs sent
// during CUDA's start-up crashed perch-train (SIGSEGV, 2 of 5 tries, SA_RESTART or not) while
// the handler ran in whichever thread the kernel chose. The handler stays, for threads that
// libraries started before this. Child processes inherit the block: a rank (launch.cc) takes a
// signal sent before it is ready once it is; the hint command unblocks them (SendHints).
void InstallSignalHandlers() {
  struct sigaction sa = {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  const sigset_t stop = perch::trainer::StopSignals();
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);
  std::thread([stop] {
    for (;;) {
      int sig = 0;
      if (sigwait(&stop, &sig) == 0) {
        g_stop_signal.store(sig);
      }
    }
  }).detach();
}

// "90", "90s", "15m", "2h" -> seconds; throws CLI::ValidationError.
double ParseDuration(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw CLI::ValidationError("--max-runtime", "not a duration: " + text);
  }
  const std::string unit = text.substr(used);
  if (unit.empty() || unit == "s") {
    return v;
  }
  if (unit == "m") {
    return v * 60;
  }
  if (unit == "h") {
    return v * 3600;
  }
  throw CLI::ValidationError("--max-runtime", "unknown unit in " + text + " (s, m or h)");
}

// Rank settings not given as options come from torchrun's variables.
void RankFromEnvironment(int* value, bool given, const char* name) {
  const char* v = std::getenv(name);
  if (!given && v != nullptr && *v != '\0') {
    try {
      *value = std::stoi(v);
    } catch (const std::exception&) {
      throw CLI::ValidationError(name, std::string("not a number: ") + v);
    }
  }
}

// Fills o->dist from the options and the environment; throws CLI::ValidationError.
void ResolveRank(perch::trainer::TrainOptions* o, const CLI::App& app, std::string master,
                 int nproc) {
  auto& d = o->dist;
  RankFromEnvironment(&d.rank, app.count("--rank") > 0, "RANK");
  RankFromEnvironment(&d.world_size, app.count("--world-size") > 0, "WORLD_SIZE");
  RankFromEnvironment(&d.local_rank, app.count("--local-rank") > 0, "LOCAL_RANK");
  if (d.world_size < 1 || d.rank < 0 || d.rank >= d.world_size || d.local_rank < 0) {
    throw CLI::ValidationError(
        "--rank",
        "rank " + std::to_string(d.rank) + " is not in a world of " + std::to_string(d.world_size));
  }
  if (nproc > 1 && d.world_size > 1) {
    throw CLI::ValidationError("--nproc", "starts its own ranks; not with --world-size/WORLD_SIZE");
  }
  if (o->loader_only && (nproc > 1 || d.world_size > 1)) {
    throw CLI::ValidationError("--loader-only", "measures one process; not with ranks");
  }
  if (d.world_size == 1) {
    return;
  }
  const char* addr = std::getenv("MASTER_ADDR");
  const char* port = std::getenv("MASTER_PORT");
  if (master.empty() && addr != nullptr && port != nullptr) {
    master = std::string(addr) + ":" + port;
  }
  if (!perch::trainer::ParseMaster(master, &d.master_addr, &d.master_port)) {
    throw CLI::ValidationError("--master", master.empty()
                                               ? "needed with --world-size > 1 (or MASTER_ADDR "
                                                 "and MASTER_PORT)"
                                               : "not HOST:PORT: " + master);
  }
}

}  // namespace

namespace {

// On a perch mount (its files carry user.perch.federation), the epoch order
// goes to perchd through perchctl, found beside this binary or on PATH.
std::string DefaultHintCommand(const std::string& data_dir) {
  char value[1];
  if (::getxattr(data_dir.c_str(), "user.perch.federation", value, 0) <= 0) return "";
  std::error_code ec;
  std::filesystem::path beside =
      std::filesystem::read_symlink("/proc/self/exe", ec).parent_path() / "perchctl";
  std::string perchctl;
  if (!ec && ::access(beside.c_str(), X_OK) == 0) {
    perchctl = "'" + beside.string() + "'";
  } else if (std::system("command -v perchctl > /dev/null 2>&1") == 0) {
    perchctl = "perchctl";
  } else {
    return "";
  }
  std::string command =
      perchctl + " hint --job perch-train:" + std::to_string(::getpid()) + " --file -";
  spdlog::info("{} is on a perch mount: each epoch's order goes to perchd ({})", data_dir, command);
  return command;
}

// --data-shards and its companions.
void AddShardOptions(CLI::App& app, perch::trainer::TrainOptions* o) {
  app.add_option("--data-shards", o->data_shards,
                 "train from WebDataset tar shards instead of a tree, e.g. "
                 "'train-{000000..000146}.tar' (brace notation; '*' globs), relative to "
                 "--data-dir unless absolute; samples are <key>.jpg/.jpeg/.png + <key>.cls");
  app.add_flag("--class-tars", o->class_tars,
               "the shards are per-class tars (ImageNet's n01440764.tar, ...): the label is the "
               "index of the tar's name in sorted order; .cls members are not needed");
  app.add_option("--epoch-samples", o->epoch_samples,
                 "samples per epoch over all ranks (required with --data-shards; ImageNet: "
                 "1281167)")
      ->check(CLI::PositiveNumber);
  app.add_option("--classes", o->classes,
                 "number of classes of .cls-labelled shards (default: --val-dir's)")
      ->check(CLI::PositiveNumber);
  app.add_option("--shuffle-buffer", o->shuffle_buffer,
                 "samples in each shard stream's shuffle buffer (default 1000)")
      ->check(CLI::Range(1, 1 << 20));
  app.add_option("--shard-streams", o->shard_streams,
                 "shards read at once per rank, each through its own shuffle buffer; part of "
                 "the data order, so a resume must keep it (default 4)")
      ->check(CLI::Range(1, 1024));
}

// Where the training data lies, for finding out whether it is on a perch mount.
std::string DataLocation(const perch::trainer::TrainOptions& o) {
  if (o.data_shards.empty()) {
    return o.data_dir;
  }
  std::string first = o.data_shards;
  if (first[0] != '/' && !o.data_dir.empty()) {
    first = o.data_dir + "/" + first;
  }
  const std::string dir = std::filesystem::path(first).parent_path().string();
  return dir.empty() ? "." : dir;
}

// --micro-batches and the rank options.
void AddDistributedOptions(CLI::App& app, perch::trainer::TrainOptions* o, int* nproc,
                           std::string* master) {
  app.add_option("--micro-batches", o->micro_batches,
                 "split each step into N micro-batches of --batch-size, exactly as N ranks would "
                 "(per-micro-batch BatchNorm, averaged gradients); default 1")
      ->check(CLI::PositiveNumber);
  app.add_option("--nproc", *nproc,
                 "run N ranks on this node as child processes (data parallel, Gloo); a rank that "
                 "dies or a SIGTERM stops all")
      ->check(CLI::PositiveNumber);
  app.add_option("--rank", o->dist.rank, "this process's rank (default: $RANK, else 0)");
  app.add_option("--world-size", o->dist.world_size,
                 "number of ranks of a multi-node job (default: $WORLD_SIZE, else 1)");
  app.add_option("--local-rank", o->dist.local_rank,
                 "rank on this node, picks the GPU (default: $LOCAL_RANK, else 0)");
  app.add_option("--master", *master,
                 "HOST:PORT of rank 0's rendezvous (default: $MASTER_ADDR:$MASTER_PORT)");
  app.add_flag("--store-hosted", o->dist.store_hosted, "(internal: set by --nproc)")->group("");
}

// Ranks other than 0 log warnings and errors only; every rank's lines name it.
void ConfigureLogging(const perch::trainer::DistributedOptions& d, const std::string& level) {
  spdlog::set_level(spdlog::level::from_str(level));
  if (d.world_size > 1) {
    spdlog::set_pattern(fmt::format("[%Y-%m-%d %H:%M:%S.%e] [rank {}] [%l] %v", d.rank));
    if (d.rank != 0) {
      spdlog::set_level(std::max(spdlog::level::warn, spdlog::level::from_str(level)));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  perch::trainer::TrainOptions o;
  std::string max_runtime;
  std::string log_level = "info";
  CLI::App app{
      "perch-train: ResNet training on an ImageFolder tree or tar shards, resumable (exit 85 = "
      "checkpointed, rerun to continue)"};
  // A repeated option takes its last value, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  auto* data_dir =
      app.add_option("--data-dir", o.data_dir,
                     "training tree: one directory per class; with --data-shards, the directory "
                     "a relative shard pattern starts from")
          ->check(CLI::ExistingDirectory);
  AddShardOptions(app, &o);
  app.add_option("--val-dir", o.val_dir, "validation tree with the same classes")
      ->check(CLI::ExistingDirectory);
  auto* ckpt = app.add_option("--checkpoint-dir", o.checkpoint_dir,
                              "where checkpoint.pt and model_final.pt go; resumes from it");
  auto* epochs =
      app.add_option("--epochs", o.epochs, "epochs to train (default 90; 1 with --loader-only)")
          ->check(CLI::PositiveNumber);
  app.add_flag("--loader-only", o.loader_only,
               "only run the data loader over --data-dir and report images/s");
  app.add_option("--summary-json", o.summary_json, "write a JSON summary of the run here");
  app.add_option("--arch", o.arch, "resnet18 or resnet50 (default)")
      ->check(CLI::IsMember({"resnet18", "resnet50"}));
  app.add_option("--batch-size", o.batch_size,
                 "images per step and rank (and micro-batch); the global batch is this x world "
                 "size x --micro-batches (default 256)")
      ->check(CLI::PositiveNumber);
  int nproc = 1;
  std::string master;
  AddDistributedOptions(app, &o, &nproc, &master);
  app.add_option("--workers", o.workers,
                 "loader threads (default: one per core; with --nproc N, cores/N per rank)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--prefetch", o.prefetch, "batches the loader prepares ahead (default 3)")
      ->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "peak learning rate (default 0.1 * global batch / 256)");
  app.add_option("--lr-schedule", o.lr_schedule,
                 "cosine (default) or step (x0.1 every "
                 "--lr-step-epochs)")
      ->check(CLI::IsMember({"cosine", "step"}));
  app.add_option("--lr-step-epochs", o.lr_step_epochs, "step schedule period (default 30)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup-epochs", o.warmup_epochs, "linear warm-up length (default 1)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--momentum", o.momentum, "SGD momentum (default 0.9)");
  app.add_option("--weight-decay", o.weight_decay, "SGD weight decay (default 1e-4)");
  app.add_flag("!--no-norm-weight-decay", o.norm_weight_decay,
               "no weight decay on BatchNorm parameters and biases");
  app.add_option("--label-smoothing", o.label_smoothing, "e.g. 0.1 (default 0)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--image-size", o.image_size, "crop size in pixels (default 224)")
      ->check(CLI::PositiveNumber);
  app.add_option("--max-steps", o.max_steps, "stop training after this many steps in total")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-runtime", max_runtime,
                 "checkpoint and exit 85 after this long, e.g. 3600, 90m, 2h");
  app.add_option("--max-skipped-fraction", o.max_skipped_fraction,
                 "stop (exit 1, after a checkpoint) when more than this fraction of the images "
                 "read are unreadable, at least 10 (default 0.1; 1 disables)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--checkpoint-every-steps", o.checkpoint_every_steps,
                 "also checkpoint every N steps (default: at epoch ends and on stop)");
  auto* hint = app.add_option(
      "--hint-command", o.hint_command,
      "at every epoch start, pipe the paths the loader will read, in order, one per line, to "
      "this shell command, e.g. 'perchctl hint --job train --file -' (perch then prefetches in "
      "sample order). Default: that, when --data-dir is on a perch mount and perchctl is next to "
      "perch-train or on PATH ($PERCH_SOCKET names a non-default control socket); '' turns it off");
  app.add_option("--seed", o.seed, "seed for weights, sample order and augmentation");
  app.add_option("--device", o.device, "auto (default), cpu or cuda")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--precision", o.precision,
                 "fp32 or bf16: bf16 autocast for the forward pass, weights and optimizer in fp32 "
                 "(default: bf16 on CUDA, fp32 on the CPU)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--memory-format", o.memory_format,
                 "channels-last or contiguous: layout of the 4-d weights and the images "
                 "(default: channels-last on CUDA, contiguous on the CPU)")
      ->check(CLI::IsMember({"channels-last", "contiguous"}));
  app.add_option(
         "--threads", o.threads,
         "libtorch intra-op threads (default: libtorch's; with --nproc N, cores/N per rank)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", o.log_every, "print progress every N steps (default 50)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.set_version_flag("--version", std::string("perch-train ") + perch::kVersion);
  if (auto rc = perch::cli::Parse(app, argc, argv)) {
    return *rc;
  }

  try {
    if (data_dir->count() == 0 && o.data_shards.empty()) {
      throw CLI::RequiredError("--data-dir (or --data-shards)");
    }
    ResolveRank(&o, app, master, nproc);
  } catch (const CLI::Error& e) {
    return perch::cli::UsageExit(app, e);
  }
  ConfigureLogging(o.dist, log_level);
  // libjpeg allocates and frees its working memory (several hundred KB) for every image. With
  // glibc's defaults those blocks are mmap'd and munmap'd each time, and with several decoding
  // threads every munmap costs page faults plus a TLB shootdown on the other cores: on a 2-core
  // VM two workers decoded 1,040 images/s instead of 1,940. Keep freed memory in the heap.
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  if (!o.loader_only && ckpt->count() == 0) {
    spdlog::error("--checkpoint-dir is required (except with --loader-only)");
    return perch::cli::kExitUsage;
  }
  if (hint->count() == 0) o.hint_command = DefaultHintCommand(DataLocation(o));
  if (o.loader_only && epochs->count() == 0) o.epochs = 1;
  if (!max_runtime.empty()) {
    try {
      o.max_runtime_s = ParseDuration(max_runtime);
    } catch (const CLI::Error& e) {
      return perch::cli::UsageExit(app, e);
    }
  }
  InstallSignalHandlers();
  o.stop_signal = &g_stop_signal;
  if (nproc > 1) {
    std::vector<std::string> args(argv + 1, argv + argc);
    for (std::string& a : perch::trainer::RankShareArgs(
             o.threads, o.workers, nproc, static_cast<int>(std::thread::hardware_concurrency()),
             std::getenv("OMP_NUM_THREADS") != nullptr)) {
      args.push_back(std::move(a));
    }
    return perch::trainer::LaunchLocalRanks(nproc, args, &g_stop_signal);
  }
  return perch::trainer::Run(o);
}
