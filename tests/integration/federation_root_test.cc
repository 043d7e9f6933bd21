// One perchd mounting a whole federation (its root, as osdf:/// at /osdf):
// namespaces resolved on lookup, a protected namespace readable only with a
// token and only by the users the configuration allows (checked as the
// unprivileged user `nobody`), unknown names ENOENT. Real perch-devfed
// (XRootD origins), real perchd, real FUSE mount.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

// Runs `cat path` as user nobody (optionally with primary group `group`).
RunResult CatAsNobody(const fs::path& path, const std::string& group = "") {
  std::vector<std::string> args = {"-u", "nobody"};
  if (!group.empty()) args.insert(args.end(), {"-g", group});
  args.insert(args.end(), {"--", "cat", path.string()});
  return RunToExit("/usr/sbin/runuser", args, std::chrono::seconds(30));
}

// The odd names of object paths that Go's url.URL leaves unescaped.
const char* const kOddNames[] = {"t$1.txt", "t&2.txt", "t+3.txt", "t,4.txt", "t:5;=@.txt"};

class FederationRootTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("fedroot");
    const fs::path w = work_->path();
    WriteLocalFile(w / "a/sub/x.txt", "public bytes of /a\n");
    // A decoy: /a's origin also has a b/inner.txt, but /a/b is a namespace
    // of its own, served by another origin.
    WriteLocalFile(w / "a/b/inner.txt", "WRONG: /a's origin\n");
    WriteLocalFile(w / "ab/inner.txt", "nested bytes of /a/b\n");
    for (const char* name : kOddNames)
      WriteLocalFile(w / "a/odd" / name, std::string("odd ") + name);
    WriteLocalFile(w / "p/secret.txt", "protected bytes of /p\n");
    WriteLocalFile(w / "n/known.txt", "unlisted bytes of /n\n");
    WriteLocalFile(w / "n/sub/deep.txt", "deep in /n\n");
    MakeReadableByXrootd(w);
    // Others pass through (and may write, as in /tmp); sticky, so no one can
    // replace perchd's cache directory in it (perchd refuses it otherwise).
    fs::permissions(w, fs::perms::all | fs::perms::sticky_bit, fs::perm_options::add);
    DevFed::Options opts;
    opts.exports.push_back({"/a", (w / "a").string(), false});
    opts.exports.push_back({"/a/b", (w / "ab").string(), false});
    opts.exports.push_back({"/p", (w / "p").string(), true});
    opts.exports.push_back({"/n", (w / "n").string(), false, /*listings=*/false});
    opts.extra_args = {"--log-level", "debug"};  // every director request in its log
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
  }

  void Mount(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--cache-dir", (work_->path() / "cache").string(),
                                     "--op-timeout", "20s"};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(fed_->FederationUrl() + "/");  // the federation root
    args.push_back(mnt_.string());
    ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "perchd.log"), "") << fed_->ErrLog();
  }

  std::unique_ptr<TempDir> work_;
  std::unique_ptr<DevFed> fed_;
  fs::path mnt_;
  PerchdProcess perchd_;  // unmounted before fed_ and work_ go
};

TEST_F(FederationRootTest, EveryNamespaceUnderOneMountAndUnknownNamesAreENOENT) {
  Mount({"--namespace-token", "/p=" + fed_->TokenFile()});
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/sub/x.txt"), "public bytes of /a\n");
  EXPECT_EQ(ReadLocalFile(mnt_ / "p/secret.txt"), "protected bytes of /p\n");
  std::set<std::string> root;
  for (const auto& e : fs::directory_iterator(mnt_)) root.insert(e.path().filename());
  EXPECT_TRUE(root.count("a")) << perchd_.Log();
  EXPECT_TRUE(root.count("p")) << perchd_.Log();
  std::error_code ec;
  EXPECT_FALSE(fs::exists(mnt_ / "no-such-namespace", ec));
  EXPECT_FALSE(ec) << ec.message();  // ENOENT, not EIO
  EXPECT_FALSE(fs::exists(mnt_ / "a/no-such-file", ec));
  EXPECT_FALSE(ec) << ec.message();
}

TEST_F(FederationRootTest, NestedNamespacesEachReadFromTheirOwnOrigin) {
  Mount();
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/b/inner.txt"), "nested bytes of /a/b\n") << perchd_.Log();
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/sub/x.txt"), "public bytes of /a\n");
  std::set<std::string> a;
  for (const auto& e : fs::directory_iterator(mnt_ / "a")) a.insert(e.path().filename());
  EXPECT_TRUE(a.count("b") && a.count("sub") && a.count("odd")) << perchd_.Log();
}

TEST_F(FederationRootTest, NamespaceWithoutListingsReadsKnownPathsAndListsEmpty) {
  Mount();
  EXPECT_EQ(ReadLocalFile(mnt_ / "n/known.txt"), "unlisted bytes of /n\n");
  EXPECT_EQ(ReadLocalFile(mnt_ / "n/sub/deep.txt"), "deep in /n\n");
  EXPECT_TRUE(fs::is_directory(mnt_ / "n/sub"));
  EXPECT_EQ(fs::file_size(mnt_ / "n/known.txt"), 21u);
  // Documented: an unlisted directory lists as empty, with one log line.
  EXPECT_TRUE(fs::is_empty(mnt_ / "n"));
  EXPECT_TRUE(fs::is_empty(mnt_ / "n/sub"));
  std::error_code ec;
  EXPECT_FALSE(fs::exists(mnt_ / "n/missing.txt", ec));
  EXPECT_FALSE(ec) << ec.message();
  std::string log = perchd_.Log();
  size_t first = log.find("namespace /n offers no listings");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("namespace /n offers no listings", first + 1), std::string::npos);
}

TEST_F(FederationRootTest, OddNamesCostNoExtraDirectorQuery) {
  Mount();
  for (const char* name : kOddNames) {
    EXPECT_EQ(ReadLocalFile(mnt_ / "a/odd" / name), std::string("odd ") + name);
  }
  // One director answer about /a serves every object below it: no GET of an
  // odd object reaches the director but the one `?directread` question per
  // namespace (the origin vouches for its own bytes, issue 41), at most one
  // per network loop (perchd runs two here).
  std::string log = fed_->ErrLog();
  size_t odd_queries = 0;
  for (size_t at = log.find("director: GET /a/odd/"); at != std::string::npos;
       at = log.find("director: GET /a/odd/", at + 1)) {
    ++odd_queries;
  }
  EXPECT_LE(odd_queries, 2u) << log;
}

TEST_F(FederationRootTest, RestartWithTheFederationDownServesWhatIsCached) {
  Mount({"--namespace-token", "/p=" + fed_->TokenFile()});
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/sub/x.txt"), "public bytes of /a\n");
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/b/inner.txt"), "nested bytes of /a/b\n");
  EXPECT_EQ(ReadLocalFile(mnt_ / "n/known.txt"), "unlisted bytes of /n\n");
  ASSERT_EQ(perchd_.Stop(), 0);
  fed_->Stop();
  Mount({"--namespace-token", "/p=" + fed_->TokenFile()});
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/sub/x.txt"), "public bytes of /a\n");
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/b/inner.txt"), "nested bytes of /a/b\n");
  EXPECT_EQ(ReadLocalFile(mnt_ / "n/known.txt"), "unlisted bytes of /n\n");
  // Never read: not there, and the answer comes within the deadline.
  auto start = std::chrono::steady_clock::now();
  std::error_code ec;
  EXPECT_FALSE(fs::exists(mnt_ / "a/never-read.txt", ec));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(21));
}

TEST_F(FederationRootTest, ProtectedNamespaceIsNotReadableByOtherLocalUsers) {
  Mount({"--namespace-token", "/p=" + fed_->TokenFile()});
  RunResult pub = CatAsNobody(mnt_ / "a/sub/x.txt");
  EXPECT_EQ(pub.exit_code, 0) << pub.output;
  EXPECT_EQ(pub.output, "public bytes of /a\n");
  RunResult prot = CatAsNobody(mnt_ / "p/secret.txt");
  EXPECT_NE(prot.exit_code, 0);
  EXPECT_NE(prot.output.find("Permission denied"), std::string::npos) << prot.output;
  EXPECT_EQ(prot.output.find("protected bytes"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat((mnt_ / "p/secret.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0400u);
  // Root (the daemon's own user) still reads it.
  EXPECT_EQ(ReadLocalFile(mnt_ / "p/secret.txt"), "protected bytes of /p\n");
}

TEST_F(FederationRootTest, ProtectedGroupMayRead) {
  Mount({"--namespace-token", "/p=" + fed_->TokenFile(), "--protected-group", "users"});
  RunResult in_group = CatAsNobody(mnt_ / "p/secret.txt", "users");
  EXPECT_EQ(in_group.exit_code, 0) << in_group.output;
  EXPECT_EQ(in_group.output, "protected bytes of /p\n");
  RunResult other = CatAsNobody(mnt_ / "p/secret.txt", "nogroup");
  EXPECT_NE(other.exit_code, 0) << other.output;
  struct stat st {};
  ASSERT_EQ(::stat((mnt_ / "p/secret.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0440u);
}

TEST_F(FederationRootTest, WithoutATokenTheProtectedNamespaceIsEACCESAndTheRestWorks) {
  Mount();
  std::ifstream in(mnt_ / "p/secret.txt");
  EXPECT_FALSE(in.good());
  struct stat st {};
  EXPECT_EQ(::stat((mnt_ / "p/secret.txt").c_str(), &st), -1);
  EXPECT_EQ(errno, EACCES);
  EXPECT_EQ(ReadLocalFile(mnt_ / "a/sub/x.txt"), "public bytes of /a\n");
  std::string log = perchd_.Log();
  size_t first = log.find("namespace /p requires a token");
  EXPECT_NE(first, std::string::npos) << log;
  EXPECT_EQ(log.find("namespace /p requires a token", first + 1), std::string::npos) << log;
}

TEST_F(FederationRootTest, ATokenConfiguredForOneNamespaceIsNotSentToAnother) {
  // A [tokens] entry for /other must not unlock /p.
  fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "[tokens]\n\"/other\" = \"" << fed_->TokenFile() << "\"\n";
  Mount({"--config", config.string()});
  struct stat st {};
  EXPECT_EQ(::stat((mnt_ / "p/secret.txt").c_str(), &st), -1);
  EXPECT_EQ(errno, EACCES);
  perchd_.Stop();
  std::ofstream(config) << "[tokens]\n\"/p\" = \"" << fed_->TokenFile() << "\"\n";
  fs::remove_all(work_->path() / "cache");  // forget the refusal
  Mount({"--config", config.string()});
  EXPECT_EQ(ReadLocalFile(mnt_ / "p/secret.txt"), "protected bytes of /p\n");
}

}  // namespace
}  // namespace perch::testing
