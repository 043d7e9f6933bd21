// A seeded generator of the trees real data has and tidy fixtures lack, and a
// reader that is not perch to compare a mount with the export it serves.
//
// Names: random bytes from every value a POSIX name may hold except '/',
// NUL and newline (XRootD's own listing is line-based: a newline name breaks
// it for the whole directory, whatever the client), UTF-8 and not, control
// characters, leading and trailing spaces and dots, '%', '?', '#', '+', 1 to
// 255 bytes. Sizes: 0, 1, block-1, block, block+1, several blocks. A path
// near PATH_MAX. Directories of 1 entry to `big_dir_entries`.
//
// What XRootD 5.5 itself cannot do is what the comparison expects of it:
// a name with '?' is listed but most cannot be read (EIO, never other
// bytes), a 255-byte name is missing from its listing but opens by name
// (docs/quirks.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace perch::testing {

struct HostileTreeOptions {
  uint64_t seed = 1;
  uint64_t block_size = 64 << 10;  // perchd's, for the sizes around a block
  size_t files = 200;              // files with random names, spread over a few directories
  size_t big_dir_entries = 5000;   // one flat directory of empty files
  size_t path_max = 4096 - 200;    // the deepest path's length below `root`
};

// Writes the tree below `root` (created; readable by user xrootd).
void WriteHostileTree(const std::filesystem::path& root, const HostileTreeOptions& options);

// Compares the tree below `mount` with the one below `export_root` (the
// directory the origin serves): every name listed (but XRootD's exceptions
// above), type and size by stat, every byte by read. Returns one line per
// difference (empty: the same); stops after `max_differences`.
std::vector<std::string> CompareTrees(const std::filesystem::path& export_root,
                                      const std::filesystem::path& mount,
                                      size_t max_differences = 20);

// Files below `root`, relative paths, sorted (for the HTTP endpoint's check).
std::vector<std::string> FilesBelow(const std::filesystem::path& root);

// `s` with every byte outside printable ASCII as \xHH, cut at 120 bytes.
std::string ShowName(const std::string& s);

// Whether XRootD 5.5 can serve a file at this relative path ('?' anywhere).
bool XrootdCanRead(const std::string& rel);

}  // namespace perch::testing
