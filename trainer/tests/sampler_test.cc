// The samplers: DistributedSampler's split equals torch.utils.data.DistributedSampler's (run by
// /usr/bin/python3 with Debian's python3-torch) for several sizes, replica counts, seeds and
// epochs, including padding longer than the dataset; the micro-batch interleaving; the strided
// split of validation.
#include "trainer/sampler.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

struct Case {
  int64_t size;
  int replicas;
  uint64_t seed;
  int64_t epoch;
};

const std::vector<Case> kCases = {
    {1, 1, 0, 0}, {10, 1, 0, 0},  {10, 2, 0, 0},   {10, 2, 7, 3},    {11, 2, 7, 3},
    {3, 8, 1, 0}, {13, 4, 42, 1}, {1000, 3, 5, 2}, {1281, 8, 0, 89}, {50000, 7, 123456789, 11}};

TEST(DistributedSamplerTest, SplitEqualsTorchDistributedSampler) {
  std::string out;
  if (testing::RunCommand(std::string(testing::kPython) + " -c 'import torch' 2>/dev/null", &out) !=
      0) {
    GTEST_SKIP() << "no python3-torch for " << testing::kPython
                 << " (apt-get install python3-torch): cannot compare with torch";
  }
  std::ostringstream script;
  script << "import json, torch\n"
            "from torch.utils.data import DistributedSampler\n"
            "out = []\n"
            "for n, w, seed, epoch in json.loads('"
         <<
      [&] {
        nlohmann::json j = nlohmann::json::array();
        for (const Case& c : kCases) {
          j.push_back({c.size, c.replicas, c.seed, c.epoch});
        }
        return j.dump();
      }()
         << "'):\n"
            "    ranks = []\n"
            "    for r in range(w):\n"
            "        s = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=True, "
            "seed=seed)\n"
            "        s.set_epoch(epoch)\n"
            "        ranks.append(list(s))\n"
            "    out.append(ranks)\n"
            "print(json.dumps(out))\n";
  const testing::TempDir dir("sampler");
  testing::WriteFile(dir.path() / "s.py", script.str());
  ASSERT_EQ(
      testing::RunCommand(
          std::string(testing::kPython) + " " + (dir.path() / "s.py").string() + " 2>&1", &out),
      0)
      << out;
  const nlohmann::json torch_splits = nlohmann::json::parse(out);
  ASSERT_EQ(torch_splits.size(), kCases.size());
  for (size_t i = 0; i < kCases.size(); ++i) {
    const Case& c = kCases[i];
    for (int r = 0; r < c.replicas; ++r) {
      DistributedSampler s(c.size, c.seed, c.replicas, r, 1, 4);
      const auto expected = torch_splits[i][r].get<std::vector<int64_t>>();
      EXPECT_EQ(s.EpochOrder(c.epoch), expected)
          << "size " << c.size << " replicas " << c.replicas << " rank " << r << " seed " << c.seed
          << " epoch " << c.epoch;
      EXPECT_EQ(s.EpochLength(), static_cast<int64_t>(expected.size()));
    }
  }
}

TEST(DistributedSamplerTest, SharesCoverTheDatasetAndPadFromTheStart) {
  DistributedSampler one(10, 3, 1, 0, 1, 1);
  const std::vector<int64_t> perm = one.EpochOrder(0);
  EXPECT_EQ(std::set<int64_t>(perm.begin(), perm.end()).size(), 10u);
  EXPECT_NE(one.EpochOrder(1), perm);  // reshuffled every epoch
  // 10 samples, 4 replicas: 3 each; padded with perm[0], perm[1]; rank r takes perm[r::4].
  for (int r = 0; r < 4; ++r) {
    DistributedSampler s(10, 3, 4, r, 1, 1);
    std::vector<int64_t> expected;
    for (int64_t i = r; i < 12; i += 4) {
      expected.push_back(perm[i % 10]);
    }
    EXPECT_EQ(s.EpochOrder(0), expected) << r;
  }
}

TEST(DistributedSamplerTest, MicroBatchesInterleaveTheReplicasBatchByBatch) {
  // 2 of 4 replicas (ranks 2 and 3) in one loader with batches of 2 per replica.
  DistributedSampler both(23, 9, 4, 2, 2, 2);
  const std::vector<int64_t> r2 = both.ReplicaOrder(5, 2);
  const std::vector<int64_t> r3 = both.ReplicaOrder(5, 3);
  ASSERT_EQ(r2.size(), 6u);
  const std::vector<int64_t> expected = {r2[0], r2[1], r3[0], r3[1], r2[2], r2[3],
                                         r3[2], r3[3], r2[4], r2[5], r3[4], r3[5]};
  EXPECT_EQ(both.EpochOrder(5), expected);
  EXPECT_EQ(both.EpochLength(), 12);
  EXPECT_EQ(DistributedSampler(23, 9, 4, 3, 1, 2).EpochOrder(5), r3);
  // A last batch shorter than `batch`: equally short pieces.
  DistributedSampler odd(10, 1, 2, 0, 2, 3);  // 5 per replica: pieces of 3, then 2
  const auto a = odd.ReplicaOrder(0, 0);
  const auto b = odd.ReplicaOrder(0, 1);
  EXPECT_EQ(odd.EpochOrder(0),
            (std::vector<int64_t>{a[0], a[1], a[2], b[0], b[1], b[2], a[3], a[4], b[3], b[4]}));
}

TEST(DistributedSamplerTest, RejectsBadArguments) {
  EXPECT_THROW(DistributedSampler(0, 0, 1, 0, 1, 1), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(5, 0, 2, 2, 1, 1), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(5, 0, 2, 1, 2, 1), std::invalid_argument);
  EXPECT_THROW(DistributedSampler(5, 0, 2, 0, 1, 0), std::invalid_argument);
  EXPECT_EQ(SequentialSampler(3).EpochOrder(4), (std::vector<int64_t>{0, 1, 2}));
}

}  // namespace
}  // namespace perch::trainer
