// CorruptCaches: a test fixture for issue #30's end-to-end tests of wrong
// bytes from caches: perch-devfed with two real XCache servers in front of a
// real XRootD origin, a proxy that flips one byte in a fifth of the caches'
// response bodies (--fault-corrupt 0.2, never the origin's), a generated tree
// exported at /c, and the real perchd mounting it. Everything lives in one
// temporary directory and is torn down in reverse order (unmount, stop the
// federation, remove the directory), also when a test fails.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {

class CorruptCaches : public ::testing::Test {
 protected:
  // Writes `files`, starts the federation. Call first in SetUp; skips the
  // test where FUSE or xrootd is missing.
  void StartFederation(const std::string& tag, const std::vector<TreeFile>& files) {
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    work_ = std::make_unique<TempDir>(tag);
    CreateTestTree(work_->path() / "data", files);
    MakeReadableByXrootd(work_->path() / "data");
    DevFed::Options opts;
    opts.exports.push_back({"/c", (work_->path() / "data").string(), false});
    opts.caches = 2;
    opts.extra_args = {"--fault-corrupt", "0.2"};
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    std::filesystem::create_directories(mnt_);
  }

  // Mounts /c with perchd's defaults and `extra` flags.
  void Mount(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"--cache-dir", (work_->path() / "cache").string(), "--control",
                                     "unix:" + Socket()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(fed_->FederationUrl() + "/c");
    args.push_back(mnt_.string());
    ASSERT_EQ(perchd_.Start(args, mnt_, work_->path() / "perchd.log"), "") << fed_->ErrLog();
  }

  // The bytes of `rel` as exported (what the origin serves).
  std::string Exported(const std::string& rel) const {
    return ReadLocalFile(work_->path() / "data" / rel);
  }
  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  std::unique_ptr<TempDir> work_;
  std::unique_ptr<DevFed> fed_;
  std::filesystem::path mnt_;
  PerchdProcess perchd_;  // stopped (and unmounted) before fed_ and work_ go
};

}  // namespace perch::testing
