// Issue 41 item 3: rot on the cache's disk is never served. Every block is
// checked against its CRC32C on its first read in each run, however the last
// run ended (once a clean stop made earlier runs' blocks "trusted" and
// served them unchecked); a read of a whole block checks it every time; and
// WholeFile checks every block of an object before the kernel may read its
// file directly. A flipped data byte, which no header check sees, tells a
// checked block from an unchecked one.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "daemon/store/file_block_store.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/test_values.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

namespace fs = std::filesystem;
using core::BlockKey;
using core::StatusCode;
using testing::Data;

// Where a block lives: a pack record, a block file (a store without packs),
// or an object file (a block of a larger object).
enum class Place { kPack, kBlockFile, kObjectFile };

class RotTest : public StoreDirTest, public ::testing::WithParamInterface<Place> {
 protected:
  // A store as perchd starts one: a new run, nothing verified yet.
  std::unique_ptr<FileBlockStore> Store() {
    auto s = std::make_unique<FileBlockStore>(dir_.string(), kBlock);
    if (GetParam() != Place::kBlockFile) s->PackSmallObjects(index_, 1 << 20, {});
    return s;
  }
  BlockKey Key() const { return BlockKey{kId, GetParam() == Place::kObjectFile ? 1u : 0u}; }
  // Flips the byte at `at` of the block's bytes on disk.
  void Rot(FileBlockStore& store, uint64_t at) {
    switch (GetParam()) {
      case Place::kPack: {
        auto loc = store.LocationOf(kId);
        ASSERT_TRUE(loc.has_value());
        char name[32];
        std::snprintf(name, sizeof(name), "%016llx.pack",
                      static_cast<unsigned long long>(loc->pack));
        FlipByte(fs::path(store.PackDir()) / name, loc->offset + loc->length - data_.size() + at);
        break;
      }
      case Place::kBlockFile: {
        const std::string path = store.PathOf(Key());
        FlipByte(path, fs::file_size(path) - data_.size() + at);
        break;
      }
      case Place::kObjectFile:
        FlipByte(store.ObjectPathOf(kId), kBlock + at);
        break;
    }
  }
  void Write(FileBlockStore& store) {
    if (GetParam() == Place::kObjectFile) {
      ASSERT_TRUE(store.Write(BlockKey{kId, 0}, Data(kBlock, 1)).ok());
    }
    ASSERT_TRUE(store.Write(Key(), data_).ok());
  }

  testing::MemIndex index_;
  const std::string data_ = Data(40000, 2);  // shorter than a block: packed, or a block file
};

INSTANTIATE_TEST_SUITE_P(Places, RotTest,
                         ::testing::Values(Place::kPack, Place::kBlockFile, Place::kObjectFile),
                         [](const ::testing::TestParamInfo<Place>& p) -> std::string {
                           switch (p.param) {
                             case Place::kPack:
                               return "Pack";
                             case Place::kBlockFile:
                               return "BlockFile";
                             case Place::kObjectFile:
                               return "ObjectFile";
                           }
                           return "Unknown";
                         });

// The store goes away as at a clean stop; the next one checks the block on
// its first read, even one of a few bytes far from the flipped one.
TEST_P(RotTest, RotWhilePerchdWasStoppedFailsTheFirstReadAfterTheStart) {
  {
    auto store = Store();
    Write(*store);
    Rot(*store, data_.size() - 7);
  }
  auto store = Store();
  auto r = store->Read(Key(), 10, 5);
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << r.status().ToString();
  EXPECT_NE(r.status().message().find("CRC32C mismatch"), std::string::npos);
  EXPECT_EQ(store->Read(Key(), 0, 1).status().code(), StatusCode::kNotFound) << "dropped";
  // Fetched again, it reads.
  ASSERT_TRUE(store->Write(Key(), data_).ok());
  EXPECT_EQ(*store->Read(Key(), 0, data_.size()), data_);
}

// Verified in this run (this store wrote it), then rotted: a read of the
// whole block, by copy or by slice, checks it again.
TEST_P(RotTest, AReadOfTheWholeBlockChecksItEachTime) {
  for (bool slice : {false, true}) {
    auto store = Store();
    Write(*store);
    EXPECT_EQ(*store->Read(Key(), 0, data_.size()), data_);
    Rot(*store, data_.size() / 2);
    core::Status s = slice ? store->Slice(Key(), 0, data_.size() + 100).status()
                           : store->Read(Key(), 0, data_.size()).status();
    EXPECT_EQ(s.code(), StatusCode::kCorrupt) << (slice ? "slice: " : "read: ") << s.ToString();
    EXPECT_EQ(store->Read(Key(), 0, 1).status().code(), StatusCode::kNotFound) << "dropped";
    ASSERT_TRUE(store->Write(Key(), data_).ok());  // for the next turn: whole again
    auto again = store->Slice(Key(), 0, data_.size());
    ASSERT_TRUE(again.ok()) << again.status().ToString();
  }
}

// What is left within one run: a read of part of a block verified earlier
// in the run is not checked again (the scrub finds such rot).
TEST_P(RotTest, APartOfABlockVerifiedInThisRunIsServedAsItIs) {
  auto store = Store();
  Write(*store);
  Rot(*store, 100);
  auto part = store->Read(Key(), 90, 20);
  ASSERT_TRUE(part.ok()) << part.status().ToString();
  EXPECT_NE(*part, data_.substr(90, 20));
  EXPECT_EQ(store->Verify(Key()).status().code(), StatusCode::kCorrupt);
}

class WholeFileRotTest : public StoreDirTest {};

// The first use of an object after a start is WholeFile (an open the kernel
// would read in passthrough): every block is checked first, a bad one is
// dropped and named, and nothing is handed out until it is whole again.
TEST_F(WholeFileRotTest, EveryBlockIsCheckedBeforeTheFileIsHandedOut) {
  const std::string object = Data(3 * kBlock + 500, 3);
  {
    FileBlockStore store(dir_.string(), kBlock);
    for (uint64_t b = 0; b < 4; ++b) {
      ASSERT_TRUE(
          store.Write(BlockKey{kId, b}, std::string_view(object).substr(b * kBlock, kBlock)).ok());
    }
    FlipByte(store.ObjectPathOf(kId), 2 * kBlock + kBlock / 2);
  }
  FileBlockStore store(dir_.string(), kBlock);
  BlockKey failed;
  auto whole = store.WholeFile(kId, object.size(), &failed);
  EXPECT_EQ(whole.status().code(), StatusCode::kCorrupt) << whole.status().ToString();
  EXPECT_EQ(failed, (BlockKey{kId, 2}));
  whole = store.WholeFile(kId, object.size(), &failed);
  EXPECT_EQ(whole.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(failed, (BlockKey{kId, 2}));
  EXPECT_EQ(*store.Read(BlockKey{kId, 3}, 0, 500), object.substr(3 * kBlock));
  ASSERT_TRUE(
      store.Write(BlockKey{kId, 2}, std::string_view(object).substr(2 * kBlock, kBlock)).ok());
  whole = store.WholeFile(kId, object.size(), &failed);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
}

class EarlierVersionsTest : public StoreDirTest {};

// Format 2, written by versions that trusted earlier runs, adds the run's
// number after the id (in the header's padding): read, and checked alike.
TEST_F(EarlierVersionsTest, AFormatTwoBlockIsReadAndChecked) {
  const BlockKey key{kId, 0};
  const std::string data = Data(70000, 4);
  std::string path;
  {
    FileBlockStore store(dir_.string(), kBlock * 2);  // a block file
    ASSERT_TRUE(store.Write(key, data).ok());
    path = store.PathOf(key);
  }
  Overwrite(path, 8, std::string("\x02\0\0\0\0\0\0\0", 8));
  Overwrite(path, 56 + kId.size(), std::string("\x11\x22\x33\0\0\0\0\0", 8));  // a run
  {
    FileBlockStore store(dir_.string(), kBlock * 2);
    auto r = store.Read(key, 0, data.size());
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(*r, data);
  }
  FlipByte(path, fs::file_size(path) - 10);
  FileBlockStore store(dir_.string(), kBlock * 2);
  EXPECT_EQ(store.Read(key, 0, 10).status().code(), StatusCode::kCorrupt);
}

// Their run record would make such a version, started again on this cache,
// trust the blocks it finds: the start-up walk removes it.
TEST_F(EarlierVersionsTest, TheirRunRecordIsRemovedByTheWalk) {
  std::ofstream(dir_ / "run") << "PERCHRUN...";
  FileBlockStore store(dir_.string(), kBlock);
  auto scan = store.ForEachBlock([](const BlockKey&, uint64_t) {}, nullptr);
  ASSERT_TRUE(scan.ok()) << scan.status().ToString();
  EXPECT_FALSE(fs::exists(dir_ / "run"));
}

}  // namespace
}  // namespace perch::store
