// The federation client against a real local federation (perch-devfed: real
// XRootD origins and caches, our director): list, stat and read every file
// byte-exact, failover mid-transfer with resume, not-found, tokens, TLS.
#include "daemon/http/federation_client.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "daemon/core/defaults.h"
#include "tests/devfed/devfed_harness.h"
#include "tests/integration/test_tree.h"

namespace perch {
namespace {

namespace fs = std::filesystem;
using core::ObjectPath;
using core::Result;
using core::StatusCode;
using http::CurlLoop;
using http::FederationClient;
using http::FederationClientOptions;
using testing::DevFed;
using testing::TempDir;

constexpr auto kTimeout = std::chrono::seconds(60);

template <typename T, typename Call>
Result<T> Wait(Call call) {
  auto promise = std::make_shared<std::promise<Result<T>>>();
  auto future = promise->get_future();
  call([promise](Result<T> r) { promise->set_value(std::move(r)); });
  if (future.wait_for(kTimeout + std::chrono::seconds(10)) != std::future_status::ready) {
    ADD_FAILURE() << "callback never ran";
    return core::InternalError("callback never ran");
  }
  return future.get();
}

ObjectPath P(const std::string& s) { return *ObjectPath::Parse(s); }

Result<core::FileAttr> StatSync(FederationClient& c, const std::string& path) {
  return Wait<core::FileAttr>([&](auto cb) { c.Stat(P(path), core::DeadlineAfter(kTimeout), cb); });
}
Result<std::vector<core::DirEntry>> ListSync(FederationClient& c, const std::string& path) {
  return Wait<std::vector<core::DirEntry>>(
      [&](auto cb) { c.List(P(path), core::DeadlineAfter(kTimeout), cb); });
}
Result<core::Bytes> ReadSync(FederationClient& c, const std::string& path, uint64_t size,
                             uint64_t off, uint64_t len) {
  auto r = Wait<core::FetchedBytes>([&](auto cb) {
    c.ReadRange(P(path), core::ObjectVersion{size, ""}, core::ByteRange{off, len},
                core::DeadlineAfter(kTimeout), cb);
  });
  if (!r.ok()) return r.status();
  return std::move(r->bytes);
}

// Reads `size` bytes in ranges of the daemon's default block size.
Result<std::string> ReadWhole(FederationClient& c, const std::string& path, uint64_t size) {
  std::string out;
  constexpr uint64_t kBlock = core::kDefaultBlockSize;
  for (uint64_t off = 0; off < size; off += kBlock) {
    auto r = ReadSync(c, path, size, off, std::min(kBlock, size - off));
    if (!r.ok()) return r.status();
    out += *r;
  }
  return out;
}

class FederationClientTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!DevFed::XrootdAvailable()) return;
    tree_ = new TempDir("fedclient-tree");
    testing::CreateTestTree(tree_->path(), testing::StandardTreeFiles());
    DevFed::Options opts;
    opts.exports.push_back({"/test", tree_->path().string(), false});
    opts.caches = 2;
    fed_ = new DevFed(opts);
    start_status_ = new std::string(fed_->Start());
  }
  static void TearDownTestSuite() {
    delete fed_;
    fed_ = nullptr;
    delete tree_;
    tree_ = nullptr;
    delete start_status_;
    start_status_ = nullptr;
  }
  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    ASSERT_TRUE(start_status_->empty()) << *start_status_;
    loop_ = std::make_unique<CurlLoop>(CurlLoop::Options{});
    auto url = http::ParseFederationUrl(fed_->FederationUrl() + "/test");
    ASSERT_TRUE(url.ok()) << url.status().ToString();
    client_ = std::make_unique<FederationClient>(*loop_, *url);
  }
  void TearDown() override {
    client_.reset();
    loop_.reset();
  }

  static TempDir* tree_;
  static DevFed* fed_;
  static std::string* start_status_;
  std::unique_ptr<CurlLoop> loop_;
  std::unique_ptr<FederationClient> client_;
};
TempDir* FederationClientTest::tree_ = nullptr;
DevFed* FederationClientTest::fed_ = nullptr;
std::string* FederationClientTest::start_status_ = nullptr;

// Walks the export with List and compares with the local tree.
TEST_F(FederationClientTest, ListingsAndStatsMatchTheExport) {
  std::vector<std::string> dirs = {"/"};
  size_t files_seen = 0;
  while (!dirs.empty()) {
    std::string dir = dirs.back();
    dirs.pop_back();
    auto entries = ListSync(*client_, dir);
    ASSERT_TRUE(entries.ok()) << dir << ": " << entries.status().ToString();
    fs::path local = tree_->path() / fs::path(dir.substr(1));
    std::map<std::string, bool> expected;
    for (auto& e : fs::directory_iterator(local))
      expected[e.path().filename().string()] = e.is_directory();
    ASSERT_EQ(entries->size(), expected.size()) << dir;
    for (const core::DirEntry& e : *entries) {
      ASSERT_TRUE(expected.count(e.name)) << "unexpected entry '" << e.name << "' in " << dir;
      EXPECT_EQ(e.attr.is_dir, expected[e.name]) << e.name;
      std::string child = (dir == "/" ? "" : dir) + "/" + e.name;
      if (e.attr.is_dir) {
        dirs.push_back(child);
      } else {
        ++files_seen;
        EXPECT_EQ(e.attr.size, fs::file_size(local / fs::path(e.name))) << child;
        auto st = StatSync(*client_, child);
        ASSERT_TRUE(st.ok()) << child << ": " << st.status().ToString();
        EXPECT_FALSE(st->is_dir);
        EXPECT_EQ(st->size, e.attr.size) << child;
        EXPECT_GT(st->mtime, 0);
      }
    }
  }
  EXPECT_EQ(files_seen, testing::StandardTreeFiles().size());
  auto dir = StatSync(*client_, "/sub dir");
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  EXPECT_TRUE(dir->is_dir);
  auto empty = ListSync(*client_, "/empty dir");
  ASSERT_TRUE(empty.ok()) << empty.status().ToString();
  EXPECT_TRUE(empty->empty());
}

TEST_F(FederationClientTest, EveryFileReadsByteExact) {
  for (const auto& f : testing::StandardTreeFiles()) {
    auto got = ReadWhole(*client_, "/" + f.rel, f.size);
    ASSERT_TRUE(got.ok()) << f.rel << ": " << got.status().ToString();
    std::string want = testing::ReadLocalFile(tree_->path() / fs::path(f.rel));
    ASSERT_EQ(got->size(), want.size()) << f.rel;
    EXPECT_TRUE(*got == want) << f.rel << " differs";
  }
  // One director query served every file of the namespace.
  EXPECT_EQ(client_->counters().director_queries, 1u);
  EXPECT_EQ(client_->counters().failovers, 0u);
}

TEST_F(FederationClientTest, RandomRangesMatch) {
  std::string want = testing::ReadLocalFile(tree_->path() / "block-plus-one.bin");
  std::mt19937_64 rng(7);
  for (int i = 0; i < 40; ++i) {
    uint64_t off = rng() % want.size();
    uint64_t len = 1 + rng() % (want.size() - off);
    auto got = ReadSync(*client_, "/block-plus-one.bin", want.size(), off, len);
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    ASSERT_TRUE(*got == want.substr(off, len)) << "range " << off << "+" << len;
  }
  // Ranges past the end are clipped, not errors.
  auto tail = ReadSync(*client_, "/one.bin", 1, 0, 100);
  ASSERT_TRUE(tail.ok());
  EXPECT_EQ(tail->size(), 1u);
  auto past = ReadSync(*client_, "/one.bin", 1, 5, 10);
  ASSERT_TRUE(past.ok());
  EXPECT_TRUE(past->empty());
}

TEST_F(FederationClientTest, MissingObjectsAreNotFound) {
  auto st = StatSync(*client_, "/no-such-file");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.status().code(), StatusCode::kNotFound) << st.status().ToString();
  auto rd = ReadSync(*client_, "/no/such/file", 10, 0, 10);
  ASSERT_FALSE(rd.ok());
  EXPECT_EQ(rd.status().code(), StatusCode::kNotFound) << rd.status().ToString();
  auto ls = ListSync(*client_, "/no-such-dir");
  ASSERT_FALSE(ls.ok());
  EXPECT_EQ(ls.status().code(), StatusCode::kNotFound) << ls.status().ToString();
}

TEST_F(FederationClientTest, WrongVersionIsCorruptNotData) {
  // The object is 14 bytes; a reader that believes it is 20 must not get data.
  auto rd = ReadSync(*client_, "/small.txt", 20, 0, 14);
  ASSERT_FALSE(rd.ok());
  EXPECT_NE(rd.status().message().find("object size is 14"), std::string::npos)
      << rd.status().ToString();
}

TEST_F(FederationClientTest, NoTokenReachesAPublicExport) {
  // Even with tokens lying around, a public namespace gets none.
  TempDir dir("token");
  std::ofstream(dir.path() / "tok") << "secret-token-value";
  FederationClientOptions opts;
  opts.token_file = (dir.path() / "tok").string();
  auto url = http::ParseFederationUrl(fed_->FederationUrl() + "/test");
  FederationClient client(*loop_, *url, opts);
  std::atomic<int> requests{0}, with_token{0};
  loop_->SetRequestObserverForTest([&](const http::HttpRequest& r) {
    requests++;
    for (const auto& h : r.headers) {
      if (h.find("secret-token-value") != std::string::npos || h.starts_with("Authorization"))
        with_token++;
    }
  });
  ASSERT_TRUE(ReadSync(client, "/small.txt", 14, 0, 14).ok());
  ASSERT_TRUE(StatSync(client, "/small.txt").ok());
  ASSERT_TRUE(ListSync(client, "/").ok());
  EXPECT_GE(requests.load(), 4);
  EXPECT_EQ(with_token.load(), 0);
}

// The federation root with nested public namespaces and a protected one: the
// token goes to the protected namespace's servers only, never to the
// director, the discovery host or the public namespaces' servers.
TEST(FederationRootClientTest, TheTokenGoesOnlyToTheProtectedNamespacesServers) {
  if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
  TempDir tree("fedroot-tokens");
  for (const char* d : {"a", "ab", "p"}) {
    fs::create_directories(tree.path() / d);
    std::ofstream(tree.path() / d / "f.txt") << "bytes of " << d << "\n";
    fs::permissions(tree.path() / d, fs::perms(0755));
    fs::permissions(tree.path() / d / "f.txt", fs::perms(0644));
  }
  DevFed::Options opts;
  opts.exports.push_back({"/a", (tree.path() / "a").string(), false});
  opts.exports.push_back({"/a/b", (tree.path() / "ab").string(), false});
  opts.exports.push_back({"/p", (tree.path() / "p").string(), true});
  DevFed fed(opts);
  ASSERT_EQ(fed.Start(), "");
  CurlLoop loop(CurlLoop::Options{});
  FederationClientOptions copts;
  copts.namespace_token_files = {{"/p", fed.TokenFile()}};  // an opaque token: named
  FederationClient client(loop, *http::ParseFederationUrl(fed.FederationUrl() + "/"), copts);
  std::string p_origin = fed.OriginUrl("/p");
  std::mutex mu;
  std::vector<std::string> leaked;  // requests with a token that went elsewhere
  int to_p = 0;
  loop.SetRequestObserverForTest([&](const http::HttpRequest& r) {
    bool token = false;
    for (const auto& h : r.headers) token = token || h.starts_with("Authorization");
    std::lock_guard<std::mutex> l(mu);
    bool p_server = r.url.starts_with(p_origin + "/");
    if (token && p_server) to_p++;
    if (token && !p_server) leaked.push_back(r.method + " " + r.url);
  });
  for (auto [path, size, body] : std::vector<std::tuple<const char*, uint64_t, const char*>>{
           {"/a/f.txt", 11, "bytes of a\n"},
           {"/a/b/f.txt", 12, "bytes of ab\n"},
           {"/p/f.txt", 11, "bytes of p\n"}}) {
    auto r = ReadSync(client, path, size, 0, size);
    ASSERT_TRUE(r.ok()) << path << ": " << r.status().ToString();
    EXPECT_EQ(*r, body);
  }
  ASSERT_TRUE(StatSync(client, "/a/b/f.txt").ok());
  ASSERT_TRUE(ListSync(client, "/p").ok());
  ASSERT_TRUE(ListSync(client, "/a").ok());
  auto root = ListSync(client, "/");
  ASSERT_TRUE(root.ok()) << root.status().ToString();
  std::set<std::string> names;
  for (const auto& e : *root) names.insert(e.name);
  EXPECT_TRUE(names.count("a") && names.count("p")) << names.size();
  std::lock_guard<std::mutex> l(mu);
  EXPECT_TRUE(leaked.empty()) << leaked.front();
  EXPECT_GE(to_p, 2);  // the read and the listing of /p
}

TEST(FederationClientFailoverTest, KilledCacheMidTransferResumesOnTheNextWithoutRefetching) {
  if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
  TempDir tree("failover-tree");
  constexpr uint64_t kSize = 64 << 20;
  testing::CreateTestTree(tree.path(), {{"big.bin", kSize}});
  DevFed::Options opts;
  opts.exports.push_back({"/fo", tree.path().string(), false});
  opts.caches = 2;
  DevFed fed(opts);
  ASSERT_EQ(fed.Start(), "");
  std::vector<std::string> caches = fed.CacheUrls("/fo");
  ASSERT_EQ(caches.size(), 2u);

  CurlLoop loop(CurlLoop::Options{});
  FederationClient client(loop, *http::ParseFederationUrl(fed.FederationUrl() + "/fo"));
  std::atomic<bool> killed{false};
  std::string killed_url;
  client.SetProgressHookForTest([&](const std::string& url, uint64_t bytes) {
    if (bytes > (8 << 20) && !killed.exchange(true)) {
      killed_url = url;
      for (size_t i = 0; i < caches.size(); ++i) {
        if (url.starts_with(caches[i])) fed.KillCache("/fo", i);
      }
    }
  });
  auto got = ReadSync(client, "/big.bin", kSize, 0, kSize);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_TRUE(killed.load());
  EXPECT_TRUE(*got == testing::ReadLocalFile(tree.path() / "big.bin"));
  EXPECT_GE(client.counters().failovers, 1u);
  EXPECT_GE(client.counters().resumes, 1u);
  // No byte crossed the network twice.
  EXPECT_EQ(client.counters().body_bytes, kSize);
}

TEST(FederationClientTokenTest, ProtectedExportNeedsAToken) {
  if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
  TempDir tree("protected-tree");
  testing::CreateTestTree(tree.path(), {{"secret.bin", 5000}, {"d/inner.txt", 10}});
  DevFed::Options opts;
  opts.exports.push_back({"/secret", tree.path().string(), true});
  DevFed fed(opts);
  ASSERT_EQ(fed.Start(), "");
  ASSERT_FALSE(fed.TokenFile().empty());

  CurlLoop loop(CurlLoop::Options{});
  auto url = http::ParseFederationUrl(fed.FederationUrl() + "/secret");
  // No token anywhere: a clear PermissionDenied, locally, before any data request.
  FederationClientOptions none;
  none.token_file = (tree.path() / "does-not-exist").string();
  FederationClient anon(loop, *url, none);
  auto denied = ReadSync(anon, "/secret.bin", 5000, 0, 5000);
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code(), StatusCode::kPermissionDenied) << denied.status().ToString();
  EXPECT_NE(denied.status().message().find("requires a token"), std::string::npos);

  // A wrong token: the origin itself refuses.
  TempDir bad("bad-token");
  std::ofstream(bad.path() / "tok") << "not-a-valid-token";
  FederationClientOptions wrong;
  wrong.namespace_token_files = {{"/secret", (bad.path() / "tok").string()}};
  FederationClient impostor(loop, *url, wrong);
  auto refused = ReadSync(impostor, "/secret.bin", 5000, 0, 5000);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied) << refused.status().ToString();
  auto refused_ls = ListSync(impostor, "/");
  ASSERT_FALSE(refused_ls.ok());
  EXPECT_EQ(refused_ls.status().code(), StatusCode::kPermissionDenied)
      << refused_ls.status().ToString();

  // The devfed token: list, stat and read succeed.
  FederationClientOptions good;
  good.namespace_token_files = {{"/secret", fed.TokenFile()}};
  FederationClient user(loop, *url, good);
  auto ls = ListSync(user, "/");
  ASSERT_TRUE(ls.ok()) << ls.status().ToString();
  EXPECT_EQ(ls->size(), 3u);  // secret.bin, d, "empty dir"
  auto st = StatSync(user, "/d/inner.txt");
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_EQ(st->size, 10u);
  auto data = ReadSync(user, "/secret.bin", 5000, 0, 5000);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  EXPECT_TRUE(*data == testing::ReadLocalFile(tree.path() / "secret.bin"));
}

TEST(FederationClientTlsTest, ReadsAndListsOverHttps) {
  if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
  TempDir tree("tls-tree");
  auto files = testing::StandardTreeFiles(/*include_large=*/false);
  testing::CreateTestTree(tree.path(), files);
  DevFed::Options opts;
  opts.exports.push_back({"/tls", tree.path().string(), false});
  opts.caches = 1;
  opts.tls = true;
  DevFed fed(opts);
  ASSERT_EQ(fed.Start(), "");
  ASSERT_TRUE(fed.FederationUrl().starts_with("https://")) << fed.FederationUrl();

  // Without the federation's CA the connection is refused, with a reason.
  {
    CurlLoop untrusting(CurlLoop::Options{});
    FederationClient c(untrusting, *http::ParseFederationUrl(fed.FederationUrl() + "/tls"));
    auto r = StatSync(c, "/small.txt");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  }
  CurlLoop::Options lo;
  lo.ca_file = fed.CaFile();
  CurlLoop loop(lo);
  FederationClient client(loop, *http::ParseFederationUrl(fed.FederationUrl() + "/tls"));
  auto ls = ListSync(client, "/");
  ASSERT_TRUE(ls.ok()) << ls.status().ToString();
  for (const auto& f : files) {
    auto got = ReadWhole(client, "/" + f.rel, f.size);
    ASSERT_TRUE(got.ok()) << f.rel << ": " << got.status().ToString();
    EXPECT_TRUE(*got == testing::ReadLocalFile(tree.path() / fs::path(f.rel))) << f.rel;
  }
}

TEST(FederationClientUnreachableTest, AnsweredWithinTheDeadline) {
  // Nothing listens on port 1: discovery fails fast with a clear message.
  CurlLoop loop(CurlLoop::Options{});
  FederationClient client(loop, *http::ParseFederationUrl("http://127.0.0.1:1/ns"));
  auto start = std::chrono::steady_clock::now();
  auto r = Wait<core::FileAttr>(
      [&](auto cb) { client.Stat(P("/x"), core::DeadlineAfter(std::chrono::seconds(5)), cb); });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnavailable) << r.status().ToString();
  EXPECT_NE(r.status().message().find("discovery"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(7));
}

}  // namespace
}  // namespace perch
