// A directory tree with the sizes and names that break naive clients:
// empty and one-byte files, sizes around the 4 MiB block size, a 64 MiB file,
// spaces, '%', '+', ';', ',', unicode, nested and empty directories.
// Contents are deterministic pseudo-random bytes. The tree is world-readable
// so that XRootD (running as user xrootd) can serve it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace perch::testing {

struct TreeFile {
  std::string rel;  // "sub dir/nested/f.txt"
  uint64_t size;
};

// The files CreateTestTree writes (relative paths and sizes).
std::vector<TreeFile> StandardTreeFiles(bool include_large = true);

// Writes `files` below `root` (created, mode 0755/0644).
void CreateTestTree(const std::filesystem::path& root, const std::vector<TreeFile>& files);

// Makes everything below `root` readable by user xrootd (devfed's servers):
// directories o+rx, files o+r. Not o+x on files: XRootD's PROPFIND then
// calls them collections.
void MakeReadableByXrootd(const std::filesystem::path& root);

// Writes `body` to `path`, creating its directories.
void WriteLocalFile(const std::filesystem::path& path, const std::string& body);

// Reads a whole local file.
std::string ReadLocalFile(const std::filesystem::path& path);

// A fresh directory under /tmp, world-traversable; removed by the destructor.
class TempDir {
 public:
  explicit TempDir(const std::string& tag);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace perch::testing
