// The open block files a FileBlockStore keeps: least recently used let go
// first, removal lets go at once, a slice keeps its descriptor past both.
#include "daemon/store/open_block_cache.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/store/file_block_store.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

namespace fs = std::filesystem;
using core::BlockKey;
using core::StatusCode;

// A descriptor that counts as closed once fcntl no longer knows it.
bool IsOpen(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

OpenBlock OpenDevNull() {
  return OpenBlock{std::make_shared<const core::BlockFd>(::open("/dev/null", O_RDONLY)), 0, 0};
}

TEST(OpenBlockCacheTest, LeastRecentlyUsedIsClosedFirst) {
  OpenBlockCache cache(2);
  OpenBlock a = OpenDevNull(), b = OpenDevNull(), c = OpenDevNull();
  const int fa = a.file->fd(), fb = b.file->fd(), fc = c.file->fd();
  cache.Put(BlockKey{"a", 0}, std::move(a));
  cache.Put(BlockKey{"b", 0}, std::move(b));
  ASSERT_TRUE(cache.Find(BlockKey{"a", 0}));  // a is now the most recent
  cache.Put(BlockKey{"c", 0}, std::move(c));
  EXPECT_EQ(cache.size(), 2u);
  EXPECT_FALSE(cache.Find(BlockKey{"b", 0}));
  EXPECT_FALSE(IsOpen(fb));
  EXPECT_TRUE(IsOpen(fa));
  EXPECT_TRUE(IsOpen(fc));
  cache.Erase(BlockKey{"a", 0});
  EXPECT_FALSE(IsOpen(fa));
  EXPECT_FALSE(cache.Find(BlockKey{"a", 0}));
}

TEST(OpenBlockCacheTest, AHolderKeepsTheDescriptorAfterTheCacheLetsGo) {
  OpenBlockCache cache(1);
  OpenBlock a = OpenDevNull();
  const int fa = a.file->fd();
  cache.Put(BlockKey{"a", 0}, std::move(a));
  std::optional<OpenBlock> held = cache.Find(BlockKey{"a", 0});
  ASSERT_TRUE(held);
  cache.Put(BlockKey{"a", 0}, OpenDevNull());  // replaced
  cache.Put(BlockKey{"b", 0}, OpenDevNull());  // and the replacement evicted
  EXPECT_TRUE(IsOpen(fa));
  held.reset();
  EXPECT_FALSE(IsOpen(fa));
}

TEST(OpenBlockCacheTest, CapacityZeroHoldsNothing) {
  OpenBlockCache cache(0);
  OpenBlock a = OpenDevNull();
  const int fa = a.file->fd();
  cache.Put(BlockKey{"a", 0}, std::move(a));
  EXPECT_FALSE(cache.Find(BlockKey{"a", 0}));
  EXPECT_FALSE(IsOpen(fa));
}

using StoreOpenFilesTest = StoreDirTest;

// A block read right after its write goes through the writer's descriptor:
// the file is not opened again (here it cannot be: its name is gone).
TEST_F(StoreOpenFilesTest, AWrittenBlockIsReadThroughTheDescriptorThatWroteIt) {
  FileBlockStore store(dir_.string(), FileBlockStore::kDefaultBlockSize, 4);
  BlockKey key{"ab01", 0};
  ASSERT_TRUE(store.Write(key, "hello, block").ok());
  fs::rename(store.PathOf(key), dir_ / "elsewhere");
  auto r = store.Read(key, 7, 5);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(*r, "block");
  auto s = store.Slice(key, 0, 5);
  ASSERT_TRUE(s.ok());
  std::string got(5, '\0');
  ASSERT_EQ(::pread(s->fd(), got.data(), 5, static_cast<off_t>(s->file_offset())), 5);
  EXPECT_EQ(got, "hello");
}

TEST_F(StoreOpenFilesTest, RemoveLetsGoOfTheFileButNotOfASliceInUse) {
  FileBlockStore store(dir_.string(), FileBlockStore::kDefaultBlockSize, 4);
  BlockKey key{"ab02", 0};
  ASSERT_TRUE(store.Write(key, "0123456789").ok());
  auto s = store.Slice(key, 2, 3);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(store.Remove(key).ok());
  EXPECT_EQ(store.Read(key, 0, 1).status().code(), StatusCode::kNotFound);
  std::string got(3, '\0');
  ASSERT_EQ(::pread(s->fd(), got.data(), 3, static_cast<off_t>(s->file_offset())), 3);
  EXPECT_EQ(got, "234");
}

TEST_F(StoreOpenFilesTest, BlocksBeyondTheLimitAreOpenedAgainAndChecked) {
  FileBlockStore store(dir_.string(), FileBlockStore::kDefaultBlockSize, 1);
  ASSERT_TRUE(store.Write(BlockKey{"ab03", 0}, "first").ok());
  ASSERT_TRUE(store.Write(BlockKey{"ab03", 1}, "second").ok());  // closes block 0's file
  fs::remove(store.PathOf(BlockKey{"ab03", 0}));
  EXPECT_EQ(store.Read(BlockKey{"ab03", 0}, 0, 5).status().code(), StatusCode::kNotFound);
  auto r = store.Read(BlockKey{"ab03", 1}, 0, 6);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, "second");
}

}  // namespace
}  // namespace perch::store
