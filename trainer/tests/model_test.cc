// ResNet parameter names and shapes equal torchvision's, so weights move between C++ and
// Python; SGD computes what torch.optim.SGD does; checkpoints round-trip.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include "trainer/checkpoint.h"
#include "trainer/resnet.h"
#include "trainer/schedule.h"
#include "trainer/sgd.h"
#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

using testing::TempDir;

nlohmann::json Shapes(ResNet& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& p : m->named_parameters()) {
    j[p.key()] = p.value().sizes().vec();
  }
  for (const auto& b : m->named_buffers()) {
    j[b.key()] = b.value().sizes().vec();
  }
  return j;
}

TEST(ResNetTest, NamesAndShapesMatchTorchvision) {
  if (!testing::PythonHasTorchvision()) {
    GTEST_SKIP() << "no torchvision for " << testing::kPython;
  }
  for (const char* arch : {"resnet18", "resnet50"}) {
    ResNet m(arch, 17);
    std::string out;
    const std::string cmd = std::string(testing::kPython) +
                            " -c 'import json, torchvision; m = torchvision.models." + arch +
                            "(num_classes=17); print(json.dumps({k: list(v.shape) for k, v in "
                            "m.state_dict().items()}))'";
    ASSERT_EQ(testing::RunCommand(cmd, &out), 0) << out;
    EXPECT_EQ(Shapes(m), nlohmann::json::parse(out)) << arch;
  }
}

TEST(ResNetTest, ForwardShapes) {
  torch::manual_seed(0);
  ResNet m("resnet18", 5);
  m->train();
  at::Tensor y = m->forward(torch::randn({2, 3, 32, 32}));
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{2, 5}));
  EXPECT_THROW(ResNet("resnet1000", 5), std::invalid_argument);
}

TEST(SgdTest, MatchesTorchOptimSgd) {
  // Reference: torch.optim.SGD(momentum=0.9, weight_decay=0.1, lr=0.5) on p = [1, -2] with
  // gradients g1 = [0.5, 0.25] then g2 = [-1, 1]:
  //   step 1: d = g1 + 0.1 p = [0.6, 0.05]; buf = d; p = [0.7, -2.025]
  //   step 2: d = g2 + 0.1 p = [-0.93, 0.7975]; buf = 0.9 * [0.6, 0.05] + d = [-0.39, 0.8425];
  //           p = [0.895, -2.44625]
  at::Tensor p = torch::tensor({1.0, -2.0}, torch::kDouble).requires_grad_(true);
  Sgd sgd({{"w", p}}, 0.9, 0.1, true);
  p.mutable_grad() = torch::tensor({0.5, 0.25}, torch::kDouble);
  sgd.Step(0.5);
  p.mutable_grad() = torch::tensor({-1.0, 1.0}, torch::kDouble);
  sgd.Step(0.5);
  EXPECT_NEAR(p[0].item<double>(), 0.895, 1e-12);
  EXPECT_NEAR(p[1].item<double>(), -2.44625, 1e-12);
  EXPECT_NEAR(sgd.State().at("w")[1].item<double>(), 0.8425, 1e-12);
  // 1-D parameters are exempt from weight decay when asked.
  at::Tensor b = torch::tensor({1.0}, torch::kDouble).requires_grad_(true);
  Sgd no_decay({{"bn.bias", b}}, 0.0, 0.1, false);
  b.mutable_grad() = torch::tensor({0.0}, torch::kDouble);
  no_decay.Step(1.0);
  EXPECT_EQ(b.item<double>(), 1.0);
}

TEST(ScheduleTest, WarmupThenCosine) {
  Schedule s;
  s.base_lr = 1.0;
  s.warmup_steps = 4;
  s.total_steps = 14;
  EXPECT_DOUBLE_EQ(s.At(0), 0.25);
  EXPECT_DOUBLE_EQ(s.At(3), 1.0);
  EXPECT_DOUBLE_EQ(s.At(4), 1.0);
  EXPECT_NEAR(s.At(9), 0.5, 1e-12);
  EXPECT_NEAR(s.At(14), 0.0, 1e-12);
  s.kind = Schedule::Kind::kStep;
  s.step_size = 3;
  EXPECT_DOUBLE_EQ(s.At(6), 1.0);
  EXPECT_NEAR(s.At(7), 0.1, 1e-12);
}

TEST(CheckpointTest, RoundTripAndFallbackToPrevious) {
  TempDir dir("ckpt");
  Checkpoint c;
  c.model = {{"conv1.weight", torch::randn({2, 3})}, {"bn1.num_batches_tracked", torch::tensor(5)}};
  c.momentum = {{"conv1.weight", torch::randn({2, 3})}};
  c.epoch = 3;
  c.position = 17;
  c.step = 99;
  c.images_seen = 1234;
  c.config = "{\"a\":1}";
  c.stats = "{}";
  c.rng_cpu = at::detail::getDefaultCPUGenerator().get_state();
  SaveCheckpoint(dir.str(), c);
  c.step = 100;
  SaveCheckpoint(dir.str(), c);
  Checkpoint r;
  std::string err;
  ASSERT_TRUE(LoadCheckpoint(dir.str(), &r, &err)) << err;
  EXPECT_EQ(r.step, 100);
  EXPECT_EQ(r.position, 17);
  EXPECT_EQ(r.config, c.config);
  ASSERT_EQ(r.model.size(), 2u);
  EXPECT_EQ(r.model[0].first, "conv1.weight");
  EXPECT_TRUE(r.model[0].second.equal(c.model[0].second));
  EXPECT_TRUE(r.momentum.at("conv1.weight").equal(c.momentum.at("conv1.weight")));
  EXPECT_TRUE(r.rng_cpu.equal(c.rng_cpu));
  // A torn newest file: the previous checkpoint is used.
  testing::WriteFile(dir.path() / kCheckpointFile, "torn");
  ASSERT_TRUE(LoadCheckpoint(dir.str(), &r, &err));
  EXPECT_EQ(r.step, 99);
  EXPECT_FALSE(err.empty());
  // Nothing there: not an error.
  TempDir empty("ckpt-empty");
  EXPECT_FALSE(LoadCheckpoint(empty.str(), &r, &err));
  EXPECT_TRUE(err.empty());
}

}  // namespace
}  // namespace perch::trainer
