// Tar shards: brace expansion, WebDataset key grouping, bounds on what a tar says (oversized
// members, truncated and corrupt shards), the split of shards between ranks and streams, and the
// determinism of the shuffle buffers (any thread order, resume mid-epoch).
#include <archive.h>
#include <archive_entry.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <thread>

#include "trainer/shard_source.h"
#include "trainer/tar_shards.h"
#include "trainer/tests/test_util.h"

namespace perch::trainer {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

using Members = std::vector<std::pair<std::string, std::string>>;

// A ustar/pax tar of `members` (name, bytes) in order, written with libarchive.
void WriteTar(const fs::path& path, const Members& members) {
  archive* a = archive_write_new();
  ASSERT_EQ(archive_write_set_format_pax_restricted(a), ARCHIVE_OK);
  ASSERT_EQ(archive_write_open_filename(a, path.c_str()), ARCHIVE_OK);
  for (const auto& [name, bytes] : members) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(e, name.back() == '/' ? AE_IFDIR : AE_IFREG);
    archive_entry_set_perm(e, 0644);
    ASSERT_EQ(archive_write_header(a, e), ARCHIVE_OK);
    archive_entry_free(e);
    archive_write_data(a, bytes.data(), bytes.size());
  }
  archive_write_close(a);
  archive_write_free(a);
}

std::vector<std::string> Keys(TarShardReader& r, std::vector<int64_t>* labels = nullptr) {
  std::vector<std::string> keys;
  ShardSample s;
  while (r.Next(&s)) {
    keys.push_back(s.key);
    if (labels != nullptr) {
      labels->push_back(s.label);
    }
  }
  return keys;
}

TEST(BraceTest, RangesListsAndPadding) {
  EXPECT_EQ(ExpandBraces("train-{000000..000003}.tar"),
            (std::vector<std::string>{"train-000000.tar", "train-000001.tar", "train-000002.tar",
                                      "train-000003.tar"}));
  EXPECT_EQ(ExpandBraces("{a,b}-{8..10}"),
            (std::vector<std::string>{"a-8", "a-9", "a-10", "b-8", "b-9", "b-10"}));
  EXPECT_EQ(ExpandBraces("{3..1}"), (std::vector<std::string>{"3", "2", "1"}));
  EXPECT_EQ(ExpandBraces("{08..10}"), (std::vector<std::string>{"08", "09", "10"}));
  EXPECT_EQ(ExpandBraces("plain.tar"), (std::vector<std::string>{"plain.tar"}));
  for (const char* bad : {"{a", "a}", "{a{b}}", "{1..x}", "{}", "{abc}", "x{1..}"}) {
    EXPECT_THROW(ExpandBraces(bad), std::invalid_argument) << bad;
  }
  EXPECT_THROW(ExpandBraces("{0..2000000}"), std::invalid_argument);
  EXPECT_THROW(ExpandBraces("{0..999}{0..999}{0..9}", 1000000), std::invalid_argument);
}

TEST(BraceTest, PatternResolvesAgainstTheDataDirAndGlobs) {
  TempDir dir("shards-glob");
  WriteTar(dir.path() / "b.tar", {});
  WriteTar(dir.path() / "a.tar", {});
  EXPECT_EQ(ResolveShardPattern("x-{1..2}.tar", "/d"),
            (std::vector<std::string>{"/d/x-1.tar", "/d/x-2.tar"}));
  EXPECT_EQ(ResolveShardPattern("/abs/{a,b}.tar", "/d"),
            (std::vector<std::string>{"/abs/a.tar", "/abs/b.tar"}));
  EXPECT_EQ(
      ResolveShardPattern("*.tar", dir.str()),
      (std::vector<std::string>{(dir.path() / "a.tar").string(), (dir.path() / "b.tar").string()}));
  EXPECT_THROW(ResolveShardPattern("*.nothing", dir.str()), std::invalid_argument);
}

TEST(KeyTest, WebDatasetSplit) {
  std::string key, ext;
  ASSERT_TRUE(SplitMemberName("dir.v2/a.b.C", &key, &ext));
  EXPECT_EQ(key, "dir.v2/a");
  EXPECT_EQ(ext, "b.c");
  ASSERT_TRUE(SplitMemberName("n01440764_10026.JPEG", &key, &ext));
  EXPECT_EQ(key, "n01440764_10026");
  EXPECT_EQ(ext, "jpeg");
  EXPECT_FALSE(SplitMemberName("dir.x/noext", &key, &ext));
  EXPECT_FALSE(SplitMemberName(".hidden", &key, &ext));
  int64_t label = -1;
  EXPECT_TRUE(ParseClassLabel(" 12\n", &label));
  EXPECT_EQ(label, 12);
  EXPECT_FALSE(ParseClassLabel("-1", &label));
  EXPECT_FALSE(ParseClassLabel("1e3", &label));
  EXPECT_FALSE(ParseClassLabel("", &label));
}

TEST(TarShardTest, GroupsConsecutiveMembersByKey) {
  TempDir dir("shards-keys");
  const fs::path tar = dir.path() / "s.tar";
  WriteTar(tar, {{"d/", ""},
                 {"d/a.jpg", "A"},
                 {"d/a.cls", "1"},
                 {"d/b.cls", "2"},  // no image: dropped
                 {"c.jpeg", "C"},
                 {"c.json", "{}"},  // other members of a sample are ignored
                 {"c.cls", "0\n"},
                 {"e.png", "E"},
                 {"e.cls", "7"},  // label out of range for 5 classes: dropped
                 {"f.jpg", "F"},
                 {"f.cls", "4"}});
  TarShardReader r(tar.string(), ShardLimits{}, -1, 5);
  std::vector<int64_t> labels;
  EXPECT_EQ(Keys(r, &labels), (std::vector<std::string>{"d/a", "c", "f"}));
  EXPECT_EQ(labels, (std::vector<int64_t>{1, 0, 4}));
  EXPECT_EQ(r.bad(), 2);
  EXPECT_TRUE(r.error().empty()) << r.error();

  // A per-class tar: every image has the shard's label; .cls is not needed.
  WriteTar(tar, {{"n1_1.JPEG", "x"}, {"n1_2.JPEG", "y"}});
  TarShardReader c(tar.string(), ShardLimits{}, 3, 5);
  labels.clear();
  EXPECT_EQ(Keys(c, &labels), (std::vector<std::string>{"n1_1", "n1_2"}));
  EXPECT_EQ(labels, (std::vector<int64_t>{3, 3}));
}

TEST(TarShardTest, OversizedMembersAndLongKeysAreSkippedAndCounted) {
  TempDir dir("shards-big");
  const fs::path tar = dir.path() / "s.tar";
  WriteTar(tar, {{"a.jpg", std::string(5000, 'a')},
                 {"a.cls", "0"},
                 {"b.jpg", "B"},
                 {"b.cls", std::string(100, '1')},  // a .cls over 32 bytes
                 {std::string(300, 'k') + ".jpg", "K"},
                 {"c.jpg", "C"},
                 {"c.cls", "1"}});
  ShardLimits limits;
  limits.max_member_bytes = 4096;
  limits.max_key_bytes = 200;
  TarShardReader r(tar.string(), limits, -1, 2);
  EXPECT_EQ(Keys(r), (std::vector<std::string>{"c"}));
  EXPECT_EQ(r.bad(), 3);
  EXPECT_TRUE(r.error().empty());

  limits = ShardLimits{};
  limits.max_samples = 1;  // the rest of a shard with more samples is dropped
  WriteTar(tar, {{"a.jpg", "A"}, {"a.cls", "0"}, {"b.jpg", "B"}, {"b.cls", "0"}});
  TarShardReader m(tar.string(), limits, -1, 2);
  EXPECT_EQ(Keys(m), (std::vector<std::string>{"a"}));
  EXPECT_FALSE(m.error().empty());
}

TEST(TarShardTest, TruncatedCorruptAndMissingShardsEndCleanly) {
  TempDir dir("shards-bad");
  const fs::path tar = dir.path() / "s.tar";
  Members members;
  for (int i = 0; i < 4; ++i) {
    members.push_back({"k" + std::to_string(i) + ".jpg", std::string(3000, 'x')});
    members.push_back({"k" + std::to_string(i) + ".cls", "0"});
  }
  WriteTar(tar, members);
  const std::string whole = testing::ReadFile(tar);

  // Cut inside k2's image: k0 and k1 come out, then the shard ends with an error.
  testing::WriteFile(tar, whole.substr(0, 4 * 512 + 2 * 3072 + 2 * 512 + 1000));
  TarShardReader t(tar.string(), ShardLimits{}, -1, 1);
  EXPECT_EQ(Keys(t), (std::vector<std::string>{"k0", "k1"}));
  EXPECT_FALSE(t.error().empty());
  EXPECT_GE(t.bad(), 1);

  // Garbage where k1's header is (its checksum fails).
  std::string corrupt = whole;
  const size_t k1 = corrupt.find("k1.jpg");
  ASSERT_NE(k1, std::string::npos);
  std::fill(corrupt.begin() + static_cast<std::ptrdiff_t>(k1 / 512 * 512),
            corrupt.begin() + static_cast<std::ptrdiff_t>(k1 / 512 * 512 + 512), '\x7f');
  testing::WriteFile(tar, corrupt);
  TarShardReader c(tar.string(), ShardLimits{}, -1, 1);
  std::vector<std::string> keys = Keys(c);
  EXPECT_LE(keys.size(), 1u);
  EXPECT_FALSE(c.error().empty());

  // Not a tar at all, and no file.
  testing::WriteFile(tar, std::string(10000, '\x42'));
  TarShardReader n(tar.string(), ShardLimits{}, -1, 1);
  EXPECT_TRUE(Keys(n).empty());
  EXPECT_EQ(n.bad(), 1);
  TarShardReader missing((dir.path() / "nope.tar").string(), ShardLimits{}, -1, 1);
  EXPECT_TRUE(Keys(missing).empty());
  EXPECT_FALSE(missing.error().empty());
}

// `shards` shards of `per_shard` samples; a sample's image bytes are its key.
class ShardSourceTest : public ::testing::Test {
 protected:
  void Make(int shards, int per_shard) {
    paths_.clear();
    for (int s = 0; s < shards; ++s) {
      Members m;
      for (int i = 0; i < per_shard; ++i) {
        const std::string key = "s" + std::to_string(s) + "_" + std::to_string(i);
        m.push_back({key + ".jpg", key});
        m.push_back({key + ".cls", std::to_string(s % 3)});
      }
      paths_.push_back((dir_.path() / ("shard-" + std::to_string(s) + ".tar")).string());
      WriteTar(paths_.back(), m);
    }
  }
  ShardSourceOptions Options(int64_t epoch_samples, int world, int rank, int streams, int buffer) {
    ShardSourceOptions o;
    o.shards = paths_;
    o.classes = 3;
    o.epoch_samples = epoch_samples;
    o.world_size = world;
    o.rank = rank;
    o.streams = streams;
    o.shuffle_buffer = buffer;
    o.seed = 11;
    return o;
  }
  // The keys of positions [start, EpochLength()) of `epoch`, read in `order`.
  static std::vector<std::string> Epoch(ShardSource& src, int64_t epoch, int64_t start,
                                        bool reverse_pairs = false) {
    src.BeginEpoch(epoch, start);
    const int64_t n = src.EpochLength();
    std::vector<std::string> keys(static_cast<size_t>(n - start));
    std::vector<int64_t> positions;
    for (int64_t p = start; p < n; ++p) {
      positions.push_back(p);
    }
    if (reverse_pairs) {  // a later position asked first, as a faster thread would
      for (size_t i = 0; i + 1 < positions.size(); i += 2) {
        std::swap(positions[i], positions[i + 1]);
      }
    }
    SampleBytes b;
    std::string error;
    for (int64_t p : positions) {
      EXPECT_TRUE(src.Read(p, &b, &error)) << error;
      keys[static_cast<size_t>(p - start)] = std::string(b.data.begin(), b.data.end());
    }
    return keys;
  }
  TempDir dir_{"shard-source"};
  std::vector<std::string> paths_;
};

TEST_F(ShardSourceTest, RanksGetDisjointWholeShardsReshuffledEachEpoch) {
  Make(10, 1);
  for (int64_t epoch : {0, 1}) {
    std::multiset<size_t> all;
    for (int rank = 0; rank < 3; ++rank) {
      ShardSource src(Options(10, 3, rank, 2, 4));
      std::vector<size_t> mine = src.RankShards(epoch);
      EXPECT_EQ(mine.size(), rank == 0 ? 4u : 3u);
      EXPECT_EQ(src.Streams(), 2);
      all.insert(mine.begin(), mine.end());
    }
    EXPECT_EQ(all.size(), 10u);
    EXPECT_EQ(std::set<size_t>(all.begin(), all.end()).size(), 10u);  // each shard once
  }
  ShardSource src(Options(10, 3, 0, 8, 4));
  EXPECT_NE(src.RankShards(0), src.RankShards(1));
  EXPECT_EQ(src.Streams(), 4);  // no more streams than the rank has shards
  EXPECT_EQ(src.HintPaths(0, 0).size(), 4u);
  EXPECT_THROW(ShardSource(Options(10, 11, 0, 1, 1)), std::invalid_argument);  // < 1 per rank
}

TEST_F(ShardSourceTest, StreamsReadWholeShardsThroughTheirBuffers) {
  Make(4, 5);
  // Buffer 1: each stream yields its shards in order; position p is stream p % 2's.
  ShardSource plain(Options(20, 1, 0, 2, 1));
  const std::vector<size_t> shards = plain.RankShards(0);
  // Hints name the shards in that order: stream k starts with shards[k], then shards[k + 2].
  std::vector<std::string> hinted;
  for (size_t i : shards) {
    hinted.push_back(paths_[i]);
  }
  EXPECT_EQ(plain.HintPaths(0, 0), hinted);
  const std::vector<std::string> keys = Epoch(plain, 0, 0);
  for (int64_t p = 0; p < 20; ++p) {
    const size_t stream = static_cast<size_t>(p % 2);
    const int64_t j = p / 2;
    const size_t shard = shards[stream + 2 * static_cast<size_t>(j / 5)];
    EXPECT_EQ(keys[static_cast<size_t>(p)],
              "s" + std::to_string(shard) + "_" + std::to_string(j % 5))
        << p;
  }
  // With a buffer the epoch is a permutation of all 20 samples (equal streams, equal shares).
  ShardSource shuffled(Options(20, 1, 0, 2, 6));
  std::vector<std::string> a = Epoch(shuffled, 0, 0);
  EXPECT_NE(a, keys);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 20u);
  EXPECT_NE(Epoch(shuffled, 1, 0), a);
}

TEST_F(ShardSourceTest, OrderDependsOnNeitherReadOrderNorThreadsAndResumes) {
  Make(6, 7);
  ShardSource src(Options(50, 2, 1, 3, 5));  // 25 positions; streams wrap around their shards
  const std::vector<std::string> ref = Epoch(src, 3, 0);
  EXPECT_EQ(Epoch(src, 3, 0, /*reverse_pairs=*/true), ref);

  // Four threads taking positions from a shared counter.
  src.BeginEpoch(3, 0);
  std::vector<std::string> threaded(ref.size());
  std::atomic<int64_t> next{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < 4; ++t) {
    pool.emplace_back([&] {
      SampleBytes b;
      std::string error;
      for (int64_t p; (p = next.fetch_add(1)) < src.EpochLength();) {
        if (src.Read(p, &b, &error)) {
          threaded[static_cast<size_t>(p)] = std::string(b.data.begin(), b.data.end());
        }
      }
    });
  }
  for (std::thread& t : pool) {
    t.join();
  }
  EXPECT_EQ(threaded, ref);

  // Resuming at any position gives the rest of the epoch.
  for (int64_t start : {1, 7, 12, 24}) {
    EXPECT_EQ(Epoch(src, 3, start), std::vector<std::string>(ref.begin() + start, ref.end()))
        << start;
  }
}

TEST_F(ShardSourceTest, LargeBufferStartsAfterAHundredAndGrows) {
  Make(2, 150);
  ShardSource src(Options(300, 1, 0, 1, 200));  // one stream, buffer 200 > initial 100
  const std::vector<std::string> ref = Epoch(src, 0, 0);
  EXPECT_EQ(std::set<std::string>(ref.begin(), ref.end()).size(), 300u);  // each sample once
  // The first emission is drawn from the first 100 samples read: the first shard's.
  const size_t first_shard = src.RankShards(0)[0];
  const int first_index = std::stoi(ref[0].substr(ref[0].find('_') + 1));
  EXPECT_EQ(ref[0].rfind("s" + std::to_string(first_shard) + "_", 0), 0u) << ref[0];
  EXPECT_LT(first_index, 100);
  for (int64_t start : {1, 99, 137, 299}) {
    EXPECT_EQ(Epoch(src, 0, start), std::vector<std::string>(ref.begin() + start, ref.end()));
  }
}

TEST_F(ShardSourceTest, CorruptShardsAreSkippedAndAStreamOfNothingFailsReads) {
  Make(2, 3);
  testing::WriteFile(paths_[1], std::string(2000, 'z'));
  ShardSource src(Options(6, 1, 0, 1, 2));
  const std::vector<std::string> keys = Epoch(src, 0, 0);
  for (const std::string& k : keys) {
    EXPECT_EQ(k.rfind("s0_", 0), 0u) << k;  // the good shard, again and again
  }
  EXPECT_GE(src.Dropped(), 1);

  testing::WriteFile(paths_[0], "");
  ShardSource none(Options(6, 1, 0, 1, 2));
  none.BeginEpoch(0, 0);
  SampleBytes b;
  std::string error;
  EXPECT_FALSE(none.Read(0, &b, &error));
  EXPECT_NE(error.find("no usable sample"), std::string::npos) << error;
  EXPECT_FALSE(none.Read(1, &b, &error));
}

}  // namespace
}  // namespace perch::trainer
