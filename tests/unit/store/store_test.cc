// The storage adapters on a real filesystem: block files with header and
// CRC32C, the RocksDB index, the cache-directory lock.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "daemon/store/cache_dir_lock.h"
#include "daemon/store/file_block_store.h"
#include "daemon/store/rocksdb_index.h"
#include "tests/fakes/test_values.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

namespace fs = std::filesystem;
using core::BlockKey;
using core::StatusCode;

// `n` bytes, seeded by `n` (tests/fakes/test_values.h's Data).
std::string SizedData(size_t n) { return testing::Data(n, static_cast<unsigned>(n)); }

class StoreTest : public StoreDirTest {
 protected:
  void TearDown() override {
    if (mounted_) umount2(dir_.c_str(), MNT_DETACH);
    StoreDirTest::TearDown();
  }
  bool mounted_ = false;
};

TEST_F(StoreTest, RoundTripAtManyOffsets) {
  FileBlockStore store(dir_.string());
  for (size_t n : {size_t{0}, size_t{1}, size_t{4097}, size_t{4} << 20}) {
    BlockKey key{"ab12cd" + std::to_string(n), 0};  // a block file, and at 4 MiB an object file
    std::string data = SizedData(n);
    ASSERT_TRUE(store.Write(key, data).ok());
    auto all = store.Read(key, 0, n + 10);
    ASSERT_TRUE(all.ok()) << all.status().ToString();
    EXPECT_TRUE(*all == data);
    if (n > 10) {
      for (int pass = 0; pass < 2; ++pass) {  // the second pass uses the verified fast path
        auto part = store.Read(key, n / 3, 7);
        ASSERT_TRUE(part.ok());
        EXPECT_EQ(*part, data.substr(n / 3, 7));
      }
    }
    auto past = store.Read(key, n + 5, 3);
    ASSERT_TRUE(past.ok());
    EXPECT_TRUE(past->empty());
  }
  EXPECT_EQ(store.Read(BlockKey{"ab12cd", 99}, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(store.Remove(BlockKey{"ab12cd", 99}).ok());
  for (const char* id : {"ab12cd1", "ab12cd4194304"}) {
    EXPECT_TRUE(store.Remove(BlockKey{id, 0}).ok());
    EXPECT_EQ(store.Read(BlockKey{id, 0}, 0, 1).status().code(), StatusCode::kNotFound);
  }
}

TEST_F(StoreTest, SliceLocatesTheBytesInTheBlockFile) {
  FileBlockStore store(dir_.string());
  std::string data = SizedData(100000);
  ASSERT_TRUE(store.Write(BlockKey{"cc", 0}, data).ok());
  auto slice = store.Slice(BlockKey{"cc", 0}, 4096, 1000);
  ASSERT_TRUE(slice.ok()) << slice.status().ToString();
  EXPECT_EQ(slice->length(), 1000u);
  std::string got(1000, '\0');
  ASSERT_EQ(pread(slice->fd(), got.data(), got.size(), static_cast<off_t>(slice->file_offset())),
            1000);
  EXPECT_EQ(got, data.substr(4096, 1000));
  auto tail = store.Slice(BlockKey{"cc", 0}, 99990, 1000);  // clipped at the end of the block
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->length(), 10u);
  EXPECT_EQ(store.Slice(BlockKey{"cc9", 0}, 0, 1).status().code(), StatusCode::kNotFound);
}

TEST_F(StoreTest, CorruptionIsDetectedAndTheFileRemoved) {
  struct Case {
    const char* name;
    std::function<void(const std::string&)> damage;
    const char* needle;
  };
  std::vector<Case> cases = {
      {"data byte", [](const std::string& p) { FlipByte(p, fs::file_size(p) - 100); }, "CRC32C"},
      {"magic", [](const std::string& p) { FlipByte(p, 0); }, "magic"},
      {"truncated", [](const std::string& p) { fs::resize_file(p, fs::file_size(p) - 1); },
       "does not match"},
      {"tiny", [](const std::string& p) { fs::resize_file(p, 10); }, "shorter than its header"},
  };
  for (const Case& c : cases) {
    BlockKey key{"ffee", 0};
    ASSERT_TRUE(FileBlockStore(dir_.string()).Write(key, SizedData(10000)).ok());
    // Damaged while no perchd ran (a process counts what it wrote itself as checked).
    FileBlockStore store(dir_.string());
    c.damage(store.PathOf(key));
    auto r = store.Read(key, 0, 10);
    ASSERT_FALSE(r.ok()) << c.name;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << c.name;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos) << r.status().message();
    EXPECT_FALSE(fs::exists(store.PathOf(key))) << c.name;
    EXPECT_EQ(store.Read(key, 0, 10).status().code(), StatusCode::kNotFound);
  }
}

// A block of an earlier process is checked (CRC32C over many read pieces)
// and served; a flip in its last piece is caught.
TEST_F(StoreTest, ABlockOfAnEarlierProcessIsCheckedWholeAndServed) {
  const std::string data = SizedData((4 << 20) + 123);
  BlockKey key{"ffef", 0};
  constexpr uint64_t kBig = 8 << 20;  // one block file, not an object file
  ASSERT_TRUE(FileBlockStore(dir_.string(), kBig).Write(key, data).ok());
  {
    FileBlockStore store(dir_.string(), kBig);
    auto r = store.Read(key, (4 << 20) + 100, 23);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(*r, data.substr((4 << 20) + 100));
  }
  FlipByte(FileBlockStore(dir_.string()).PathOf(key),
           fs::file_size(FileBlockStore(dir_.string()).PathOf(key)) - 1);
  EXPECT_EQ(FileBlockStore(dir_.string(), kBig).Read(key, 0, 1).status().code(),
            StatusCode::kCorrupt);
}

TEST_F(StoreTest, ABlockUnderAnotherKeysNameIsRejected) {
  FileBlockStore store(dir_.string());
  ASSERT_TRUE(store.Write(BlockKey{"aa01", 0}, SizedData(100)).ok());
  fs::create_directories(fs::path(store.PathOf(BlockKey{"aa02", 0})).parent_path());
  fs::rename(store.PathOf(BlockKey{"aa01", 0}), store.PathOf(BlockKey{"aa02", 0}));
  auto r = store.Read(BlockKey{"aa02", 0}, 0, 10);
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(r.status().message().find("another block"), std::string::npos);
}

TEST_F(StoreTest, FullDiskIsNoSpaceAndLeavesNothing) {
  if (mount("tmpfs", dir_.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount tmpfs";
  mounted_ = true;
  FileBlockStore store(dir_.string());
  ASSERT_TRUE(store.Write(BlockKey{"bb", 0}, SizedData(100 << 10)).ok());
  auto s = store.Write(BlockKey{"bb", 1}, SizedData(400 << 10));
  EXPECT_EQ(s.code(), StatusCode::kNoSpace) << s.ToString();
  size_t files = 0;
  for (auto& e : fs::recursive_directory_iterator(dir_)) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // no temp file or half-made object file left behind
}

TEST_F(StoreTest, RocksDbIndexBatchesScansAndReopens) {
  {
    auto index = RocksDbIndex::Open((dir_ / "index").string());
    ASSERT_TRUE(index.ok()) << index.status().ToString();
    ASSERT_TRUE(
        (*index)
            ->Apply({{"b/x/1", "one"}, {"b/x/2", "two"}, {"c/y", "other"}, {"b/x/3", "three"}})
            .ok());
    ASSERT_TRUE((*index)->Apply({{"b/x/3", std::nullopt}}).ok());
    // A second open of the same directory is refused clearly.
    auto second = RocksDbIndex::Open((dir_ / "index").string());
    ASSERT_FALSE(second.ok());
    EXPECT_EQ(second.status().code(), StatusCode::kUnavailable) << second.status().ToString();
  }
  auto index = RocksDbIndex::Open((dir_ / "index").string());
  ASSERT_TRUE(index.ok());
  auto v = (*index)->Get("b/x/2");
  ASSERT_TRUE(v.ok() && v->has_value());
  EXPECT_EQ(**v, "two");
  EXPECT_FALSE((*index)->Get("b/x/3")->has_value());
  std::vector<std::string> keys;
  ASSERT_TRUE((*index)
                  ->Scan("b/",
                         [&](std::string_view k, std::string_view) {
                           keys.emplace_back(k);
                           return true;
                         })
                  .ok());
  EXPECT_EQ(keys, (std::vector<std::string>{"b/x/1", "b/x/2"}));
}

TEST_F(StoreTest, CacheDirLockIsExclusive) {
  fs::path root = dir_ / "cache";
  auto first = CacheDirLock::Acquire(root.string());
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto second = CacheDirLock::Acquire(root.string());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("pid " + std::to_string(getpid())), std::string::npos)
      << second.status().message();
  { CacheDirLock released = std::move(*first); }
  EXPECT_TRUE(CacheDirLock::Acquire(root.string()).ok());
}

// Issue #42 item 2: what perchd, as root, writes in its cache directory never
// lands outside it.
TEST_F(StoreTest, CacheDirLockRefusesALinkedLockAndTouchesNothingOutside) {
  fs::path root = dir_ / "cache", victim = dir_ / "victim";
  fs::create_directories(root);
  { std::ofstream(victim) << "precious\n"; }
  fs::create_symlink(victim, root / "lock");
  auto lock = CacheDirLock::Acquire(root.string());
  ASSERT_FALSE(lock.ok());
  EXPECT_EQ(lock.status().code(), core::StatusCode::kPermissionDenied);
  EXPECT_NE(lock.status().message().find("lock file is a symbolic link"), std::string::npos)
      << lock.status().message();
  std::ifstream in(victim);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "precious\n");
}

TEST_F(StoreTest, CacheDirLockRefusesADirectoryOthersCouldReplace) {
  // A parent any user may write, without the sticky bit: refused.
  fs::path open_parent = dir_ / "open";
  fs::create_directories(open_parent);
  fs::permissions(open_parent, fs::perms::all);
  auto lock = CacheDirLock::Acquire((open_parent / "cache").string());
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("writable by other users (mode 0777"), std::string::npos)
      << lock.status().message();
  // The same with the sticky bit, as /tmp: others cannot replace our entry.
  fs::permissions(open_parent, fs::perms::all | fs::perms::sticky_bit);
  EXPECT_TRUE(CacheDirLock::Acquire((open_parent / "cache").string()).ok());
}

TEST_F(StoreTest, CacheDirLockRefusesADirectoryOrLinkOfAnotherUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root (chown to nobody)";
  const uid_t nobody = 65534;
  fs::path theirs = dir_ / "theirs";
  fs::create_directories(theirs);
  fs::permissions(theirs, fs::perms(0755));
  ASSERT_EQ(::chown(theirs.c_str(), nobody, nobody), 0);
  auto lock = CacheDirLock::Acquire(theirs.string());
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("owned by uid 65534"), std::string::npos)
      << lock.status().message();
  EXPECT_FALSE(fs::exists(theirs / "lock"));
  EXPECT_EQ(fs::status(theirs).permissions() & fs::perms::all, fs::perms(0755));
  // A link another user made to a directory of ours.
  fs::path ours = dir_ / "ours", link = dir_ / "link";
  fs::create_directories(ours);
  fs::create_symlink(ours, link);
  ASSERT_EQ(::lchown(link.c_str(), nobody, nobody), 0);
  lock = CacheDirLock::Acquire(link.string());
  ASSERT_FALSE(lock.ok());
  EXPECT_NE(lock.status().message().find("the link"), std::string::npos) << lock.status().message();
  EXPECT_FALSE(fs::exists(ours / "lock"));
}

TEST_F(StoreTest, ForEachBlockListsBlocksAndRemovesLeftovers) {
  fs::path root = dir_ / "cache";
  std::string before_tmp;
  {
    FileBlockStore before(root.string());
    ASSERT_TRUE(before.Write(BlockKey{"aa11", 0}, SizedData(5000)).ok());
    ASSERT_TRUE(before.Write(BlockKey{"aa12", 0}, SizedData(300)).ok());
    before_tmp = before.TempPrefix();
  }
  FileBlockStore probe(root.string());
  const fs::path shard = fs::path(probe.PathOf(BlockKey{"aa11", 0})).parent_path();
  // A killed writer's half-written temp file, an old one; a truncated block;
  // a block file under another block's name.
  { std::ofstream(shard / (before_tmp + "123"), std::ios::binary) << std::string(777, 'x'); }
  fs::copy_file(probe.PathOf(BlockKey{"aa11", 0}), shard / "aa11.7");
  fs::resize_file(probe.PathOf(BlockKey{"aa12", 0}), 100);
  // Hostile headers: huge id and data lengths, and a file of only a magic.
  for (uint64_t huge : std::initializer_list<uint64_t>{~0ULL, 1ULL << 40, 4097}) {
    std::string h = "PERCHBLK";
    for (uint64_t v : std::initializer_list<uint64_t>{1, 64, 0, huge, 0, huge}) {
      for (int i = 0; i < 8; ++i) h.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    }
    h.resize(64 + 100, 'z');
    std::ofstream(shard / ("aa" + std::to_string(huge) + ".0"), std::ios::binary) << h;
  }
  { std::ofstream(shard / "aa22.0", std::ios::binary) << "PERCHBLK"; }

  FileBlockStore store(root.string());  // a later process
  // A write of this process under way: its temp file is kept.
  const fs::path mine = shard / (store.TempPrefix() + "456");
  { std::ofstream(mine, std::ios::binary) << std::string(10, 'y'); }
  std::map<BlockKey, uint64_t> seen;
  auto scan = store.ForEachBlock([&](const BlockKey& k, uint64_t n) { seen[k] = n; }, nullptr);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(seen, (std::map<BlockKey, uint64_t>{{BlockKey{"aa11", 0}, 5000}}));
  EXPECT_EQ(scan->blocks, 1u);
  EXPECT_EQ(scan->leftovers_removed, 7u);
  EXPECT_FALSE(fs::exists(shard / (before_tmp + "123")));
  EXPECT_FALSE(fs::exists(shard / "aa11.7"));
  EXPECT_FALSE(fs::exists(store.PathOf(BlockKey{"aa12", 0})));
  EXPECT_TRUE(fs::exists(mine));
  EXPECT_EQ(*store.Read(BlockKey{"aa11", 0}, 0, 5000), SizedData(5000));
}

// Issue 14: blocks the index records are listed by their names alone (the
// start-up walk of a million blocks reads directories, not a million
// headers); files it does not record still have their headers checked.
TEST_F(StoreTest, ForEachBlockOpensOnlyBlocksTheIndexDoesNotRecord) {
  fs::path root = dir_ / "cache";
  FileBlockStore store(root.string());
  ASSERT_TRUE(store.Write(BlockKey{"bb11", 0}, SizedData(100)).ok());
  ASSERT_TRUE(store.Write(BlockKey{"bb12", 0}, SizedData(200)).ok());
  ASSERT_TRUE(store.Write(BlockKey{"cc22", 0}, SizedData(300)).ok());
  // Recorded but damaged: not opened by the walk (a read finds it corrupt).
  fs::resize_file(store.PathOf(BlockKey{"cc22", 0}), 10);
  // Not a block's name: never asked about, checked and removed.
  const fs::path shard = fs::path(store.PathOf(BlockKey{"bb11", 0})).parent_path();
  { std::ofstream(shard / "bb11.012", std::ios::binary) << "PERCHBLK"; }
  std::set<BlockKey> asked;
  std::map<BlockKey, uint64_t> seen;
  auto scan = store.ForEachBlock([&](const BlockKey& k, uint64_t n) { seen[k] = n; },
                                 [&](const BlockKey& k) {
                                   asked.insert(k);
                                   return k.object_id != "bb12";
                                 });
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_EQ(asked, (std::set<BlockKey>{{"bb11", 0}, {"bb12", 0}, {"cc22", 0}}));
  EXPECT_EQ(seen, (std::map<BlockKey, uint64_t>{{BlockKey{"bb12", 0}, 200}}));
  EXPECT_EQ(scan->blocks, 3u);
  EXPECT_EQ(scan->leftovers_removed, 1u);
  EXPECT_TRUE(fs::exists(store.PathOf(BlockKey{"cc22", 0})));
  EXPECT_EQ(store.Read(BlockKey{"cc22", 0}, 0, 300).status().code(), StatusCode::kCorrupt);
}

TEST_F(StoreTest, BlockDirectoriesAndFilesArePrivate) {
  fs::path root = dir_ / "cache";
  fs::create_directories(root);
  fs::permissions(root, fs::perms(0755));  // as an older perchd left it
  auto lock = CacheDirLock::Acquire(root.string());
  ASSERT_TRUE(lock.ok());
  EXPECT_EQ(fs::status(root).permissions() & fs::perms::all, fs::perms::owner_all);
  FileBlockStore store(root.string());
  ASSERT_TRUE(store.Write(BlockKey{"cc", 0}, SizedData(10)).ok());
  fs::path file = store.PathOf(BlockKey{"cc", 0});
  EXPECT_EQ(fs::status(file).permissions() & fs::perms::all,
            fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(fs::status(file.parent_path()).permissions() & fs::perms::all, fs::perms::owner_all);
  EXPECT_EQ(fs::status(root / "blocks").permissions() & fs::perms::all, fs::perms::owner_all);
}

TEST_F(StoreTest, ACorruptIndexIsMovedAsideAndANewOneOpens) {
  const std::string dir = (dir_ / "index").string();
  {
    auto index = RocksDbIndex::Open(dir);
    ASSERT_TRUE(index.ok());
    ASSERT_TRUE((*index)->Apply({{"b/x/1", "one"}}).ok());
  }
  // Every file of the database overwritten with garbage.
  for (auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file() && e.path().filename() != "LOCK") {
      std::ofstream(e.path(), std::ios::binary | std::ios::trunc) << "garbage, not a database\n";
    }
  }
  auto index = RocksDbIndex::Open(dir);
  ASSERT_TRUE(index.ok()) << index.status().ToString();
  EXPECT_TRUE(fs::exists(dir + ".corrupt"));
  EXPECT_FALSE((*index)->Get("b/x/1")->has_value());
  ASSERT_TRUE((*index)->Apply({{"b/x/2", "two"}}).ok());
  // Corruption found later (a scan) is handled the same way by Reset.
  ASSERT_TRUE((*index)->Reset(core::CorruptError("test", core::FailureSite::kLocal)).ok());
  EXPECT_FALSE((*index)->Get("b/x/2")->has_value());
  EXPECT_TRUE(fs::exists(dir + ".corrupt"));
}

}  // namespace
}  // namespace perch::store
