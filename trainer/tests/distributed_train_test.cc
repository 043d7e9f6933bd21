// perch-train data parallel, end to end on CPU (Gloo on loopback) with tiny images:
//   - 2 ranks (--nproc 2) end with the weights of 1 process computing the same 2 replicas as
//     micro-batches (--micro-batches 2), and of 2 processes started torchrun-style (RANK,
//     WORLD_SIZE, MASTER_ADDR, MASTER_PORT); each rank hints exactly its torch
//     DistributedSampler share of every epoch (compared with Python's, where python3-torch is
//     installed);
//   - SIGTERM to one rank: all ranks stop, one checkpoint, exit 85; the same command resumes
//     to the uninterrupted run's weights bit for bit; SIGTERM to the --nproc parent: the same;
//     a rank killed outright stops the job.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "devfed/held_port.h"
#include "trainer/checkpoint.h"
#include "trainer/image_folder.h"
#include "trainer/tests/process.h"
#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

namespace fs = std::filesystem;
using testing::Process;
using testing::TempDir;

class DistributedTrainTest : public ::testing::Test {
 protected:
  // 21 training images: 11 per rank (one padded), batches of 2 per rank; 5 validation images.
  void SetUp() override {
    testing::MakeSmallTree(dir_.path() / "data", 3, 7, 2, 48, 64);
    fs::remove(dir_.path() / "data" / "val" / "n00000002" / "n00000002_1.JPEG");
  }

  // On the CPU with one thread, as the weights are compared bit for bit (on a GPU node "auto"
  // would train on CUDA, whose cuDNN kernels are not bit-reproducible).
  std::vector<std::string> Args(const fs::path& ckpt, int epochs = 2) {
    return {"--data-dir",
            (dir_.path() / "data" / "train").string(),
            "--checkpoint-dir",
            ckpt.string(),
            "--val-dir",
            (dir_.path() / "data" / "val").string(),
            "--arch",
            "resnet18",
            "--image-size",
            "32",
            "--epochs",
            std::to_string(epochs),
            "--batch-size",
            "2",
            "--workers",
            "1",
            "--threads",
            "1",
            "--device",
            "cpu",
            "--lr",
            "0.05",
            "--seed",
            "7",
            "--log-every",
            "1",
            "--hint-command",
            ""};
  }
  static std::vector<std::string> With(std::vector<std::string> a,
                                       const std::vector<std::string>& more) {
    a.insert(a.end(), more.begin(), more.end());
    return a;
  }
  int RunToExit(const std::vector<std::string>& args, const fs::path& log) {
    Process p(args, log);
    return p.Wait(std::chrono::seconds(120));
  }
  std::string Log(const std::string& name) { return testing::ReadFile(dir_.path() / name); }
  fs::path Path(const std::string& name) { return dir_.path() / name; }

  // Largest absolute difference between two state dicts (names and shapes must agree).
  static double MaxDifference(const fs::path& a, const fs::path& b, bool* identical) {
    TensorMap wa = LoadStateDict(a.string());
    TensorMap wb = LoadStateDict(b.string());
    EXPECT_EQ(wa.size(), wb.size());
    double worst = 0;
    *identical = true;
    for (size_t i = 0; i < std::min(wa.size(), wb.size()); ++i) {
      EXPECT_EQ(wa[i].first, wb[i].first);
      *identical = *identical && wa[i].second.equal(wb[i].second);
      worst = std::max(
          worst,
          (wa[i].second.to(at::kDouble) - wb[i].second.to(at::kDouble)).abs().max().item<double>());
    }
    return worst;
  }

  TempDir dir_{"ddp"};
};

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    out.push_back(line);
  }
  return out;
}

TEST_F(DistributedTrainTest, TwoRanksComputeWhatOneProcessComputesAndHintTheirShares) {
  // 2 ranks; each appends every epoch's hints to hints.$RANK.
  const std::string hints = "cat >> '" + dir_.str() + "/hints.'\"$RANK\"";
  std::vector<std::string> ddp = With(Args(Path("ddp")), {"--nproc", "2", "--hint-command", hints,
                                                          "--summary-json", Path("ddp.json")});
  ASSERT_EQ(RunToExit(ddp, Path("ddp.log")), 0) << Log("ddp.log");
  // The same two replicas as micro-batches of one process.
  ASSERT_EQ(RunToExit(With(Args(Path("micro")),
                           {"--micro-batches", "2", "--summary-json", Path("micro.json")}),
                      Path("micro.log")),
            0)
      << Log("micro.log");
  // Two processes given their ranks the way torchrun gives them.
  {
    // Held until the ranks are done, so that no test beside this one takes it before rank 0's
    // store binds it (c10d binds with SO_REUSEADDR, as the hold does: devfed/held_port.h).
    devfed::HeldPort master;
    const std::string port = std::to_string(master.port());
    std::vector<std::unique_ptr<Process>> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(std::make_unique<Process>(
          Args(Path("env")), Path("env.log"),
          std::vector<std::string>{"RANK=" + std::to_string(r), "WORLD_SIZE=2",
                                   "LOCAL_RANK=" + std::to_string(r), "MASTER_ADDR=127.0.0.1",
                                   "MASTER_PORT=" + port}));
    }
    for (auto& p : ranks) {
      ASSERT_EQ(p->Wait(std::chrono::seconds(120)), 0) << Log("env.log");
    }
  }
  EXPECT_NE(Log("ddp.log").find("[rank 0]"), std::string::npos) << Log("ddp.log");
  EXPECT_EQ(Log("ddp.log").find("[rank 1] [info]"), std::string::npos) << Log("ddp.log");
  bool identical = false;
  const double micro_diff =
      MaxDifference(Path("ddp") / "model_final.pt", Path("micro") / "model_final.pt", &identical);
  EXPECT_LT(micro_diff, 1e-5);
  RecordProperty("ddp_vs_micro_batches", identical ? "bit-identical" : std::to_string(micro_diff));
  const double env_diff =
      MaxDifference(Path("ddp") / "model_final.pt", Path("env") / "model_final.pt", &identical);
  EXPECT_EQ(env_diff, 0);
  const auto sd = nlohmann::json::parse(testing::ReadFile(Path("ddp.json")));
  const auto sm = nlohmann::json::parse(testing::ReadFile(Path("micro.json")));
  EXPECT_EQ(sd["images_seen"], sm["images_seen"]);
  EXPECT_EQ(sd["step"], sm["step"]);
  EXPECT_EQ(sd["step"], 10);  // 2 epochs x 5 steps of 4 (the 6th, 1 + 1 images, skipped)
  EXPECT_EQ(sd["images_seen"], 40);
  // Validation split between the ranks (3 + 2 images) with rank 0's BatchNorm statistics gives
  // what the one process gives.
  EXPECT_EQ(sd["val"]["images"], 5);
  EXPECT_EQ(sd["val"]["top1"], sm["val"]["top1"]);
  EXPECT_EQ(sd["val"]["top5"], sm["val"]["top5"]);
  // Relative: this loss can be large (BatchNorm statistics of two-image batches), and summed in
  // another order its last digits differ (PyTorch 2.11: 77306041.6 against 77306043.2).
  const double val_loss = sm["val"]["loss"].get<double>();
  EXPECT_NEAR(sd["val"]["loss"].get<double>(), val_loss, 1e-5 * std::max(1.0, std::fabs(val_loss)));

  // Each rank hinted its own share of each epoch: 11 paths per epoch, the two shares together
  // cover the 21 files (one padded twice), and they are torch's DistributedSampler split.
  ImageFolder data((dir_.path() / "data" / "train").string());
  std::vector<std::vector<std::string>> shares = {Lines(Log("hints.0")), Lines(Log("hints.1"))};
  ASSERT_EQ(shares[0].size(), 22u) << Log("ddp.log");
  ASSERT_EQ(shares[1].size(), 22u);
  std::set<std::string> epoch0(shares[0].begin(), shares[0].begin() + 11);
  epoch0.insert(shares[1].begin(), shares[1].begin() + 11);
  EXPECT_EQ(epoch0.size(), 21u);
  std::string out;
  if (testing::RunCommand(std::string(testing::kPython) + " -c 'import torch' 2>/dev/null", &out) !=
      0) {
    GTEST_SKIP() << "no python3-torch for " << testing::kPython
                 << ": the split is not compared with torch's DistributedSampler";
  }
  ASSERT_EQ(testing::RunCommand(
                std::string(testing::kPython) +
                    " -c 'from torch.utils.data import DistributedSampler as D\n"
                    "for r in (0, 1):\n"
                    "  s = D(range(21), num_replicas=2, rank=r, seed=7)\n"
                    "  print(\" \".join(str(i) for e in (0, 1) if s.set_epoch(e) is None for i in "
                    "s))' 2>&1",
                &out),
            0)
      << out;
  std::vector<std::string> torch_lines = Lines(out);
  ASSERT_EQ(torch_lines.size(), 2u) << out;
  for (int r = 0; r < 2; ++r) {
    std::istringstream in(torch_lines[r]);
    std::vector<std::string> expected;
    for (int64_t i; in >> i;) {
      expected.push_back(data.samples()[i].path);
    }
    EXPECT_EQ(shares[r], expected) << "rank " << r;
  }
}

TEST_F(DistributedTrainTest, SigtermToOneRankStopsAllWithOneCheckpointAndResumesExactly) {
  ASSERT_EQ(RunToExit(With(Args(Path("ref"), 3), {"--nproc", "2"}), Path("ref.log")), 0)
      << Log("ref.log");

  const std::vector<std::string> args = With(Args(Path("term"), 3), {"--nproc", "2"});
  {
    Process p(args, Path("term.log"));
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Log("term.log").find("step 3/") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const pid_t rank1 = testing::ChildWithRank(p.pid(), 1);
    ASSERT_GT(rank1, 0) << Log("term.log");
    kill(rank1, SIGTERM);
    ASSERT_EQ(p.Wait(std::chrono::seconds(60)), 85) << Log("term.log");
  }
  const std::string log = Log("term.log");
  // Rank 0, told by rank 1 at the next step, saves once; rank 1 saves nothing.
  size_t saves = 0;
  for (size_t at = log.find("checkpoint (stop on another rank)"); at != std::string::npos;
       at = log.find("checkpoint (stop on another rank)", at + 1)) {
    ++saves;
  }
  EXPECT_EQ(saves, 1u) << log;
  EXPECT_EQ(log.find("checkpoint (signal)"), std::string::npos) << log;
  EXPECT_TRUE(fs::exists(Path("term") / kCheckpointFile));
  EXPECT_FALSE(fs::exists(Path("term") / "model_final.pt"));
  ASSERT_EQ(RunToExit(args, Path("term.log")), 0) << Log("term.log");
  EXPECT_NE(Log("term.log").find("resumed from"), std::string::npos);
  bool identical = false;
  EXPECT_EQ(
      MaxDifference(Path("ref") / "model_final.pt", Path("term") / "model_final.pt", &identical),
      0);
  EXPECT_TRUE(identical);

  // SIGTERM to the --nproc parent (what HTCondor signals): forwarded to every rank, one
  // checkpoint, exit 85.
  {
    Process p(With(Args(Path("parent"), 3), {"--nproc", "2"}), Path("parent.log"));
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Log("parent.log").find("step 2/") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    p.Signal(SIGTERM);
    ASSERT_EQ(p.Wait(std::chrono::seconds(60)), 85) << Log("parent.log");
  }
  const std::string parent_log = Log("parent.log");
  const size_t first = parent_log.find("checkpoint (signal)");
  EXPECT_NE(first, std::string::npos) << parent_log;
  EXPECT_EQ(parent_log.find("checkpoint (", first + 1), std::string::npos) << parent_log;
  EXPECT_TRUE(fs::exists(Path("parent") / kCheckpointFile));

  // A rank that dies outright (SIGKILL, no checkpoint) takes the job down, promptly.
  {
    Process p(With(Args(Path("kill"), 3), {"--nproc", "2"}), Path("kill.log"));
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (Log("kill.log").find("step 2/") == std::string::npos &&
           std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    const pid_t rank1 = testing::ChildWithRank(p.pid(), 1);
    ASSERT_GT(rank1, 0) << Log("kill.log");
    kill(rank1, SIGKILL);
    EXPECT_EQ(p.Wait(std::chrono::seconds(60)), 128 + SIGKILL) << Log("kill.log");
  }
  EXPECT_NE(Log("kill.log").find("rank 1 was killed by signal 9"), std::string::npos)
      << Log("kill.log");
}

}  // namespace
}  // namespace perch::trainer
