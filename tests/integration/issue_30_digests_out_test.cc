// Issue #30 item 3, "digests out", end to end through real XRootD servers
// (perch-devfed: origins with `xrootd.chksum`, an XCache relaying their
// digests) and the real perchd: the HTTP endpoint answers Want-Digest with the
// origin's digest, the mount gives it as user.perch.digest.<algorithm>, and
// perch-transfer checks every file against its server's digest, refusing
// (with no file left) one whose bytes a cache corrupted.
#include <gtest/gtest.h>
#include <sys/xattr.h>

#include <cerrno>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "daemon/core/object_digest.h"
#include "daemon/http/digest.h"
#include "tests/devfed/devfed_harness.h"
#include "tests/devfed/http_fetch.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"
#include "tests/integration/transfer_fixture.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

// The raw digest `algorithm` a Digest header states, "" if it does not
// (its first reading: XRootD's base64 crc32c and perch's hex both read right).
std::string Stated(const std::string& header, const std::string& algorithm) {
  for (const http::InstanceDigest& d : http::ParseDigestHeader(header)) {
    if (d.algorithm != algorithm) continue;
    auto readings = http::Readings(d);
    if (!readings.empty()) return readings[0].raw;
  }
  return "";
}

std::string HexOf(const std::string& raw) {
  return core::DigestValueText(core::ObjectDigest{"crc32c", raw});
}

// The value of extended attribute `name` of `path`, asked as getfattr does
// (its size first); errno as "errno N" when it fails.
std::string GetXattr(const fs::path& path, const std::string& name) {
  ssize_t n = getxattr(path.c_str(), name.c_str(), nullptr, 0);
  if (n < 0) return "errno " + std::to_string(errno);
  std::string value(static_cast<size_t>(n), '\0');
  n = getxattr(path.c_str(), name.c_str(), value.data(), value.size());
  if (n < 0) return "errno " + std::to_string(errno);
  value.resize(static_cast<size_t>(n));
  return value;
}

std::vector<std::string> ListXattr(const fs::path& path) {
  std::string names(4096, '\0');
  ssize_t n = listxattr(path.c_str(), names.data(), names.size());
  std::vector<std::string> out;
  for (size_t i = 0; n > 0 && i < static_cast<size_t>(n);) {
    out.emplace_back(names.c_str() + i);
    i += out.back().size() + 1;
  }
  return out;
}

class DigestsOutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("digests-out");
    // One block, and three blocks (the last short) of 4 MiB.
    CreateTestTree(work_->path() / "ns", {{"small.bin", 70000}, {"big.bin", (9 << 20) + 333}});
    MakeReadableByXrootd(work_->path());
    DevFed::Options opts;
    opts.exports.push_back({"/ns", (work_->path() / "ns").string(), false});
    opts.caches = 1;  // perch reads from the XCache, which relays the origin's digest
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
    ASSERT_EQ(perchd_.Start({"--cache-dir", (work_->path() / "cache").string(), "--op-timeout",
                             "20s", "--control", "unix:" + Socket(), "--http", "127.0.0.1:0",
                             fed_->FederationUrl() + "/", mnt_.string()},
                            mnt_, work_->path() / "perchd.log"),
              "")
        << fed_->ErrLog();
    std::string addr = PerchctlJson(Socket(), {"health", "--json"})["http_address"];
    ASSERT_FALSE(addr.empty());
    base_ = "http://" + addr;
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }
  // The origin's answer to a HEAD of `rel` with `Want-Digest: algorithm`.
  std::string OriginDigest(const std::string& rel, const std::string& algorithm) {
    auto r = Fetch(fed_->OriginUrl("/ns") + "/ns/" + rel, "HEAD", {"Want-Digest: " + algorithm});
    EXPECT_EQ(r.status, 200) << rel;
    return Stated(r.Header("digest"), algorithm);
  }

  std::unique_ptr<TempDir> work_;
  std::unique_ptr<DevFed> fed_;
  fs::path mnt_;
  std::string base_;
  PerchdProcess perchd_;  // stopped (and unmounted) before fed_ and work_ go
};

TEST_F(DigestsOutTest, TheEndpointAnswersWantDigestWithTheOriginsDigest) {
  for (const char* f : {"small.bin", "big.bin"}) {
    const std::string crc32c = OriginDigest(f, "crc32c"), md5 = OriginDigest(f, "md5");
    ASSERT_EQ(crc32c.size(), 4u) << f;
    ASSERT_EQ(md5.size(), 16u) << f;
    // As Pelican's client asks after a download (HEAD, KnownChecksumTypes).
    auto head = Fetch(base_ + "/ns/" + f, "HEAD",
                      {"Want-Digest: md5,crc32c,crc32,sha", "Connection: close"});
    ASSERT_EQ(head.status, 200) << f;
    // The first algorithm asked that a server states (issue 41: perch hands
    // out only digests a server stated and the bytes matched): md5, in base64.
    const std::string digest = head.Header("digest");
    EXPECT_EQ(Stated(digest, "md5"), md5) << f << ": " << digest;
    EXPECT_EQ(digest.find("adler32"), std::string::npos) << "not asked: " << digest;
    EXPECT_EQ(digest.rfind("md5=", 0), 0u) << digest;
    // A GET asking for crc32c has the servers asked for it, and carries it,
    // spelled as Pelican reads it (hex), before the bytes, which are the origin's.
    auto get = Fetch(base_ + "/ns/" + f, "GET", {"Want-Digest: crc32c"});
    ASSERT_EQ(get.status, 200);
    EXPECT_EQ(Stated(get.Header("digest"), "crc32c"), crc32c);
    EXPECT_NE(get.Header("digest").find("crc32c=" + HexOf(crc32c)), std::string::npos);
    // Both now, in the order asked.
    const std::string both =
        Fetch(base_ + "/ns/" + f, "HEAD", {"Want-Digest: md5,crc32c"}).Header("digest");
    EXPECT_EQ(Stated(both, "md5"), md5) << both;
    EXPECT_EQ(Stated(both, "crc32c"), crc32c) << both;
    EXPECT_TRUE(get.body == ReadLocalFile(work_->path() / "ns" / f));
  }
  // No Want-Digest, or only algorithms perch does not know: no Digest header.
  EXPECT_FALSE(Fetch(base_ + "/ns/small.bin", "HEAD").Has("digest"));
  EXPECT_FALSE(Fetch(base_ + "/ns/small.bin", "HEAD", {"Want-Digest: UNIXsum"}).Has("digest"));
  nlohmann::json stats = PerchctlJson(Socket(), {"stats", "--json"});
  // Once per object and algorithm asked (md5, crc32c), and once for the
  // small file's cold read (checked as fetched).
  EXPECT_LE(stats.value("digest_asks", uint64_t{0}), 5u) << stats.dump();
  EXPECT_EQ(stats.value("digest_cache_mismatches", uint64_t{9}), 0u);
}

TEST_F(DigestsOutTest, TheMountGivesTheOriginsDigestAsAnExtendedAttribute) {
  const fs::path big = mnt_ / "ns" / "big.bin";
  const std::string crc32c = OriginDigest("big.bin", "crc32c");
  ASSERT_EQ(crc32c.size(), 4u);
  // Not asked yet: not listed, and listing asks no server.
  for (const std::string& name : ListXattr(big)) {
    EXPECT_NE(name.rfind("user.perch.digest.", 0), 0u) << name;
  }
  EXPECT_EQ(GetXattr(big, "user.perch.digest.crc32c"), HexOf(crc32c));
  const std::string md5 = OriginDigest("big.bin", "md5");
  EXPECT_EQ(GetXattr(big, "user.perch.digest.md5"),
            core::DigestValueText(core::ObjectDigest{"md5", md5}));
  // Once known, those listed are those a server stated: no other.
  std::vector<std::string> names = ListXattr(big);
  for (const std::string& a : core::DigestAlgorithms()) {
    const bool stated = a == "crc32c" || a == "md5";
    EXPECT_EQ(std::find(names.begin(), names.end(), "user.perch.digest." + a) != names.end(),
              stated)
        << a;
  }
  EXPECT_EQ(GetXattr(big, "user.perch.digest.nonesuch"), "errno " + std::to_string(ENODATA));
  EXPECT_EQ(GetXattr(big, "user.perch.nonesuch"), "errno " + std::to_string(ENODATA));
  EXPECT_EQ(GetXattr(mnt_ / "ns", "user.perch.digest.crc32c"),
            "errno " + std::to_string(ENODATA));  // a directory has none
  // A buffer too small is ERANGE, as for any attribute.
  char small[3];
  EXPECT_EQ(getxattr(big.c_str(), "user.perch.digest.crc32c", small, sizeof small), -1);
  EXPECT_EQ(errno, ERANGE);
  // The file read through the mount is the origin's.
  EXPECT_TRUE(ReadLocalFile(big) == ReadLocalFile(work_->path() / "ns" / "big.bin"));
}

class DigestTransferTest : public TransferFixture {};

TEST_F(DigestTransferTest, EveryFileIsCheckedAgainstItsServersDigest) {
  DevFed::Options opts;
  opts.caches = 1;
  StartFederation({{"a.bin", 1000}, {"b.bin", (9 << 20) + 7}}, opts);
  WriteAdFiles({{UrlOf("a.bin"), sandbox_.string()}, {UrlOf("b.bin"), sandbox_.string()}});
  RunResult r = RunPlugin();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 2u);
  for (const ClassAd& ad : ads) {
    EXPECT_TRUE(Val(ad, "TransferSuccess").boolean) << ad.Unparse();
    // devfed's cache relays its origin's adler32.
    EXPECT_EQ(Dev(ad, "PerchDigest").rfind("adler32=", 0), 0u) << ad.Unparse();
  }
  EXPECT_TRUE(ReadLocalFile(sandbox_ / "b.bin") == ReadLocalFile(tree_ / "b.bin"));
}

// A file read whole in one range is checked as it arrives (issue 41): the
// corrupting cache's body fails the origin's digest and the origin sends it.
TEST_F(DigestTransferTest, ACorruptedSmallFileIsReadFromTheOrigin) {
  DevFed::Options opts;
  opts.caches = 1;
  opts.extra_args = {"--fault-corrupt", "1", "--log-level", "error"};  // every cache body
  StartFederation({{"small.bin", 200000}}, opts);
  WriteAdFiles({{UrlOf("small.bin"), sandbox_.string()}});
  RunResult r = RunPlugin();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 1u);
  EXPECT_TRUE(Val(ads[0], "TransferSuccess").boolean) << ads[0].Unparse();
  EXPECT_TRUE(ReadLocalFile(sandbox_ / "small.bin") == ReadLocalFile(tree_ / "small.bin"));
}

// A file read in parts is checked whole against its digest before it is
// kept: one whose parts a cache corrupted is refused and leaves no file.
TEST_F(DigestTransferTest, ACorruptedFileIsRefusedAndNoFileIsLeft) {
  DevFed::Options opts;
  opts.caches = 1;
  opts.extra_args = {"--fault-corrupt", "1", "--log-level", "error"};  // every cache body
  StartFederation({{"bad.bin", (9 << 20) + 7}}, opts);
  WriteAdFiles({{UrlOf("bad.bin"), sandbox_.string()}});
  RunResult r = RunPlugin();
  EXPECT_NE(r.exit_code, 0) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 1u);
  EXPECT_FALSE(Val(ads[0], "TransferSuccess").boolean) << ads[0].Unparse();
  EXPECT_NE(Str(ads[0], "TransferError").find("do not match the object's digest"),
            std::string::npos)
      << ads[0].Unparse();
  EXPECT_TRUE(SandboxEntries().empty());  // neither bad.bin nor its temporary file
}

}  // namespace
}  // namespace perch::testing
