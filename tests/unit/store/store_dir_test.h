// What the store's tests share: a private temporary directory per test
// (removed after it), the block size and an object id, and writing or
// flipping bytes of a file at an offset, the damage a crash or a bad disk leaves.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace perch::store {

// The block size of the store's tests, and an object id.
inline constexpr uint64_t kBlock = 64 << 10;
inline const std::string kId = "0123456789abcdef0123456789abcdef";

class StoreDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string t = (std::filesystem::temp_directory_path() / "perch-store-XXXXXX").string();
    ASSERT_NE(mkdtemp(t.data()), nullptr);
    dir_ = t;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

// Overwrites `bytes.size()` bytes of file `path` at offset `at`.
inline void Overwrite(const std::string& path, uint64_t at, std::string_view bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(at));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Flips one bit of the byte at `at` of file `path`.
inline void FlipByte(const std::filesystem::path& path, uint64_t at) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(at));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(at));
  f.put(static_cast<char>(c ^ 1));
}

}  // namespace perch::store
