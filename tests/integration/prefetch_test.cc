// Prefetch end to end: a real perch-devfed federation (XRootD origin), the
// real perchd and its FUSE mount, perchctl for stats and hints. Readers are
// ordinary threads doing POSIX reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// An ImageNet-like tree (4 classes of 40 small files) and one large file.
std::vector<TreeFile> PrefetchTree() {
  std::vector<TreeFile> files;
  for (int c = 0; c < 4; ++c) {
    for (int i = 0; i < 40; ++i) {
      files.push_back({"train/n0" + std::to_string(c) + "/img" + std::to_string(i) + ".JPEG",
                       20000 + static_cast<uint64_t>((c * 40 + i) * 577) % 90000});
    }
  }
  files.push_back({"big/blob.bin", (24ULL << 20) + 12345});
  return files;
}

class PrefetchMountTest : public MountedFederation {
 protected:
  void SetUp() override { StartFederation("prefetch", PrefetchTree()); }

  json Stats() { return CtlJson({"stats", "--json"}); }

  // Waits until `ready` holds and no fetch is in flight or queued (prefetch
  // runs behind the readers).
  json QuietStats(const std::function<bool(const json&)>& ready = nullptr) {
    json s;
    for (int i = 0; i < 400; ++i) {
      s = Stats();
      const json& p = s["prefetch"];
      if ((!ready || ready(s)) && s["inflight_requests"] == 0 && p["queued_demand"] == 0 &&
          p["queued_hint"] == 0 && p["queued_speculative"] == 0) {
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return s;
  }

  uint64_t Blocks(uint64_t block_size) const {
    uint64_t n = 0;
    for (const auto& f : files_) n += (f.size + block_size - 1) / block_size;
    return n;
  }
  uint64_t Bytes() const {
    uint64_t n = 0;
    for (const auto& f : files_) n += f.size;
    return n;
  }
};

TEST_F(PrefetchMountTest, FourConcurrentReadersFetchEachBlockOnce) {
  Mount();
  // Four readers, each in its own order, all starting cold at once.
  std::vector<std::thread> readers;
  std::atomic<int> mismatches{0};
  for (int r = 0; r < 4; ++r) {
    readers.emplace_back([&, r] {
      std::vector<TreeFile> order = files_;
      std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(r)));
      for (const auto& f : order) {
        if (ReadLocalFile(mnt_ / f.rel) != ReadLocalFile(tree_ / f.rel)) mismatches++;
      }
    });
  }
  for (auto& t : readers) t.join();
  EXPECT_EQ(mismatches, 0);
  // Blocks reach the disk (and cached_bytes) shortly after the readers have them.
  json s = QuietStats([&](const json& s) { return s["cached_bytes"] == Bytes(); });
  // Every block crossed the network once: bytes the origin served == dataset size.
  EXPECT_EQ(s["bytes_from_network"], Bytes());
  EXPECT_EQ(s["misses"], Blocks(4 << 20));
  EXPECT_EQ(s["cached_bytes"], Bytes());
  EXPECT_LE(s["prefetch"]["max_in_flight_seen"], s["prefetch"]["budget_requests"]);
  EXPECT_GT(s["prefetch"]["directory_files"], 0u);
  EXPECT_GT(s["prefetch"]["sequential_blocks"], 0u);
}

TEST_F(PrefetchMountTest, HintedFilesArriveBeforeTheyAreRead) {
  Mount();
  // The trainer's order for one epoch, as a file of paths inside the mount.
  std::vector<std::string> order;
  for (const auto& f : files_) {
    if (f.rel.starts_with("train/")) order.push_back((mnt_ / f.rel).string());
  }
  std::shuffle(order.begin(), order.end(), std::mt19937(42));
  fs::path list = work_->path() / "epoch.txt";
  {
    std::ofstream out(list);
    for (const auto& p : order) out << p << "\n";
  }
  RunResult r = Ctl({"hint", "--job", "trainer", "--file", list.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("hinted 160 paths"), std::string::npos) << r.output;
  json s = QuietStats([](const json& s) { return s["prefetch"]["hinted_files"] == 160u; });
  EXPECT_EQ(s["prefetch"]["hinted_files"], 160u);  // within the default window of 512
  const uint64_t fetched = s["bytes_from_network"];
  for (const auto& p : order) {
    auto rel = fs::relative(p, mnt_);
    ASSERT_EQ(ReadLocalFile(p), ReadLocalFile(tree_ / rel)) << p;
  }
  s = Stats();
  EXPECT_EQ(s["bytes_from_network"], fetched);  // every read was a hit
  EXPECT_GE(s["hits"], 160u);
}

TEST_F(PrefetchMountTest, LargeFileStreamsWithReadAhead) {
  Mount({"--no-prefetch"});
  // Without prefetch nothing is read ahead...
  ASSERT_EQ(ReadLocalFile(mnt_ / "train/n00/img0.JPEG"),
            ReadLocalFile(tree_ / "train/n00/img0.JPEG"));
  json s = QuietStats();
  EXPECT_EQ(s["prefetch"]["sequential_blocks"], 0u);
  EXPECT_EQ(s["prefetch"]["directory_files"], 0u);
  perchd_.Stop();

  // ... with it, a sequential reader has the next blocks fetched for it.
  Mount();
  ASSERT_EQ(ReadLocalFile(mnt_ / "big/blob.bin"), ReadLocalFile(tree_ / "big/blob.bin"));
  s = QuietStats();
  EXPECT_GE(s["prefetch"]["sequential_blocks"], 4u);  // 7 blocks: all but the first were read ahead
  EXPECT_EQ(s["bytes_from_network"].get<uint64_t>(), (24ULL << 20) + 12345 + 0u);
}

}  // namespace
}  // namespace perch::testing
