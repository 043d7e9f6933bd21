// CacheStack's own policy over fakes: statfs figures from the quota, the
// extended attributes a file shows, whether a mount may start (offline with
// a warm cache only), and the prefetch caps taken from the effective quota.
#include "daemon/core/cache_stack.h"

#include <gtest/gtest.h>

#include "tests/fakes/read_bytes.h"
#include "tests/fakes/stack_fixture.h"
#include "tests/fakes/test_values.h"

namespace perch::core {
namespace {

using testing::Data;
using testing::P;
using testing::StackConfig;
using testing::StackFixture;

std::string ReadAll(Mount& m, const std::string& path) {
  auto h = m.fs().Open(P(path));
  EXPECT_TRUE(h.ok()) << h.status().ToString();
  if (!h.ok()) return {};
  auto r = testing::ReadBytes(m.fs(), *h, 0, 1 << 20);
  m.fs().Release(*h);
  return r.ok() ? *r : std::string();
}

TEST(CacheStackTest, StatFsShowsTheQuotaAndWhatIsLeftOfIt) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.catalog = CatalogOptions{100 * 1024, 0.95, 0.85, 1, nullptr, nullptr, nullptr};
  ASSERT_TRUE(node.Build(config).ok());
  uint64_t blocks = 0, free = 0;
  node.stack().StatFs(1024, &blocks, &free);
  EXPECT_EQ(blocks, 100u);
  EXPECT_EQ(free, 100u);
  ASSERT_EQ(ReadAll(node.mount(), "/d/a.bin"), Data(2500, 1));
  node.stack().StatFs(1024, &blocks, &free);
  EXPECT_EQ(free, (100 * 1024 - 2500) / 1024);
}

TEST(CacheStackTest, XattrsNameTheFederationTheUrlAndWhatIsCached) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.first_mount = false;
  ASSERT_TRUE(node.Build(config).ok());
  MountSpec spec;
  spec.federation_id = "pelican://fed.example/ns";
  spec.federation_prefix = P("/ns");
  spec.origin = &node.origin;
  spec.last_server = [](const ObjectPath&) { return std::string("https://cache.example:8443"); };
  Mount& m = **node.stack().AddMount(std::move(spec));
  auto attr = m.fs().GetAttr(P("/d/a.bin"));
  ASSERT_TRUE(attr.ok());
  auto x = m.Xattrs(P("/d/a.bin"), *attr);
  EXPECT_EQ(x["user.perch.federation"], "pelican://fed.example/ns");
  EXPECT_EQ(x["user.perch.url"], "pelican://fed.example/ns/d/a.bin");
  EXPECT_EQ(x["user.perch.cached_bytes"], "0");
  EXPECT_EQ(x["user.perch.cache_id"], m.fs().ObjectId(P("/d/a.bin"), *attr));
  EXPECT_EQ(x["user.perch.server"], "https://cache.example:8443");
  ASSERT_EQ(ReadAll(m, "/d/a.bin"), Data(2500, 1));
  EXPECT_EQ(m.Xattrs(P("/d/a.bin"), *attr)["user.perch.cached_bytes"], "2500");
  auto dir = m.Xattrs(P("/d"), *m.fs().GetAttr(P("/d")));
  EXPECT_EQ(dir.size(), 1u);  // a directory names its federation only
}

TEST(CacheStackTest, AMountStartsOfflineOnlyWithAWarmCache) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.names.file_ttl = config.names.dir_ttl = config.names.negative_ttl =
      std::chrono::seconds(-1);
  ASSERT_TRUE(node.Build(config).ok());
  EXPECT_TRUE(node.mount().CheckRoot(std::chrono::seconds(1)).ok());

  // A cold cache and no federation: nothing to serve.
  testing::FakeOrigin down;
  down.FailWith(UnavailableError("federation down"));
  auto cold = node.AddMount(down, "pelican://down.example/");
  ASSERT_TRUE(cold.ok());
  Status s = (*cold)->CheckRoot(std::chrono::seconds(1));
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("pelican://down.example/"), std::string::npos) << s.message();

  // A warm cache: the restarted mount serves offline.
  ASSERT_EQ(ReadAll(node.mount(), "/d/a.bin"), Data(2500, 1));
  node.origin.FailWith(UnavailableError("federation down"));
  ASSERT_TRUE(node.Build(config).ok());
  EXPECT_TRUE(node.mount().CheckRoot(std::chrono::seconds(1)).ok());
  EXPECT_EQ(ReadAll(node.mount(), "/d/a.bin"), Data(2500, 1));
  EXPECT_TRUE(node.mount().offline());
  // The other federation's warm cache does not make this one's.
  auto still_cold = node.AddMount(down, "pelican://down.example/");
  ASSERT_TRUE(still_cold.ok());
  EXPECT_FALSE((*still_cold)->CheckRoot(std::chrono::seconds(1)).ok());
}

// A cache written before mount tags (untagged "na/<path>" keys): its only
// mount takes the entries over once, so it still starts offline.
TEST(CacheStackTest, TheOnlyMountAdoptsUntaggedNamespaceEntries) {
  StackFixture node;
  node.origin.AddFile("/d/a.bin", Data(2500, 1));
  StackConfig config;
  config.first_mount = false;
  ASSERT_TRUE(node.Build(config).ok());
  ASSERT_TRUE(node.AddMount(node.origin, "fed").ok());
  ASSERT_TRUE(
      node.stack().mounts()[0]->CheckRoot(std::chrono::seconds(1)).ok());  // as perchd starts
  ASSERT_EQ(ReadAll(*node.stack().mounts()[0], "/d/a.bin"), Data(2500, 1));
  const std::string tag = CacheStack::TagOf("fed");
  // Rewrite the entries as the old layout had them.
  std::vector<Index::Write> old;
  ASSERT_TRUE(node.index
                  .Scan("n",
                        [&](std::string_view k, std::string_view v) {
                          std::string path(k.substr(2 + 1 + tag.size()));
                          old.push_back({std::string(k.substr(0, 2)) + path, std::string(v)});
                          old.push_back({std::string(k), std::nullopt});
                          return true;
                        })
                  .ok());
  ASSERT_FALSE(old.empty());
  ASSERT_TRUE(node.index.Apply(old).ok());
  ASSERT_EQ(node.index.CountPrefix("na/" + tag), 0u);
  ASSERT_TRUE(node.index.Get("na/")->has_value());

  node.origin.FailWith(UnavailableError("federation down"));
  ASSERT_TRUE(node.Build(config).ok());
  MountSpec spec;
  spec.federation_id = "fed";
  spec.origin = &node.origin;
  spec.adopt_untagged_entries = true;
  Mount& m = **node.stack().AddMount(std::move(spec));
  EXPECT_TRUE(m.CheckRoot(std::chrono::seconds(1)).ok());
  EXPECT_EQ(ReadAll(m, "/d/a.bin"), Data(2500, 1));  // blocks kept their ids
  EXPECT_FALSE(node.index.Get("na/")->has_value());
  EXPECT_GT(node.index.CountPrefix("na/" + tag + "/"), 0u);
  EXPECT_EQ(node.index.CountPrefix("na/d"), 0u);
}

TEST(CacheStackTest, PrefetchIsCappedToAnEighthOfTheQuota) {
  StackFixture node;
  node.origin.AddFile("/big.bin", Data(20000, 1));  // 20 blocks of 1000
  StackConfig config;
  config.catalog =
      CatalogOptions{16000, 0.95, 0.85, 1, nullptr, nullptr, nullptr};  // an eighth: 2 blocks
  config.prefetch = true;
  config.prefetch_options.directories = false;
  config.prefetch_options.max_window_bytes = 64ULL << 20;
  ASSERT_TRUE(node.Build(config).ok());
  auto h = node.mount().fs().Open(P("/big.bin"));
  ASSERT_TRUE(h.ok());
  for (uint64_t off = 0; off < 8000; off += 1000)
    ASSERT_TRUE(testing::ReadBytes(node.mount().fs(), *h, off, 1000).ok());
  node.mount().fs().Release(*h);
  // Never more than two blocks ahead of the reader, whatever the configured window.
  EXPECT_LE(node.origin.reads.load(), 8 + 2);
}

}  // namespace
}  // namespace perch::core

// The whole-object check of issue 30 (Mount::VerifyComplete, the scrub's
// digests): an object of more than one block, held whole, against its
// origin's digest. The test "digest" is adler32 under every name (4 bytes;
// longer ones repeat it), so the origin's adler32 claim matches the bytes.
namespace perch::core {
namespace {

std::string Adler32(std::string_view bytes) {
  uint32_t a = 1, b = 0;
  for (unsigned char c : bytes) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  uint32_t v = (b << 16) | a;
  return std::string{static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
}

class AdlerHasher : public DigestHasher {
 public:
  explicit AdlerHasher(std::vector<std::string> algorithms) : algorithms_(std::move(algorithms)) {}
  void Update(std::string_view bytes) override { bytes_ += bytes; }
  std::vector<ObjectDigest> Finish() override {
    std::vector<ObjectDigest> out;
    const std::string v = Adler32(bytes_);
    for (const std::string& a : algorithms_) {
      std::string raw;
      while (raw.size() < DigestLength(a)) raw += v;
      out.push_back(ObjectDigest{a, raw.substr(0, DigestLength(a))});
    }
    return out;
  }

 private:
  const std::vector<std::string> algorithms_;
  std::string bytes_;
};

StackConfig Checking() {
  StackConfig config;
  config.digest_hasher = [](const std::vector<std::string>& algorithms) {
    return std::make_unique<AdlerHasher>(algorithms);
  };
  config.verify_complete_objects = true;
  return config;
}

void OfferAdler(perch::testing::FakeOrigin& origin) {
  origin.OfferDigests([](const std::string& bytes) {
    return std::vector<ObjectDigest>{{"adler32", Adler32(bytes)}};
  });
}

struct Opened {
  FileAttr attr;
  std::string id;
};

Opened Attr(Mount& m, const std::string& path) {
  auto a = m.fs().GetAttr(P(path));
  EXPECT_TRUE(a.ok());
  return Opened{a.ok() ? *a : FileAttr(), a.ok() ? m.fs().ObjectId(P(path), *a) : ""};
}

// Caches all of `path` without reading its last byte (a read to the end is checked).
void Fill(Mount& m, const std::string& path, uint64_t size) {
  auto h = m.fs().Open(P(path));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(testing::ReadBytes(m.fs(), *h, 0, size - 1).ok());
  m.fs().Release(*h);
}

// The xattr user.perch.digest of `path`: what is known of its copy.
std::string Verdict(Mount& m, const std::string& path) {
  Opened o = Attr(m, path);
  return m.Xattrs(P(path), o.attr)[Mount::kVerdictXattr];
}

bool StartsWith(const std::string& s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

Status Check(Mount& m, const std::string& path) {
  Opened o = Attr(m, path);
  return m.VerifyComplete(P(path), o.attr, o.id, DeadlineAfter(std::chrono::seconds(2)));
}

TEST(VerifyCompleteTest, AWholeObjectIsCheckedOnceAgainstItsDigest) {
  StackFixture node;
  node.origin.AddFile("/d/big", Data(2500, 7));  // three blocks of 1000
  OfferAdler(node.origin);
  ASSERT_TRUE(node.Build(Checking()).ok());
  ASSERT_EQ(ReadAll(node.mount(), "/d/big"), Data(2500, 7));  // checked at its end
  EXPECT_EQ(node.origin.digest_asks.load(), 1);
  const int reads = node.origin.reads.load();
  EXPECT_TRUE(Check(node.mount(), "/d/big").ok());
  EXPECT_EQ(node.origin.digest_asks.load(), 1);
  EXPECT_EQ(node.stack().digests().stats().verified.load(), 1u);
  // Checked: not again, and nothing fetched to check it.
  EXPECT_TRUE(Check(node.mount(), "/d/big").ok());
  EXPECT_EQ(node.origin.digest_asks.load(), 1);
  EXPECT_EQ(node.origin.reads.load(), reads);
}

TEST(VerifyCompleteTest, AWrongCopyIsDroppedAndTheNextReadFetchesItAgain) {
  StackFixture node;
  node.origin.AddFile("/d/big", Data(2500, 7));
  OfferAdler(node.origin);
  ASSERT_TRUE(node.Build(Checking()).ok());
  node.origin.CorruptBodies(true);
  Fill(node.mount(), "/d/big", 2500);
  const Opened o = Attr(node.mount(), "/d/big");
  ASSERT_EQ(node.catalog().CachedBytes(o.id), 2500u);
  Status s = Check(node.mount(), "/d/big");
  EXPECT_EQ(s.code(), StatusCode::kCorrupt) << s.ToString();
  EXPECT_EQ(node.catalog().CachedBytes(o.id), 0u);  // dropped, not fetched again in the check
  EXPECT_EQ(node.stack().digests().stats().mismatches.load(), 1u);
  EXPECT_EQ(node.origin.distrusts.load(), 1);  // the next copy from the origin where it may be
  const std::string said = Verdict(node.mount(), "/d/big");
  EXPECT_TRUE(StartsWith(said, "mismatched: the cached copy did not match adler32=")) << said;
  node.origin.CorruptBodies(false);
  EXPECT_EQ(ReadAll(node.mount(), "/d/big"), Data(2500, 7));
  EXPECT_TRUE(Check(node.mount(), "/d/big").ok());
  // Read right now: the xattr says which digest it matched, nothing of the past.
  EXPECT_EQ(Verdict(node.mount(), "/d/big"),
            DigestText(ObjectDigest{"adler32", Adler32(Data(2500, 7))}));
}

TEST(VerifyCompleteTest, AReadToTheEndOfAWrongCopyFailsAndTheNextOpenReadsItRight) {
  StackFixture node;
  node.origin.AddFile("/d/big", Data(2500, 7));
  OfferAdler(node.origin);
  ASSERT_TRUE(node.Build(Checking()).ok());
  node.origin.CorruptBodies(true);
  FileSystem& fs = node.mount().fs();
  auto h = fs.Open(P("/d/big"));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(testing::ReadBytes(fs, *h, 0, 1000).ok());  // wrong, and not known to be yet
  ASSERT_TRUE(testing::ReadBytes(fs, *h, 1000, 1000).ok());
  auto last = testing::ReadBytes(fs, *h, 2000, 1000);
  EXPECT_EQ(last.status().code(), StatusCode::kCorrupt) << last.status().ToString();
  // This open file read wrong bytes: its later reads fail, even once the
  // object was fetched again (the kernel retries a failed read-ahead).
  node.origin.CorruptBodies(false);
  auto again = testing::ReadBytes(fs, *h, 0, 1000);
  EXPECT_EQ(again.status().code(), StatusCode::kCorrupt) << again.status().ToString();
  EXPECT_EQ(ReadAll(node.mount(), "/d/big"), Data(2500, 7));  // fetched again, checked at its end
  EXPECT_EQ(node.stack().digests().stats().mismatches.load(), 1u);
  EXPECT_EQ(node.stack().digests().stats().verified.load(), 1u);
}

// A server that states a wrong digest of another algorithm for a copy
// verified already (a hostile cache asked for md5): the claim is wrong, not
// the copy. Nothing is dropped, nobody is told to distrust the copy, the
// wrong digest is not handed out, and the file stays verified.
TEST(VerifyCompleteTest, AWrongClaimOfAnotherAlgorithmLeavesAVerifiedCopyAlone) {
  StackFixture node;
  node.origin.AddFile("/d/big", Data(2500, 7));
  std::atomic<bool> lie{false};
  node.origin.OfferDigests([&lie](const std::string& bytes) {
    if (lie) return std::vector<ObjectDigest>{{"md5", std::string(16, 'x')}};
    return std::vector<ObjectDigest>{{"adler32", Adler32(bytes)}};
  });
  ASSERT_TRUE(node.Build(Checking()).ok());
  ASSERT_EQ(ReadAll(node.mount(), "/d/big"), Data(2500, 7));
  const Opened o = Attr(node.mount(), "/d/big");
  ASSERT_EQ(node.catalog().CachedBytes(o.id), 2500u);
  lie = true;
  auto md5 = node.mount().Digests(P("/d/big"), o.attr, {"md5"});
  EXPECT_TRUE(!md5.ok() || md5->empty()) << "a digest no honest server stated";
  EXPECT_EQ(node.catalog().CachedBytes(o.id), 2500u) << "a verified copy dropped";
  EXPECT_EQ(node.origin.distrusts.load(), 0);
  EXPECT_EQ(node.stack().digests().stats().mismatches.load(), 0u);
  EXPECT_EQ(Verdict(node.mount(), "/d/big"),
            DigestText(ObjectDigest{"adler32", Adler32(Data(2500, 7))}));
}

TEST(VerifyCompleteTest, ANewCopyOfAnObjectCheckedBeforeIsCheckedWithoutAsking) {
  StackFixture node;
  node.origin.AddFile("/d/big", Data(2500, 7));
  OfferAdler(node.origin);
  ASSERT_TRUE(node.Build(Checking()).ok());
  ASSERT_EQ(ReadAll(node.mount(), "/d/big"), Data(2500, 7));
  ASSERT_TRUE(Check(node.mount(), "/d/big").ok());
  ASSERT_TRUE(node.mount().Evict(P("/d/big")).ok());
  node.origin.CorruptBodies(true);
  Fill(node.mount(), "/d/big", 2500);  // a new copy, wrong
  EXPECT_EQ(Check(node.mount(), "/d/big").code(), StatusCode::kCorrupt);
  EXPECT_EQ(node.origin.digest_asks.load(), 1);  // against the digest known already
}

TEST(VerifyCompleteTest, NothingIsCheckedThatIsNotWholeOrIsOneBlock) {
  StackFixture node;
  node.origin.AddFile("/d/big", Data(2500, 7));
  node.origin.AddFile("/d/small", Data(900, 3));
  OfferAdler(node.origin);
  node.origin.CorruptBodies(true);
  ASSERT_TRUE(node.Build(Checking()).ok());
  auto h = node.mount().fs().Open(P("/d/big"));
  ASSERT_TRUE(h.ok());
  ASSERT_TRUE(testing::ReadBytes(node.mount().fs(), *h, 0, 1000).ok());  // one block of three
  node.mount().fs().Release(*h);
  EXPECT_TRUE(Check(node.mount(), "/d/big").ok());
  EXPECT_EQ(Verdict(node.mount(), "/d/big"),
            "unverified: not checked yet (1000 of 2500 bytes cached; checked once read whole)");
  ReadAll(node.mount(), "/d/small");
  EXPECT_TRUE(Check(node.mount(), "/d/small").ok());  // one block: checked at its fetch
  EXPECT_EQ(node.origin.digest_asks.load(), 0);

  // No digest offered: asked once per copy, not at every read to the end.
  StackFixture none;
  none.origin.AddFile("/d/big", Data(2500, 7));
  ASSERT_TRUE(none.Build(Checking()).ok());
  ReadAll(none.mount(), "/d/big");
  ReadAll(none.mount(), "/d/big");
  EXPECT_TRUE(Check(none.mount(), "/d/big").ok());
  EXPECT_EQ(none.origin.digest_asks.load(), 1);
  EXPECT_EQ(Verdict(none.mount(), "/d/big"),
            "unverified: no server but those that sent its bytes states a digest");
  EXPECT_EQ(none.stack().digests().stats().unverified.load(), 1u);

  // Checking off: a whole wrong copy is not looked at.
  StackFixture off;
  off.origin.AddFile("/d/big", Data(2500, 7));
  OfferAdler(off.origin);
  off.origin.CorruptBodies(true);
  StackConfig config = Checking();
  config.verify_complete_objects = false;
  ASSERT_TRUE(off.Build(config).ok());
  ReadAll(off.mount(), "/d/big");
  EXPECT_TRUE(Check(off.mount(), "/d/big").ok());
  EXPECT_EQ(off.origin.digest_asks.load(), 0);
  EXPECT_EQ(Verdict(off.mount(), "/d/big"),
            "unverified: digest checks are off (--no-verify-digests)");
}

TEST(VerifyCompleteTest, TheScrubChecksCopiesAgainstTheDigestsVerified) {
  StackFixture node;
  node.origin.AddFile("/d/big", Data(2500, 7));
  OfferAdler(node.origin);
  StackConfig config = Checking();
  config.verify_complete_objects = false;  // the digest is known from an xattr's question
  ASSERT_TRUE(node.Build(config).ok());
  const Opened o = Attr(node.mount(), "/d/big");
  ASSERT_TRUE(node.mount().Digests(P("/d/big"), o.attr).ok());
  ASSERT_TRUE(node.mount().Evict(P("/d/big")).ok());
  node.origin.CorruptBodies(true);
  ReadAll(node.mount(), "/d/big");  // a wrong copy, its blocks' own checks fine
  auto job = node.stack().scrubber().Verify(ObjectPath(), "/", nullptr);
  ASSERT_TRUE(job->finished());
  ScrubProgress p = job->Progress();
  EXPECT_EQ(p.corrupt_blocks, 0u);
  EXPECT_EQ(p.digest_mismatches, 1u);
  EXPECT_EQ(node.catalog().CachedBytes(o.id), 0u);
  ASSERT_EQ(p.files.size(), 1u);
  EXPECT_EQ(p.files[0].verdict.kind, DigestVerdict::kMismatched);
  const std::string said = Verdict(node.mount(), "/d/big");
  EXPECT_TRUE(StartsWith(said, "mismatched: the cached copy did not match adler32=")) << said;
  node.stack().scrubber().Stop();
}

}  // namespace
}  // namespace perch::core
