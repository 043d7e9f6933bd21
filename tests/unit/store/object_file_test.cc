// FileBlockStore's object files (object_map.h): the blocks of an object of
// more than one block in one file at their offsets, a map of which are there,
// and WholeFile, the complete object a kernel can read directly.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "daemon/store/file_block_store.h"
#include "daemon/store/object_map.h"
#include "tests/fakes/test_values.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

namespace fs = std::filesystem;
using core::BlockKey;
using core::StatusCode;
using testing::Data;

std::string ReadFd(int fd) {
  std::string out;
  char buf[65536];
  for (off_t off = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return out;
}

class ObjectFileTest : public StoreDirTest {
 protected:
  FileBlockStore Store(uint64_t bs = kBlock) { return FileBlockStore(dir_.string(), bs, 16); }
  // Writes every block of `object` (blocks of kBlock) to `store`.
  static void WriteAll(FileBlockStore& store, const std::string& object) {
    for (uint64_t b = 0; b * kBlock < object.size(); ++b) {
      ASSERT_TRUE(
          store.Write(BlockKey{kId, b}, std::string_view(object).substr(b * kBlock, kBlock)).ok())
          << b;
    }
  }
  std::string Block(FileBlockStore& store, uint64_t b, uint64_t len = kBlock) {
    auto r = store.Read(BlockKey{kId, b}, 0, len);
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : "";
  }

  const std::string object_ = Data(3 * kBlock + 1000, 7);
};

TEST_F(ObjectFileTest, BlocksOfALargeObjectShareOneFileAtTheirOffsets) {
  FileBlockStore store = Store();
  // Out of order, as prefetch and readers write them.
  for (uint64_t b : {2, 0, 3, 1}) {
    ASSERT_TRUE(
        store.Write(BlockKey{kId, b}, std::string_view(object_).substr(b * kBlock, kBlock)).ok());
  }
  const std::string data = store.ObjectPathOf(kId);
  EXPECT_EQ(fs::file_size(data), object_.size());
  EXPECT_TRUE(fs::exists(data + ".map"));
  EXPECT_FALSE(fs::exists(dir_ / "blocks")) << "no block file for a large object";
  EXPECT_EQ((fs::status(data).permissions() & fs::perms::all),
            fs::perms::owner_read | fs::perms::owner_write);
  // A fresh store (no open files, nothing verified) reads every block back.
  FileBlockStore again = Store();
  for (uint64_t b = 0; b < 4; ++b) {
    EXPECT_EQ(Block(again, b), object_.substr(b * kBlock, kBlock)) << b;
  }
  auto part = again.Read(BlockKey{kId, 3}, 500, 10000);
  ASSERT_TRUE(part.ok());
  EXPECT_EQ(*part, object_.substr(3 * kBlock + 500, 500));
  auto slice = again.Slice(BlockKey{kId, 2}, 100, 200);
  ASSERT_TRUE(slice.ok());
  EXPECT_EQ(slice->file_offset(), 2 * kBlock + 100);
  EXPECT_EQ(slice->length(), 200u);
}

TEST_F(ObjectFileTest, ASmallObjectStaysOneBlockFile) {
  FileBlockStore store = Store();
  const BlockKey key{kId, 0};
  ASSERT_TRUE(store.Write(key, Data(1000, 1)).ok());
  EXPECT_TRUE(fs::exists(store.PathOf(key)));
  EXPECT_FALSE(fs::exists(store.ObjectPathOf(kId)));
  EXPECT_EQ(Block(store, 0, 1000), Data(1000, 1));
  EXPECT_EQ(store.WholeFile(kId, 1000).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(store.Remove(key).ok());
  EXPECT_FALSE(fs::exists(store.PathOf(key)));
}

TEST_F(ObjectFileTest, WholeFileIsTheCompleteObjectOnly) {
  FileBlockStore store = Store();
  for (uint64_t b : {0, 1, 3}) {
    ASSERT_TRUE(
        store.Write(BlockKey{kId, b}, std::string_view(object_).substr(b * kBlock, kBlock)).ok());
  }
  EXPECT_EQ(store.WholeFile(kId, object_.size()).status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(
      store.Write(BlockKey{kId, 2}, std::string_view(object_).substr(2 * kBlock, kBlock)).ok());
  // Another size is another object: not this file.
  EXPECT_FALSE(store.WholeFile(kId, object_.size() + 1).ok());
  // From a store of its own, which goes before the file does.
  auto whole = Store().WholeFile(kId, object_.size());
  ASSERT_TRUE(whole.ok()) << whole.status().message();
  EXPECT_EQ(::fcntl((*whole)->fd(), F_GETFL) & O_ACCMODE, O_RDONLY);
  EXPECT_TRUE(ReadFd((*whole)->fd()) == object_);
  // A block gone: no longer whole.
  ASSERT_TRUE(store.Remove(BlockKey{kId, 1}).ok());
  EXPECT_EQ(store.WholeFile(kId, object_.size()).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store.Read(BlockKey{kId, 1}, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Block(store, 2), object_.substr(2 * kBlock, kBlock));
}

TEST_F(ObjectFileTest, AWholeFileHeldKeepsItsBlocksUntilLetGo) {
  FileBlockStore store = Store();
  WriteAll(store, object_);
  auto whole = store.WholeFile(kId, object_.size());
  ASSERT_TRUE(whole.ok());
  auto again = store.WholeFile(kId, object_.size());  // a second holder
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(store.Held(kId));
  EXPECT_EQ(store.Remove(BlockKey{kId, 1}).code(), StatusCode::kUnavailable);
  whole->reset();
  EXPECT_EQ(store.Remove(BlockKey{kId, 1}).code(), StatusCode::kUnavailable);
  EXPECT_TRUE(ReadFd((*again)->fd()) == object_);
  again->reset();
  EXPECT_FALSE(store.Held(kId));
  EXPECT_TRUE(store.Remove(BlockKey{kId, 1}).ok());
  EXPECT_EQ(store.Read(BlockKey{kId, 1}, 0, 1).status().code(), StatusCode::kNotFound);
  // A failed WholeFile holds nothing.
  EXPECT_FALSE(store.WholeFile(kId, object_.size()).ok());
  EXPECT_FALSE(store.Held(kId));
}

TEST_F(ObjectFileTest, RemovingTheLastBlockRemovesBothFiles) {
  FileBlockStore store = Store();
  WriteAll(store, object_);
  const std::string data = store.ObjectPathOf(kId);
  for (uint64_t b : {1, 0, 3}) {
    ASSERT_TRUE(store.Remove(BlockKey{kId, b}).ok());
    EXPECT_TRUE(fs::exists(data)) << b;
  }
  // Removed blocks take their disk space with them (a hole).
  struct stat st {};
  ASSERT_EQ(::stat(data.c_str(), &st), 0);
  EXPECT_LE(static_cast<uint64_t>(st.st_blocks) * 512, 2 * kBlock);
  ASSERT_TRUE(store.Remove(BlockKey{kId, 2}).ok());
  EXPECT_FALSE(fs::exists(data));
  EXPECT_FALSE(fs::exists(data + ".map"));
  ASSERT_TRUE(store.Remove(BlockKey{kId, 2}).ok()) << "removing an absent block is fine";
}

TEST_F(ObjectFileTest, ADamagedBlockIsRemovedOnItsFirstCheckedRead) {
  {
    FileBlockStore store = Store();
    WriteAll(store, object_);
  }
  const std::string data = FileBlockStore(dir_.string(), kBlock).ObjectPathOf(kId);
  Overwrite(data, kBlock + 77, "Z");
  FileBlockStore store = Store();  // a new run: nothing verified yet
  EXPECT_EQ(store.Read(BlockKey{kId, 1}, 0, 10).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(store.Read(BlockKey{kId, 1}, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Block(store, 0), object_.substr(0, kBlock));
  EXPECT_EQ(store.WholeFile(kId, object_.size()).status().code(), StatusCode::kNotFound);
  // Fetched again, it is whole again.
  ASSERT_TRUE(store.Write(BlockKey{kId, 1}, std::string_view(object_).substr(kBlock, kBlock)).ok());
  auto whole = store.WholeFile(kId, object_.size());
  ASSERT_TRUE(whole.ok());
  EXPECT_TRUE(ReadFd((*whole)->fd()) == object_);
}

TEST_F(ObjectFileTest, ADamagedMapEntryIsAMissNotAServedBlock) {
  {
    FileBlockStore store = Store();
    WriteAll(store, object_);
  }
  const std::string map = Store().ObjectPathOf(kId) + ".map";
  Overwrite(map, MapEntryOffset(2) + 3, "\x7f");
  FileBlockStore store = Store();
  EXPECT_EQ(store.Read(BlockKey{kId, 2}, 0, 10).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(store.Read(BlockKey{kId, 2}, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(Block(store, 3, 1000), object_.substr(3 * kBlock));
}

TEST_F(ObjectFileTest, AnotherBlockSizeMakesTheObjectFileAMiss) {
  {
    FileBlockStore store = Store();
    WriteAll(store, object_);
  }
  FileBlockStore bigger = Store(2 * kBlock);
  EXPECT_EQ(bigger.Read(BlockKey{kId, 1}, 0, 10).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(fs::exists(bigger.ObjectPathOf(kId))) << "removed, not misread";
  ASSERT_TRUE(
      bigger.Write(BlockKey{kId, 1}, std::string_view(object_).substr(2 * kBlock, 2 * kBlock))
          .ok());
  auto r = bigger.Read(BlockKey{kId, 1}, 0, 2 * kBlock);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(*r == object_.substr(2 * kBlock, 2 * kBlock));
}

TEST_F(ObjectFileTest, ForEachBlockListsObjectBlocksAndRemovesLeftovers) {
  {
    FileBlockStore store = Store();
    WriteAll(store, object_);
    ASSERT_TRUE(store.Write(BlockKey{"ffff", 0}, "small").ok());
  }
  // A data file whose map never got written (killed in between), and a
  // damaged entry.
  const std::string orphan = Store().ObjectPathOf("aa00aa00aa00aa00aa00aa00aa00aa00");
  fs::create_directories(fs::path(orphan).parent_path());
  std::ofstream(orphan) << std::string(5000, 'x');
  Overwrite(Store().ObjectPathOf(kId) + ".map", MapEntryOffset(1) + 9, "\x01");
  FileBlockStore store = Store();
  std::map<BlockKey, uint64_t> seen;
  auto scan = store.ForEachBlock([&](const BlockKey& k, uint64_t len) { seen[k] = len; },
                                 [](const BlockKey& k) { return k.index == 3; });
  ASSERT_TRUE(scan.ok()) << scan.status().message();
  EXPECT_EQ(scan->blocks, 4u);  // 0, 2, 3 (recorded, not told) and the small one
  EXPECT_EQ(scan->leftovers_removed, 2u);
  EXPECT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[(BlockKey{kId, 0})], kBlock);
  EXPECT_EQ(seen[(BlockKey{kId, 2})], kBlock);
  EXPECT_EQ(seen[(BlockKey{"ffff", 0})], 5u);
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_EQ(store.Read(BlockKey{kId, 1}, 0, 1).status().code(), StatusCode::kNotFound);
}

TEST(ObjectMapTest, EntriesRoundTripAndDamageIsSeen) {
  const MapEntry e{4096, 0xdeadbeef};
  const std::string enc = EncodeMapEntry(e);
  ASSERT_EQ(enc.size(), kMapEntrySize);
  auto back = DecodeMapEntry(enc);
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->length, 4096u);
  EXPECT_EQ(back->crc, 0xdeadbeefu);
  EXPECT_EQ(DecodeMapEntry(std::string(kMapEntrySize, '\0'))->length, 0u);
  EXPECT_EQ(DecodeMapEntry("")->length, 0u) << "past the end of the map: absent";
  for (size_t i = 0; i < kMapEntrySize; ++i) {
    std::string bad = enc;
    bad[i] ^= 0x10;
    EXPECT_FALSE(DecodeMapEntry(bad).has_value()) << i;
  }
  EXPECT_EQ(CheckMapHeader(EncodeMapHeader(kBlock, kId), kBlock, kId), "");
  EXPECT_NE(CheckMapHeader(EncodeMapHeader(kBlock, kId), kBlock, "other"), "");
  EXPECT_NE(CheckMapHeader(EncodeMapHeader(kBlock, kId).substr(0, 100), kBlock, kId), "");
}

}  // namespace
}  // namespace perch::store
