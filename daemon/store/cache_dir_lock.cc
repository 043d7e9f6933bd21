#include "daemon/store/cache_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace perch::store {

core::Result<CacheDirLock> CacheDirLock::Acquire(const std::string& root) {
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) {
    std::filesystem::create_directories(root, ec);
    if (ec)
      return core::InternalError("cannot create cache directory " + root + ": " + ec.message());
  }
  // Private to the daemon, also when an older perchd or an admin made it
  // with a wider mode: nobody else may list or read what is cached.
  std::filesystem::permissions(root, std::filesystem::perms::owner_all, ec);
  if (ec)
    return core::InternalError("cannot make cache directory " + root + " private: " + ec.message());
  const std::string path = root + "/lock";
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return core::InternalError("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int err = errno;
    char buf[32] = {0};
    ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
    ::close(fd);
    if (err == EWOULDBLOCK) {
      std::string pid = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "unknown";
      while (!pid.empty() && (pid.back() == '\n' || pid.back() == ' ')) pid.pop_back();
      return core::UnavailableError(
          "cache directory " + root + " is already used by another perchd (pid " + pid + ")",
          core::FailureSite::kLocal);
    }
    return core::InternalError("cannot lock " + path + ": " + std::strerror(err));
  }
  std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    // The lock holds; only the diagnostic pid is missing.
  }
  return CacheDirLock(fd);
}

CacheDirLock& CacheDirLock::operator=(CacheDirLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
  }
  return *this;
}

CacheDirLock::~CacheDirLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace perch::store
