// MountedFederation: a test fixture with a federation of its own (perch-devfed
// serving a generated tree at /test), the real perchd mounting it with its
// own control socket, and the real perchctl to talk to it. Everything lives
// in one temporary directory and is torn down in reverse order (unmount,
// stop the federation, remove the directory), also when a test fails.
//
// The including test target defines PERCHCTL_PATH.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/devfed/devfed_harness.h"
#include "tests/integration/perchd_harness.h"
#include "tests/integration/stats_json.h"
#include "tests/integration/test_tree.h"

namespace perch::testing {

class MountedFederation : public ::testing::Test {
 protected:
  // Writes `files` (and whatever `populate` adds to the tree), starts the
  // federation. Call first in SetUp; skips the test where xrootd or FUSE is
  // missing.
  void StartFederation(
      const std::string& tag, std::vector<TreeFile> files,
      const std::function<void(const std::filesystem::path&)>& populate = nullptr) {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    if (!FuseAvailable()) GTEST_SKIP() << "needs root and /dev/fuse";
    work_ = std::make_unique<TempDir>(tag);
    tree_ = work_->path() / "tree";
    files_ = std::move(files);
    CreateTestTree(tree_, files_);
    if (populate) populate(tree_);
    DevFed::Options opts;
    opts.exports.push_back({"/test", tree_.string(), false});
    fed_ = std::make_unique<DevFed>(opts);
    ASSERT_EQ(fed_->Start(), "");
    mnt_ = work_->path() / "mnt";
    std::filesystem::create_directories(mnt_);
  }

  // perchd's arguments for a mount of /test (`extra` flags added), also for a
  // successor taking it over: the cache survives remounts.
  std::vector<std::string> MountArgs(const std::vector<std::string>& extra = {}) const {
    std::vector<std::string> args = {"--cache-dir",  (work_->path() / "cache").string(),
                                     "--op-timeout", "20s",
                                     "--control",    "unix:" + Socket()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(fed_->FederationUrl() + "/test");
    args.push_back(mnt_.string());
    return args;
  }

  // Mounts /test with perchd (`extra` flags added).
  void Mount(const std::vector<std::string>& extra = {}) {
    ASSERT_EQ(perchd_.Start(MountArgs(extra), mnt_, work_->path() / "perchd.log"), "");
  }

  std::string Socket() const { return (work_->path() / "ctl.sock").string(); }

  RunResult Ctl(std::vector<std::string> args) {
    args.insert(args.begin(), {"--socket", Socket()});
    return RunToExit(PERCHCTL_PATH, args, std::chrono::seconds(120));
  }

  // perchctl's JSON answer; a test failure when it exits non-zero or is not JSON.
  nlohmann::json CtlJson(std::vector<std::string> args) {
    return PerchctlJson(Socket(), std::move(args));
  }

  std::string ReadFile(const std::string& rel) { return ReadLocalFile(mnt_ / rel); }
  std::string Original(const std::string& rel) { return ReadLocalFile(tree_ / rel); }

  std::unique_ptr<TempDir> work_;
  std::filesystem::path tree_, mnt_;
  std::vector<TreeFile> files_;
  std::unique_ptr<DevFed> fed_;
  PerchdProcess perchd_;  // destroyed (unmounted) before fed_ and work_
};

}  // namespace perch::testing
