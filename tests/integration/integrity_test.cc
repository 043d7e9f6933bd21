// Issue #30 item 1, end to end: the real perchd (--verify-digests) mounts a FaultServer
// federation whose data servers answer Want-Digest as XRootD's origins do
// (the whole object's adler32 on a Range GET). A server that sends a body
// with one byte flipped under the true digest is never served from: the next
// server sends the object, and the mismatch is counted. With no honest
// server the read fails (EIO), never wrong. A server without checksums (405
// to Want-Digest, as XRootD answers) is read without them.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "tests/fakes/fault_server.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

std::string RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

class IntegrityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("integrity");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
    for (int i = 0; i < 3; ++i) {
      std::string name = "f" + std::to_string(i);
      objects_.push_back(RandomBytes(100000 + i, i + 1));
      server_.AddObject(name, objects_.back());
      listing_.push_back({name, std::to_string(objects_.back().size()), false});
    }
    server_.SetListing("", listing_);
  }

  void Mount(bool verify = true) {
    std::vector<std::string> args = {"--cache-dir",      (work_->path() / "cache").string(),
                                     "--op-timeout",     "10s",
                                     "--no-prefetch",    "--control",
                                     "unix:" + Socket(), server_.BaseUrl() + "/ns",
                                     mnt_.string()};
    if (verify) args.insert(args.begin(), "--verify-digests");
    ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "perchd.log"), "");
  }
  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }
  nlohmann::json Stats() { return PerchctlJson(Socket(), {"stats", "--json"}); }
  // The errno of reading `name` whole through the mount (0 if it read).
  int ReadErrno(const std::string& name, std::string* bytes) {
    int fd = ::open((mnt_ / name).c_str(), O_RDONLY);
    if (fd < 0) return errno;
    char buf[65536];
    int error = 0;
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
      if (n < 0) {
        error = errno;
        break;
      }
      bytes->append(buf, static_cast<size_t>(n));
    }
    ::close(fd);
    return error;
  }

  FaultServer server_;
  std::vector<std::string> objects_;
  std::vector<FaultServer::ListingEntry> listing_;
  std::unique_ptr<TempDir> work_;
  fs::path mnt_;
  PerchdProcess perchd_;  // declared last: stopped (and unmounted) first
};

TEST_F(IntegrityTest, ACorruptBodyIsNeverServedAndTheNextServerSendsIt) {
  server_.SetLinks({"corrupt", "ok"});
  Mount();
  for (size_t i = 0; i < objects_.size(); ++i) {
    EXPECT_EQ(ReadLocalFile(mnt_ / ("f" + std::to_string(i))), objects_[i]) << i;
  }
  nlohmann::json s = Stats();
  // The corrupt server is asked first for f0; penalised, it sorts last after.
  EXPECT_GE(s["digest_mismatches"], 1u) << s.dump();
  EXPECT_EQ(s["digests_verified"], objects_.size()) << s.dump();
  EXPECT_GE(server_.DigestAsks("corrupt"), 1);
  EXPECT_NE(perchd_.Log().find("does not match the object's digest (adler32="), std::string::npos)
      << perchd_.Log();
}

TEST_F(IntegrityTest, WithNoHonestServerTheReadFailsRatherThanServeWrongBytes) {
  server_.SetLinks({"corrupt"});
  Mount();
  std::string bytes;
  auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ReadErrno("f0", &bytes), EIO);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(11));
  EXPECT_TRUE(bytes.empty()) << bytes.size() << " bytes were served";
  EXPECT_GE(Stats()["digest_mismatches"], 1u);
  EXPECT_EQ(Stats()["digests_verified"], 0u);
}

TEST_F(IntegrityTest, AServerWithoutChecksumsIsReadWithoutThem) {
  server_.SetLinks({"nodigest"});
  Mount();
  for (size_t i = 0; i < objects_.size(); ++i) {
    EXPECT_EQ(ReadLocalFile(mnt_ / ("f" + std::to_string(i))), objects_[i]) << i;
  }
  EXPECT_EQ(server_.DigestAsks("nodigest"), 1);  // refused once, then not asked again
  nlohmann::json s = Stats();
  EXPECT_EQ(s["digests_verified"], 0u);
  EXPECT_EQ(s["digest_mismatches"], 0u);
  EXPECT_EQ(s["failovers"], 0u) << "a refused digest is not a failed server";
}

// XRootD 5.5 crashes under concurrent Want-Digest requests (docs/quirks.md):
// without --verify-digests perchd never sends one.
TEST_F(IntegrityTest, ByDefaultNoDigestIsAsked) {
  server_.SetLinks({"ok"});
  Mount(/*verify=*/false);
  for (size_t i = 0; i < objects_.size(); ++i) {
    EXPECT_EQ(ReadLocalFile(mnt_ / ("f" + std::to_string(i))), objects_[i]) << i;
  }
  EXPECT_GE(server_.Hits("ok"), 3);
  EXPECT_EQ(server_.DigestAsks("ok"), 0);
}

}  // namespace
}  // namespace perch::testing
