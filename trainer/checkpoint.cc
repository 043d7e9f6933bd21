#include "trainer/checkpoint.h"

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <fcntl.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace perch::trainer {

namespace fs = std::filesystem;

namespace {

constexpr char kFormat[] = "perch-train-checkpoint/1";

[[noreturn]] void ThrowErrno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

void FsyncDir(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    ThrowErrno("open " + dir);
  }
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) {
    ThrowErrno("fsync " + dir);
  }
}

c10::Dict<std::string, at::Tensor> ToDict(const TensorMap& tensors) {
  c10::Dict<std::string, at::Tensor> d;
  for (const auto& [name, t] : tensors) {
    d.insert(name, t.detach().to(at::kCPU).contiguous());
  }
  return d;
}

// One read of the whole file (checkpoints are ~100-200 MB; byte-wise stream iteration is
// slow, very slow in sanitizer builds).
std::vector<char> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    throw std::runtime_error("cannot open " + path);
  }
  const std::streamsize size = in.tellg();
  std::vector<char> bytes(static_cast<size_t>(std::max<std::streamsize>(size, 0)));
  in.seekg(0);
  if (!in.read(bytes.data(), size)) {
    throw std::runtime_error("cannot read " + path);
  }
  return bytes;
}

TensorMap FromDict(const c10::IValue& v) {
  TensorMap out;
  for (const auto& entry : v.toGenericDict()) {
    out.emplace_back(entry.key().toStringRef(), entry.value().toTensor());
  }
  return out;
}

void LoadFrom(const std::string& path, Checkpoint* ckpt) {
  c10::IValue root = torch::pickle_load(ReadAll(path));
  c10::impl::GenericDict d = root.toGenericDict();
  if (!d.contains("format") || d.at("format").toStringRef() != kFormat) {
    throw std::runtime_error(path + " is not a perch-train checkpoint");
  }
  ckpt->model = FromDict(d.at("model"));
  ckpt->momentum.clear();
  for (auto& [name, t] : FromDict(d.at("momentum"))) {
    ckpt->momentum[name] = t;
  }
  ckpt->epoch = d.at("epoch").toInt();
  ckpt->position = d.at("position").toInt();
  ckpt->step = d.at("step").toInt();
  ckpt->images_seen = d.at("images_seen").toInt();
  ckpt->finished = d.at("finished").toBool();
  ckpt->config = d.at("config").toStringRef();
  ckpt->stats = d.at("stats").toStringRef();
  ckpt->rng_cpu = d.at("rng_cpu").toTensor();
}

}  // namespace

void WriteFileAtomically(const std::string& path, const std::vector<char>& bytes) {
  const std::string tmp = path + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    ThrowErrno("create " + tmp);
  }
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) {
        continue;
      }
      int e = errno;
      close(fd);
      errno = e;
      ThrowErrno("write " + tmp);
    }
    done += static_cast<size_t>(w);
  }
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    ThrowErrno("fsync " + tmp);
  }
  if (close(fd) != 0) {
    ThrowErrno("close " + tmp);
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    ThrowErrno("rename " + tmp);
  }
  FsyncDir(fs::path(path).parent_path().empty() ? "." : fs::path(path).parent_path().string());
}

void SaveCheckpoint(const std::string& dir, const Checkpoint& ckpt) {
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format", std::string(kFormat));
  d.insert("model", ToDict(ckpt.model));
  TensorMap momentum(ckpt.momentum.begin(), ckpt.momentum.end());
  d.insert("momentum", ToDict(momentum));
  d.insert("epoch", ckpt.epoch);
  d.insert("position", ckpt.position);
  d.insert("step", ckpt.step);
  d.insert("images_seen", ckpt.images_seen);
  d.insert("finished", ckpt.finished);
  d.insert("config", ckpt.config);
  d.insert("stats", ckpt.stats);
  d.insert("rng_cpu", ckpt.rng_cpu.defined() ? ckpt.rng_cpu : at::empty({0}, at::kByte));
  std::vector<char> bytes = torch::pickle_save(c10::IValue(d));

  const fs::path current = fs::path(dir) / kCheckpointFile;
  const fs::path previous = fs::path(dir) / kPreviousCheckpointFile;
  // Keep the last good checkpoint until the new one is durable under its final name.
  const fs::path staged = fs::path(dir) / "checkpoint.next.pt";
  WriteFileAtomically(staged.string(), bytes);
  if (fs::exists(current) && rename(current.c_str(), previous.c_str()) != 0) {
    ThrowErrno("rename " + current.string());
  }
  if (rename(staged.c_str(), current.c_str()) != 0) {
    ThrowErrno("rename " + staged.string());
  }
  FsyncDir(dir);
}

bool LoadCheckpoint(const std::string& dir, Checkpoint* ckpt, std::string* error) {
  error->clear();
  // checkpoint.next.pt is durable but may not have been renamed yet when the process died
  // between the two renames; it is the newest then.
  for (const char* name : {kCheckpointFile, "checkpoint.next.pt", kPreviousCheckpointFile}) {
    const fs::path path = fs::path(dir) / name;
    if (!fs::exists(path)) {
      continue;
    }
    try {
      LoadFrom(path.string(), ckpt);
      return true;
    } catch (const std::exception& e) {
      *error += path.string() + ": " + e.what() + "; ";
    }
  }
  return false;
}

void SaveStateDict(const std::string& path, const TensorMap& tensors) {
  WriteFileAtomically(path, torch::pickle_save(c10::IValue(ToDict(tensors))));
}

TensorMap LoadStateDict(const std::string& path) {
  return FromDict(torch::pickle_load(ReadAll(path)));
}

}  // namespace perch::trainer
