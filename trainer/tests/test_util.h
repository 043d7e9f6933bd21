// Helpers shared by the trainer's tests: a temporary directory removed in its destructor (so
// also when a test fails), running a command and capturing its output, a Python with
// torchvision, and small synthetic image trees.
#ifndef PERCH_TRAINER_TESTS_TEST_UTIL_H_
#define PERCH_TRAINER_TESTS_TEST_UTIL_H_

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

#include "trainer/synth.h"

namespace perch::trainer::testing {

class TempDir {
 public:
  explicit TempDir(const std::string& tag) {
    std::string t =
        (std::filesystem::temp_directory_path() / ("perch-trainer-" + tag + "-XXXXXX")).string();
    if (mkdtemp(t.data()) == nullptr) {
      std::abort();
    }
    path_ = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// Runs `command` through /bin/sh; returns its exit status and stdout.
inline int RunCommand(const std::string& command, std::string* out) {
  out->clear();
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) {
    return -1;
  }
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) {
    out->append(buf, n);
  }
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Debian's python3-torchvision installs for /usr/bin/python3 (not for a pyenv python3 that may
// come first on PATH).
inline constexpr char kPython[] = "/usr/bin/python3";

inline bool PythonHasTorchvision() {
  std::string out;
  return RunCommand(std::string(kPython) + " -c 'import torch, torchvision' 2>/dev/null", &out) ==
         0;
}

inline void WriteFile(const std::filesystem::path& p, const std::string& bytes) {
  std::filesystem::create_directories(p.parent_path());
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

inline std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A small synthetic tree: dir/train/<class>/..., dir/val/<class>/...
inline void MakeSmallTree(const std::filesystem::path& dir, int classes, int per_class,
                          int val_per_class, int min_side = 64, int max_side = 96) {
  SynthOptions o;
  o.out = dir.string();
  o.classes = classes;
  o.per_class = per_class;
  o.val_per_class = val_per_class;
  o.min_side = min_side;
  o.max_side = max_side;
  o.threads = 2;
  SynthesizeTree(o);
}

}  // namespace perch::trainer::testing

#endif  // PERCH_TRAINER_TESTS_TEST_UTIL_H_
