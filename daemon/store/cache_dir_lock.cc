#include "daemon/store/cache_dir_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace perch::store {

namespace {

std::string Uid(uid_t uid) { return "uid " + std::to_string(uid); }

// Whether no user but perchd's and root can replace `dir`'s entries: owned
// by one of them, and writable by group or others only with the sticky bit.
core::Status Safe(const std::filesystem::path& dir, const struct stat& st, const char* what) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return core::PermissionDeniedError(std::string(what) + " " + dir.string() + " is owned by " +
                                           Uid(st.st_uid) + ", not by perchd's user (" + Uid(me) +
                                           ") or root",
                                       core::FailureSite::kLocal);
  }
  // A link's own mode means nothing: who may replace it is its directory's
  // business, checked as the next one up.
  if (!S_ISLNK(st.st_mode) && (st.st_mode & (S_IWGRP | S_IWOTH)) != 0 &&
      (st.st_mode & S_ISVTX) == 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return core::PermissionDeniedError(std::string(what) + " " + dir.string() +
                                           " is writable by other users (mode " + mode +
                                           ", no sticky bit): they could replace it",
                                       core::FailureSite::kLocal);
  }
  return core::Status();
}

core::Status Refused(const std::string& root, const core::Status& why) {
  return core::PermissionDeniedError("refusing cache directory " + root + ": " + why.message() +
                                         "; give perchd a directory of its own (docs/security.md)",
                                     core::FailureSite::kLocal);
}

}  // namespace

core::Result<CacheDirLock> CacheDirLock::Acquire(const std::string& root) {
  std::error_code ec;
  if (!std::filesystem::exists(root, ec)) {
    std::filesystem::create_directories(root, ec);
    if (ec)
      return core::InternalError("cannot create cache directory " + root + ": " + ec.message());
  }
  // The directory as it resolves now. Every directory above it must be one
  // that no other user can replace (so that the name keeps resolving to the
  // directory checked here), and the directory itself perchd's own: a user
  // who made it, or could swap it, could point what perchd writes as root
  // anywhere (a `lock` linked to /etc/shadow).
  // Both the name as given (its links may be replaced by who can write
  // where they are) and where it leads are checked.
  std::filesystem::path real = std::filesystem::canonical(root, ec);
  if (ec)
    return core::InternalError("cannot resolve cache directory " + root + ": " + ec.message());
  std::filesystem::path given = std::filesystem::absolute(root, ec).lexically_normal();
  if (ec) given = real;
  if (struct stat st{}; ::lstat(given.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    if (core::Status s = Safe(given, st, "the link"); !s.ok()) return Refused(root, s);
  }
  for (const std::filesystem::path& chain : {given, real}) {
    for (std::filesystem::path up = chain.parent_path(); !up.empty(); up = up.parent_path()) {
      struct stat st {};
      if (::lstat(up.c_str(), &st) != 0)
        return core::InternalError("cannot stat " + up.string() + ": " + std::strerror(errno));
      if (core::Status s = Safe(up, st, "the directory above it,"); !s.ok())
        return Refused(root, s);
      if (up == up.root_path()) break;
    }
  }
  int dir = ::open(real.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0)
    return core::InternalError("cannot open " + real.string() + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(dir, &st) != 0 || st.st_uid != ::geteuid()) {
    uid_t owner = st.st_uid;
    ::close(dir);
    return Refused(
        root, core::PermissionDeniedError("it is owned by " + Uid(owner) +
                                          ", not by perchd's user (" + Uid(::geteuid()) + ")"));
  }
  // Private to the daemon, also when an older perchd or an admin made it
  // with a wider mode: nobody else may list or read what is cached.
  if (::fchmod(dir, S_IRWXU) != 0) {
    int err = errno;
    ::close(dir);
    return core::InternalError("cannot make cache directory " + root +
                               " private: " + std::strerror(err));
  }
  const std::string path = root + "/lock";
  int fd = ::openat(dir, "lock", O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  int err = errno;
  ::close(dir);
  if (fd < 0) {
    if (err == ELOOP) {
      return Refused(root, core::PermissionDeniedError("its lock file is a symbolic link"));
    }
    return core::InternalError("cannot open " + path + ": " + std::strerror(err));
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    return Refused(root,
                   core::PermissionDeniedError("its lock file is not a file of perchd's user"));
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    err = errno;
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
