#include "trainer/image_folder.h"

#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace perch::trainer {

namespace {

// os.path.join(a, b) for a relative b.
std::string Join(const std::string& a, const std::string& b) {
  if (a.empty() || a.back() == '/') {
    return a + b;
  }
  return a + "/" + b;
}

// stat() follows symlinks, as os.scandir's is_dir() and os.walk(followlinks=True) do.
bool IsDir(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

struct Entry {
  std::string name;
  bool is_dir;
};

// The entries of `dir` (without . and ..) and whether each is a directory, following symlinks as
// os.scandir's is_dir() does: the type readdir reports is trusted, and only symlinks and entries
// of unknown type cost a stat(). On ImageNet through a FUSE mount that saves 1.28 million
// round trips. Unreadable directories yield nothing, as os.walk's default onerror=None skips
// them.
std::vector<Entry> ListDir(const std::string& dir) {
  std::vector<Entry> entries;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) {
    return entries;
  }
  while (struct dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") {
      continue;
    }
    bool is_dir = e->d_type == DT_DIR;
    if (e->d_type == DT_LNK || e->d_type == DT_UNKNOWN) {
      is_dir = IsDir(Join(dir, name));
    }
    entries.push_back(Entry{std::move(name), is_dir});
  }
  closedir(d);
  return entries;
}

// os.walk(top, followlinks=True) yields (dirpath, dirnames, filenames); ImageFolder sorts those
// tuples, i.e. by dirpath. Collect every directory below `top` with its non-directory entries.
// os.walk lists a symlink to a directory among dirnames and follows it; a symlink cycle would
// make os.walk loop forever, here it is cut at a depth of 64.
void Walk(const std::string& top, int depth,
          std::vector<std::pair<std::string, std::vector<std::string>>>* out) {
  std::vector<std::string> files;
  std::vector<std::string> subdirs;
  for (Entry& e : ListDir(top)) {
    if (e.is_dir) {
      subdirs.push_back(std::move(e.name));
    } else {
      files.push_back(std::move(e.name));
    }
  }
  out->emplace_back(top, std::move(files));
  if (depth >= 64) {
    return;
  }
  for (const std::string& sub : subdirs) {
    Walk(Join(top, sub), depth + 1, out);
  }
}

}  // namespace

bool ImageFolder::HasImageExtension(const std::string& filename) {
  static const char* const kExtensions[] = {".jpg", ".jpeg", ".png",  ".ppm", ".bmp",
                                            ".pgm", ".tif",  ".tiff", ".webp"};
  std::string lower = filename;
  // str.lower() on ASCII; non-ASCII letters never matter for these suffixes.
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* ext : kExtensions) {
    std::string e = ext;
    if (lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0) {
      return true;
    }
  }
  return false;
}

ImageFolder::ImageFolder(const std::string& root) : root_(root) {
  if (!IsDir(root_)) {
    throw std::runtime_error("not a directory: " + root_);
  }
  // std::string compares bytes; for UTF-8 names that is Python's code-point order.
  for (Entry& e : ListDir(root_)) {
    if (e.is_dir) {
      classes_.push_back(std::move(e.name));
    }
  }
  std::sort(classes_.begin(), classes_.end());
  if (classes_.empty()) {
    throw std::runtime_error("couldn't find any class folder in " + root_);
  }
  std::vector<std::string> empty_classes;
  for (size_t label = 0; label < classes_.size(); ++label) {
    std::vector<std::pair<std::string, std::vector<std::string>>> dirs;
    Walk(Join(root_, classes_[label]), 0, &dirs);
    std::sort(dirs.begin(), dirs.end());
    size_t before = samples_.size();
    for (auto& [dir, files] : dirs) {
      std::sort(files.begin(), files.end());
      for (const std::string& f : files) {
        if (HasImageExtension(f)) {
          samples_.push_back(Sample{Join(dir, f), static_cast<int64_t>(label)});
        }
      }
    }
    if (samples_.size() == before) {
      empty_classes.push_back(classes_[label]);
    }
  }
  if (!empty_classes.empty()) {
    std::string msg = "found no valid file for the classes";
    for (const std::string& c : empty_classes) {
      msg += " " + c;
    }
    throw std::runtime_error(msg + " in " + root_);
  }
}

}  // namespace perch::trainer
