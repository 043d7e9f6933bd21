// perch-bench-read: reads a list of files with N threads in one process, the way a
// data loader's workers do (open, read to the end, close), and prints what it read.
// --list-dirs first lists every directory the files are in, as a dataset's scan does
// (torchvision's ImageFolder, perch-train's): on a FUSE mount with readdirplus the
// listing brings each name's attributes, and the opens then need no LOOKUP.
// The benchmarks use it next to `xargs cat`, whose fork and exec per batch of files
// cost more CPU than a local read of a 100 KB file (bench/cost.sh).
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace {

struct Totals {
  std::atomic<long long> files{0}, bytes{0}, errors{0};
};

// Reads one file to its end; false (and a message) on an error.
bool ReadOne(int dir, const std::string& path, char* buf, size_t size, Totals& t) {
  const int fd = ::openat(dir, path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    std::fprintf(stderr, "perch-bench-read: open %s: %s\n", path.c_str(), std::strerror(errno));
    return false;
  }
  long long n = 0;
  for (;;) {
    const ssize_t r = ::read(fd, buf, size);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR) continue;
      std::fprintf(stderr, "perch-bench-read: read %s: %s\n", path.c_str(), std::strerror(errno));
      ::close(fd);
      return false;
    }
    n += r;
  }
  ::close(fd);
  t.files += 1;
  t.bytes += n;
  return true;
}

// Lists `path` (relative to `dir`) to its end; false (and a message) on an error.
bool ListOne(int dir, const std::string& path) {
  const int fd = ::openat(dir, path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = fd < 0 ? nullptr : ::fdopendir(fd);
  if (d == nullptr) {
    std::fprintf(stderr, "perch-bench-read: list %s: %s\n", path.c_str(), std::strerror(errno));
    if (fd >= 0) ::close(fd);
    return false;
  }
  while (::readdir(d) != nullptr) {
  }
  ::closedir(d);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Reads every file named in LIST (one path a line) with several threads."};
  std::string list, base = ".";
  unsigned threads = 32;
  size_t buffer_kib = 128;
  app.add_option("list", list, "file with one path a line (relative to --dir)")->required();
  app.add_option("-C,--dir", base, "directory the paths are relative to");
  app.add_option("-j,--threads", threads, "reader threads")->check(CLI::Range(1u, 4096u));
  app.add_option("--buffer-kib", buffer_kib, "read() size in KiB")
      ->check(CLI::Range(size_t{4}, size_t{65536}));
  bool list_dirs = false;
  app.add_flag("--list-dirs", list_dirs,
               "list the files' directories first (as a dataset scan does), then read");
  CLI11_PARSE(app, argc, argv);

  std::ifstream in(list);
  if (!in) {
    std::fprintf(stderr, "perch-bench-read: cannot read %s\n", list.c_str());
    return 2;
  }
  std::vector<std::string> paths;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) paths.push_back(std::move(line));
  const int dir = ::open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) {
    std::fprintf(stderr, "perch-bench-read: open %s: %s\n", base.c_str(), std::strerror(errno));
    return 2;
  }

  Totals totals;
  if (list_dirs) {
    std::set<std::string> unique;
    for (const std::string& p : paths) {
      const size_t slash = p.rfind('/');
      unique.insert(slash == std::string::npos ? "." : p.substr(0, slash));
    }
    const std::vector<std::string> dirs(unique.begin(), unique.end());
    std::atomic<size_t> next_dir{0};
    std::vector<std::thread> listers;
    for (unsigned i = 0; i < threads; ++i)
      listers.emplace_back([&] {
        for (size_t k; (k = next_dir.fetch_add(1)) < dirs.size();)
          if (!ListOne(dir, dirs[k])) totals.errors += 1;
      });
    for (auto& l : listers) l.join();
  }
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;
  for (unsigned i = 0; i < threads; ++i)
    workers.emplace_back([&] {
      const size_t size = buffer_kib * 1024;
      auto buf = std::make_unique<char[]>(size);
      for (size_t k; (k = next.fetch_add(1)) < paths.size();)
        if (!ReadOne(dir, paths[k], buf.get(), size, totals)) totals.errors += 1;
    });
  for (auto& w : workers) w.join();
  ::close(dir);
  std::printf("%lld files %lld bytes %lld errors\n", totals.files.load(), totals.bytes.load(),
              totals.errors.load());
  return totals.errors == 0 ? 0 : 1;
}
