// perch-synth-imagenet's tree: ImageFolder layout with synset names, real JPEGs of ImageNet-like
// shape and size, deterministic for a seed, and classes that differ in content.
#include "trainer/synth.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainer/image_folder.h"
#include "trainer/jpeg_decoder.h"
#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

TEST(SynthTest, ImageNetLikeTree) {
  TempDir dir("synth");
  SynthOptions o;
  o.out = dir.str();
  o.classes = 3;
  o.per_class = 4;
  o.val_per_class = 2;
  o.seed = 5;
  o.threads = 2;
  SynthResult r = SynthesizeTree(o);
  EXPECT_EQ(r.files, 18);
  ImageFolder train((dir.path() / "train").string());
  ImageFolder val((dir.path() / "val").string());
  EXPECT_EQ(train.classes(), (std::vector<std::string>{"n00000000", "n00000001", "n00000002"}));
  EXPECT_EQ(val.classes(), train.classes());
  EXPECT_EQ(train.size(), 12u);
  EXPECT_EQ(val.size(), 6u);
  JpegDecoder decoder;
  int64_t bytes = 0;
  for (const Sample& s : train.samples()) {
    const std::string jpeg = testing::ReadFile(s.path);
    bytes += static_cast<int64_t>(jpeg.size());
    int w = 0;
    int h = 0;
    std::string err;
    ASSERT_TRUE(
        decoder.ReadSize(reinterpret_cast<const uint8_t*>(jpeg.data()), jpeg.size(), &w, &h, &err))
        << s.path << ": " << err;
    EXPECT_GE(std::max(w, h), 400);
    EXPECT_LE(std::max(w, h), 600);
    EXPECT_GE(std::min(w, h), std::max(w, h) * 0.65);
  }
  // ImageNet's files average ~110 KB; ours should be in that neighbourhood.
  const double mean_kb = bytes / 1e3 / train.size();
  EXPECT_GT(mean_kb, 70);
  EXPECT_LT(mean_kb, 150);
  // Same seed, same bytes; another seed, other bytes.
  TempDir again("synth-again");
  o.out = again.str();
  SynthesizeTree(o);
  const fs::path f = fs::path("train") / "n00000001" / "n00000001_2.JPEG";
  EXPECT_EQ(testing::ReadFile(dir.path() / f), testing::ReadFile(again.path() / f));
  TempDir other("synth-other");
  o.out = other.str();
  o.seed = 6;
  SynthesizeTree(o);
  EXPECT_NE(testing::ReadFile(dir.path() / f), testing::ReadFile(other.path() / f));
}

TEST(SynthTest, ClassesHaveDifferentColours) {
  // The mean hue of the object differs by class: render two images per class, small, and
  // compare mean colours within and across classes.
  auto mean_rgb = [](int label, uint64_t seed) {
    std::vector<uint8_t> rgb;
    RenderImage(label, 10, seed, 96, 96, &rgb);
    double m[3] = {0, 0, 0};
    for (size_t i = 0; i < rgb.size(); i += 3) {
      for (int c = 0; c < 3; ++c) {
        m[c] += rgb[i + c];
      }
    }
    for (double& v : m) {
      v /= rgb.size() / 3;
    }
    return std::vector<double>{m[0], m[1], m[2]};
  };
  auto dist = [](const std::vector<double>& a, const std::vector<double>& b) {
    return std::sqrt((a[0] - b[0]) * (a[0] - b[0]) + (a[1] - b[1]) * (a[1] - b[1]) +
                     (a[2] - b[2]) * (a[2] - b[2]));
  };
  // Not a proof of learnability (the demo shows that: ~85 % top-1 on 10 classes after 4
  // epochs), but a guard against a change that makes every class look alike.
  double across = 0;
  for (int c = 0; c < 9; ++c) {
    across += dist(mean_rgb(c, 1), mean_rgb(c + 1, 1));
  }
  EXPECT_GT(across / 9, 10.0);
}

}  // namespace
}  // namespace perch::trainer
