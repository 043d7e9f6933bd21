#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>

#include "trainer/synth.h"

namespace perch::trainer {

namespace fs = std::filesystem;

namespace {

struct ArchiveWriter {
  archive* a = archive_write_new();
  ~ArchiveWriter() { archive_write_free(a); }
  void Check(int r, const std::string& what) const {
    if (r != ARCHIVE_OK) {
      const char* e = archive_error_string(a);
      throw std::runtime_error(what + ": " + (e ? e : "libarchive error"));
    }
  }
  void Add(const std::string& name, const std::string& bytes) const {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, name.c_str());
    archive_entry_set_size(e, static_cast<la_int64_t>(bytes.size()));
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    const int r = archive_write_header(a, e);
    archive_entry_free(e);
    Check(r, "tar header for " + name);
    if (archive_write_data(a, bytes.data(), bytes.size()) !=
        static_cast<la_ssize_t>(bytes.size())) {
      Check(ARCHIVE_FATAL, "tar data of " + name);
    }
  }
};

std::string ReadAll(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

}  // namespace

std::string ShardName(int shard, int shards) {
  const int width = std::max<int>(6, static_cast<int>(std::to_string(shards - 1).size()));
  std::string n = std::to_string(shard);
  return "train-" +
         std::string(static_cast<size_t>(width) - std::min<size_t>(n.size(), width), '0') + n +
         ".tar";
}

int64_t WriteTrainShards(const SynthOptions& o, int shards) {
  if (shards < 1) {
    throw std::invalid_argument("synth: --shards must be >= 1");
  }
  // The tree's training files, dealt to the shards in a seeded random order (WebDataset shards
  // are written shuffled, so that every shard holds every class).
  std::vector<std::pair<fs::path, int>> files;
  for (int c = 0; c < o.classes; ++c) {
    for (int i = 0; i < o.per_class; ++i) {
      files.emplace_back(fs::path(o.out) / "train" / SynsetName(c) /
                             (SynsetName(c) + "_" + std::to_string(i) + ".JPEG"),
                         c);
    }
  }
  std::mt19937_64 rng(o.seed);
  std::shuffle(files.begin(), files.end(), rng);
  const fs::path dir = fs::path(o.out) / "shards";
  fs::create_directories(dir);
  int64_t bytes = 0;
  for (int s = 0; s < shards; ++s) {
    const size_t begin = files.size() * static_cast<size_t>(s) / static_cast<size_t>(shards);
    const size_t end = files.size() * static_cast<size_t>(s + 1) / static_cast<size_t>(shards);
    const fs::path path = dir / ShardName(s, shards);
    const fs::path tmp = path.string() + ".tmp";
    {
      ArchiveWriter w;
      w.Check(archive_write_set_format_pax_restricted(w.a), "tar format");
      w.Check(archive_write_open_filename(w.a, tmp.c_str()), tmp.string());
      for (size_t i = begin; i < end; ++i) {
        const std::string key = files[i].first.stem().string();
        const std::string jpeg = ReadAll(files[i].first);
        if (jpeg.empty()) {
          throw std::runtime_error("cannot read " + files[i].first.string());
        }
        w.Add(key + ".jpg", jpeg);
        w.Add(key + ".cls", std::to_string(files[i].second));
      }
      w.Check(archive_write_close(w.a), tmp.string());
    }
    fs::rename(tmp, path);
    bytes += static_cast<int64_t>(fs::file_size(path));
  }
  return bytes;
}

}  // namespace perch::trainer
