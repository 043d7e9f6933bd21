// Issue #13 item 1, end to end: perchd's HTTP endpoint serves the mounted
// federation to clients that do not use the mount. Real perch-devfed (XRootD
// origins), the real perchd (FUSE mount and endpoint over one cache), and
// real clients: curl, wget, Python's fsspec HTTPFileSystem (Debian's
// python3-fsspec), a Range reader in Python's http.client; the unprivileged
// user `nobody` for the protected namespace.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "daemon/http/propfind.h"
#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

// Reads a URL in ranges of `chunk` bytes over one keep-alive connection and
// checks each answer is a 206 with the right Content-Range; prints the
// bytes' length and writes them to argv[3].
constexpr char kRangeClient[] = R"PY(
import http.client, sys, urllib.parse
url, chunk, out = urllib.parse.urlsplit(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
conn.request("HEAD", url.path)
head = conn.getresponse(); head.read()
assert head.status == 200, head.status
size = int(head.getheader("Content-Length"))
assert head.getheader("Accept-Ranges") == "bytes"
data = bytearray()
while len(data) < size:
    end = min(len(data) + chunk, size) - 1
    conn.request("GET", url.path, headers={"Range": "bytes=%d-%d" % (len(data), end),
                                           "User-Agent": "rangeclient/1"})
    r = conn.getresponse()
    body = r.read()
    assert r.status == 206, r.status
    assert r.getheader("Content-Range") == "bytes %d-%d/%d" % (len(data), end, size), r.getheader("Content-Range")
    data += body
open(out, "wb").write(data)
print(len(data))
)PY";

// fsspec's HTTPFileSystem over the endpoint: ls, info, seek+read, cat.
constexpr char kFsspecClient[] = R"PY(
import sys, fsspec
base, out = sys.argv[1], sys.argv[2]
fs = fsspec.filesystem("http")
names = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(base + "/pub/d/", detail=False))
print("ls", ",".join(names))
print("size", fs.info(base + "/pub/big.bin")["size"])
with fs.open(base + "/pub/big.bin", "rb", block_size=1 << 20) as f:
    f.seek(5_000_000)
    part = f.read(100_000)
open(out + ".part", "wb").write(part)
open(out, "wb").write(fs.cat(base + "/pub/big.bin"))
)PY";

class HttpEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("httpep");
    const fs::path w = work_->path();
    CreateTestTree(w / "pub", {{"big.bin", 9 * 1024 * 1024 + 333},
                               {"d/one.txt", 1000},
                               {"d/two words.txt", 70000},
                               {"d/sub/deep.bin", 5000}});
    WriteLocalFile(w / "p/secret.txt", "protected bytes of /p\n");
    MakeReadableByXrootd(w);
    DevFed::Options opts;
    opts.exports.push_back({"/pub", (w / "pub").string(), false});
    opts.exports.push_back({"/p", (w / "p").string(), true});
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = w / "mnt";
    fs::create_directories(mnt_);
  }

  // Mounts the federation root with the endpoint (on a free loopback port
  // unless `extra` names --http).
  void Mount(std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--cache-dir",       (work_->path() / "cache").string(),
                                     "--op-timeout",      "20s",
                                     "--namespace-token", "/p=" + fed_->TokenFile(),
                                     "--control",         "unix:" + Socket()};
    if (std::find(extra.begin(), extra.end(), "--http") == extra.end())
      args.insert(args.end(), {"--http", "127.0.0.1:0"});
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(fed_->FederationUrl() + "/");
    args.push_back(mnt_.string());
    ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "perchd.log"), "") << fed_->ErrLog();
    std::string addr = Ctl({"health", "--json"})["http_address"];
    ASSERT_FALSE(addr.empty());
    base_ = "http://" + addr;
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  nlohmann::json Ctl(std::vector<std::string> args) {
    return PerchctlJson(Socket(), std::move(args));
  }
  nlohmann::json Stats() { return Ctl({"stats", "--json"}); }

  RunResult Curl(std::vector<std::string> args) {
    args.insert(args.begin(), {"-sS", "--max-time", "60"});
    return RunToExit("/usr/bin/curl", args);
  }
  // The status line's code of a request for `path` (e.g. "404").
  std::string StatusOf(const std::string& path, std::vector<std::string> extra = {}) {
    extra.insert(extra.end(), {"-o", "/dev/null", "-w", "%{http_code}", base_ + path});
    return Curl(extra).output;
  }
  RunResult Python(const char* script, std::vector<std::string> args) {
    fs::path py = work_->path() / "client.py";
    std::ofstream(py) << script;
    args.insert(args.begin(), py.string());
    return RunToExit("/usr/bin/python3", args, std::chrono::seconds(120));
  }
  std::string Original(const std::string& rel) { return ReadLocalFile(work_->path() / rel); }

  std::unique_ptr<TempDir> work_;
  std::unique_ptr<DevFed> fed_;
  fs::path mnt_;
  std::string base_;
  PerchdProcess perchd_;  // stopped before fed_ and work_ go
};

TEST_F(HttpEndpointTest, CurlWgetAndARangeClientReadByteExactThroughOneCache) {
  Mount();
  const fs::path w = work_->path();
  // curl, cold: the bytes come from the federation.
  RunResult r = Curl({"-o", (w / "curl.bin").string(), base_ + "/pub/big.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(ReadLocalFile(w / "curl.bin") == Original("pub/big.bin"));
  nlohmann::json cold = Stats();
  EXPECT_GE(cold["bytes_from_network"].get<uint64_t>(), 9u * 1024 * 1024);
  // A byte range, and one past the end.
  r = Curl({"-r", "4194000-4194999", base_ + "/pub/big.bin"});
  EXPECT_TRUE(r.output == Original("pub/big.bin").substr(4194000, 1000));
  EXPECT_EQ(StatusOf("/pub/big.bin", {"-r", "99999999-"}), "416");
  // wget and a Range client after it: the cache answers, the network is not asked again.
  r = RunToExit("/usr/bin/wget", {"-q", "-O", (w / "wget.bin").string(), base_ + "/pub/big.bin"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(ReadLocalFile(w / "wget.bin") == Original("pub/big.bin"));
  r = Python(kRangeClient, {base_ + "/pub/big.bin", "1000000", (w / "range.bin").string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(ReadLocalFile(w / "range.bin") == Original("pub/big.bin"));
  nlohmann::json warm = Stats();
  EXPECT_EQ(warm["bytes_from_network"], cold["bytes_from_network"]);
  EXPECT_GT(warm["hits"].get<uint64_t>(), cold["hits"].get<uint64_t>());
  // Each client counted under its own label.
  auto client = [&warm](const std::string& name) {
    return Element(warm["http_clients"], "client", name);
  };
  EXPECT_EQ(client("curl")["requests"], 3);
  EXPECT_GE(client("curl")["bytes"].get<uint64_t>(), 9u * 1024 * 1024 + 1000);
  EXPECT_EQ(client("wget")["requests"], 1);
  EXPECT_EQ(client("rangeclient")["requests"], 10);  // ten ranges of 1 MB
  // The mount reads the same cached bytes.
  EXPECT_TRUE(ReadLocalFile(mnt_ / "pub/big.bin") == Original("pub/big.bin"));
  EXPECT_EQ(Stats()["bytes_from_network"], cold["bytes_from_network"]);
}

TEST_F(HttpEndpointTest, FsspecListsAndReads) {
  Mount();
  fs::path out = work_->path() / "fsspec.bin";
  RunResult r = Python(kFsspecClient, {base_, out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ls one.txt,sub,two%20words.txt"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("size 9437517"), std::string::npos) << r.output;
  EXPECT_TRUE(ReadLocalFile(out.string() + ".part") ==
              Original("pub/big.bin").substr(5000000, 100000));
  EXPECT_TRUE(ReadLocalFile(out) == Original("pub/big.bin"));
  EXPECT_GE(Element(Stats()["http_clients"], "client", "python")["requests"].get<uint64_t>(), 3u);
}

TEST_F(HttpEndpointTest, PropfindListsInXRootDsShape) {
  Mount();
  RunResult r = Curl({"-X", "PROPFIND", "-H", "Depth: 1", base_ + "/pub/d"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // perch's own parser of XRootD's answers reads it.
  auto responses = http::ParseMultistatus(r.output);
  ASSERT_TRUE(responses.ok()) << responses.status().message() << "\n" << r.output;
  auto listing = http::InterpretListing(*responses, "/pub/d");
  ASSERT_TRUE(listing.ok()) << listing.status().message() << "\n" << r.output;
  ASSERT_EQ(listing->children.size(), 3u) << r.output;
  EXPECT_EQ(listing->children[0].name, "one.txt");
  EXPECT_EQ(listing->children[0].attr.size, 1000u);
  EXPECT_EQ(listing->children[1].name, "sub");
  EXPECT_TRUE(listing->children[1].attr.is_dir);
  EXPECT_EQ(listing->children[2].name, "two words.txt");
  EXPECT_EQ(listing->children[2].attr.size, 70000u);
  // Depth 0 of a file: itself.
  r = Curl({"-X", "PROPFIND", "-H", "Depth: 0", base_ + "/pub/d/two%20words.txt"});
  responses = http::ParseMultistatus(r.output);
  ASSERT_TRUE(responses.ok()) << r.output;
  ASSERT_EQ(responses->size(), 1u);
  EXPECT_EQ((*responses)[0].attr.size, 70000u);
}

TEST_F(HttpEndpointTest, ErrorsAreClearAndTheEndpointLivesOn) {
  Mount();
  EXPECT_EQ(StatusOf("/elsewhere/x"), "404");  // below no namespace of the federation
  EXPECT_EQ(StatusOf("/pub/no-such-file"), "404");
  EXPECT_EQ(StatusOf("/pub/d/one.txt", {"-X", "PUT", "--data", "x"}), "405");
  EXPECT_EQ(StatusOf("/pub/%zz"), "400");
  EXPECT_EQ(StatusOf("/pub/../p/secret.txt", {"--path-as-is"}), "400");
  RunResult big = Curl({"-o", "/dev/null", "-w", "%{http_code}", "-H",
                        "X-Pad: " + std::string(20000, 'x'), base_ + "/pub/d/one.txt"});
  EXPECT_NE(big.output, "200") << big.output;
  // Still serving, and the mount too.
  EXPECT_EQ(StatusOf("/pub/d/one.txt"), "200");
  RunResult mounts = Curl({base_ + "/.perch/mounts"});
  auto j = nlohmann::json::parse(mounts.output);
  ASSERT_EQ(j["mounts"].size(), 1u) << mounts.output;
  EXPECT_EQ(j["mounts"][0]["prefix"], "/");
  EXPECT_EQ(j["mounts"][0]["mountpoint"], mnt_.string());
  // HEAD answers as GET does, without the body (issue 42).
  EXPECT_EQ(StatusOf("/.perch/mounts", {"-I"}), "200");
  EXPECT_GE(Element(Stats()["http_clients"], "client", "curl")["errors"].get<uint64_t>(), 5u);
}

TEST_F(HttpEndpointTest, PelicansTrailerReportsTheTransferStatus) {
  Mount();
  RunResult r = Curl({"--raw", "-D", "-", "-H", "X-Transfer-Status: true", "-H", "TE: trailers",
                      base_ + "/pub/d/one.txt"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("Transfer-Encoding: chunked"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("\r\n0\r\nX-Transfer-Status: 200: OK\r\n"), std::string::npos)
      << r.output;
}

TEST_F(HttpEndpointTest, ProtectedNamespaceOnlyForTheUsersTheMountAllows) {
  Mount({"--protected-group", "users"});
  auto curl_as = [&](const std::string& group, const std::string& path = "/p/secret.txt") {
    return RunToExit("/usr/sbin/runuser", {"-u", "nobody", "-g", group, "--", "/usr/bin/curl",
                                           "-sS", "-w", " %{http_code}", base_ + path});
  };
  RunResult other = curl_as("nogroup");
  EXPECT_NE(other.output.find(" 403"), std::string::npos) << other.output;
  EXPECT_EQ(other.output.find("protected bytes"), std::string::npos) << other.output;
  // Names below it are not probed: a missing one is 403 as well, as the
  // kernel refuses the walk into the directory (docs/security.md).
  for (const char* probe : {"/p/no-such-file", "/p/no/such/dir", "/p/"}) {
    RunResult r = curl_as("nogroup", probe);
    EXPECT_NE(r.output.find(" 403"), std::string::npos) << probe << ": " << r.output;
  }
  RunResult member = curl_as("users");
  EXPECT_EQ(member.output, "protected bytes of /p\n 200") << member.output;
  // Root (the daemon's own user) reads it; public namespaces are for everyone.
  EXPECT_EQ(Curl({base_ + "/p/secret.txt"}).output, "protected bytes of /p\n");
  RunResult pub =
      RunToExit("/usr/sbin/runuser", {"-u", "nobody", "--", "/usr/bin/curl", "-sS", "-o",
                                      "/dev/null", "-w", "%{http_code}", base_ + "/pub/d/one.txt"});
  EXPECT_EQ(pub.output, "200");
}

TEST_F(HttpEndpointTest, NonLoopbackAddressOnlyWithTheOptIn) {
  RunResult r =
      RunPerchdToExit({"--foreground", "--cache-dir", (work_->path() / "cache-x").string(),
                       "--http", "0.0.0.0:0", fed_->FederationUrl() + "/", mnt_.string()},
                      std::chrono::seconds(15));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--http-allow-remote"), std::string::npos) << r.output;
  ASSERT_FALSE(IsMounted(mnt_));
  Mount({"--http", "0.0.0.0:0", "--http-allow-remote"});
  std::string addr = Ctl({"health", "--json"})["http_address"];
  ASSERT_EQ(addr.rfind("0.0.0.0:", 0), 0u) << addr;
  std::string port = addr.substr(addr.find(':') + 1);
  EXPECT_EQ(Curl({"http://127.0.0.1:" + port + "/pub/d/one.txt"}).output,
            Original("pub/d/one.txt"));
}

}  // namespace
}  // namespace perch::testing
