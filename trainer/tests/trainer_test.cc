// perch-train end to end, on CPU with tiny images: a run stopped by SIGTERM (exit 85) or by
// --max-runtime, and restarted with the same arguments, ends with exactly the parameters of an
// uninterrupted run; the weights load in Python with torchvision's names; bad images are
// skipped and counted; a checkpoint is not resumed with other settings.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "trainer/checkpoint.h"
#include "trainer/tests/process.h"
#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

namespace fs = std::filesystem;
using testing::Process;
using testing::TempDir;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override { testing::MakeSmallTree(dir_.path() / "data", 3, 6, 2, 48, 64); }

  // 18 images in batches of 4: 5 steps per epoch (the last one of 2 images), 3 epochs.
  // On the CPU with one thread, as the weights are compared bit for bit (on a GPU node "auto"
  // would train on CUDA, whose cuDNN kernels are not bit-reproducible).
  std::vector<std::string> Args(const fs::path& ckpt) {
    return {"--data-dir",
            (dir_.path() / "data" / "train").string(),
            "--val-dir",
            (dir_.path() / "data" / "val").string(),
            "--checkpoint-dir",
            ckpt.string(),
            "--arch",
            "resnet18",
            "--image-size",
            "32",
            "--epochs",
            "3",
            "--batch-size",
            "4",
            "--workers",
            "2",
            "--threads",
            "1",
            "--device",
            "cpu",
            "--lr",
            "0.05",
            "--label-smoothing",
            "0.1",
            "--seed",
            "7",
            "--log-every",
            "1"};
  }
  int RunToExit(std::vector<std::string> args, const fs::path& log) {
    Process p(args, log);
    return p.Wait(std::chrono::seconds(120));
  }
  void ExpectSameWeights(const fs::path& a, const fs::path& b) {
    TensorMap wa = LoadStateDict(a.string());
    TensorMap wb = LoadStateDict(b.string());
    ASSERT_EQ(wa.size(), wb.size());
    for (size_t i = 0; i < wa.size(); ++i) {
      ASSERT_EQ(wa[i].first, wb[i].first);
      EXPECT_TRUE(wa[i].second.equal(wb[i].second)) << wa[i].first;
    }
  }
  std::string Log(const fs::path& p) { return testing::ReadFile(p); }

  TempDir dir_{"train"};
};

TEST_F(TrainerTest, SigtermAndMaxRuntimeRestartsGiveTheUninterruptedResult) {
  const fs::path ref = dir_.path() / "ref";
  ASSERT_EQ(RunToExit(Args(ref), dir_.path() / "ref.log"), 0) << Log(dir_.path() / "ref.log");

  // SIGTERM while training: after step 3 has been logged (mid-epoch 0).
  const fs::path term = dir_.path() / "term";
  const fs::path term_log = dir_.path() / "term.log";
  {
    Process p(Args(term), term_log);
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Log(term_log).find("step 3/") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    p.Signal(SIGTERM);
    ASSERT_EQ(p.Wait(std::chrono::seconds(60)), 85) << Log(term_log);
  }
  EXPECT_TRUE(fs::exists(term / kCheckpointFile));
  EXPECT_FALSE(fs::exists(term / "model_final.pt"));
  ASSERT_EQ(RunToExit(Args(term), term_log), 0) << Log(term_log);
  EXPECT_NE(Log(term_log).find("resumed from"), std::string::npos);
  ExpectSameWeights(ref / "model_final.pt", term / "model_final.pt");

  // --max-runtime so short that every run does about one step: many restarts, at every kind
  // of position (mid-epoch, epoch end, after the last step).
  const fs::path chain = dir_.path() / "chain";
  std::vector<std::string> args = Args(chain);
  args.insert(args.end(), {"--max-runtime", "0.01", "--workers", "3"});
  int runs = 0;
  int rc = 85;
  while (rc == 85 && runs < 40) {
    rc = RunToExit(args, dir_.path() / "chain.log");
    ++runs;
  }
  ASSERT_EQ(rc, 0) << Log(dir_.path() / "chain.log");
  EXPECT_GE(runs, 5);
  ExpectSameWeights(ref / "model_final.pt", chain / "model_final.pt");

  // A finished run restarted: nothing to do, exit 0, same weights.
  ASSERT_EQ(RunToExit(Args(ref), dir_.path() / "ref.log"), 0);

  // Other settings are refused rather than silently mixed.
  std::vector<std::string> other = Args(term);
  other.insert(other.end(), {"--batch-size", "5"});
  EXPECT_EQ(RunToExit(other, dir_.path() / "other.log"), 2);
}

TEST_F(TrainerTest, WeightsLoadInPythonAndSummaryReports) {
  const fs::path ckpt = dir_.path() / "ck";
  const fs::path summary = dir_.path() / "summary.json";
  // One corrupt JPEG in the training set.
  testing::WriteFile(dir_.path() / "data" / "train" / "n00000002" / "broken.JPEG",
                     std::string("\xff\xd8\xff\xe0 truncated", 15));
  std::vector<std::string> args = Args(ckpt);
  args.insert(args.end(), {"--summary-json", summary.string(), "--epochs", "1"});
  ASSERT_EQ(RunToExit(args, dir_.path() / "log"), 0) << Log(dir_.path() / "log");
  EXPECT_NE(Log(dir_.path() / "log").find("broken.JPEG"), std::string::npos);

  const nlohmann::json s = nlohmann::json::parse(testing::ReadFile(summary));
  EXPECT_EQ(s["status"], "finished");
  EXPECT_EQ(s["skipped_images"], 1);
  EXPECT_EQ(s["images_seen"], 18);
  EXPECT_GT(s["images_per_second"].get<double>(), 0);
  EXPECT_GE(s["data_wait_fraction"].get<double>(), 0);
  EXPECT_LE(s["data_wait_fraction"].get<double>(), 1);
  EXPECT_EQ(s["val"]["images"], 6);
  EXPECT_GE(s["val"]["top5"].get<double>(), s["val"]["top1"].get<double>());

  if (!testing::PythonHasTorchvision()) {
    GTEST_SKIP() << "no torchvision for " << testing::kPython;
  }
  std::string out;
  const std::string cmd =
      std::string(testing::kPython) +
      " -c 'import sys, torch, torchvision; sd = torch.load(sys.argv[1]); "
      "assert \"layer1.0.conv1.weight\" in sd and \"bn1.running_var\" in sd; "
      "m = torchvision.models.resnet18(num_classes=3); m.load_state_dict(sd, strict=True); "
      "ck = torch.load(sys.argv[2]); assert ck[\"finished\"] and ck[\"step\"] == 5; "
      "assert torch.equal(ck[\"model\"][\"fc.weight\"], sd[\"fc.weight\"]); "
      "m.eval(); print(tuple(m(torch.zeros(1, 3, 32, 32)).shape))' '" +
      (ckpt / "model_final.pt").string() + "' '" + (ckpt / kCheckpointFile).string() + "'";
  ASSERT_EQ(testing::RunCommand(cmd + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("(1, 3)"), std::string::npos) << out;
}

// --precision bf16 and --memory-format channels-last (CUDA's defaults) on the CPU: the loss falls
// as in fp32, every epoch is reported, the weights differ from fp32's (autocast did compute in
// bf16), and the weights, saved from channels-last tensors, load in Python and run there.
TEST_F(TrainerTest, Bf16AndChannelsLastLearnAndLoadInPython) {
  // Two steps of 9 images per epoch at a low rate: on 18 images of 32 px the loss of batches of
  // 4 at --lr 0.05 jumps about too much to show a trend in a few epochs.
  auto train = [&](const std::string& name, const std::vector<std::string>& extra) {
    const fs::path summary = dir_.path() / (name + ".json");
    std::vector<std::string> args = Args(dir_.path() / name);
    args.insert(args.end(), {"--epochs", "12", "--batch-size", "9", "--lr", "0.005",
                             "--summary-json", summary.string()});
    args.insert(args.end(), extra.begin(), extra.end());
    EXPECT_EQ(RunToExit(args, dir_.path() / (name + ".log")), 0)
        << Log(dir_.path() / (name + ".log"));
    return nlohmann::json::parse(testing::ReadFile(summary));
  };
  const nlohmann::json fp32 = train("fp32", {});
  const nlohmann::json bf16 =
      train("bf16", {"--precision", "bf16", "--memory-format", "channels-last"});
  EXPECT_EQ(fp32["precision"], "fp32");
  EXPECT_EQ(fp32["memory_format"], "contiguous");
  EXPECT_EQ(bf16["precision"], "bf16");
  EXPECT_EQ(bf16["memory_format"], "channels-last");
  for (const nlohmann::json* s : {&fp32, &bf16}) {
    const nlohmann::json& e = (*s)["run"]["epochs"];
    ASSERT_EQ(e.size(), 12u) << s->dump();
    EXPECT_EQ(e[0]["images"], 18);
    // Seen on 2026-11-26: from 1.13-1.16 (epochs 0-1) to 0.43-0.52 (epochs 9-11).
    const double first = (e[0]["loss"].get<double>() + e[1]["loss"].get<double>()) / 2;
    const double last =
        (e[9]["loss"].get<double>() + e[10]["loss"].get<double>() + e[11]["loss"].get<double>()) /
        3;
    EXPECT_LT(last, 0.7 * first) << s->dump();
  }
  EXPECT_NE(Log(dir_.path() / "bf16.log").find("epoch 11 done: 18 images"), std::string::npos)
      << Log(dir_.path() / "bf16.log");
  const TensorMap a = LoadStateDict((dir_.path() / "fp32" / "model_final.pt").string());
  const TensorMap b = LoadStateDict((dir_.path() / "bf16" / "model_final.pt").string());
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a[0].first, "conv1.weight");
  EXPECT_FALSE(a[0].second.equal(b[0].second));

  if (!testing::PythonHasTorchvision()) {
    GTEST_SKIP() << "no torchvision for " << testing::kPython;
  }
  std::string out;
  const std::string cmd =
      std::string(testing::kPython) +
      " -c 'import sys, torch, torchvision; m = torchvision.models.resnet18(num_classes=3); "
      "m.load_state_dict(torch.load(sys.argv[1]), strict=True); m.eval(); "
      "x = torch.rand(2, 3, 32, 32).contiguous(memory_format=torch.channels_last); "
      "y = m.to(memory_format=torch.channels_last)(x); assert torch.isfinite(y).all(); "
      "print(tuple(y.shape))' '" +
      (dir_.path() / "bf16" / "model_final.pt").string() + "'";
  ASSERT_EQ(testing::RunCommand(cmd + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("(2, 3)"), std::string::npos) << out;
}

TEST_F(TrainerTest, StopsWhenMostImagesAreUnreadable) {
  // 12 bad files among 30: a data source in trouble, not a few bad images.
  for (int i = 0; i < 12; ++i) {
    testing::WriteFile(
        dir_.path() / "data" / "train" / "n00000000" / ("bad" + std::to_string(i) + ".JPEG"),
        "not a jpeg");
  }
  const fs::path ckpt = dir_.path() / "ck";
  const fs::path summary = dir_.path() / "s.json";
  std::vector<std::string> args = Args(ckpt);
  args.insert(args.end(), {"--summary-json", summary.string()});
  ASSERT_EQ(RunToExit(args, dir_.path() / "log"), 1) << Log(dir_.path() / "log");
  EXPECT_NE(Log(dir_.path() / "log").find("could not be read or decoded"), std::string::npos)
      << Log(dir_.path() / "log");
  EXPECT_EQ(nlohmann::json::parse(testing::ReadFile(summary))["status"], "unreadable-data");
  EXPECT_TRUE(fs::exists(ckpt / kCheckpointFile));
  // Accepting them: training runs through, skipping them every epoch.
  args.insert(args.end(), {"--max-skipped-fraction", "1"});
  ASSERT_EQ(RunToExit(args, dir_.path() / "log"), 0) << Log(dir_.path() / "log");
  const nlohmann::json s = nlohmann::json::parse(testing::ReadFile(summary));
  EXPECT_EQ(s["status"], "finished");
  EXPECT_GE(s["skipped_images"].get<int64_t>(), 24);
}

TEST_F(TrainerTest, EpochEndingInABatchOfOneImage) {
  // 17 images in batches of 4: the last batch holds one 32 px image, whose layer4 output is 1x1;
  // BatchNorm cannot train on that, so the step is left out instead of failing.
  fs::remove(dir_.path() / "data" / "train" / "n00000000" / "n00000000_0.JPEG");
  const fs::path summary = dir_.path() / "s.json";
  std::vector<std::string> args = Args(dir_.path() / "ck");
  args.insert(args.end(), {"--epochs", "1", "--summary-json", summary.string()});
  ASSERT_EQ(RunToExit(args, dir_.path() / "log"), 0) << Log(dir_.path() / "log");
  const nlohmann::json s = nlohmann::json::parse(testing::ReadFile(summary));
  EXPECT_EQ(s["images_seen"], 16);
  EXPECT_EQ(s["step"], 4);
}

TEST_F(TrainerTest, HintCommandGetsTheRemainingEpochOrder) {
  const fs::path hints = dir_.path() / "hints.txt";
  std::vector<std::string> args = Args(dir_.path() / "ck");
  args.insert(args.end(), {"--hint-command", "cat > '" + hints.string() + "'", "--max-runtime",
                           "0.01", "--epochs", "1"});
  // First run: the whole epoch, a permutation of the training files; it stops after one step.
  ASSERT_EQ(RunToExit(args, dir_.path() / "log"), 85) << Log(dir_.path() / "log");
  std::vector<std::string> first;
  std::istringstream in(testing::ReadFile(hints));
  for (std::string line; std::getline(in, line);) {
    first.push_back(line);
  }
  ASSERT_EQ(first.size(), 18u);
  std::vector<std::string> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::string> files;
  for (const auto& e : fs::recursive_directory_iterator(dir_.path() / "data" / "train")) {
    if (e.is_regular_file()) {
      files.push_back(e.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  EXPECT_EQ(sorted, files);
  EXPECT_NE(first, sorted);  // shuffled
  // Resumed after one batch of 4: the 14 files still to be read, in the same order.
  ASSERT_EQ(RunToExit(args, dir_.path() / "log"), 85) << Log(dir_.path() / "log");
  std::vector<std::string> second;
  std::istringstream in2(testing::ReadFile(hints));
  for (std::string line; std::getline(in2, line);) {
    second.push_back(line);
  }
  EXPECT_EQ(second, std::vector<std::string>(first.begin() + 4, first.end()));
}

TEST_F(TrainerTest, LoaderOnlyReportsThroughput) {
  const fs::path summary = dir_.path() / "lo.json";
  ASSERT_EQ(RunToExit({"--data-dir", (dir_.path() / "data" / "train").string(), "--loader-only",
                       "--epochs", "2", "--batch-size", "4", "--workers", "2", "--image-size", "32",
                       "--summary-json", summary.string()},
                      dir_.path() / "lo.log"),
            0)
      << Log(dir_.path() / "lo.log");
  const nlohmann::json s = nlohmann::json::parse(testing::ReadFile(summary));
  EXPECT_EQ(s["images"], 36);
  EXPECT_GT(s["images_per_second"].get<double>(), 0);
}

}  // namespace
}  // namespace perch::trainer
