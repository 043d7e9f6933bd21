#include "transfer/local_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>

namespace perch::transfer {
namespace {

namespace fs = std::filesystem;
using core::Result;
using core::Status;

// The temporary file being written, for the signal handlers: a plain buffer
// (unlink is async-signal-safe; std::string is not). The plugin writes one
// file at a time.
char g_cleanup_path[PATH_MAX];
volatile sig_atomic_t g_cleanup_armed = 0;

void Arm(const std::string& path) {
  if (path.size() >= sizeof(g_cleanup_path)) return;
  g_cleanup_armed = 0;
  std::memcpy(g_cleanup_path, path.c_str(), path.size() + 1);
  g_cleanup_armed = 1;
}

void Disarm() { g_cleanup_armed = 0; }

extern "C" void CleanupAndDie(int sig) {
  if (g_cleanup_armed) unlink(g_cleanup_path);
  signal(sig, SIG_DFL);
  raise(sig);
}

Status LocalError(const std::string& what, int err) {
  std::string msg = what + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) {
    return Status(core::StatusCode::kNoSpace, msg, core::FailureSite::kLocal);
  }
  if (err == EACCES || err == EPERM || err == EROFS) {
    return core::PermissionDeniedError(msg, core::FailureSite::kLocal);
  }
  if (err == ENOENT || err == ENOTDIR) return core::NotFoundError(msg, core::FailureSite::kLocal);
  return core::InternalError(msg);
}

}  // namespace

Result<std::string> ResolveDestination(const std::string& local_name,
                                       const core::ObjectPath& object) {
  if (local_name.empty()) return core::InvalidArgumentError("LocalFileName is empty");
  std::error_code ec;
  if (!fs::is_directory(local_name, ec)) return local_name;
  if (object.IsRoot()) {
    return core::InvalidArgumentError("LocalFileName " + local_name +
                                      " is a directory and the URL names no file");
  }
  std::string dir = local_name;
  if (dir.back() != '/') dir += '/';
  return dir + std::string(object.Name());
}

Result<TempFile> TempFile::CreateFor(const std::string& destination) {
  fs::path dest(destination);
  fs::path dir = dest.parent_path();
  if (dir.empty()) dir = ".";
  std::string name = dest.filename().string();
  if (name.empty())
    return core::InvalidArgumentError("destination " + destination + " has no name");
  // Room for ".perch-XXXXXX" within NAME_MAX.
  std::string tmpl = (dir / ("." + name.substr(0, 200) + ".perch-XXXXXX")).string();
  int fd = mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd < 0) {
    return LocalError("cannot create a temporary file in " + dir.string(), errno);
  }
  Arm(tmpl);
  return TempFile(fd, tmpl, destination);
}

TempFile::TempFile(int fd, std::string path, std::string destination)
    : fd_(fd), path_(std::move(path)), destination_(std::move(destination)) {}

TempFile::TempFile(TempFile&& other) noexcept
    : fd_(other.fd_),
      path_(std::move(other.path_)),
      destination_(std::move(other.destination_)),
      committed_(other.committed_) {
  other.fd_ = -1;
  other.committed_ = true;  // the moved-from object owns nothing
}

TempFile::~TempFile() {
  if (fd_ >= 0) close(fd_);
  if (!committed_) {
    unlink(path_.c_str());
    Disarm();
  }
}

Status TempFile::WriteAt(uint64_t offset, std::string_view data) const {
  while (!data.empty()) {
    ssize_t n = pwrite(fd_, data.data(), data.size(), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return LocalError("cannot write " + path_, n < 0 ? errno : ENOSPC);
    data.remove_prefix(static_cast<size_t>(n));
    offset += static_cast<uint64_t>(n);
  }
  return Status::Ok();
}

Status TempFile::Reset() const {
  if (ftruncate(fd_, 0) != 0) return LocalError("cannot truncate " + path_, errno);
  return Status::Ok();
}

Status TempFile::Commit() {
  mode_t mask = umask(0);
  umask(mask);
  if (fchmod(fd_, 0666 & ~mask) != 0) return LocalError("cannot chmod " + path_, errno);
  if (close(fd_) != 0) {
    fd_ = -1;
    return LocalError("cannot write " + path_, errno);
  }
  fd_ = -1;
  if (rename(path_.c_str(), destination_.c_str()) != 0) {
    return LocalError("cannot rename " + path_ + " to " + destination_, errno);
  }
  committed_ = true;
  Disarm();
  return Status::Ok();
}

void InstallCleanupOnSignals() {
  struct sigaction sa {};
  sa.sa_handler = CleanupAndDie;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
}

}  // namespace perch::transfer
