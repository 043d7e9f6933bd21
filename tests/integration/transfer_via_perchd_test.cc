// perch-transfer on a node where perchd runs with its HTTP endpoint: the
// plugin (run as HTCondor runs it, transfer_fixture.h) fetches through
// perchd, so the bytes land in and come from the node's one cache; perchctl's
// stats show it. Where perchd does not serve a URL (another namespace, or a
// protected one the job's user may not read through perchd: 403) the plugin
// goes to the federation itself with the job's own token.
#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "daemon/http/url.h"
#include "tests/integration/squatter.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/transfer_fixture.h"

#ifndef PERCHCTL_PATH
#error "PERCHCTL_PATH must name the perchctl binary"
#endif

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

class TransferViaPerchdTest : public TransferFixture {
 protected:
  // Mounts `federation` with the endpoint on a free loopback port; perchd
  // reads protected namespaces with devfed's token. Sets endpoint_.
  void StartPerchd(const std::string& federation) {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    mnt_ = work_->path() / "mnt";
    fs::create_directories(mnt_);
    std::vector<std::string> args = {"--cache-dir",  (work_->path() / "cache").string(),
                                     "--op-timeout", "20s",
                                     "--http",       "127.0.0.1:0",
                                     "--control",    "unix:" + Socket()};
    if (!fed_->CaFile().empty()) args.insert(args.end(), {"--ca-file", fed_->CaFile()});
    // devfed's token (a macaroon: opaque) is named for every protected export.
    if (!fed_->TokenFile().empty())
      args.insert(args.end(), {"--namespace-token", "/=" + fed_->TokenFile()});
    args.insert(args.end(), {federation, mnt_.string()});
    ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "perchd.log"), "") << fed_->ErrLog();
    std::string address = Ctl({"health", "--json"})["http_address"];
    ASSERT_FALSE(address.empty());
    endpoint_ = "http://" + address;
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  nlohmann::json Ctl(std::vector<std::string> args) {
    return PerchctlJson(Socket(), std::move(args));
  }
  uint64_t Stat(const nlohmann::json& stats, const char* key) {
    return stats.contains(key) ? stats[key].get<uint64_t>() : 0;
  }

  // Runs the plugin for every file of the tree into `dir`; checks each ad and
  // each file's bytes. Returns the ads.
  std::vector<ClassAd> FetchAll(const fs::path& dir) {
    fs::create_directories(dir);
    std::vector<Request> requests;
    for (const TreeFile& f : files_) requests.push_back({UrlOf(f.rel), dir.string()});
    WriteAdFiles(requests);
    RunResult r = RunPlugin();
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_EQ(r.output.find("fetching from the federation directly"), std::string::npos)
        << r.output;
    std::vector<ClassAd> ads = ResultAds();
    EXPECT_EQ(ads.size(), files_.size());
    for (size_t i = 0; i < ads.size() && i < files_.size(); ++i) {
      SCOPED_TRACE(ads[i].Unparse());
      EXPECT_TRUE(Val(ads[i], "TransferSuccess").boolean);
      EXPECT_EQ(Dev(ads[i], "PerchVia"), "perchd");
      EXPECT_EQ(Dev(ads[i], "PerchServer"), endpoint_);
      EXPECT_EQ(Val(ads[i], "TransferFileBytes").integer, static_cast<int64_t>(files_[i].size));
      fs::path got = dir / fs::path(files_[i].rel).filename();
      EXPECT_TRUE(ReadLocalFile(got) == ReadLocalFile(tree_ / files_[i].rel)) << got;
    }
    return ads;
  }

  fs::path mnt_;
  std::string endpoint_;
  PerchdProcess perchd_;  // stopped (unmounted) before the fixture's federation and directory
};

TEST_F(TransferViaPerchdTest, TenFilesThroughPerchdThenFromItsCache) {
  DevFed::Options opts;
  opts.caches = 1;
  opts.tls = true;
  StartFederation(TenFiles(), opts);
  StartPerchd(Base() + "/");  // the federation's root: pelican://127.0.0.1:P/
  uint64_t total = 0;
  for (const TreeFile& f : files_) total += f.size;

  // First job: perchd is found through $PERCH_ENDPOINT; its cache is cold.
  setenv("PERCH_ENDPOINT", endpoint_.c_str(), 1);
  FetchAll(work_->path() / "job1");
  nlohmann::json cold = Ctl({"stats", "--json"});
  EXPECT_GE(Stat(cold, "bytes_from_network"), total);
  ASSERT_TRUE(cold.contains("http_clients")) << cold.dump();
  const nlohmann::json transfer = Element(cold["http_clients"], "client", "perch-transfer");
  ASSERT_FALSE(transfer.is_null()) << cold.dump();
  EXPECT_GE(transfer["requests"].get<uint64_t>(), files_.size());
  EXPECT_GE(transfer["bytes"].get<uint64_t>(), total);

  // Second job: perchd is found through its config file's http key; every
  // byte comes from the node's cache.
  unsetenv("PERCH_ENDPOINT");
  fs::path config = work_->path() / "perchd.toml";
  std::ofstream(config) << "# perchd's config as the node has it\nhttp = \"" << endpoint_.substr(7)
                        << "\"\n";
  setenv("PERCH_CONFIG", config.c_str(), 1);
  FetchAll(work_->path() / "job2");
  nlohmann::json warm = Ctl({"stats", "--json"});
  EXPECT_EQ(Stat(warm, "bytes_from_network"), Stat(cold, "bytes_from_network"));
  EXPECT_GT(Stat(warm, "hits"), Stat(cold, "hits"));
  EXPECT_GE(Stat(warm, "bytes_from_cache") - Stat(cold, "bytes_from_cache"), total);
}

TEST_F(TransferViaPerchdTest, WhatPerchdDoesNotServeComesFromTheFederation) {
  fs::path secret = work_->path() / "secret";
  CreateTestTree(secret, {{"s.bin", 300000}});
  DevFed::Options opts;
  opts.exports.push_back({"/prot", secret.string(), true});
  StartFederation({{"open.bin", 70000}}, opts);
  StartPerchd(fed_->FederationUrl() + "/prot");  // perchd mounts the protected namespace only
  setenv("PERCH_ENDPOINT", endpoint_.c_str(), 1);
  std::string prot_url = Base() + "/prot/s.bin";

  // Root may read the protected namespace through perchd.
  WriteAdFiles({{prot_url, sandbox_.string()}});
  RunResult r = RunPlugin();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(Dev(ResultAds().at(0), "PerchVia"), "perchd");
  EXPECT_TRUE(ReadLocalFile(sandbox_ / "s.bin") == ReadLocalFile(secret / "s.bin"));

  // A job's user may not (403): the plugin reads it with the job's token. And
  // /ns is mounted by no perchd: straight from the federation.
  if (RunToExit("/usr/sbin/runuser", {"-u", "nobody", "--", "test", "-x", PERCH_TRANSFER_PATH})
          .exit_code != 0) {
    GTEST_SKIP() << "user nobody cannot run " << PERCH_TRANSFER_PATH;
  }
  fs::path job = work_->path() / "nobody-job";
  fs::create_directories(job);
  fs::path token = job / "job.token";
  fs::copy_file(fed_->TokenFile(), token);
  infile_ = job / "in.ads";
  outfile_ = job / "out.ads";
  WriteAdFiles({{prot_url, job.string()}, {UrlOf("open.bin"), job.string()}});
  for (const auto& e : fs::recursive_directory_iterator(job)) {
    ASSERT_EQ(lchown(e.path().c_str(), 65534, 65534), 0);
  }
  ASSERT_EQ(chown(job.c_str(), 65534, 65534), 0);
  setenv("BEARER_TOKEN_FILE", token.c_str(), 1);
  r = RunToExit("/usr/sbin/runuser", {"-u", "nobody", "--", PERCH_TRANSFER_PATH, "-infile",
                                      infile_.string(), "-outfile", outfile_.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 2u);
  EXPECT_EQ(Dev(ads[0], "PerchVia"), "federation");
  EXPECT_NE(Dev(ads[0], "PerchFallbackReason").find("403"), std::string::npos) << ads[0].Unparse();
  // perchd's error body is quoted without its trailing newline (issue 44: a literal "\n").
  EXPECT_EQ(Dev(ads[0], "PerchFallbackReason").find("\\n"), std::string::npos) << ads[0].Unparse();
  EXPECT_EQ(Dev(ads[1], "PerchVia"), "federation");
  EXPECT_NE(Dev(ads[1], "PerchFallbackReason").find("no mount of perchd"), std::string::npos)
      << ads[1].Unparse();
  EXPECT_NE(r.output.find(prot_url + ": perchd at " + endpoint_ + " could not serve it"),
            std::string::npos)
      << r.output;
  EXPECT_TRUE(ReadLocalFile(job / "s.bin") == ReadLocalFile(secret / "s.bin"));
  EXPECT_TRUE(ReadLocalFile(job / "open.bin") == ReadLocalFile(tree_ / "open.bin"));
  struct stat st {};
  ASSERT_EQ(stat((job / "s.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 65534u);
}

// Issue #42: another local user listens where perch-transfer looks for
// perchd (a port perchd does not hold) and answers as perchd would, with a
// mount that claims the URL. perch-transfer sees that the socket is not
// root's, sends it nothing and fetches from the federation: the job gets the
// object's bytes, not the squatter's.
TEST_F(TransferViaPerchdTest, ASquatterOnTheEndpointsPortIsNeverTakenForPerchd) {
  StartFederation({{"ns.bin", 70000}}, DevFed::Options{});
  auto fu = http::ParseFederationUrl(Base() + "/ns/ns.bin");
  ASSERT_TRUE(fu.ok()) << fu.status().ToString();
  const std::string mounts = R"({"mounts":[{"federation":")" + Base() + R"(/","discovery":")" +
                             fu->discovery_url + R"(","prefix":"/","mountpoint":"/osdf"}]})";
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  Squatter squatter(port, mounts);
  ASSERT_TRUE(squatter.Won(std::chrono::seconds(10))) << "the squatter could not listen";
  setenv("PERCH_ENDPOINT", ("http://127.0.0.1:" + std::to_string(port)).c_str(), 1);
  WriteAdFiles({{UrlOf("ns.bin"), sandbox_.string()}});
  RunResult r = RunPlugin();
  unsetenv("PERCH_ENDPOINT");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("uid 65534's, not perchd's"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("fetching from the federation directly"), std::string::npos) << r.output;
  ClassAd ad = ResultAds().at(0);
  EXPECT_TRUE(Val(ad, "TransferSuccess").boolean) << ad.Unparse();
  EXPECT_NE(Dev(ad, "PerchVia"), "perchd") << ad.Unparse();
  EXPECT_TRUE(ReadLocalFile(sandbox_ / "ns.bin") == ReadLocalFile(tree_ / "ns.bin"));
  EXPECT_TRUE(squatter.Running());
}

}  // namespace
}  // namespace perch::testing
