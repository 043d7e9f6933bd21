// FileBlockStore::Verify, the scrub's check of one block (issue 30, item 5):
// a byte flipped on disk in a pack record, an object file or a block file is
// found even where a read would not look (part of a block verified earlier
// in the run), the block is dropped and the next read misses; and a verify racing readers, removals
// and rewrites of the same blocks never reports a corruption that is not
// there (run under ThreadSanitizer with the store's other tests).
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "daemon/store/file_block_store.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/test_values.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

namespace fs = std::filesystem;
using core::BlockKey;
using core::StatusCode;

class VerifyTest : public StoreDirTest {
 protected:
  // A store that packs small objects (unless `packs` is false), as perchd
  // starts one: a new run, nothing verified yet.
  std::unique_ptr<FileBlockStore> Store(bool packs = true) {
    auto s = std::make_unique<FileBlockStore>(dir_.string(), kBlock, 16);
    if (packs) s->PackSmallObjects(index_, 1 << 20, std::chrono::milliseconds(0));
    return s;
  }

  testing::MemIndex index_;
};

TEST_F(VerifyTest, GoodBlocksOfEveryKindPass) {
  auto store = Store();
  const std::string small = testing::Data(5000, 1), big = testing::Data(kBlock, 2);
  ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, small).ok());  // a pack record
  ASSERT_TRUE(store->Write(BlockKey{"bb02", 0}, big).ok());    // an object file
  ASSERT_TRUE(store->Write(BlockKey{"bb02", 1}, small).ok());
  for (auto [key, len] :
       {std::pair{BlockKey{"aa01", 0}, small.size()}, std::pair{BlockKey{"bb02", 0}, big.size()},
        std::pair{BlockKey{"bb02", 1}, small.size()}}) {
    auto v = store->Verify(key);
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    EXPECT_EQ(*v, len);
  }
  EXPECT_EQ(store->Verify(BlockKey{"cc03", 0}).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(store->Verify(BlockKey{"bb02", 7}).status().code(), StatusCode::kNotFound);
}

// A byte flipped in a pack record of a block verified in this run (this
// store wrote it): a read of part of it serves it as it is; Verify finds it,
// drops it, and the next read misses (refetched).
TEST_F(VerifyTest, FlippedByteInAPackRecordIsFoundAndDropped) {
  const std::string data = testing::Data(20000, 3);
  auto store = Store();
  ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, data).ok());
  ASSERT_TRUE(store->Write(BlockKey{"aa02", 0}, data).ok());
  auto loc = store->LocationOf("aa01");
  ASSERT_TRUE(loc.has_value());
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.pack", static_cast<unsigned long long>(loc->pack));
  FlipByte(dir_ / "packs" / name, loc->offset + loc->length - 100);  // in the data
  auto served = store->Read(BlockKey{"aa01", 0}, data.size() - 150, 100);
  ASSERT_TRUE(served.ok());
  EXPECT_NE(*served, data.substr(data.size() - 150, 100))
      << "part of a verified block is served without a CRC pass";
  auto v = store->Verify(BlockKey{"aa01", 0});
  EXPECT_EQ(v.status().code(), StatusCode::kCorrupt) << v.status().ToString();
  EXPECT_NE(v.status().message().find("CRC32C mismatch"), std::string::npos);
  EXPECT_EQ(store->Read(BlockKey{"aa01", 0}, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(store->LocationOf("aa01").has_value());
  // Its neighbour in the same pack is untouched.
  auto other = store->Verify(BlockKey{"aa02", 0});
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  // Written again (the refetch), it reads and verifies.
  ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, data).ok());
  EXPECT_EQ(*store->Read(BlockKey{"aa01", 0}, 0, data.size()), data);
  EXPECT_TRUE(store->Verify(BlockKey{"aa01", 0}).ok());
}

TEST_F(VerifyTest, FlippedByteInAnObjectFileDropsThatBlockOnly) {
  const std::string b0 = testing::Data(kBlock, 4), b1 = testing::Data(kBlock, 5),
                    b2 = testing::Data(1000, 6);
  {
    auto store = Store();
    ASSERT_TRUE(store->Write(BlockKey{"dd04", 0}, b0).ok());
    ASSERT_TRUE(store->Write(BlockKey{"dd04", 1}, b1).ok());
    ASSERT_TRUE(store->Write(BlockKey{"dd04", 2}, b2).ok());
  }
  auto store = Store();
  FlipByte(store->ObjectPathOf("dd04"), kBlock + 12345);  // block 1
  EXPECT_TRUE(store->Verify(BlockKey{"dd04", 0}).ok());
  auto v = store->Verify(BlockKey{"dd04", 1});
  EXPECT_EQ(v.status().code(), StatusCode::kCorrupt) << v.status().ToString();
  EXPECT_EQ(store->Read(BlockKey{"dd04", 1}, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(*store->Read(BlockKey{"dd04", 0}, 0, b0.size()), b0);
  EXPECT_EQ(*store->Read(BlockKey{"dd04", 2}, 0, b2.size()), b2);
  ASSERT_TRUE(store->Write(BlockKey{"dd04", 1}, b1).ok());
  EXPECT_EQ(*store->Read(BlockKey{"dd04", 1}, 0, b1.size()), b1);
  EXPECT_TRUE(store->Verify(BlockKey{"dd04", 1}).ok());
}

TEST_F(VerifyTest, FlippedByteInABlockFileIsFound) {
  const std::string data = testing::Data(30000, 7);
  {
    auto store = Store(/*packs=*/false);
    ASSERT_TRUE(store->Write(BlockKey{"ee05", 0}, data).ok());
  }
  auto store = Store(/*packs=*/false);
  const std::string path = store->PathOf(BlockKey{"ee05", 0});
  FlipByte(path, fs::file_size(path) - 1);
  EXPECT_EQ(store->Verify(BlockKey{"ee05", 0}).status().code(), StatusCode::kCorrupt);
  EXPECT_FALSE(fs::exists(path));
}

// Readers, removals and rewrites of the same blocks while they are verified:
// the blocks' bytes are always right, so Verify may find a block or not
// (removed meanwhile) but must never call one corrupt, and nothing crashes.
TEST_F(VerifyTest, RacingReadersRemovalsAndRewritesAreNeverCorruptions) {
  auto store = Store();
  std::vector<std::pair<BlockKey, std::string>> blocks;
  for (int i = 0; i < 4; ++i) {
    const std::string id = "ff0" + std::to_string(i);
    blocks.push_back({BlockKey{id, 0}, testing::Data(3000 + 100 * i, 10 + i)});  // packed
    blocks.push_back({BlockKey{id + "b", 0}, testing::Data(kBlock, 20 + i)});    // object file
    blocks.push_back({BlockKey{id + "b", 1}, testing::Data(kBlock / 2, 30 + i)});
  }
  for (auto& [k, d] : blocks) ASSERT_TRUE(store->Write(k, d).ok());
  std::atomic<bool> stop{false};
  std::atomic<int> corrupt{0}, verified{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      while (!stop) {
        for (auto& [k, d] : blocks) {
          auto v = store->Verify(k);
          if (v.ok()) {
            verified++;
          } else if (v.status().code() == StatusCode::kCorrupt) {
            ADD_FAILURE() << v.status().ToString();
            corrupt++;
          }
        }
      }
    });
  }
  threads.emplace_back([&] {  // an evictor that puts the blocks back (a refetch)
    while (!stop) {
      for (auto& [k, d] : blocks) {
        (void)store->Remove(k);
        (void)store->Write(k, d);
      }
    }
  });
  threads.emplace_back([&] {  // readers, by copy and by slice
    while (!stop) {
      for (auto& [k, d] : blocks) {
        auto r = store->Read(k, 0, d.size());
        if (r.ok()) {
          EXPECT_EQ(*r, d);
        }
        auto s = store->Slice(k, 0, 100);
        (void)s;
      }
    }
  });
  // How long the race runs (its threads do the waiting; no time of the code's).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(corrupt.load(), 0);
  EXPECT_GT(verified.load(), 0);
}

}  // namespace
}  // namespace perch::store
