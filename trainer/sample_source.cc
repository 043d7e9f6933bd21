#include "trainer/sample_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace perch::trainer {

bool ReadWholeFile(const std::string& path, SampleBytes* out, std::string* error) {
  std::vector<uint8_t>* buf = &out->data;
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *error = std::strerror(errno);
    return false;
  }
  struct stat st;
  size_t n = 0;
  if (fstat(fd, &st) == 0 && st.st_size > 0 && buf->size() < static_cast<size_t>(st.st_size) + 1) {
    buf->resize(static_cast<size_t>(st.st_size) + 1);
  }
  if (buf->size() < 4096) {
    buf->resize(4096);
  }
  while (true) {
    if (n == buf->size()) {
      buf->resize(buf->size() * 2);  // the file grew since fstat
    }
    ssize_t r = read(fd, buf->data() + n, buf->size() - n);
    if (r < 0) {
      if (errno == EINTR) {
        continue;
      }
      *error = std::strerror(errno);
      close(fd);
      return false;
    }
    if (r == 0) {
      break;
    }
    n += static_cast<size_t>(r);
  }
  close(fd);
  out->size = n;
  return true;
}

std::vector<int64_t> FolderSource::EpochOrder(int64_t epoch) const {
  std::vector<int64_t> order = sampler_->EpochOrder(epoch);
  for (int64_t index : order) {
    if (index < 0 || index >= static_cast<int64_t>(data_.size())) {
      throw std::out_of_range("loader: the sampler named sample " + std::to_string(index));
    }
  }
  return order;
}

void FolderSource::BeginEpoch(int64_t epoch, int64_t /*start*/) { order_ = EpochOrder(epoch); }

bool FolderSource::Read(int64_t position, SampleBytes* out, std::string* error) {
  const int64_t index = order_[static_cast<size_t>(position)];
  const Sample& sample = data_.samples()[static_cast<size_t>(index)];
  out->label = sample.label;
  out->key = static_cast<uint64_t>(index);
  out->name = sample.path;
  return ReadWholeFile(sample.path, out, error);
}

std::vector<std::string> FolderSource::HintPaths(int64_t epoch, int64_t start) const {
  const std::vector<int64_t> order = EpochOrder(epoch);
  std::vector<std::string> paths;
  for (size_t i = static_cast<size_t>(std::max<int64_t>(0, start)); i < order.size(); ++i) {
    paths.push_back(data_.samples()[static_cast<size_t>(order[i])].path);
  }
  return paths;
}

}  // namespace perch::trainer
