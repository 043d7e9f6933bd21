// Synthesis of an ImageNet-like ImageFolder tree of real JPEG files, for tests, benchmarks and
// the demo: out/train/<synset>/<synset>_<i>.JPEG and out/val/<synset>/... (and optionally the
// training images again as WebDataset tar shards, out/shards/train-NNNNNN.tar), synset names
// n00000000, n00000001, ... Images have a long side of 400-600 px and a short side of 2/3 to
// 7/8 of it (ImageNet's typical 500x375) and about 105 KB at quality 90 (ImageNet averages
// ~110 KB), with content a model can learn: each class has its own hue, shape family and
// stripe orientation/frequency, drawn at a random place and scale over a random background,
// plus noise so that JPEG sizes resemble photos.
//
// Deterministic for a given seed. Thread-safe (no shared state); SynthesizeTree uses its own
// threads.
#ifndef PERCH_TRAINER_SYNTH_H_
#define PERCH_TRAINER_SYNTH_H_

#include <cstdint>
#include <string>
#include <vector>

namespace perch::trainer {

struct SynthOptions {
  std::string out;
  int classes = 10;
  int per_class = 100;    // training images per class
  int val_per_class = 0;  // validation images per class (0: no val/)
  uint64_t seed = 1;
  int quality = 90;
  int min_side = 400;  // range of the long side
  int max_side = 600;
  int threads = 0;  // 0: one per core
};

struct SynthResult {
  int64_t files = 0;
  int64_t bytes = 0;
};

// Renders image `index` of class `label` (RGB, width*height*3) into `rgb`.
void RenderImage(int label, int classes, uint64_t seed, int width, int height,
                 std::vector<uint8_t>* rgb);

// Encodes RGB as a baseline 4:2:0 JPEG; returns false on a TurboJPEG error.
bool EncodeJpeg(const std::vector<uint8_t>& rgb, int width, int height, int quality,
                std::vector<uint8_t>* jpeg);

// Writes the whole tree. Throws std::runtime_error on I/O errors.
SynthResult SynthesizeTree(const SynthOptions& options);

// "n%08d".
std::string SynsetName(int label);

// After SynthesizeTree: packs the tree's training images into `shards` WebDataset tar shards,
// out/shards/train-000000.tar ... (libarchive, pax), members <key>.jpg and <key>.cls (the label
// in decimal), key = the file's name without extension; the images are dealt to the shards in a
// random order seeded by o.seed, about equally many per shard. Returns the bytes written.
// Throws std::runtime_error on I/O errors, std::invalid_argument when shards < 1.
int64_t WriteTrainShards(const SynthOptions& o, int shards);

// "train-000000.tar" for shard 0 of `shards` (at least 6 digits).
std::string ShardName(int shard, int shards);

}  // namespace perch::trainer

#endif  // PERCH_TRAINER_SYNTH_H_
