// TransferFixture: runs perch-transfer as HTCondor's starter runs it. A test
// writes the -infile in HTCondor's format (one new-format ad per line),
// pre-allocates the -outfile with spaces as the starter does, runs the real
// binary, and reads the result ads back. The federation is a real
// perch-devfed (XRootD origin and caches). perchd's config is pointed at a
// file that does not exist and $PERCH_ENDPOINT is unset unless a test sets
// them, so the node's own /etc/perch/perchd.toml never matters.
//
// The including target defines PERCH_TRANSFER_PATH.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"
#include "transfer/classad.h"

namespace perch::testing {

using transfer::ClassAd;
using transfer::ClassAdValue;

// The environment variables perch-transfer reads; each test sets its own.
inline constexpr const char* kEnv[] = {"PERCH_ENDPOINT", "PERCH_CONFIG",      "PERCH_CA_FILE",
                                       "BEARER_TOKEN",   "BEARER_TOKEN_FILE", "TOKEN",
                                       "_CONDOR_CREDS"};

struct Request {
  std::string url;
  std::string local;  // LocalFileName
};

// Ten files of the sizes that matter: empty, one byte, around and across the
// plugin's 8 MiB chunks, names that need percent-encoding in a URL.
inline std::vector<TreeFile> TenFiles() {
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

inline std::string Encoded(const std::string& rel) {
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

class TransferFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* e : kEnv) unsetenv(e);
    work_ = std::make_unique<TempDir>("transfer");
    sandbox_ = work_->path() / "execute" / "dir_1234";
    std::filesystem::create_directories(sandbox_);
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
    for (const auto& e : std::filesystem::recursive_directory_iterator(sandbox_)) {
      out.insert(std::filesystem::relative(e.path(), sandbox_).string());
    }
    return out;
  }

  std::unique_ptr<TempDir> work_;
  std::filesystem::path sandbox_, tree_, infile_, outfile_;
  std::vector<TreeFile> files_;
  std::unique_ptr<DevFed> fed_;
};

inline std::string Str(const ClassAd& ad, const char* name) {
  auto v = ad.GetString(name);
  return v.ok() && v->has_value() ? **v : "<" + std::string(name) + " missing>";
}
inline const ClassAdValue& Val(const ClassAd& ad, const char* name) {
  static const ClassAdValue kMissing;
  const ClassAdValue* v = ad.Find(name);
  return v != nullptr ? *v : kMissing;
}
// An attribute of the DeveloperData ad.
inline std::string Dev(const ClassAd& ad, const char* name) {
  auto dev = transfer::ParseClassAds(Val(ad, "DeveloperData").text);
  if (!dev.ok() || dev->size() != 1) return "<no DeveloperData>";
  const ClassAdValue* v = (*dev)[0].Find(name);
  return v == nullptr ? "" : (v->kind == ClassAdValue::Kind::kString ? v->text : v->Unparse());
}

}  // namespace perch::testing
