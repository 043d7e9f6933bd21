// perch-transfer run as HTCondor's starter runs it: the test writes the
// -infile in HTCondor's format (one new-format ad per line), pre-allocates the
// -outfile with spaces as the starter does, runs the real binary, and reads
// the result ads back. The federation is a real perch-devfed (XRootD origin
// and caches); no perchd runs unless a test starts one, and perchd's config
// is pointed at a file that does not exist, so the node's own
// /etc/perch/perchd.toml never matters.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "client/transfer/classad.h"
#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

#ifndef PERCH_TRANSFER_PATH
#error "PERCH_TRANSFER_PATH must name the perch-transfer binary"
#endif

namespace perch::testing {
namespace {

namespace fs = std::filesystem;
using transfer::ClassAd;
using transfer::ClassAdValue;

// The environment variables perch-transfer reads; each test sets its own.
constexpr const char* kEnv[] = {"PERCH_ENDPOINT", "PERCH_CONFIG",      "PERCH_CA_FILE",
                                "BEARER_TOKEN",   "BEARER_TOKEN_FILE", "TOKEN",
                                "_CONDOR_CREDS"};

struct Request {
  std::string url;
  std::string local;  // LocalFileName
};

// Ten files of the sizes that matter: empty, one byte, around and across the
// plugin's 8 MiB chunks, names that need percent-encoding in a URL.
std::vector<TreeFile> TenFiles() {
  return {{"a.bin", 0},
          {"b.txt", 1},
          {"c.bin", 1000},
          {"d.bin", 110000},
          {"e.bin", (4 << 20) - 1},
          {"f.bin", (8 << 20) + 1},
          {"sub/g.bin", 20 << 20},
          {"with space.bin", 5000},
          {"pct%.bin", 123},
          {"sub/h.bin", 12345}};
}

std::string Encoded(const std::string& rel) {
  std::string out;
  for (char c : rel) {
    if (c == ' ') {
      out += "%20";
    } else if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

class TransferPluginTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* e : kEnv) unsetenv(e);
    work_ = std::make_unique<TempDir>("transfer");
    sandbox_ = work_->path() / "execute" / "dir_1234";
    fs::create_directories(sandbox_);
    setenv("PERCH_CONFIG", (work_->path() / "no-perchd.toml").c_str(), 1);
    infile_ = work_->path() / "transfer-in.ads";
    outfile_ = work_->path() / "transfer-out.ads";
  }
  void TearDown() override {
    for (const char* e : kEnv) unsetenv(e);
  }

  // Starts a federation exporting `files` at /ns.
  void StartFederation(std::vector<TreeFile> files, DevFed::Options opts) {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    files_ = std::move(files);
    tree_ = work_->path() / "tree";
    CreateTestTree(tree_, files_);
    opts.exports.insert(opts.exports.begin(), {"/ns", tree_.string(), false});
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
  }

  // "pelican://127.0.0.1:P" for a TLS federation, the dev form "http://127.0.0.1:P" otherwise.
  std::string Base() const {
    std::string f = fed_->FederationUrl();
    return f.starts_with("https://") ? "pelican://" + f.substr(8) : f;
  }
  std::string UrlOf(const std::string& rel) const { return Base() + "/ns/" + Encoded(rel); }

  // Writes the -infile as HTCondor does, and an -outfile pre-allocated with spaces.
  void WriteAdFiles(const std::vector<Request>& requests) {
    std::ofstream in(infile_);
    for (const Request& r : requests) {
      in << "[ LocalFileName = " << transfer::QuoteClassAdString(r.local)
         << "; Url = " << transfer::QuoteClassAdString(r.url) << " ]\n";
    }
    std::ofstream(outfile_) << std::string(19 * 1024, ' ');
  }

  RunResult Run(const std::vector<std::string>& args) {
    return RunToExit(PERCH_TRANSFER_PATH, args, std::chrono::seconds(120));
  }
  RunResult RunPlugin(bool upload = false) {
    std::vector<std::string> args = {"-infile", infile_.string(), "-outfile", outfile_.string()};
    if (upload) args.push_back("-upload");
    return Run(args);
  }

  // The result ads; the file holds nothing else (the pre-allocation is cut).
  std::vector<ClassAd> ResultAds() {
    std::string text = ReadLocalFile(outfile_);
    EXPECT_TRUE(text.empty() || text.back() == '\n') << "not cut after the last ad: " << text;
    auto ads = transfer::ParseClassAds(text);
    EXPECT_TRUE(ads.ok()) << ads.status().ToString() << "\n" << text;
    return ads.ok() ? *ads : std::vector<ClassAd>{};
  }

  // Entries of the sandbox (temporary files would show here).
  std::set<std::string> SandboxEntries() {
    std::set<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(sandbox_)) {
      out.insert(fs::relative(e.path(), sandbox_).string());
    }
    return out;
  }

  std::unique_ptr<TempDir> work_;
  fs::path sandbox_, tree_, infile_, outfile_;
  std::vector<TreeFile> files_;
  std::unique_ptr<DevFed> fed_;
};

std::string Str(const ClassAd& ad, const char* name) {
  auto v = ad.GetString(name);
  return v.ok() && v->has_value() ? **v : "<" + std::string(name) + " missing>";
}
const ClassAdValue& Val(const ClassAd& ad, const char* name) {
  static const ClassAdValue kMissing;
  const ClassAdValue* v = ad.Find(name);
  return v != nullptr ? *v : kMissing;
}
// An attribute of the DeveloperData ad.
std::string Dev(const ClassAd& ad, const char* name) {
  auto dev = transfer::ParseClassAds(Val(ad, "DeveloperData").text);
  if (!dev.ok() || dev->size() != 1) return "<no DeveloperData>";
  const ClassAdValue* v = (*dev)[0].Find(name);
  return v == nullptr ? "" : (v->kind == ClassAdValue::Kind::kString ? v->text : v->Unparse());
}

TEST_F(TransferPluginTest, TenFilesStraightFromTheFederation) {
  DevFed::Options opts;
  opts.caches = 1;
  opts.tls = true;  // pelican:// URLs: discovery over https
  StartFederation(TenFiles(), opts);
  setenv("PERCH_CA_FILE", fed_->CaFile().c_str(), 1);
  std::vector<Request> requests;
  std::vector<fs::path> expected;
  for (size_t i = 0; i < files_.size(); ++i) {
    // Every third goes to the sandbox directory itself: the URL's name is appended.
    std::string name = fs::path(files_[i].rel).filename().string();
    bool to_dir = i % 3 == 2;
    requests.push_back(
        {UrlOf(files_[i].rel), to_dir ? sandbox_.string() : (sandbox_ / ("in-" + name)).string()});
    expected.push_back(to_dir ? sandbox_ / name : sandbox_ / ("in-" + name));
  }
  WriteAdFiles(requests);
  RunResult r = RunPlugin();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("no perchd endpoint configured"), std::string::npos) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), files_.size()) << ReadLocalFile(outfile_);
  std::set<std::string> names;
  for (size_t i = 0; i < files_.size(); ++i) {
    const ClassAd& ad = ads[i];
    SCOPED_TRACE(ad.Unparse());
    EXPECT_TRUE(Val(ad, "TransferSuccess").boolean);
    EXPECT_EQ(Str(ad, "TransferUrl"), requests[i].url);
    EXPECT_EQ(Str(ad, "TransferFileName"), requests[i].local);
    EXPECT_EQ(Str(ad, "TransferProtocol"), "pelican");
    EXPECT_EQ(Str(ad, "TransferType"), "download");
    EXPECT_EQ(Val(ad, "TransferFileBytes").integer, static_cast<int64_t>(files_[i].size));
    EXPECT_EQ(Val(ad, "TransferTotalBytes").integer, static_cast<int64_t>(files_[i].size));
    EXPECT_FALSE(Val(ad, "TransferRetryable").boolean);
    EXPECT_EQ(ad.Find("TransferError"), nullptr);
    EXPECT_LE(Val(ad, "TransferStartTime").integer, Val(ad, "TransferEndTime").integer);
    EXPECT_FALSE(Str(ad, "TransferLocalMachineName").empty());
    EXPECT_EQ(Dev(ad, "PerchVia"), "federation");
    EXPECT_TRUE(ReadLocalFile(expected[i]) == ReadLocalFile(tree_ / files_[i].rel)) << expected[i];
    names.insert(fs::relative(expected[i], sandbox_).string());
  }
  EXPECT_EQ(SandboxEntries(), names);  // no temporary file left beside them
}

TEST_F(TransferPluginTest, AMissingObjectFailsAndLeavesNothing) {
  StartFederation({{"one.bin", 300000}, {"three.bin", 1000}}, {});
  WriteAdFiles({{UrlOf("one.bin"), (sandbox_ / "one.bin").string()},
                {UrlOf("missing.bin"), (sandbox_ / "missing.bin").string()},
                {UrlOf("three.bin"), (sandbox_ / "three.bin").string()}});
  RunResult r = RunPlugin();
  EXPECT_EQ(r.exit_code, 1) << r.output;  // not retryable: the object does not exist
  std::vector<ClassAd> ads = ResultAds();
  // Downloads stop at the first failure, as Pelican's plugin does.
  ASSERT_EQ(ads.size(), 2u) << ReadLocalFile(outfile_);
  EXPECT_TRUE(Val(ads[0], "TransferSuccess").boolean);
  const ClassAd& bad = ads[1];
  EXPECT_EQ(Val(bad, "TransferSuccess").kind, ClassAdValue::Kind::kBool);
  EXPECT_FALSE(Val(bad, "TransferSuccess").boolean);
  EXPECT_FALSE(Val(bad, "TransferRetryable").boolean);
  std::string error = Str(bad, "TransferError");
  EXPECT_NE(error.find("cannot download " + UrlOf("missing.bin") + ": not found"),
            std::string::npos)
      << error;
  EXPECT_NE(Val(bad, "TransferErrorData").text.find("ErrorType = \"Specification\""),
            std::string::npos)
      << bad.Unparse();
  EXPECT_EQ(Val(bad, "TransferFileBytes").integer, 0);
  EXPECT_EQ(SandboxEntries(), std::set<std::string>{"one.bin"});
}

TEST_F(TransferPluginTest, ACutTransferResumesInsteadOfStartingOver) {
  const uint64_t size = 128 << 20;  // 16 chunk reads: some are cut
  DevFed::Options opts;
  opts.caches = 2;
  opts.extra_args = {"--fault-cut", "0.4", "--fault-seed", "7", "--log-level", "error"};
  StartFederation({{"big.bin", size}}, opts);
  WriteAdFiles({{UrlOf("big.bin"), sandbox_.string()}});
  RunResult r = RunPlugin();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  ASSERT_TRUE(ReadLocalFile(sandbox_ / "big.bin") == ReadLocalFile(tree_ / "big.bin"));
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 1u);
  EXPECT_GE(std::stoll(Dev(ads[0], "PerchResumes")), 1) << ads[0].Unparse();

  // What the fault proxies forwarded, counted on their side.
  ASSERT_EQ(kill(fed_->Pid(), SIGUSR1), 0);
  std::smatch m;
  std::string log;
  std::regex counters("fault proxies: ([0-9]+) response body bytes, ([0-9]+) cut");
  for (int i = 0; i < 100 && !std::regex_search(log, m, counters); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    log = fed_->ErrLog();
  }
  ASSERT_TRUE(std::regex_search(log, m, counters)) << log;
  uint64_t fetched = std::stoull(m[1]), cuts = std::stoull(m[2]);
  EXPECT_GE(cuts, 1u) << log;
  // Every byte once (plus the small PROPFIND answer): a restart would add
  // whole chunks.
  EXPECT_GE(fetched, size);
  EXPECT_LE(fetched, size + size / 100) << cuts << " cuts";
  EXPECT_GE(Val(ads[0], "TransferTotalBytes").integer, static_cast<int64_t>(size));
  EXPECT_LE(Val(ads[0], "TransferTotalBytes").integer, static_cast<int64_t>(size + size / 100));
}

TEST_F(TransferPluginTest, ClassAdOutput) {
  RunResult r = Run({"-classad"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output,
            "MultipleFileSupport = true\n"
            "PluginVersion = \"" PERCH_VERSION
            "\"\n"
            "PluginType = \"FileTransfer\"\n"
            "ProtocolVersion = 2\n"
            "SupportedMethods = \"osdf, pelican, stash\"\n");
  RunResult v = Run({"-version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.output, "perch-transfer " PERCH_VERSION "\n");
}

TEST_F(TransferPluginTest, UploadsAreRefused) {
  std::ofstream(sandbox_ / "result.txt") << "job output\n";
  WriteAdFiles({{"osdf:///ns/out/result.txt", (sandbox_ / "result.txt").string()},
                {"osdf:///ns/out/other.txt", (sandbox_ / "other.txt").string()}});
  RunResult r = RunPlugin(/*upload=*/true);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 2u);
  for (const ClassAd& ad : ads) {
    EXPECT_FALSE(Val(ad, "TransferSuccess").boolean);
    EXPECT_EQ(Str(ad, "TransferType"), "upload");
    EXPECT_NE(Str(ad, "TransferError").find("does not upload"), std::string::npos);
  }
  EXPECT_EQ(Str(ads[1], "TransferUrl"), "osdf:///ns/out/other.txt");
  EXPECT_EQ(ReadLocalFile(sandbox_ / "result.txt"), "job output\n");
}

TEST_F(TransferPluginTest, AMalformedInputFileIsReportedInTheOutputFile) {
  std::ofstream(outfile_) << std::string(4096, ' ');
  std::ofstream(infile_) << "[ Url = \"osdf:///ns/a\"; LocalFileName = \"a\" ]\n"
                         << "[ Url = \"osdf:///ns/b\" LocalFileName = \"b\" ]\n";
  RunResult r = RunPlugin();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 1u);
  EXPECT_FALSE(Val(ads[0], "TransferSuccess").boolean);
  std::string error = Str(ads[0], "TransferError");
  EXPECT_NE(error.find("malformed input file"), std::string::npos) << error;
  EXPECT_NE(error.find("line 2, column"), std::string::npos) << error;
  EXPECT_NE(r.output.find("malformed input file"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(sandbox_ / "a"));  // nothing was fetched

  // Ads that name no transfer (protocol 4 adds such) are skipped.
  std::ofstream(infile_) << "[ JobAdInformation = [ Owner = \"u\" ]; Retries = 3 ]\n";
  r = RunPlugin();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(ReadLocalFile(outfile_), "");
}

TEST_F(TransferPluginTest, AProtectedNamespaceUsesTheJobsCondorCredentials) {
  fs::path secret = work_->path() / "secret";
  CreateTestTree(secret, {{"s.bin", 70000}});
  DevFed::Options opts;
  opts.exports.push_back({"/prot", secret.string(), true});
  StartFederation({{"open.bin", 1000}}, opts);
  ASSERT_FALSE(fed_->TokenFile().empty());
  std::string url = Base() + "/prot/s.bin";

  // No token anywhere: refused, and said so.
  fs::path creds = work_->path() / "creds";
  fs::create_directories(creds);
  setenv("_CONDOR_CREDS", creds.c_str(), 1);
  WriteAdFiles({{url, (sandbox_ / "s.bin").string()}});
  RunResult r = RunPlugin();
  EXPECT_EQ(r.exit_code, 1) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 1u);
  EXPECT_NE(Str(ads[0], "TransferError").find("permission denied"), std::string::npos)
      << ads[0].Unparse();
  EXPECT_FALSE(fs::exists(sandbox_ / "s.bin"));

  // HTCondor's credmon puts the job's token in $_CONDOR_CREDS/<name>.use; a
  // NAME+ scheme prefix selects it.
  fs::copy_file(fed_->TokenFile(), creds / "myvo.use");
  WriteAdFiles({{"myvo+" + url, (sandbox_ / "s.bin").string()}});
  r = RunPlugin();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(ReadLocalFile(sandbox_ / "s.bin") == ReadLocalFile(secret / "s.bin"));
  EXPECT_EQ(r.output.find(ReadLocalFile(fed_->TokenFile()).substr(0, 40)), std::string::npos)
      << "the token was logged";
}

}  // namespace
}  // namespace perch::testing
