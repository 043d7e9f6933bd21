// The cache store under abuse (issue #11), end to end: the real perchd and
// FUSE mount over a real perch-devfed federation, the real perchctl.
//  - the cache directory is private: user nobody can list or read nothing;
//  - a disk smaller than the quota (a small tmpfs that fills up under perchd):
//    every read byte-exact, network bytes near bytes read, store errors shown
//    by `perchctl stats` and `perchctl health`;
//  - a corrupt index: perchd starts, says so once, serves;
//  - SIGKILL during warms, 20 times over one cache directory: after every
//    restart each file is byte-exact and the cache's size is the sum of its
//    block files (no orphans, no temp files).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "daemon/core/codec.h"
#include "daemon/store/rocksdb_index.h"
#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// Small files of many sizes and a few multi-block ones.
std::vector<TreeFile> MixedTree(int small, int large, uint64_t large_size) {
  std::vector<TreeFile> files;
  for (int i = 0; i < small; ++i) {
    files.push_back({"small/s" + std::to_string(i), 1 + 9973 * static_cast<uint64_t>(i) % 300000});
  }
  for (int i = 0; i < large; ++i)
    files.push_back({"large/l" + std::to_string(i), large_size + 4096 * i});
  return files;
}

struct OnDisk {
  uint64_t block_bytes = 0;  // data bytes of all block files (header excluded)
  uint64_t block_files = 0;
  uint64_t temp_files = 0;
};

// Little-endian u64 at `p`.
uint64_t U64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// What the cache directory holds, read from the block files' headers and
// the object files' maps (docs/design.md "On-disk format": entries of 32 bytes from
// offset 4096, the first 8 the block's length, 0 when absent).
OnDisk Walk(const fs::path& cache) {
  OnDisk out;
  std::error_code ec;
  if (fs::exists(cache / "objects", ec)) {
    for (auto& e : fs::recursive_directory_iterator(cache / "objects")) {
      if (!e.is_regular_file() || e.path().extension() != ".map") continue;
      std::ifstream in(e.path(), std::ios::binary);
      in.seekg(4096);
      unsigned char entry[32];
      while (in.read(reinterpret_cast<char*>(entry), sizeof(entry))) {
        if (const uint64_t len = U64(entry); len > 0) {
          out.block_bytes += len;
          out.block_files++;
        }
      }
    }
  }
  // Small files: the pack records the index names ("sp/<id>" -> format, pack,
  // offset, length), each a block header (data length at byte 32) and the data.
  if (fs::exists(cache / "packs", ec)) {
    auto index = store::RocksDbIndex::OpenReadOnly((cache / "index").string());
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    std::vector<std::string> names;
    if (index.ok()) {
      (*index)
          ->Scan("sp/",
                 [&](std::string_view, std::string_view v) {
                   names.emplace_back(v);
                   return true;
                 })
          .IgnoreError();
    }
    for (const std::string& v : names) {
      // Varints: format, pack, offset in 4 KiB units, length.
      uint64_t f[4] = {0, 0, 0, 0};
      core::codec::Reader r(v);
      for (uint64_t& x : f) EXPECT_TRUE(r.GetVarint(&x)) << "a damaged name";
      const uint64_t pack = f[1], offset = f[2] * 4096;
      char name[32];
      std::snprintf(name, sizeof(name), "%016llx.pack", static_cast<unsigned long long>(pack));
      std::ifstream in(cache / "packs" / name, std::ios::binary);
      in.seekg(static_cast<std::streamoff>(offset));
      unsigned char h[40];
      if (!in.read(reinterpret_cast<char*>(h), sizeof(h))) continue;
      out.block_bytes += U64(h + 32);
      out.block_files++;
    }
  }
  if (!fs::exists(cache / "blocks", ec)) return out;
  for (auto& e : fs::recursive_directory_iterator(cache / "blocks")) {
    if (!e.is_regular_file()) continue;
    if (e.path().filename().string().starts_with(".tmp.")) {
      out.temp_files++;
      continue;
    }
    std::ifstream in(e.path(), std::ios::binary);
    unsigned char h[24];
    if (!in.read(reinterpret_cast<char*>(h), sizeof(h))) continue;
    out.block_bytes += e.file_size() - U64(h + 16);  // minus the header's length
    out.block_files++;
  }
  return out;
}

class StoreHardeningTest : public MountedFederation {
 protected:
  void TearDown() override {
    perchd_.Stop();
    if (tmpfs_) umount2((work_->path() / "cache").c_str(), MNT_DETACH);
  }

  json Stats() { return CtlJson({"stats", "--json"}); }

  // Polls until `pred(stats)` holds (at most `timeout`); returns the last stats.
  json StatsWhen(const std::function<bool(const json&)>& pred,
                 std::chrono::seconds timeout = std::chrono::seconds(20)) {
    auto end = std::chrono::steady_clock::now() + timeout;
    json s = Stats();
    while (!pred(s) && std::chrono::steady_clock::now() < end) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      s = Stats();
    }
    return s;
  }

  uint64_t ReadAll() {
    uint64_t bytes = 0;
    for (const auto& f : files_) {
      EXPECT_EQ(ReadFile(f.rel), Original(f.rel)) << f.rel;
      bytes += f.size;
    }
    return bytes;
  }

  fs::path Cache() const { return work_->path() / "cache"; }

  bool tmpfs_ = false;
};

TEST_F(StoreHardeningTest, NobodyCanListOrReadTheCacheDirectory) {
  StartFederation("store-private", MixedTree(12, 1, 5 << 20));
  // As a package or an admin may have made it: readable by all.
  fs::create_directories(Cache());
  fs::permissions(Cache(), fs::perms(0755));
  Mount();
  ReadAll();
  json s = StatsWhen(
      [&](const json& s) { return s["cached_bytes"] > 0u && s["inflight_requests"] == 0u; });
  ASSERT_GT(s["cached_bytes"], 0u);
  // As root: no directory or file under the cache grants anything to group or others.
  size_t files = 0;
  for (auto& e : fs::recursive_directory_iterator(Cache())) {
    if (e.is_symlink()) continue;
    EXPECT_EQ(e.status().permissions() & (fs::perms::group_all | fs::perms::others_all),
              fs::perms::none)
        << e.path();
    files += e.is_regular_file();
  }
  EXPECT_GT(files, 10u);
  // As nobody: nothing can be listed or read (the index names protected paths).
  std::string block;
  std::error_code ec;
  for (const char* dir : {"blocks", "packs"}) {  // small files are packed
    for (auto& e : fs::recursive_directory_iterator(Cache() / dir, ec)) {
      if (e.is_regular_file()) block = e.path().string();
    }
  }
  ASSERT_FALSE(block.empty());
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{"-u", "nobody", "--", "ls", Cache().string()},
        std::vector<std::string>{"-u", "nobody", "--", "ls", (Cache() / "index").string()},
        std::vector<std::string>{"-u", "nobody", "--", "cat",
                                 (Cache() / "index" / "CURRENT").string()},
        std::vector<std::string>{"-u", "nobody", "--", "cat", block}}) {
    RunResult r = RunToExit("/usr/sbin/runuser", cmd);
    EXPECT_NE(r.exit_code, 0) << cmd.back() << ": " << r.output;
    EXPECT_NE(r.output.find("Permission denied"), std::string::npos) << r.output;
  }
}

TEST_F(StoreHardeningTest, ADiskSmallerThanTheQuotaServesEveryReadAndShowsStoreErrors) {
  StartFederation("store-enospc", MixedTree(40, 12, 5 << 20));
  fs::create_directories(Cache());
  ASSERT_EQ(mount("tmpfs", Cache().c_str(), "tmpfs", 0, "size=64m"), 0)
      << "mount tmpfs: " << strerror(errno);
  tmpfs_ = true;
  Mount({"--cache-size", "1G"});
  // At start the quota is capped to what the filesystem holds.
  json s = Stats();
  EXPECT_LT(s["capacity_bytes"].get<uint64_t>(), 64u << 20);
  // Then something else takes 36 MiB of it behind perchd's back.
  {
    std::ofstream filler(Cache() / "filler", std::ios::binary);
    filler << std::string(36 << 20, 'f');
  }
  const uint64_t read = ReadAll();  // byte-exact, checked inside
  s = StatsWhen([](const json& s) { return s["inflight_requests"] == 0u; });
  EXPECT_GT(read, 64u << 20);
  EXPECT_LE(s["bytes_from_network"].get<uint64_t>(), read * 11 / 10) << s.dump() << perchd_.Log();
  EXPECT_GT(s["store_errors"].get<uint64_t>(), 0u) << s.dump();
  EXPECT_LT(s["capacity_bytes"].get<uint64_t>(), 28u << 20) << s.dump();
  EXPECT_LE(s["cached_bytes"].get<uint64_t>(), s["capacity_bytes"].get<uint64_t>());
  RunResult human = Ctl({"stats"});
  EXPECT_NE(human.output.find("store errors "), std::string::npos) << human.output;
  EXPECT_EQ(human.output.find("store errors 0,"), std::string::npos) << human.output;
  EXPECT_EQ(human.output.find("store errors 0\n"), std::string::npos) << human.output;
  RunResult health = Ctl({"health"});
  EXPECT_NE(health.exit_code, 0) << health.output;
  EXPECT_NE(health.output.find("DEGRADED"), std::string::npos) << health.output;
  // One warning a minute, not one per block.
  const std::string log = perchd_.Log();
  size_t warnings = 0;
  for (size_t at = log.find("served but not cached"); at != std::string::npos;
       at = log.find("served but not cached", at + 1)) {
    ++warnings;
  }
  EXPECT_LE(warnings, 2u) << log;
  // Reading it all again still works, from cache where it fits.
  ReadAll();
}

TEST_F(StoreHardeningTest, ACorruptIndexIsMovedAsideAndTheCacheServes) {
  StartFederation("store-corrupt", MixedTree(20, 2, 5 << 20));
  Mount();
  const uint64_t bytes = ReadAll();
  StatsWhen([&](const json& s) { return s["cached_bytes"] == bytes; });
  ASSERT_EQ(perchd_.Stop(), 0);
  size_t garbled = 0;
  for (auto& e : fs::directory_iterator(Cache() / "index")) {
    if (!e.is_regular_file() || e.path().filename() == "LOCK") continue;
    std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << "not a database\n";
    ++garbled;
  }
  ASSERT_GT(garbled, 2u);
  Mount();
  const std::string log = perchd_.Log();
  size_t said = 0;
  for (size_t at = log.find("is corrupt"); at != std::string::npos;
       at = log.find("is corrupt", at + 1))
    ++said;
  EXPECT_EQ(said, 1u) << log;
  EXPECT_TRUE(fs::exists(Cache() / "index.corrupt"));
  // The blocks are re-adopted from their files: counted, and served.
  json s = StatsWhen([&](const json& s) { return s["cached_bytes"] == bytes; });
  EXPECT_EQ(s["cached_bytes"], bytes) << log;
  EXPECT_EQ(ReadAll(), bytes);
  s = Stats();
  EXPECT_EQ(s["corrupt_blocks"], 0u);
  EXPECT_EQ(s["bytes_from_network"], 0u);
  EXPECT_EQ(s["cached_bytes"], Walk(Cache()).block_bytes);
}

TEST_F(StoreHardeningTest, AColdReadIsNotCountedAsCacheBytesAndLeftoversGoAtStart) {
  StartFederation("store-hits", {{"big", 64 << 20}});
  Mount();
  ASSERT_EQ(ReadFile("big"), Original("big"));  // one cold `cat`
  json s = StatsWhen([](const json& s) { return s["cached_bytes"] == 64u << 20; });
  // Every byte came over the network once; hits count the parts read, not
  // whole blocks (this was 900 MiB "from cache" for a 64 MiB file).
  EXPECT_EQ(s["bytes_from_network"], 64u << 20);
  EXPECT_LE(s["bytes_from_cache"].get<uint64_t>(), 64u << 20) << s.dump();
  ASSERT_EQ(perchd_.Stop(), 0);
  // What a daemon killed mid-write leaves: a half-written temp file, outside
  // the quota until now.
  // (A 64 MiB file is an object file: no block file, the shard is made here.)
  const fs::path shard = Cache() / "blocks" / "ab";
  fs::create_directories(shard);
  { std::ofstream(shard / ".tmp.1.2", std::ios::binary) << std::string(3 << 20, 't'); }
  Mount();
  s = StatsWhen([&](const json&) { return Walk(Cache()).temp_files == 0; });
  EXPECT_EQ(Walk(Cache()).temp_files, 0u);
  EXPECT_EQ(s["cached_bytes"], Walk(Cache()).block_bytes);
  EXPECT_NE(perchd_.Log().find("removed 1 leftover files"), std::string::npos) << perchd_.Log();
}

TEST_F(StoreHardeningTest, TwentySigkillsDuringWarmsLeaveAConsistentCache) {
  StartFederation("store-crash", MixedTree(150, 4, 6 << 20));
  int recovered = 0;  // restarts that found something to repair
  std::mt19937 rng(11);
  auto start = std::chrono::steady_clock::now();
  for (int cycle = 0; cycle <= 20; ++cycle) {
    Mount();
    // The start-up walk has reconciled the index with the block files.
    json s = StatsWhen([&](const json& s) {
      OnDisk d = Walk(Cache());
      return s["cached_bytes"] == d.block_bytes && d.temp_files == 0;
    });
    OnDisk d = Walk(Cache());
    ASSERT_EQ(s["cached_bytes"], d.block_bytes) << "cycle " << cycle << "\n" << perchd_.Log();
    ASSERT_EQ(s["cached_blocks"], d.block_files) << "cycle " << cycle;
    ASSERT_EQ(d.temp_files, 0u) << "cycle " << cycle;
    recovered += perchd_.Log().find("adopted") != std::string::npos;
    // Every cached byte is right (a bad block would be dropped and counted).
    ReadAll();
    ASSERT_EQ(Stats()["corrupt_blocks"], 0u) << "cycle " << cycle;
    if (::testing::Test::HasFailure() || cycle == 20) break;
    // Two times in three start from empty, else from what is cached; warm,
    // and kill perchd somewhere in the middle.
    if (cycle % 3 != 2) {
      ASSERT_EQ(Ctl({"evict", mnt_.string()}).exit_code, 0);
    }
    std::thread warm([&] { Ctl({"warm", mnt_.string(), "--wait"}); });
    std::this_thread::sleep_for(
        std::chrono::milliseconds(std::uniform_int_distribution<int>(5, 150)(rng)));
    perchd_.Kill();
    warm.join();
  }
  // A bound against a hang, not a rate: 21 starts, walks and warms take
  // 60-160 s on these 2 cores beside the other integration tests (each cold
  // small file's digest is asked of a second server since issue 41).
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(240));
  std::cerr << recovered << " of 20 restarts adopted block files written before their record\n";
}

}  // namespace
}  // namespace perch::testing
