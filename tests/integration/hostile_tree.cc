#include "tests/integration/hostile_tree.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <map>
#include <random>
#include <set>

#include "tests/integration/test_tree.h"

namespace perch::testing {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxName = 255;

}  // namespace

std::string ShowName(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    }
  }
  return out.size() > 120 ? out.substr(0, 120) + "...(" + std::to_string(s.size()) + " bytes)"
                          : out;
}

namespace {

class NameMaker {
 public:
  explicit NameMaker(uint64_t seed) : rng_(seed) {}

  // A name no other name of `taken` has; `dir`: a directory's (no '?', which
  // would hide everything below it from XRootD, and at most 200 bytes: the
  // entries of a directory whose own name XRootD cuts are beyond repair).
  std::string Make(std::set<std::string>* taken, bool dir) {
    for (;;) {
      std::string n = Draw(dir);
      if (n.empty() || n == "." || n == ".." || taken->count(n)) continue;
      // Two names that one cut to 254 bytes would make the same: keep the
      // comparison about perch.
      if (n.size() >= kMaxName - 1 && taken->count(n.substr(0, kMaxName - 1))) continue;
      taken->insert(n);
      return n;
    }
  }

 private:
  size_t Length() {
    switch (Pick(16)) {
      case 0:
        return 1;
      case 1:
        return kMaxName;
      case 2:
        return kMaxName - 1;
      case 3:
        return 100 + Pick(kMaxName - 100);
      default:
        return 1 + Pick(24);
    }
  }
  char Byte(bool dir) {
    for (;;) {
      unsigned char c;
      switch (Pick(6)) {
        case 0:  // any byte
          c = static_cast<unsigned char>(1 + Pick(255));
          break;
        case 1: {  // the characters that break URLs and shells
          static const char kSpecial[] = " .%?#+&;,'\"<>\\:=@$!*()[]{}|~`^\t\r";
          c = static_cast<unsigned char>(kSpecial[Pick(sizeof(kSpecial) - 1)]);
          break;
        }
        default: {
          static const char kPlain[] =
              "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-";
          c = static_cast<unsigned char>(kPlain[Pick(sizeof(kPlain) - 1)]);
        }
      }
      if (c == '/' || c == '\n' || c == 0 || (dir && c == '?')) continue;
      return static_cast<char>(c);
    }
  }
  std::string Draw(bool dir) {
    std::string n;
    size_t len = dir ? std::min<size_t>(Length(), 200) : Length();
    // A UTF-8 name now and then (2-byte é, 4-byte emoji), cut to fit.
    if (Pick(6) == 0) {
      while (n.size() + 4 <= len) n += Pick(2) ? "\xc3\xa9" : "\xf0\x9f\x90\xa6";
    }
    while (n.size() < len) n += Byte(dir);
    switch (Pick(8)) {  // edges: leading/trailing spaces and dots
      case 0:
        n[0] = ' ';
        break;
      case 1:
        n[n.size() - 1] = ' ';
        break;
      case 2:
        n[0] = '.';
        break;
      case 3:
        n[n.size() - 1] = '.';
        break;
      default:
        break;
    }
    return n;
  }
  size_t Pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

  std::mt19937_64 rng_;
};

std::string Bytes(std::mt19937_64& rng, uint64_t size) {
  std::string out(size, '\0');
  for (uint64_t i = 0; i < size; ++i) out[i] = static_cast<char>(rng() & 0xff);
  return out;
}

// Names in `dir` by readdir(3), what every tool sees, sorted; false and
// `err` if opendir or readdir failed.
bool List(const fs::path& dir, std::vector<std::string>* out, std::string* err) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) {
    *err = std::string("opendir: ") + std::strerror(errno);
    return false;
  }
  errno = 0;
  while (struct dirent* e = ::readdir(d)) {
    std::string n = e->d_name;
    if (n != "." && n != "..") out->push_back(n);
  }
  int e = errno;
  ::closedir(d);
  if (e != 0) {
    *err = std::string("readdir: ") + std::strerror(e);
    return false;
  }
  std::sort(out->begin(), out->end());
  return true;
}

// The whole file; false and `err` (strerror of the failing call) if not.
bool Read(const fs::path& p, std::string* out, std::string* err) {
  int fd = ::open(p.c_str(), O_RDONLY);
  if (fd < 0) {
    *err = std::strerror(errno);
    return false;
  }
  char buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      *err = std::strerror(errno);
      ::close(fd);
      return false;
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return true;
}

}  // namespace

bool XrootdCanRead(const std::string& rel) { return rel.find('?') == std::string::npos; }

void WriteHostileTree(const fs::path& root, const HostileTreeOptions& o) {
  std::mt19937_64 rng(o.seed);
  NameMaker names(o.seed * 7919 + 1);
  fs::create_directories(root);
  // A few directories with odd names, one level down and two.
  std::vector<fs::path> dirs = {root};
  std::set<std::string> top;
  for (int i = 0; i < 4; ++i) {
    fs::path d = root / names.Make(&top, true);
    fs::create_directories(d);
    dirs.push_back(d);
    std::set<std::string> inner;
    fs::path dd = d / names.Make(&inner, true);
    fs::create_directories(dd);
    dirs.push_back(dd);
  }
  std::map<fs::path, std::set<std::string>> taken;
  for (const fs::path& d : dirs) {
    for (const auto& e : fs::directory_iterator(d)) taken[d].insert(e.path().filename().string());
  }
  const uint64_t b = o.block_size;
  const std::vector<uint64_t> sizes = {0, 1, b - 1, b, b + 1, 3 * b + 7, 100, 4096};
  for (size_t i = 0; i < o.files; ++i) {
    fs::path d = dirs[i % dirs.size()];
    uint64_t size = i < sizes.size() ? sizes[i] : sizes[rng() % sizes.size()] % (2 * b + 3);
    WriteLocalFile(d / names.Make(&taken[d], false), Bytes(rng, size));
  }
  // A path near PATH_MAX: directories of 200-byte names.
  fs::path deep = root / "deep";
  size_t len = std::string("deep").size();
  while (len + 1 + 200 + 1 + 40 < o.path_max) {
    deep /= std::string(200, static_cast<char>('a' + len % 26));
    len += 201;
  }
  WriteLocalFile(deep / "end-of-a-long-path.bin", Bytes(rng, 3 * b + 1));
  // One flat directory, like ImageNet's validation set.
  fs::path big = root / "big";
  fs::create_directories(big);
  for (size_t i = 0; i < o.big_dir_entries; ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "ILSVRC2012_val_%08zu.JPEG", i + 1);
    int fd = ::open((big / name).c_str(), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd >= 0) ::close(fd);
  }
  MakeReadableByXrootd(root);
}

std::vector<std::string> CompareTrees(const fs::path& export_root, const fs::path& mount,
                                      size_t max_differences) {
  std::vector<std::string> diffs;
  auto differ = [&](const std::string& rel, const std::string& what) {
    if (diffs.size() < max_differences) diffs.push_back("'" + ShowName(rel) + "': " + what);
  };
  std::vector<std::string> stack = {""};
  while (!stack.empty() && diffs.size() < max_differences) {
    std::string rel = stack.back();
    stack.pop_back();
    std::vector<std::string> want, got;
    std::string err;
    if (!List(export_root / rel, &want, &err)) {
      differ(rel, "the export: " + err);
      continue;
    }
    if (!List(mount / rel, &got, &err)) {
      differ(rel, "the mount: " + err);
      continue;
    }
    std::set<std::string> listed(got.begin(), got.end());
    for (const std::string& name : want) {
      const std::string child = rel.empty() ? name : rel + "/" + name;
      struct stat a {
      }, m{};
      ::lstat((export_root / child).c_str(), &a);
      const bool cut = name.size() == kMaxName;  // XRootD lists it cut to 254 bytes
      if (!listed.count(name) && !cut) differ(child, "not listed");
      listed.erase(name);
      if (cut && !XrootdCanRead(name)) continue;  // neither listed nor served by XRootD
      if (::stat((mount / child).c_str(), &m) != 0) {
        differ(child, std::string("stat: ") + std::strerror(errno));
        continue;
      }
      if (S_ISDIR(a.st_mode) != S_ISDIR(m.st_mode)) {
        differ(child, "a directory on one side only");
        continue;
      }
      if (S_ISDIR(a.st_mode)) {
        stack.push_back(child);
        continue;
      }
      if (a.st_size != m.st_size) {
        differ(child, "size " + std::to_string(m.st_size) + ", not " + std::to_string(a.st_size));
      }
      std::string bytes, original;
      bool read = Read(mount / child, &bytes, &err);
      if (!read && !XrootdCanRead(child)) {
        // XRootD reads most names with '?' as something else: EIO, never
        // another file's bytes.
        if (err != std::strerror(EIO)) differ(child, "a name with '?' must give EIO, not " + err);
        continue;
      }
      if (!read) {
        differ(child, "read: " + err);
      } else if (!Read(export_root / child, &original, &err) || bytes != original) {
        differ(child, "bytes differ");
      }
    }
    for (const std::string& extra : listed) {
      // XRootD's cut of a 255-byte name with '?', which no request can check.
      bool phantom = extra.size() == kMaxName - 1 && !XrootdCanRead(extra) &&
                     std::any_of(want.begin(), want.end(), [&](const std::string& w) {
                       return w.size() == kMaxName && w.compare(0, extra.size(), extra) == 0;
                     });
      if (!phantom) differ(rel.empty() ? extra : rel + "/" + extra, "listed, not in the export");
    }
  }
  return diffs;
}

std::vector<std::string> FilesBelow(const fs::path& root) {
  std::vector<std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    if (e.is_regular_file()) out.push_back(fs::relative(e.path(), root).string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace perch::testing
