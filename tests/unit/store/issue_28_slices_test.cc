// Issue 28 item 4: a slice is a use of its block. While a reply holds one
// (splicing or copying its bytes), removing the block must not punch a hole
// under it: an object file's block is refused, a pack record's hole waits
// until the slice is let go. On the main, both were punched at once
// and the slice read zeros (the endpoint sent them with 200 OK).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "daemon/store/file_block_store.h"
#include "tests/fakes/fake_time_source.h"
#include "tests/fakes/mem_index.h"
#include "tests/fakes/test_values.h"
#include "tests/unit/store/store_dir_test.h"

namespace perch::store {
namespace {

using core::BlockKey;
using core::StatusCode;

// What a reply reads through `slice` now.
std::string ReadSlice(const core::BlockSlice& slice) {
  std::string out(slice.length(), '\0');
  ssize_t n = ::pread(slice.fd(), out.data(), out.size(), static_cast<off_t>(slice.file_offset()));
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

class SliceInUseTest : public StoreDirTest {
 protected:
  // Packs freeing dropped records at once (no grace): only a use delays a
  // hole, which the puncher looks at again a retry later on `time` (time_
  // unless the test wants the puncher racing on real time).
  std::unique_ptr<FileBlockStore> Store(const core::TimeSource* time = nullptr) {
    auto s = std::make_unique<FileBlockStore>(dir_.string(), kBlock);
    s->PackSmallObjects(index_, 1 << 20, std::chrono::milliseconds(0), 0,
                        time != nullptr ? *time : time_);
    return s;
  }
  // Whether the `len` bytes at `offset` of `path` read as zeros (a hole).
  static bool IsAHole(const std::string& path, uint64_t offset, uint64_t len) {
    std::string got(len, 'x');
    const int fd = ::open(path.c_str(), O_RDONLY);
    ssize_t n = ::pread(fd, got.data(), len, static_cast<off_t>(offset));
    ::close(fd);
    return n == static_cast<ssize_t>(len) && got == std::string(len, '\0');
  }
  // Moves time past the puncher's retry of a hole in use and waits for its
  // pass over the holes then due.
  static bool LetThePuncherLook(testing::FakeTimeSource& time, FileBlockStore& store) {
    const uint64_t passes = store.PunchPassesForTest();
    time.Advance(std::chrono::seconds(1));
    return store.AwaitPunchPassForTest(passes);
  }

  testing::MemIndex index_;
  testing::FakeTimeSource time_;
};

TEST_F(SliceInUseTest, ABlockOfAnObjectFileStaysUnderASlice) {
  auto store = Store();
  const std::string object = testing::Data(3 * kBlock, 5);
  for (uint64_t b = 0; b < 3; ++b)
    ASSERT_TRUE(
        store->Write(BlockKey{kId, b}, std::string_view(object).substr(b * kBlock, kBlock)).ok());
  auto slice = store->Slice(BlockKey{kId, 1}, 100, kBlock - 100);
  ASSERT_TRUE(slice.ok()) << slice.status().ToString();
  // An eviction while a reply sends the slice: the reply's bytes stay.
  (void)store->Remove(BlockKey{kId, 1});
  EXPECT_TRUE(ReadSlice(*slice) == object.substr(kBlock + 100, kBlock - 100))
      << "a hole was punched under a slice in use";
  // Let go: the block can go, and does.
  slice = core::InternalError("let go");
  EXPECT_TRUE(store->Remove(BlockKey{kId, 1}).ok());
  EXPECT_EQ(store->Read(BlockKey{kId, 1}, 0, 1).status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(IsAHole(store->ObjectPathOf(kId), kBlock, kBlock))
      << "an object file's block is punched in Remove";
}

TEST_F(SliceInUseTest, ARemovalOfABlockInUseIsRefusedAndSaysSo) {
  auto store = Store();
  const std::string object = testing::Data(2 * kBlock, 6);
  for (uint64_t b = 0; b < 2; ++b)
    ASSERT_TRUE(
        store->Write(BlockKey{kId, b}, std::string_view(object).substr(b * kBlock, kBlock)).ok());
  EXPECT_FALSE(store->InUse(BlockKey{kId, 0}));
  {
    auto slice = store->Slice(BlockKey{kId, 0}, 0, 10);
    ASSERT_TRUE(slice.ok());
    auto copy = *slice;  // a reply's copy keeps it in use too
    slice = core::InternalError("let go");
    EXPECT_TRUE(store->InUse(BlockKey{kId, 0}));
    EXPECT_FALSE(store->InUse(BlockKey{kId, 1}));
    EXPECT_EQ(store->Remove(BlockKey{kId, 0}).code(), StatusCode::kUnavailable);
    EXPECT_TRUE(ReadSlice(copy) == object.substr(0, 10));
  }
  EXPECT_FALSE(store->InUse(BlockKey{kId, 0}));
  EXPECT_TRUE(store->Remove(BlockKey{kId, 0}).ok());
  // A slice that fails (no such block) holds nothing.
  EXPECT_FALSE(store->Slice(BlockKey{kId, 0}, 0, 10).ok());
  EXPECT_FALSE(store->InUse(BlockKey{kId, 0}));
}

TEST_F(SliceInUseTest, APackRecordIsPunchedOnlyAfterItsLastSliceIsLetGo) {
  auto store = Store();
  const std::string small = testing::Data(30000, 7);
  ASSERT_TRUE(store->Write(BlockKey{"aa01", 0}, small).ok());
  auto loc = store->LocationOf("aa01");
  ASSERT_TRUE(loc);
  auto slice = store->Slice(BlockKey{"aa01", 0}, 0, small.size());
  ASSERT_TRUE(slice.ok());
  // Evicted: the name goes at once (a new read misses), the bytes stay for the slice.
  ASSERT_TRUE(store->Remove(BlockKey{"aa01", 0}).ok());
  EXPECT_EQ(store->Read(BlockKey{"aa01", 0}, 0, 1).status().code(), StatusCode::kNotFound);
  for (int retry = 0; retry < 3; ++retry) ASSERT_TRUE(LetThePuncherLook(time_, *store));
  EXPECT_TRUE(ReadSlice(*slice) == small) << "a pack record was punched under a slice in use";
  // Let go: its hole is punched.
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.pack", static_cast<unsigned long long>(loc->pack));
  const std::string pack = store->PackDir() + "/" + name;
  slice = core::InternalError("let go");
  ASSERT_TRUE(LetThePuncherLook(time_, *store));
  EXPECT_TRUE(IsAHole(pack, loc->offset, loc->length));
}

TEST_F(SliceInUseTest, ARecordWrittenAgainKeepsTheOldCopyForItsSlice) {
  auto store = Store();
  const std::string small = testing::Data(20000, 8);
  ASSERT_TRUE(store->Write(BlockKey{"bb02", 0}, small).ok());
  auto slice = store->Slice(BlockKey{"bb02", 0}, 0, small.size());
  ASSERT_TRUE(slice.ok());
  // Fetched twice (or after a failed check): the new record replaces the
  // old, whose bytes a reply still sends.
  ASSERT_TRUE(store->Write(BlockKey{"bb02", 0}, small).ok());
  for (int retry = 0; retry < 3; ++retry) ASSERT_TRUE(LetThePuncherLook(time_, *store));
  EXPECT_TRUE(ReadSlice(*slice) == small) << "the old record was punched under a slice in use";
  auto read = store->Read(BlockKey{"bb02", 0}, 0, small.size());
  ASSERT_TRUE(read.ok());
  EXPECT_TRUE(*read == small);
}

// Removals and writes racing slices and reads of the same blocks, on every
// thread at once (and under ThreadSanitizer in the test command): whatever
// a slice or read yields is the block's bytes, never a hole's zeros.
TEST_F(SliceInUseTest, RemovalsRacingSlicesAndReadsNeverYieldAWrongByte) {
  // The steady clock: holes retried while in use are punched during the race.
  auto store = Store(&core::TimeSource::Steady());
  const std::string object = testing::Data(4 * kBlock, 9);  // an object file of 4 blocks
  std::vector<std::string> smalls;                          // small objects, packed
  for (unsigned i = 0; i < 4; ++i) smalls.push_back(testing::Data(5000 + 7000 * i, 20 + i));
  auto key_of = [&](unsigned k) {
    return k < 4 ? BlockKey{kId, k} : BlockKey{"sm0" + std::to_string(k - 4), 0};
  };
  auto bytes_of = [&](unsigned k) {
    return k < 4 ? std::string_view(object).substr(k * kBlock, kBlock)
                 : std::string_view(smalls[k - 4]);
  };
  for (unsigned k = 0; k < 8; ++k) ASSERT_TRUE(store->Write(key_of(k), bytes_of(k)).ok());
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> served{0}, wrong{0};
  std::vector<std::thread> threads;
  for (unsigned t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      unsigned k = t;
      while (!stop) {
        k = (k * 7 + 3) % 8;
        const std::string_view want = bytes_of(k);
        if (auto slice = store->Slice(key_of(k), 0, want.size()); slice.ok()) {
          std::this_thread::yield();  // a reply takes its time
          if (ReadSlice(*slice) != want) wrong++;
          served++;
        }
        if (auto read = store->Read(key_of(k), 0, want.size()); read.ok()) {
          if (*read != want) wrong++;
          served++;
        }
      }
    });
  }
  threads.emplace_back([&] {
    for (unsigned k = 0; !stop; k = (k + 5) % 8) (void)store->Remove(key_of(k));
  });
  threads.emplace_back([&] {
    for (unsigned k = 0; !stop; k = (k + 3) % 8) (void)store->Write(key_of(k), bytes_of(k));
  });
  // How long the race runs (its threads do the waiting; no time of the code's).
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  stop = true;
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0u) << "of " << served.load() << " slices and reads";
  EXPECT_GT(served.load(), 100u);
}

}  // namespace
}  // namespace perch::store
