// Fixtures for devfed's own tests: a served directory readable by user
// xrootd (hello.txt, "sub dir/a b.txt"), removed after the test.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/devfed/devfed_harness.h"

namespace perch::testing {

// A temporary directory that user xrootd can read (mkdtemp makes 0700 ones).
class TempData {
 public:
  explicit TempData(const std::string& tag) {
    std::string t =
        (std::filesystem::temp_directory_path() / ("perch-devfed-" + tag + "-XXXXXX")).string();
    if (mkdtemp(t.data()) != nullptr) path_ = t;
    std::filesystem::permissions(path_, std::filesystem::perms(0755));
  }
  ~TempData() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempData(const TempData&) = delete;
  TempData& operator=(const TempData&) = delete;

  void Write(const std::string& rel, const std::string& content) {
    std::filesystem::path p = path_ / rel;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << content;
    for (std::filesystem::path q = p; q != path_; q = q.parent_path()) {
      std::filesystem::permissions(q, std::filesystem::perms(q == p ? 0644 : 0755));
    }
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The Link header a Pelican director writes for `path` on `bases`, best first.
inline std::string Link(const std::vector<std::string>& bases, const std::string& path, int depth) {
  std::string out;
  for (size_t i = 0; i < bases.size(); ++i) {
    out += (i ? ", <" : "<") + bases[i] + path +
           ">; rel=\"duplicate\"; pri=" + std::to_string(i + 1) +
           "; depth=" + std::to_string(depth);
  }
  return out;
}

class DevFedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!DevFed::XrootdAvailable()) GTEST_SKIP() << "xrootd is not installed";
    data_.Write("hello.txt", "hello world\n");
    data_.Write("sub dir/a b.txt", "spaces");
    dir_ = data_.path();
  }
  TempData data_{"data"};
  std::filesystem::path dir_;
};

}  // namespace perch::testing
