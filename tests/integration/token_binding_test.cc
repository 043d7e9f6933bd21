// Issue #29 item 1, end to end: the real perchd mounts a FaultServer
// federation whose director marks /ns as requiring a token and names its
// issuers; the fake origin records every Authorization header it gets. The
// node's token (--token-file, a WLCG JWT of https://good.example) reaches the
// origin only when the director names that issuer; a director naming another
// issuer (a hostile or mistaken one, linking to its own origin) gets nothing:
// the mount of that namespace is refused with one line saying why (below a
// federation root the namespace is EACCES instead: FederationRootTest). An
// opaque token (a macaroon) goes only below the [tokens] prefix naming it.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/fakes/fault_server.h"
#include "tests/fakes/unsigned_jwt.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

constexpr char kGood[] = "https://good.example";
constexpr char kMacaroon[] = "MDAxY2xvY2F0aW9uIG9wYXF1ZQ";

// A WLCG token of `issuer` (unsigned: the fake origin does not verify).
std::string Jwt(const std::string& issuer) {
  return UnsignedJwt(R"({"wlcg.ver":"1.0","iss":")" + issuer + R"(","scope":"storage.read:/"})");
}

// Reads `path` whole: its bytes, or the errno of the first call that failed.
struct ReadOutcome {
  std::string bytes;
  int error = 0;
};
ReadOutcome ReadOrErrno(const fs::path& path) {
  ReadOutcome r;
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return {"", errno};
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      r.error = errno;
      break;
    }
    r.bytes.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return r;
}

// The names in directory `dir`, sorted; empty if it cannot be listed.
std::vector<std::string> Listing(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class TokenBindingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>("token-binding");
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
    server_.SetLinks({"ok"});
    server_.SetListing("", {{"x.txt", "6", false}});
    server_.AddObject("x.txt", "bytes\n");
    jwt_file_ = (work_->path() / "node.token").string();
    std::ofstream(jwt_file_) << Jwt(kGood) << "\n";
    macaroon_file_ = (work_->path() / "ns.token").string();
    std::ofstream(macaroon_file_) << kMacaroon << "\n";
  }

  // Mounts the federation with `flags` and reads /ns/x.txt through the mount.
  ReadOutcome MountAndRead(std::vector<std::string> flags) {
    flags.insert(flags.end(), {"--cache-dir", (work_->path() / "cache").string(), "--op-timeout",
                               "20s", server_.BaseUrl() + "/ns", mnt_.string()});
    std::string started = perchd_.Start(flags, mnt_, work_->path() / "perchd.log");
    EXPECT_EQ(started, "");
    if (!started.empty()) return {"", -1};
    return ReadOrErrno(mnt_ / "x.txt");
  }

  // perchd with `flags`, expected to refuse the mount (exit 1) and say why. If
  // it mounts instead, the mount is removed here so that nothing is left.
  RunResult RefusedMount(std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--foreground", "--cache-dir", (work_->path() / "cache").string(),
                                 "--control", "unix:" + (work_->path() / "ctl.sock").string()});
    flags.insert(flags.end(), {server_.BaseUrl() + "/ns", mnt_.string()});
    RunResult r = RunPerchdToExit(flags, std::chrono::seconds(15));
    if (IsMounted(mnt_)) {
      ADD_FAILURE() << "perchd mounted:\n" << r.output;
      RunToExit("/bin/fusermount3", {"-u", "-z", mnt_.string()});
    }
    return r;
  }

  // The Authorization headers the origin got that carried anything.
  std::vector<std::string> TokensAtTheOrigin() const {
    std::vector<std::string> sent;
    for (const std::string& a : server_.Authorizations())
      if (!a.empty()) sent.push_back(a);
    return sent;
  }

  // Stops perchd, then lists the requests the origin got that did not carry
  // `authorization` ("" if every one did, and there was one). Requests run
  // beside the reads (the prefetcher lists the directory of a file opened,
  // and may ask after the read has returned): only once perchd is gone has
  // it asked all it will, and one list of them is judged whole.
  std::string RequestsWithout(const std::string& authorization) {
    EXPECT_EQ(perchd_.Stop(), 0);
    std::vector<FaultServer::Request> got = server_.Requests();
    if (got.empty()) return "the origin got no request";
    std::string without;
    for (const FaultServer::Request& q : got) {
      if (q.authorization != authorization)
        without += q.method + " " + q.target + " with '" + q.authorization + "'\n";
    }
    return without;
  }

  size_t Count(const std::string& haystack, const std::string& needle) {
    size_t n = 0;
    for (size_t at = haystack.find(needle); at != std::string::npos;
         at = haystack.find(needle, at + 1))
      ++n;
    return n;
  }

  FaultServer server_;
  std::unique_ptr<TempDir> work_;
  fs::path mnt_;
  std::string jwt_file_, macaroon_file_;
  PerchdProcess perchd_;  // declared last: stopped (and unmounted) first
};

TEST_F(TokenBindingTest, TheNodesJwtGoesToANamespaceNamingItsIssuer) {
  server_.SetProtected({"https://other.example", kGood});
  ReadOutcome r = MountAndRead({"--token-file", jwt_file_});
  EXPECT_EQ(r.error, 0) << perchd_.Log();
  EXPECT_EQ(r.bytes, "bytes\n");
  EXPECT_EQ(Listing(mnt_), std::vector<std::string>{"x.txt"}) << perchd_.Log();
  EXPECT_EQ(RequestsWithout("Bearer " + Jwt(kGood)), "");
}

TEST_F(TokenBindingTest, TheNodesJwtNeverGoesToANamespaceOfAnotherIssuer) {
  server_.SetProtected({"https://evil.example"});
  RunResult r = RefusedMount({"--token-file", jwt_file_});
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(TokensAtTheOrigin().empty()) << TokensAtTheOrigin().front();
  EXPECT_EQ(Count(r.output, "warning namespace /ns requires a token"), 1u) << r.output;
  EXPECT_NE(r.output.find("its issuer 'https://good.example' is not one the namespace names "
                          "(https://evil.example)"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find(Jwt(kGood)), std::string::npos) << "the token was logged";
}

TEST_F(TokenBindingTest, AnOpaqueTokenGoesOnlyWhereATokensPrefixNamesIt) {
  server_.SetProtected({kGood});
  RunResult refused = RefusedMount({"--token-file", macaroon_file_});
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_NE(refused.output.find("an opaque token (not a JWT)"), std::string::npos)
      << refused.output;
  EXPECT_TRUE(TokensAtTheOrigin().empty());
  // A [tokens] prefix that does not hold /ns does not name it either.
  refused = RefusedMount({"--namespace-token", "/other=" + macaroon_file_});
  EXPECT_NE(refused.exit_code, 0) << refused.output;
  EXPECT_TRUE(TokensAtTheOrigin().empty());

  // Named for /ns, in the configuration file or by the flag, it is sent there.
  fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "[tokens]\n\"/ns\" = \"" << macaroon_file_ << "\"\n";
  ReadOutcome r = MountAndRead({"--config", config.string()});
  EXPECT_EQ(r.error, 0) << perchd_.Log();
  EXPECT_EQ(r.bytes, "bytes\n");
  EXPECT_EQ(RequestsWithout(std::string("Bearer ") + kMacaroon), "");
}

}  // namespace
}  // namespace perch::testing
