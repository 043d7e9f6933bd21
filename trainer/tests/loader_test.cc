// Loader: batch content depends only on (seed, epoch, position), never on thread count or
// timing; a mid-epoch restart continues exactly; epochs reshuffle; bad files are skipped and
// counted without stopping the epoch.
#include "trainer/loader.h"

#include <gtest/gtest.h>

#include <set>

#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

struct Epoch {
  std::vector<at::Tensor> images;
  std::vector<at::Tensor> labels;
  std::vector<int64_t> ends;
};

Epoch Collect(Loader& loader, int64_t epoch, int64_t start) {
  Epoch e;
  loader.StartEpoch(epoch, start);
  Batch b;
  while (loader.Next(&b)) {
    e.images.push_back(b.images.clone());  // the loader reuses its buffers
    e.labels.push_back(b.labels.clone());
    e.ends.push_back(b.end_position);
  }
  return e;
}

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::MakeSmallTree(dir_.path(), 3, 7, 0);
    data_ = std::make_unique<ImageFolder>((dir_.path() / "train").string());
  }
  LoaderOptions Options(int workers) {
    LoaderOptions o;
    o.batch_size = 4;
    o.workers = workers;
    o.image_size = 24;
    o.seed = 42;
    o.prefetch = 2;
    return o;
  }
  TempDir dir_{"loader"};
  std::unique_ptr<ImageFolder> data_;
};

TEST_F(LoaderTest, SameBatchesWhateverTheThreadCount) {
  Loader one(*data_, Options(1));
  Loader four(*data_, Options(4));
  for (int64_t epoch : {0, 1}) {
    Epoch a = Collect(one, epoch, 0);
    Epoch b = Collect(four, epoch, 0);
    ASSERT_EQ(a.images.size(), 6u);  // 21 samples in batches of 4
    ASSERT_EQ(a.images.size(), b.images.size());
    for (size_t i = 0; i < a.images.size(); ++i) {
      EXPECT_TRUE(a.images[i].equal(b.images[i])) << "epoch " << epoch << " batch " << i;
      EXPECT_TRUE(a.labels[i].equal(b.labels[i]));
    }
    EXPECT_EQ(a.ends.back(), 21);
    EXPECT_EQ(a.images.back().size(0), 1);
  }
}

TEST_F(LoaderTest, ResumingMidEpochContinuesExactly) {
  Loader loader(*data_, Options(3));
  Epoch full = Collect(loader, 1, 0);
  // Restart after two batches (8 samples), as a checkpoint taken there would.
  Epoch rest = Collect(loader, 1, 8);
  ASSERT_EQ(rest.images.size(), full.images.size() - 2);
  for (size_t i = 0; i < rest.images.size(); ++i) {
    EXPECT_TRUE(rest.images[i].equal(full.images[i + 2])) << i;
    EXPECT_TRUE(rest.labels[i].equal(full.labels[i + 2]));
    EXPECT_EQ(rest.ends[i], full.ends[i + 2]);
  }
  // Abandoning an epoch half-way and starting another is fine too.
  loader.StartEpoch(0, 0);
  Batch b;
  ASSERT_TRUE(loader.Next(&b));
  Epoch again = Collect(loader, 1, 0);
  ASSERT_EQ(again.images.size(), full.images.size());
  EXPECT_TRUE(again.images[3].equal(full.images[3]));
}

TEST_F(LoaderTest, EpochsReshuffleAndCoverEverySample) {
  Loader loader(*data_, Options(2));
  // With no sampler in the options, the loader reads DistributedSampler's order, 1 replica.
  auto order = [&](uint64_t seed, int64_t epoch) {
    return DistributedSampler(static_cast<int64_t>(data_->size()), seed, 1, 0, 1, 1)
        .EpochOrder(epoch);
  };
  std::vector<int64_t> o0 = order(42, 0);
  std::vector<int64_t> o1 = order(42, 1);
  EXPECT_NE(o0, o1);
  EXPECT_EQ(std::set<int64_t>(o0.begin(), o0.end()).size(), 21u);
  EXPECT_EQ(std::set<int64_t>(o1.begin(), o1.end()).size(), 21u);
  Epoch e0 = Collect(loader, 0, 0);
  Epoch e1 = Collect(loader, 1, 0);
  EXPECT_FALSE(e0.images[0].equal(e1.images[0]));
  // Labels come out in the epoch's order.
  std::vector<int64_t> labels;
  for (auto& l : e0.labels) {
    for (int64_t i = 0; i < l.size(0); ++i) {
      labels.push_back(l[i].item<int64_t>());
    }
  }
  for (size_t i = 0; i < o0.size(); ++i) {
    EXPECT_EQ(labels[i], data_->samples()[o0[i]].label);
  }
  // A different seed gives a different order.
  EXPECT_NE(order(43, 0), o0);
}

TEST(LoaderCorruptTest, BadFilesAreSkippedAndCounted) {
  TempDir dir("loader-bad");
  testing::MakeSmallTree(dir.path(), 2, 5, 0);
  const fs::path cls = dir.path() / "train" / "n00000001";
  const std::string good = testing::ReadFile(cls / "n00000001_0.JPEG");
  testing::WriteFile(cls / "truncated.JPEG", good.substr(0, good.size() / 3));
  testing::WriteFile(cls / "garbage.jpg", std::string(5000, 'x'));
  testing::WriteFile(cls / "empty.jpg", "");
  testing::WriteFile(cls / "text.png", "PNG? no");  // not a JPEG: counted as unreadable
  fs::create_symlink(cls / "nowhere", cls / "dangling.jpg");
  ImageFolder data((dir.path() / "train").string());
  ASSERT_EQ(data.size(), 15u);
  LoaderOptions o;
  o.batch_size = 4;
  o.workers = 2;
  o.image_size = 16;
  o.train = true;
  Loader loader(data, o);
  for (int64_t epoch : {0, 1}) {
    loader.StartEpoch(epoch, 0);
    Batch b;
    int64_t images = 0;
    int64_t skipped = 0;
    int64_t batches = 0;
    while (loader.Next(&b)) {
      ASSERT_EQ(b.images.size(0), b.size);
      ASSERT_EQ(b.labels.size(0), b.size);
      images += b.size;
      skipped += b.skipped;
      ++batches;
      EXPECT_TRUE(at::isfinite(b.images).all().item<bool>());
    }
    EXPECT_EQ(batches, 4);
    EXPECT_EQ(images, 10);
    EXPECT_EQ(skipped, 5);
  }
  EXPECT_EQ(loader.stats().skipped, 10);
  EXPECT_EQ(loader.stats().images, 20);
}

}  // namespace
}  // namespace perch::trainer
