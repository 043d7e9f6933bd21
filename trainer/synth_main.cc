// perch-synth-imagenet: writes an ImageNet-like ImageFolder tree of real JPEGs (see synth.h).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>

#include "perch/version.h"
#include "trainer/synth.h"

int main(int argc, char** argv) {
  perch::trainer::SynthOptions o;
  CLI::App app{"perch-synth-imagenet: an ImageNet-like tree of JPEGs with learnable classes"};
  app.add_option("--out", o.out, "output directory (train/ and val/ are created in it)")
      ->required();
  app.add_option("--classes", o.classes, "number of classes (default 10)")
      ->check(CLI::PositiveNumber);
  app.add_option("--per-class", o.per_class, "training images per class (default 100)")
      ->check(CLI::PositiveNumber);
  app.add_option("--val-per-class", o.val_per_class, "validation images per class (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "seed (default 1)");
  app.add_option("--quality", o.quality, "JPEG quality (default 90)")->check(CLI::Range(1, 100));
  app.add_option("--min-side", o.min_side, "shortest long side in px (default 400)")
      ->check(CLI::Range(8, 10000));
  app.add_option("--max-side", o.max_side, "longest long side in px (default 600)")
      ->check(CLI::Range(8, 10000));
  app.add_option("--threads", o.threads, "threads (default: one per core)");
  int shards = 0;
  app.add_option("--shards", shards,
                 "also write the training images as N WebDataset tar shards, "
                 "out/shards/train-{000000..N-1}.tar (<key>.jpg + <key>.cls)")
      ->check(CLI::NonNegativeNumber);
  app.set_version_flag("--version", std::string("perch-synth-imagenet ") + perch::kVersion);
  CLI11_PARSE(app, argc, argv);
  try {
    auto t0 = std::chrono::steady_clock::now();
    perch::trainer::SynthResult r = perch::trainer::SynthesizeTree(o);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("wrote %lld JPEGs, %.1f MB (%.0f KB each on average) to %s in %.1f s\n",
                static_cast<long long>(r.files), r.bytes / 1e6,
                r.files ? r.bytes / 1e3 / r.files : 0.0, o.out.c_str(), secs);
    if (shards > 0) {
      const int64_t bytes = perch::trainer::WriteTrainShards(o, shards);
      std::printf("wrote %d tar shards, %.1f MB, to %s/shards (%s ... %s)\n", shards, bytes / 1e6,
                  o.out.c_str(), perch::trainer::ShardName(0, shards).c_str(),
                  perch::trainer::ShardName(shards - 1, shards).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "perch-synth-imagenet: %s\n", e.what());
    return 1;
  }
  return 0;
}
