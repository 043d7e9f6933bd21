// The scrub end to end (issue 30, item 5): the real perchd and FUSE mount
// over perch-devfed's real XRootD origin, the real perchctl.
//  - a tree is warmed, bytes are flipped on disk under the cache directory
//    (in pack records of small files and in one block of a large file's
//    object file): `perchctl verify` reports exactly those blocks, drops
//    them, and the mount then reads every file byte-exact (the dropped
//    blocks fetched again); a second verify finds nothing;
//  - the background scrub at a configured rate finds a flipped byte with no
//    read at all, and the mount then reads the file byte-exact.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "daemon/core/codec.h"
#include "daemon/core/defaults.h"
#include "daemon/store/rocksdb_index.h"
#include "tests/integration/mounted_federation.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr uint64_t kBlock = core::kDefaultBlockSize;  // perchd runs with the default

std::vector<TreeFile> Tree() {
  std::vector<TreeFile> files;
  for (int i = 0; i < 12; ++i)
    files.push_back({"small/s" + std::to_string(i), 1000 + 37011 * static_cast<uint64_t>(i)});
  files.push_back({"large/l0", 2 * kBlock + 12345});
  files.push_back({"large/l1", kBlock + 7});
  return files;
}

// Flips one bit of the byte at `at` of file `path`.
void FlipByte(const fs::path& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 0x10));
  f.flush();
}

class ScrubTest : public MountedFederation {
 protected:
  void SetUp() override { StartFederation("scrub", Tree()); }
  void TearDown() override { perchd_.Stop(); }

  fs::path Cache() const { return work_->path() / "cache"; }

  // Where the cache holds each object, by the tree's relative path: its id
  // (the "o/" records name the path) and, for a small file, its pack record
  // ("sp/<id>": pack number, offset, length). Read from the index read-only.
  struct Place {
    std::string id;
    uint64_t pack = 0, offset = 0, length = 0;
  };
  std::map<std::string, Place> Places() {
    std::map<std::string, Place> out;
    auto index = store::RocksDbIndex::OpenReadOnly((Cache() / "index").string());
    EXPECT_TRUE(index.ok()) << index.status().ToString();
    if (!index.ok()) return out;
    std::map<std::string, std::string> id_of;
    (*index)
        ->Scan("o/",
               [&](std::string_view k, std::string_view v) {
                 core::codec::Reader r(v);
                 std::string path;
                 if (r.GetString(&path)) {
                   for (const TreeFile& f : files_) {
                     if (path.ends_with("/" + f.rel)) id_of[f.rel] = std::string(k.substr(2));
                   }
                 }
                 return true;
               })
        .IgnoreError();
    for (const auto& [rel, id] : id_of) {
      Place p;
      p.id = id;
      auto loc = (*index)->Get("sp/" + id);
      if (loc.ok() && *loc) {
        uint64_t f[4] = {0, 0, 0, 0};
        core::codec::Reader r(**loc);
        for (uint64_t& x : f) EXPECT_TRUE(r.GetVarint(&x));
        p.pack = f[1];
        p.offset = f[2] * 4096;
        p.length = f[3];
      }
      out[rel] = p;
    }
    return out;
  }

  fs::path PackPath(uint64_t pack) const {
    char name[32];
    std::snprintf(name, sizeof(name), "%016llx.pack", static_cast<unsigned long long>(pack));
    return Cache() / "packs" / name;
  }
  fs::path ObjectFile(const std::string& id) const {
    return Cache() / "objects" / id.substr(0, 2) / id;
  }

  // Flips a byte in the last data byte of small file `rel`'s pack record.
  void CorruptSmall(const std::map<std::string, Place>& places, const std::string& rel) {
    auto it = places.find(rel);
    ASSERT_NE(it, places.end()) << rel << " is not cached";
    ASSERT_GT(it->second.length, 0u) << rel << " is not packed";
    FlipByte(PackPath(it->second.pack), it->second.offset + it->second.length - 1);
  }

  void ExpectAllByteExact() {
    for (const TreeFile& f : files_) {
      EXPECT_TRUE(ReadFile(f.rel) == Original(f.rel)) << f.rel << " differs through the mount";
    }
  }

  json Stats() { return CtlJson({"stats", "--json"}); }
};

TEST_F(ScrubTest, VerifyReportsExactlyTheCorruptedBlocksAndTheMountReadsExact) {
  Mount({"--scrub-rate", "0"});
  ASSERT_EQ(Ctl({"warm", mnt_.string(), "--wait"}).exit_code, 0);
  auto places = Places();
  ASSERT_EQ(places.size(), files_.size());
  CorruptSmall(places, "small/s3");
  CorruptSmall(places, "small/s10");
  FlipByte(ObjectFile(places["large/l0"].id), kBlock + 4242);  // block 1 of 3

  RunResult r = Ctl({"verify", mnt_.string(), "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.output;  // something was bad
  json v;
  ASSERT_NO_THROW(v = json::parse(r.output)) << r.output;
  std::set<std::string> reported;
  for (const auto& c : v["corrupt"]) reported.insert(c.get<std::string>());
  const std::set<std::string> want = {"/test/small/s3 (block 0)", "/test/small/s10 (block 0)",
                                      "/test/large/l0 (block 1)"};
  EXPECT_EQ(reported, want) << v.dump(2);
  EXPECT_EQ(v["corrupt_blocks"], 3);
  EXPECT_EQ(v["blocks_done"], v["blocks_total"]);
  EXPECT_EQ(v["missing_blocks"], 0);
  EXPECT_EQ(v["finished"], true);
  json s = Stats();
  EXPECT_EQ(s["scrub_corrupt_blocks"], 3);
  EXPECT_GE(s["corrupt_blocks"], 3);
  EXPECT_GT(s["scrubbed_bytes"].get<uint64_t>(), 2 * kBlock);
  const uint64_t misses_before = s["misses"];

  // The mount reads every file right: the dropped blocks are fetched again.
  ExpectAllByteExact();
  EXPECT_GE(Stats()["misses"].get<uint64_t>(), misses_before + 3);
  // Nothing is bad now; a path below the mount checks only what is under it.
  json again = CtlJson({"verify", mnt_.string(), "--json"});
  EXPECT_EQ(again["corrupt_blocks"], 0) << again.dump(2);
  EXPECT_TRUE(again["corrupt"].empty());
  json small = CtlJson({"verify", (mnt_ / "small").string(), "--json"});
  EXPECT_EQ(small["blocks_done"], 12);
  // The human form says per file what it found, the bad ones as MISMATCHED
  // (--quiet: only those not verified); exit 0 when all is good.
  CorruptSmall(Places(), "small/s5");
  RunResult text = Ctl({"verify", (mnt_ / "small").string()});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.output.find("/test/small/s5: MISMATCHED (block 0 failed its CRC32C"),
            std::string::npos)
      << text.output;
  EXPECT_NE(text.output.find("/test/small/s0: verified (adler32="), std::string::npos)
      << text.output;
  RunResult quiet = Ctl({"verify", "--quiet", (mnt_ / "small").string()});
  EXPECT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find(": verified ("), std::string::npos) << quiet.output;
  ExpectAllByteExact();
}

TEST_F(ScrubTest, BackgroundScrubFindsACorruptionWithoutARead) {
  Mount({"--scrub-rate", "0"});
  ASSERT_EQ(Ctl({"warm", mnt_.string(), "--wait"}).exit_code, 0);
  ASSERT_EQ(perchd_.Stop(), 0);
  auto places = Places();
  FlipByte(ObjectFile(places["large/l1"].id), 1000);  // block 0 of 2
  CorruptSmall(places, "small/s7");
  // A restart with the scrub on at once (its delay from the config file).
  const fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "scrub_start_delay = \"0s\"\n";
  Mount({"--scrub-rate", "64M", "--config", config.string()});
  json s = Stats();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (s["scrub_corrupt_blocks"] < 2 && std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    s = Stats();
  }
  EXPECT_EQ(s["scrub_corrupt_blocks"], 2) << s.dump(2);
  EXPECT_EQ(s["hits"], 0);  // found without any read
  EXPECT_EQ(s["misses"], 0);
  ExpectAllByteExact();
  EXPECT_GE(Stats()["misses"].get<uint64_t>(), 2u);
}

}  // namespace
}  // namespace perch::testing
