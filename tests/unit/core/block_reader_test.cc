#include "daemon/core/block_reader.h"

#include <gtest/gtest.h>

#include "tests/fakes/fake_origin.h"
#include "tests/fakes/mem_block_store.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::Data;
using testing::FakeOrigin;
using testing::InlineExecutor;
using testing::MemBlockStore;
using testing::QueuedExecutor;

using testing::kBlock;

class BlockReaderTest : public ::testing::Test {
 protected:
  BlockReaderTest() : reader_(origin_, store_, disk_, BlockReaderOptions{kBlock}) {
    data_ = Data(3500, 3);
    origin_.AddFile("/f", data_);
  }

  Result<core::Bytes> Read(uint64_t off, uint64_t len) {
    std::optional<Result<core::Bytes>> out;
    reader_.Read(*ObjectPath::Parse("/f"), ObjectVersion{data_.size(), ""}, "obj",
                 ByteRange{off, len}, DeadlineAfter(std::chrono::seconds(5)),
                 [&](Result<core::Bytes> r) { out = std::move(r); });
    EXPECT_TRUE(out.has_value()) << "inline fakes complete synchronously";
    return out ? *std::move(out) : Result<core::Bytes>(InternalError("no answer"));
  }

  FakeOrigin origin_;
  MemBlockStore store_;
  InlineExecutor disk_;
  BlockReader reader_;
  std::string data_;
};

TEST_F(BlockReaderTest, MissThenHit) {
  auto first = Read(900, 300);  // spans blocks 0 and 1
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, data_.substr(900, 300));
  EXPECT_EQ(reader_.stats().misses.load(), 2u);
  EXPECT_EQ(origin_.reads.load(), 2);
  EXPECT_TRUE(store_.Has(BlockKey{"obj", 0}));
  EXPECT_TRUE(store_.Has(BlockKey{"obj", 1}));

  auto again = Read(950, 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, data_.substr(950, 100));
  EXPECT_EQ(origin_.reads.load(), 2);  // no new fetch
  EXPECT_EQ(reader_.stats().hits.load(), 2u);
}

TEST_F(BlockReaderTest, WholeObjectAndShortLastBlock) {
  auto all = Read(0, 10000);  // clipped to 3500
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, data_);
  EXPECT_EQ(origin_.bytes_read.load(), data_.size());  // whole blocks, each once
  auto past = Read(3500, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->empty());
}

TEST_F(BlockReaderTest, ConcurrentMissesShareOneFetch) {
  origin_.Hold(true);
  int answered = 0;
  for (int i = 0; i < 4; ++i) {
    reader_.Read(*ObjectPath::Parse("/f"), ObjectVersion{data_.size(), ""}, "obj",
                 ByteRange{10, 20}, DeadlineAfter(std::chrono::seconds(5)),
                 [&](Result<core::Bytes> r) {
                   ASSERT_TRUE(r.ok());
                   EXPECT_EQ(*r, data_.substr(10, 20));
                   ++answered;
                 });
  }
  EXPECT_EQ(origin_.reads.load(), 1);
  EXPECT_EQ(origin_.Release(), 1u);
  EXPECT_EQ(answered, 4);
  EXPECT_EQ(reader_.stats().shared_fetches.load(), 3u);
}

TEST_F(BlockReaderTest, CorruptBlockIsDroppedAndRefetched) {
  ASSERT_TRUE(Read(0, 100).ok());
  store_.Corrupt(BlockKey{"obj", 0});
  auto r = Read(0, 100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, data_.substr(0, 100));
  EXPECT_EQ(reader_.stats().corrupt_blocks.load(), 1u);
  EXPECT_EQ(origin_.reads.load(), 2);
  EXPECT_TRUE(store_.Has(BlockKey{"obj", 0}));
}

// Issue #30 item 4: bytes a server says not to keep (Cache-Control no-store
// or private) are served and never written; every read of them is a fetch.
TEST_F(BlockReaderTest, BytesAServerSaysNotToKeepAreServedNeverStored) {
  origin_.NoStore(true);
  auto first = Read(900, 300);
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(*first, data_.substr(900, 300));
  EXPECT_FALSE(store_.Has(BlockKey{"obj", 0}));
  EXPECT_FALSE(store_.Has(BlockKey{"obj", 1}));
  EXPECT_EQ(reader_.stats().uncacheable_blocks.load(), 2u);
  auto again = Read(950, 100);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, data_.substr(950, 100));
  EXPECT_EQ(origin_.reads.load(), 4);  // fetched again, not served from memory
  EXPECT_EQ(reader_.stats().hits.load(), 0u);
  origin_.NoStore(false);
  ASSERT_TRUE(Read(0, 10).ok());
  EXPECT_TRUE(store_.Has(BlockKey{"obj", 0}));  // once the server allows it, it is kept
}

TEST_F(BlockReaderTest, FullDiskServesUncached) {
  store_.SetFull(true);
  auto r = Read(0, 2000);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, data_.substr(0, 2000));
  EXPECT_EQ(reader_.stats().store_errors.load(), 2u);
  EXPECT_EQ(store_.Size(), 0u);
}

TEST_F(BlockReaderTest, OriginErrorsPropagateAndNothingIsStored) {
  origin_.FailWith(UnavailableError("all caches down"));
  auto r = Read(0, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable);
  EXPECT_EQ(store_.Size(), 0u);
  // The failure is not remembered: the next read tries again.
  origin_.FailWith(Status::Ok());
  EXPECT_TRUE(Read(0, 100).ok());
}

TEST_F(BlockReaderTest, ShortOriginBodiesAreErrorsNotData) {
  origin_.ShortBodies(true);
  auto r = Read(0, 100);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(store_.Size(), 0u);
}

// Records what the reader tells, and how (one call per StoredMany).
class RecordingListener : public BlockListener {
 public:
  void Stored(const BlockKey& key, uint64_t, const ObjectPath&, const ObjectVersion&) override {
    stored_calls.push_back({key});
  }
  void StoredMany(const std::vector<StoredBlock>& blocks) override {
    std::vector<BlockKey> keys;
    for (const StoredBlock& b : blocks) keys.push_back(b.key);
    stored_calls.push_back(keys);
  }
  void Touched(const BlockKey&, uint64_t) override {}
  void Dropped(const BlockKey&) override {}
  bool Contains(const BlockKey&) const override { return false; }
  std::vector<std::vector<BlockKey>> stored_calls;
};

// Blocks fetched close together are written and recorded as one batch; a
// reader in the meantime is served from memory without a second fetch.
TEST(BlockReaderWriteBehind, BlocksAreWrittenAndRecordedInBatches) {
  FakeOrigin origin;
  MemBlockStore store;
  QueuedExecutor disk;
  RecordingListener listener;
  BlockReader reader(origin, store, disk, BlockReaderOptions{kBlock}, &listener);
  const std::string a = Data(3000, 1), b = Data(500, 2);
  origin.AddFile("/a", a);
  origin.AddFile("/b", b);
  auto read = [&](const char* path, const std::string& id, const std::string& data) {
    std::optional<Result<core::Bytes>> out;
    reader.Read(*ObjectPath::Parse(path), ObjectVersion{data.size(), ""}, id,
                ByteRange{0, data.size()}, DeadlineAfter(std::chrono::seconds(5)),
                [&](Result<core::Bytes> r) { out = std::move(r); });
    EXPECT_TRUE(out.has_value() && out->ok());
    if (out && out->ok()) {
      EXPECT_EQ(**out, data);
    }
  };
  read("/a", "a", a);  // 3 blocks
  read("/b", "b", b);  // 1 block
  EXPECT_EQ(store.Size(), 0u) << "nothing written before the batch runs";
  EXPECT_TRUE(reader.InUse(BlockKey{"b", 0}));
  read("/b", "b", b);  // from memory
  EXPECT_EQ(origin.reads.load(), 4);

  EXPECT_EQ(disk.RunAll(), 1u) << "one drain for the four blocks";
  EXPECT_EQ(store.Size(), 4u);
  ASSERT_EQ(listener.stored_calls.size(), 1u);
  EXPECT_EQ(listener.stored_calls[0].size(), 4u);
  EXPECT_FALSE(reader.InUse(BlockKey{"b", 0}));

  // FlushWrites writes what waits on the calling thread (shutdown); the
  // drain left queued then finds nothing.
  origin.AddFile("/c", b);
  read("/c", "c", b);
  reader.FlushWrites();
  EXPECT_EQ(store.Size(), 5u);
  ASSERT_EQ(listener.stored_calls.size(), 2u);
  EXPECT_EQ(disk.RunAll(), 1u);
  EXPECT_EQ(listener.stored_calls.size(), 2u);
}

}  // namespace
}  // namespace perch::core
