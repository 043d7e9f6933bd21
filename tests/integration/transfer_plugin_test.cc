// perch-transfer run as HTCondor runs it (transfer_fixture.h), with no perchd
// on the node: every byte comes straight from the federation.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <regex>
#include <thread>

#include "perch/version.h"
#include "tests/integration/transfer_fixture.h"

namespace perch::testing {
namespace {

namespace fs = std::filesystem;

using TransferPluginTest = TransferFixture;

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

TEST_F(TransferPluginTest, AnUnreachablePerchdIsPassedBy) {
  StartFederation({{"x.bin", 50000}, {"y.bin", 60000}}, {});
  setenv("PERCH_ENDPOINT", "http://127.0.0.1:1", 1);  // nothing listens there
  WriteAdFiles({{UrlOf("x.bin"), sandbox_.string()}, {UrlOf("y.bin"), sandbox_.string()}});
  RunResult r = RunPlugin();
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* f : {"x.bin", "y.bin"}) {
    EXPECT_TRUE(ReadLocalFile(sandbox_ / f) == ReadLocalFile(tree_ / f)) << f;
  }
  // One line on stderr for the whole run, naming the endpoint and why.
  std::string line =
      "perch-transfer: perchd's endpoint http://127.0.0.1:1 (from $PERCH_ENDPOINT) "
      "is not usable";
  ASSERT_NE(r.output.find(line), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find(line, r.output.find(line) + 1), std::string::npos) << r.output;
  std::vector<ClassAd> ads = ResultAds();
  ASSERT_EQ(ads.size(), 2u);
  EXPECT_EQ(Dev(ads[1], "PerchVia"), "federation");
  EXPECT_NE(Dev(ads[1], "PerchFallbackReason").find("127.0.0.1:1"), std::string::npos);
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

TEST_F(TransferPluginTest, SigtermLeavesNoPartialFile) {
  // 40 Mbit/s: 32 MiB take about 7 s, long enough to stop the plugin mid-file.
  DevFed::Options opts;
  opts.extra_args = {"--wan-rate", "40"};
  StartFederation({{"slow.bin", 32 << 20}}, opts);
  WriteAdFiles({{UrlOf("slow.bin"), sandbox_.string()}});
  pid_t pid = fork();
  if (pid == 0) {
    int fd = open((work_->path() / "plugin.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    execl(PERCH_TRANSFER_PATH, PERCH_TRANSFER_PATH, "-infile", infile_.c_str(), "-outfile",
          outfile_.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  ASSERT_GT(pid, 0);
  // Once its temporary file exists, the download is under way.
  bool started = false;
  for (int i = 0; i < 400 && !started; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
    started = !SandboxEntries().empty();
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(started) << ReadLocalFile(work_->path() / "plugin.log");
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << status;
  EXPECT_TRUE(SandboxEntries().empty());  // neither slow.bin nor its temporary file
  auto ads = transfer::ParseClassAds(ReadLocalFile(outfile_));  // still the pre-allocated spaces
  ASSERT_TRUE(ads.ok());
  EXPECT_TRUE(ads->empty());
}

TEST_F(TransferPluginTest, ClassAdOutput) {
  RunResult r = Run({"-classad"});
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.output, "MultipleFileSupport = true\nPluginVersion = \"" + std::string(kVersion) +
                          "\"\n"
                          "PluginType = \"FileTransfer\"\n"
                          "ProtocolVersion = 2\n"
                          "SupportedMethods = \"osdf, pelican, stash\"\n");
  RunResult v = Run({"-version"});
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.output, "perch-transfer " + std::string(kVersion) + "\n");
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
