#include "tests/integration/test_tree.h"

#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace perch::testing {

namespace fs = std::filesystem;

std::vector<TreeFile> StandardTreeFiles(bool include_large) {
  constexpr uint64_t kMiB = 1 << 20;
  std::vector<TreeFile> files = {
      {"empty.bin", 0},
      {"one.bin", 1},
      {"small.txt", 14},
      {"block-minus-one.bin", 4 * kMiB - 1},
      {"block.bin", 4 * kMiB},
      {"block-plus-one.bin", 4 * kMiB + 1},
      {"with space.bin", 1000},
      {"100%.txt", 100},
      {"a+b=c&d.txt", 7},
      {"semi;colon,comma.txt", 33},
      {"\xc3\xbc"
       "n"
       "\xc3\xaf"
       "code-"
       "\xe5\x90\x8d"
       ".dat",
       4097},
      {"sub dir/nested/deep.txt", 12345},
      {"sub dir/x.bin", 65536},
      {"images/n01440764/img_0001.JPEG", 110 * 1024},
      {"images/n01440764/img_0002.JPEG", 98 * 1024},
      {"images/n01443537/img_0003.JPEG", 120 * 1024},
  };
  if (include_large) files.push_back({"large.bin", 64 * kMiB});
  return files;
}

void CreateTestTree(const fs::path& root, const std::vector<TreeFile>& files) {
  std::mt19937_64 rng(42);
  fs::create_directories(root / "empty dir");
  for (const TreeFile& f : files) {
    fs::path p = root / fs::path(f.rel);
    fs::create_directories(p.parent_path());
    std::ofstream out(p, std::ios::binary);
    std::string buf(1 << 16, '\0');
    uint64_t left = f.size;
    while (left > 0) {
      size_t n = static_cast<size_t>(std::min<uint64_t>(left, buf.size()));
      for (size_t i = 0; i < n; i += 8) {
        uint64_t v = rng();
        std::memcpy(&buf[i], &v, std::min<size_t>(8, n - i));
      }
      out.write(buf.data(), static_cast<std::streamsize>(n));
      left -= n;
    }
    if (!out) throw std::runtime_error("cannot write " + p.string());
  }
  for (auto& e : fs::recursive_directory_iterator(root)) {
    fs::permissions(e.path(), e.is_directory() ? fs::perms(0755) : fs::perms(0644));
  }
  fs::permissions(root, fs::perms(0755));
}

void MakeReadableByXrootd(const fs::path& root) {
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    fs::perms add =
        e.is_directory() ? fs::perms::others_read | fs::perms::others_exec : fs::perms::others_read;
    fs::permissions(e.path(), add, fs::perm_options::add);
  }
}

void WriteLocalFile(const fs::path& path, const std::string& body) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << body;
}

std::string ReadLocalFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TempDir::TempDir(const std::string& tag) {
  std::string templ = (fs::temp_directory_path() / ("perch-" + tag + "-XXXXXX")).string();
  if (mkdtemp(templ.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = templ;
  fs::permissions(path_, fs::perms(0755));
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace perch::testing
