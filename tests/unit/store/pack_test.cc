// Small objects in pack files (pack_files.h), named in the index.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>

#include "daemon/core/index_keys.h"
#include "daemon/store/file_block_store.h"
#include "tests/fakes/fake_time_source.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/test_values.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

namespace fs = std::filesystem;
using core::BlockKey;
using core::StatusCode;

class PackTest : public StoreDirTest {
 protected:
  // A store over dir_ that packs small objects into packs of `max_bytes`,
  // freeing dropped records at once (no grace).
  std::unique_ptr<FileBlockStore> Store(uint64_t max_bytes = 1 << 20) {
    auto s = std::make_unique<FileBlockStore>(dir_.string(), kBlock);
    s->PackSmallObjects(index_, max_bytes, std::chrono::milliseconds(0));
    return s;
  }
  // The pack files' names in the store at `dir` (dir_ unless given).
  std::set<std::string> Packs(const fs::path& dir = {}) const {
    std::set<std::string> out;
    std::error_code ec;
    for (auto& e : fs::directory_iterator((dir.empty() ? dir_ : dir) / "packs", ec))
      out.insert(e.path().filename());
    return out;
  }
  // Bytes the filesystem holds for `path` (holes hold none).
  static uint64_t Allocated(const fs::path& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  }
  static std::string Data(size_t n, unsigned seed) { return testing::Data(n, seed); }

  // Packs of 1 MiB in `dir`: what is allocated ahead of the records, and trimmed.
  void ExpectAllocatedAheadOnlyOnExt4(const fs::path& dir);

  testing::MemIndex index_;
};

TEST_F(PackTest, SmallObjectsShareOnePackAndReadBack) {
  auto store = Store();
  const std::string a = Data(1000, 1), b = Data(5000, 2), big = Data(kBlock, 3);
  ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, a).ok());
  ASSERT_TRUE(store->Write(BlockKey{"bb02", 0}, b).ok());
  ASSERT_TRUE(store->Write(BlockKey{"cc03", 0}, big).ok());  // a whole block: an object file
  EXPECT_EQ(Packs().size(), 1u);
  EXPECT_FALSE(fs::exists(store->PathOf(BlockKey{"aa01", 0})));
  EXPECT_TRUE(fs::exists(store->ObjectPathOf("cc03")));
  auto la = store->LocationOf("aa01"), lb = store->LocationOf("bb02");
  ASSERT_TRUE(la && lb);
  EXPECT_EQ(la->pack, lb->pack);
  EXPECT_EQ(la->offset % PackFiles::kAlign, 0u);
  EXPECT_EQ(lb->offset, PackFiles::Extent(la->length));
  EXPECT_FALSE(store->LocationOf("cc03"));

  // Read back by a store of a later process (nothing held open, CRC checked).
  store.reset();
  store = Store();
  auto ra = store->Read(BlockKey{"aa01", 0}, 0, 1000);
  ASSERT_TRUE(ra.ok()) << ra.status().ToString();
  EXPECT_EQ(*ra, a);
  auto part = store->Read(BlockKey{"bb02", 0}, 100, 50);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, b.substr(100, 50));
  auto slice = store->Slice(BlockKey{"bb02", 0}, 10, 20);
  ASSERT_TRUE(slice.ok());
  EXPECT_EQ(slice->file_offset(), lb->offset + (lb->length - b.size()) + 10);
  EXPECT_EQ(slice->length(), 20u);
  auto rbig = store->Read(BlockKey{"cc03", 0}, 0, kBlock);
  ASSERT_TRUE(rbig.ok());
  EXPECT_EQ(*rbig, big);
  EXPECT_EQ(store->Read(BlockKey{"dd04", 0}, 0, 10).status().code(), StatusCode::kNotFound);
}

TEST_F(PackTest, AWriteBatchPacksTheSmallAndNamesThemTogether) {
  auto store = Store();
  const std::string a = Data(700, 21), b = Data(9000, 22), big = Data(2 * kBlock, 23);
  std::vector<core::BlockStore::BlockWrite> batch = {
      {BlockKey{"aa01", 0}, a},
      {BlockKey{"cc03", 1}, std::string_view(big).substr(kBlock)},
      {BlockKey{"bb02", 0}, b}};
  auto statuses = store->WriteMany(batch);
  ASSERT_EQ(statuses.size(), 3u);
  for (const auto& s : statuses) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(store->LocationOf("aa01") && store->LocationOf("bb02"));
  EXPECT_FALSE(store->LocationOf("cc03"));
  store = Store();
  EXPECT_EQ(*store->Read(BlockKey{"aa01", 0}, 0, 700), a);
  EXPECT_EQ(*store->Read(BlockKey{"bb02", 0}, 0, 9000), b);
  EXPECT_EQ(*store->Read(BlockKey{"cc03", 1}, 0, kBlock), big.substr(kBlock));
}

TEST_F(PackTest, RemoveFreesTheRecordAndAnEmptyPackGoes) {
  auto store = Store(/*max_bytes=*/16 << 10);
  const std::string d = Data(6000, 4);  // two records to a 16 KiB pack
  for (const char* id : {"aa01", "aa02", "aa03"})
    ASSERT_TRUE(store->Write(BlockKey{id, 0}, d).ok());
  ASSERT_EQ(Packs().size(), 2u);
  const auto first = store->LocationOf("aa01"), third = store->LocationOf("aa03");
  ASSERT_TRUE(first && third);
  ASSERT_NE(first->pack, third->pack);
  const fs::path pack = fs::path(store->PackDir()) / *Packs().begin();
  const uint64_t before = Allocated(pack);

  ASSERT_TRUE(store->Remove(BlockKey{"aa01", 0}).ok());
  EXPECT_FALSE(store->LocationOf("aa01"));
  EXPECT_EQ(store->Read(BlockKey{"aa01", 0}, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_LT(Allocated(pack), before) << "the record's bytes are a hole";
  auto still = store->Read(BlockKey{"aa02", 0}, 0, d.size());
  ASSERT_TRUE(still.ok());
  EXPECT_EQ(*still, d);

  // The last record of a pack that is no longer written to: the file goes.
  ASSERT_TRUE(store->Remove(BlockKey{"aa02", 0}).ok());
  EXPECT_FALSE(fs::exists(pack));
  EXPECT_EQ(Packs().size(), 1u);
  // The active pack stays, even empty.
  ASSERT_TRUE(store->Remove(BlockKey{"aa03", 0}).ok());
  EXPECT_EQ(Packs().size(), 1u);
}

// A dropped record's bytes stay readable for the grace, and while a slice of
// it lives (a reply may still be splicing from them), then the puncher frees
// them without any further call. Time is a FakeTimeSource: each step moves it
// and waits for the puncher's pass, not for a guessed number of milliseconds.
TEST_F(PackTest, TheHoleIsPunchedAfterTheGrace) {
  testing::FakeTimeSource time;
  FileBlockStore store(dir_.string(), kBlock);
  store.PackSmallObjects(index_, 1 << 20, std::chrono::milliseconds(300), 0, time);
  const std::string d = Data(40000, 13);
  ASSERT_TRUE(store.Write(BlockKey{"aa01", 0}, d).ok());
  ASSERT_TRUE(store.Write(BlockKey{"aa02", 0}, d).ok());
  auto slice = store.Slice(BlockKey{"aa01", 0}, 0, d.size());
  ASSERT_TRUE(slice.ok());
  const fs::path pack = fs::path(store.PackDir()) / *Packs().begin();
  const uint64_t before = Allocated(pack);
  ASSERT_TRUE(store.Remove(BlockKey{"aa01", 0}).ok());
  std::string got(d.size(), '\0');
  ASSERT_EQ(::pread(slice->fd(), got.data(), got.size(), static_cast<off_t>(slice->file_offset())),
            static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, d) << "within the grace";
  EXPECT_EQ(Allocated(pack), before);
  time.Advance(std::chrono::milliseconds(299));
  EXPECT_EQ(store.PunchPassesForTest(), 0u) << "the puncher looked before the grace was over";
  uint64_t passes = store.PunchPassesForTest();
  time.Advance(std::chrono::milliseconds(1));  // past the grace: in use
  ASSERT_TRUE(store.AwaitPunchPassForTest(passes)) << "no pass of the puncher";
  ASSERT_EQ(::pread(slice->fd(), got.data(), got.size(), static_cast<off_t>(slice->file_offset())),
            static_cast<ssize_t>(got.size()));
  EXPECT_EQ(got, d) << "past the grace, while the slice lives";
  const off_t at = static_cast<off_t>(slice->file_offset());
  slice = core::InternalError("let go");
  // Then the hole, once another grace is over: the record's bytes read as zeros.
  passes = store.PunchPassesForTest();
  time.Advance(std::chrono::milliseconds(300));
  ASSERT_TRUE(store.AwaitPunchPassForTest(passes)) << "no pass of the puncher";
  const int fd = ::open(pack.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const bool punched =
      ::pread(fd, got.data(), got.size(), at) == static_cast<ssize_t>(got.size()) &&
      got == std::string(d.size(), '\0');
  ::close(fd);
  EXPECT_TRUE(punched) << "punched after it";
}

TEST_F(PackTest, ARecordWrittenAgainReplacesTheFirst) {
  auto store = Store();
  ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, Data(3000, 5)).ok());
  const auto first = store->LocationOf("aa01");
  const std::string again = Data(3000, 6);
  ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, again).ok());
  const auto second = store->LocationOf("aa01");
  ASSERT_TRUE(first && second);
  EXPECT_NE(first->offset, second->offset);
  store = Store();  // a later process reads what the index names
  auto r = store->Read(BlockKey{"aa01", 0}, 0, again.size());
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, again);
}

TEST_F(PackTest, DamagedRecordsAndNamesAreDroppedNotServed) {
  {
    auto store = Store();
    ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, Data(3000, 7)).ok());
    ASSERT_TRUE(store->Write(BlockKey{"bb02", 0}, Data(3000, 8)).ok());
    ASSERT_TRUE(store->Write(BlockKey{"cc03", 0}, Data(3000, 9)).ok());
    auto la = store->LocationOf("aa01"), lb = store->LocationOf("bb02");
    const std::string pack = fs::path(store->PackDir()) / *Packs().begin();
    Overwrite(pack, la->offset + la->length - 10, "XXXX");  // data: fails the CRC
    Overwrite(pack, lb->offset, "NOTPERCH");                // header: bad magic
  }
  ASSERT_TRUE(index_.Apply({{core::index_keys::PackRecord("cc03"), std::string("garbage")}}).ok());
  auto store = Store();  // a new run: every first read is checked
  for (const char* id : {"aa01", "bb02", "cc03"}) {
    auto r = store->Read(BlockKey{id, 0}, 0, 3000);
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << id;
    EXPECT_FALSE(store->LocationOf(id)) << id;
    EXPECT_EQ(store->Read(BlockKey{id, 0}, 0, 3000).status().code(), StatusCode::kNotFound);
  }
}

TEST_F(PackTest, WalkCountsAdoptsRenamesAndDrops) {
  {
    auto store = Store(/*max_bytes=*/16 << 10);
    for (const char* id : {"aa01", "aa02", "aa03", "aa04"})
      ASSERT_TRUE(store->Write(BlockKey{id, 0}, Data(6000, 10)).ok());
  }
  ASSERT_EQ(Packs().size(), 2u);
  // The index loses both names of the first pack (as after an index reset);
  // one record of the second is damaged.
  ASSERT_TRUE(index_
                  .Apply({{core::index_keys::PackRecord("aa01"), std::nullopt},
                          {core::index_keys::PackRecord("aa02"), std::nullopt}})
                  .ok());
  auto store = Store();
  const auto l4 = store->LocationOf("aa04");
  ASSERT_TRUE(l4);
  Overwrite(fs::path(store->PackDir()) / *Packs().rbegin(), l4->offset, "NOTPERCH");

  std::vector<std::pair<BlockKey, uint64_t>> adopted;
  auto scan = store->ForEachBlock(
      [&](const BlockKey& k, uint64_t len) { adopted.emplace_back(k, len); },
      [](const BlockKey& k) { return k.object_id == "aa03"; });  // the catalog knows aa03 only
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(scan->blocks, 3u);             // aa03 (recorded), aa01 and aa02 (named again)
  EXPECT_EQ(scan->leftovers_removed, 1u);  // aa04: its header is damaged
  EXPECT_FALSE(store->LocationOf("aa04"));
  ASSERT_EQ(adopted.size(), 2u);
  EXPECT_EQ(adopted[0], std::make_pair(BlockKey{"aa01", 0}, uint64_t{6000}));
  EXPECT_EQ(adopted[1], std::make_pair(BlockKey{"aa02", 0}, uint64_t{6000}));
  for (const char* id : {"aa01", "aa02", "aa03"}) {
    auto r = store->Read(BlockKey{id, 0}, 0, 6000);
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().ToString();
    EXPECT_EQ(*r, Data(6000, 10));
  }

  // A record the catalog does not know (killed between the two records) is adopted.
  ASSERT_TRUE(store->Write(BlockKey{"bb05", 0}, Data(100, 11)).ok());
  store = Store();
  adopted.clear();
  scan = store->ForEachBlock([&](const BlockKey& k, uint64_t len) { adopted.emplace_back(k, len); },
                             [](const BlockKey& k) { return k.object_id != "bb05"; });
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->blocks, 4u);
  ASSERT_EQ(adopted.size(), 1u);
  EXPECT_EQ(adopted[0], std::make_pair(BlockKey{"bb05", 0}, uint64_t{100}));
}

// Packs of earlier processes that nothing names and that hold nothing to
// name again are removed by the walk: copies of objects named elsewhere (a
// record written again before a crash), and holes or zeros.
TEST_F(PackTest, WalkRemovesPacksWithNothingLeft) {
  {
    auto store = Store(/*max_bytes=*/16 << 10);
    for (const char* id : {"aa01", "aa02", "aa03"})
      ASSERT_TRUE(store->Write(BlockKey{id, 0}, Data(6000, 14)).ok());
  }
  ASSERT_EQ(Packs().size(), 2u);
  const fs::path packs = dir_ / "packs";
  fs::copy_file(packs / *Packs().begin(), packs / "0000000000000010.pack");
  { std::ofstream(packs / "0000000000000011.pack", std::ios::binary) << std::string(8192, '\0'); }
  auto store = Store();
  auto scan = store->ForEachBlock([](const BlockKey&, uint64_t) { ADD_FAILURE() << "adopted"; },
                                  [](const BlockKey&) { return true; });
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->blocks, 3u);
  EXPECT_EQ(scan->leftovers_removed, 2u);
  EXPECT_EQ(Packs().size(), 2u);
  EXPECT_FALSE(fs::exists(packs / "0000000000000010.pack"));
  for (const char* id : {"aa01", "aa02", "aa03"}) EXPECT_LT(store->LocationOf(id)->pack, 16u);
}

// Naming again after a lost index reads records only where one must start
// (the pack's start, right after a record, after a hole): past a damaged
// header the rest of that stretch is skipped, since a record's data may hold
// what looks like a header.
TEST_F(PackTest, WalkNamesAgainOnlyWhereARecordMustStart) {
  const std::vector<std::string> ids = {"aa00", "aa01", "aa02", "aa03", "aa04"};
  {
    auto store = Store();
    for (const auto& id : ids) ASSERT_TRUE(store->Write(BlockKey{id, 0}, Data(6000, 30)).ok());
  }
  std::vector<core::Index::Write> lost;
  std::vector<FileBlockStore::PackLocation> at;
  {
    auto store = Store();
    for (const auto& id : ids) {
      at.push_back(*store->LocationOf(id));
      lost.push_back({core::index_keys::PackRecord(id), std::nullopt});
    }
  }
  ASSERT_TRUE(index_.Apply(lost).ok());
  const fs::path pack = dir_ / "packs" / *Packs().begin();
  Overwrite(pack.string(), at[1].offset, "NOTPERCH");  // aa01's header: damaged
  {                                                    // aa03: dropped, a hole
    const int fd = ::open(pack.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                          static_cast<off_t>(at[3].offset),
                          static_cast<off_t>(PackFiles::Extent(at[3].length))),
              0);
    ::close(fd);
  }
  auto store = Store();
  std::vector<std::string> adopted;
  auto scan = store->ForEachBlock(
      [&](const BlockKey& k, uint64_t) { adopted.push_back(k.object_id); }, nullptr);
  ASSERT_TRUE(scan.ok());
  // aa02 is whole but follows damage with no hole between: not looked at.
  EXPECT_EQ(adopted, (std::vector<std::string>{"aa00", "aa04"}));
  EXPECT_FALSE(store->LocationOf("aa02"));
  auto r = store->Read(BlockKey{"aa04", 0}, 0, 6000);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, Data(6000, 30));
}

// Two packs nothing names hold copies of the same objects (a crash before
// the earlier copies' holes were punched): the later copies are named, and
// their pack stays even though the earlier one named them first.
TEST_F(PackTest, WalkNamesTheLaterCopyAndKeepsItsPack) {
  {
    auto store = Store();
    ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, Data(6000, 40)).ok());
    ASSERT_TRUE(store->Write(BlockKey{"aa02", 0}, Data(6000, 41)).ok());
  }
  const fs::path packs = dir_ / "packs";
  fs::copy_file(packs / "0000000000000001.pack", packs / "0000000000000002.pack");
  ASSERT_TRUE(index_
                  .Apply({{core::index_keys::PackRecord("aa01"), std::nullopt},
                          {core::index_keys::PackRecord("aa02"), std::nullopt}})
                  .ok());
  auto store = Store();
  std::vector<std::string> adopted;
  auto scan = store->ForEachBlock(
      [&](const BlockKey& k, uint64_t) { adopted.push_back(k.object_id); }, nullptr);
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(adopted, (std::vector<std::string>{"aa01", "aa02"}));  // once each
  EXPECT_EQ(scan->blocks, 2u);
  ASSERT_TRUE(fs::exists(packs / "0000000000000002.pack"));
  for (const char* id : {"aa01", "aa02"}) {
    EXPECT_EQ(store->LocationOf(id)->pack, 2u) << id;
    auto r = store->Read(BlockKey{id, 0}, 0, 6000);
    ASSERT_TRUE(r.ok()) << id << ": " << r.status().ToString();
  }
}

TEST_F(PackTest, BlockFilesOfEarlierVersionsAreStillReadAndRemoved) {
  const std::string d = Data(2000, 12);
  {
    FileBlockStore old(dir_.string(), kBlock);  // no packs: a block file
    ASSERT_TRUE(old.Write(BlockKey{"aa01", 0}, d).ok());
  }
  auto store = Store();
  const std::string file = store->PathOf(BlockKey{"aa01", 0});
  ASSERT_TRUE(fs::exists(file));
  auto r = store->Read(BlockKey{"aa01", 0}, 0, d.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, d);
  auto scan =
      store->ForEachBlock([](const BlockKey&, uint64_t) {}, [](const BlockKey&) { return true; });
  ASSERT_TRUE(scan.ok());
  EXPECT_EQ(scan->blocks, 1u);
  ASSERT_TRUE(store->Remove(BlockKey{"aa01", 0}).ok());
  EXPECT_FALSE(fs::exists(file));
}

// On ext4 the active pack is allocated ahead of its writes (fewer
// allocations per record); what was never written goes back as the pack is
// left and when the store closes, so only records hold disk space. Elsewhere
// (tmpfs: allocating zeroes memory the writes overwrite) nothing is
// allocated ahead.
void PackTest::ExpectAllocatedAheadOnlyOnExt4(const fs::path& dir) {
  const uint64_t max_bytes = 1 << 20;
  auto store = std::make_unique<FileBlockStore>(dir.string(), kBlock);
  store->PackSmallObjects(index_, max_bytes, std::chrono::milliseconds(0),
                          PackFiles::kMaxReserveBytes);
  struct statfs sfs {};
  ASSERT_EQ(::statfs(dir.c_str(), &sfs), 0);
  const bool ahead = sfs.f_type == EXT4_SUPER_MAGIC;
  const std::string d = testing::Data(60000, 7);  // a 60 KiB extent: 17 to a pack, 4 KiB left
  const uint64_t extent = PackFiles::Extent(d.size() + 1);
  ASSERT_EQ(extent, 60u << 10);
  ASSERT_TRUE(store->Write(BlockKey{"aa00", 0}, d).ok());
  ASSERT_EQ(Packs(dir).size(), 1u);
  const fs::path first = fs::path(store->PackDir()) / *Packs(dir).begin();
  EXPECT_EQ(Allocated(first), ahead ? max_bytes : extent)
      << (ahead ? "allocated ahead, up to the pack's size" : "only what was written");
  for (int i = 1; i < 17; ++i)
    ASSERT_TRUE(store->Write(BlockKey{"aa" + std::to_string(10 + i), 0}, d).ok());
  ASSERT_EQ(Packs(dir).size(), 1u);
  ASSERT_TRUE(store->Write(BlockKey{"bb00", 0}, d).ok());
  ASSERT_EQ(Packs(dir).size(), 2u);
  EXPECT_EQ(Allocated(first), 17 * extent) << "the unwritten tail went as the pack was left";
  const fs::path second = fs::path(store->PackDir()) / *Packs(dir).rbegin();
  EXPECT_EQ(Allocated(second), ahead ? max_bytes : extent);
  store.reset();
  EXPECT_EQ(Allocated(second), extent) << "trimmed when the store closed";
  EXPECT_LE(fs::file_size(second), extent);
  store = std::make_unique<FileBlockStore>(dir.string(), kBlock);
  store->PackSmallObjects(index_, max_bytes, std::chrono::milliseconds(0),
                          PackFiles::kMaxReserveBytes);
  auto r = store->Read(BlockKey{"bb00", 0}, 0, d.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(*r, d);
}

TEST_F(PackTest, APackIsAllocatedAheadOnExt4AndTrimmedWhenLeft) {
  ExpectAllocatedAheadOnlyOnExt4(dir_);
}

TEST_F(PackTest, APackOnTmpfsIsNotAllocatedAhead) {
  struct statfs sfs {};
  if (::statfs("/dev/shm", &sfs) != 0 || sfs.f_type != TMPFS_MAGIC)
    GTEST_SKIP() << "no tmpfs at /dev/shm";
  std::string t = "/dev/shm/perch-pack-XXXXXX";
  ASSERT_NE(mkdtemp(t.data()), nullptr);
  ExpectAllocatedAheadOnlyOnExt4(t);
  fs::remove_all(t);
}

// What is allocated ahead is disk the quota does not count: a 1024th of the
// quota at most, nothing for a quota under 1 GiB, never more than 8 MiB.
TEST(PackReserveTest, AtMostA1024thOfTheQuota) {
  EXPECT_EQ(PackFiles::ReserveFor(8 << 20), 0u);
  EXPECT_EQ(PackFiles::ReserveFor(1ULL << 29), 0u);
  EXPECT_EQ(PackFiles::ReserveFor(1ULL << 30), 1u << 20);
  EXPECT_EQ(PackFiles::ReserveFor(3ULL << 30), 3u << 20);
  EXPECT_EQ(PackFiles::ReserveFor(10ULL << 30), 8u << 20);
  EXPECT_EQ(PackFiles::ReserveFor(1ULL << 40), PackFiles::kMaxReserveBytes);
  EXPECT_EQ(PackFiles::ReserveFor(1500ULL << 20) % PackFiles::kAlign, 0u);
}

TEST_F(PackTest, ConcurrentWritersGetDisjointRecords) {
  auto store = Store(/*max_bytes=*/256 << 10);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
        ASSERT_TRUE(store->Write(BlockKey{id, 0}, Data(3000 + i, t * 100 + i)).ok());
      }
    });
  }
  for (auto& t : threads) t.join();
  store = Store();
  for (int t = 0; t < 4; ++t) {
    for (int i = 0; i < 50; ++i) {
      const std::string id = "t" + std::to_string(t) + "-" + std::to_string(i);
      auto r = store->Read(BlockKey{id, 0}, 0, 4000);
      ASSERT_TRUE(r.ok()) << id << ": " << r.status().ToString();
      EXPECT_EQ(*r, Data(3000 + i, t * 100 + i)) << id;
    }
  }
}

}  // namespace
}  // namespace perch::store
