#include "fuse/mountpoint.h"

#include <dirent.h>
#include <mntent.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace perch::fuse {

namespace {

namespace fs = std::filesystem;

struct MountEntry {
  bool found = false;
  std::string fsname;  // "perch:pelican://..." for a perch mount
  std::string type;    // "fuse.perch" for a perch mount
};

// The topmost mount at `dir` (absolute, normalized), from the kernel's table;
// getmntent_r undoes its octal escapes (a space is "\040" there).
MountEntry MountAt(const std::string& dir) {
  MountEntry out;
  FILE* table = ::setmntent("/proc/self/mounts", "r");
  if (table == nullptr) return out;
  mntent m{};
  char buf[8192];
  while (::getmntent_r(table, &m, buf, sizeof(buf)) != nullptr) {
    if (dir == m.mnt_dir) {
      out = MountEntry{true, m.mnt_fsname, m.mnt_type};  // later ones are on top
    }
  }
  ::endmntent(table);
  return out;
}

// `p` made absolute with its directory resolved but not its last component:
// that is where the mount table names the mount, and a dead mount there
// cannot be resolved (every access gives ENOTCONN).
std::string MountTablePath(const std::string& p) {
  fs::path a = fs::absolute(p).lexically_normal();
  if (!a.has_filename()) a = a.parent_path();  // "/mnt/x/" -> "/mnt/x"
  if (a == a.root_path()) return a.string();
  std::error_code ec;
  fs::path dir = fs::weakly_canonical(a.parent_path(), ec);
  return ((ec ? a.parent_path() : dir) / a.filename()).string();
}

// Runs `fusermount3 -u -z dir` (what a user who is not root may do to a FUSE
// mount of their own); true if it succeeded.
bool FusermountLazy(const std::string& dir) {
  std::string prog = "fusermount3", u = "-u", z = "-z", d = dir;
  char* argv[] = {prog.data(), u.data(), z.data(), d.data(), nullptr};
  pid_t pid = 0;
  if (::posix_spawnp(&pid, prog.c_str(), nullptr, nullptr, argv, environ) != 0) return false;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Detaches the dead FUSE mount at `dir` (lazily: processes that still hold
// files there keep failing, new lookups see the directory below).
core::Status DetachDeadMount(const std::string& dir, const MountEntry& entry) {
  if (::umount2(dir.c_str(), MNT_DETACH) != 0) {
    int err = errno;
    if (err != EPERM || !FusermountLazy(dir)) {
      return core::InvalidArgumentError("mountpoint " + dir + " is a dead FUSE mount (" +
                                        entry.fsname +
                                        ") that cannot be unmounted: " + std::strerror(err) +
                                        "; run fusermount3 -u -z " + dir + " as root");
    }
  }
  spdlog::warn("mountpoint {} was a dead FUSE mount ({}, left by a daemon that died); unmounted it",
               dir, entry.fsname);
  return core::Status::Ok();
}

// The first entry of directory `dir` other than . and .. ("" if none).
std::string FirstEntry(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return "";
  std::string name;
  while (dirent* e = ::readdir(d)) {
    if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0) {
      name = e->d_name;
      break;
    }
  }
  ::closedir(d);
  return name;
}

}  // namespace

core::Status PrepareMountpoint(const std::string& mountpoint, bool allow_nonempty) {
  const std::string dir = MountTablePath(mountpoint);
  // statfs, not stat: the kernel answers stat of a FUSE mount's root from
  // cached attributes even when the daemon is dead, but always asks the
  // daemon for statfs (perchd answers it from memory). A crash may have left
  // dead mounts stacked at `dir`: one per crash.
  struct statfs sfs {};
  struct stat st {};
  for (int tries = 0; ::statfs(dir.c_str(), &sfs) != 0 || ::stat(dir.c_str(), &st) != 0; ++tries) {
    int err = errno;
    MountEntry entry = MountAt(dir);
    if (err != ENOTCONN || !entry.found || tries == 8) {
      std::string why = err == ENOENT ? "does not exist" : std::strerror(err);
      return core::InvalidArgumentError("mountpoint " + mountpoint + ": " + why);
    }
    if (core::Status s = DetachDeadMount(dir, entry); !s.ok()) return s;
  }
  if (!S_ISDIR(st.st_mode)) {
    return core::InvalidArgumentError("mountpoint " + mountpoint + " is not a directory");
  }
  if (MountEntry entry = MountAt(dir); entry.found && entry.type == "fuse.perch") {
    return core::UnavailableError(
        "mountpoint " + mountpoint + " is already a perch mount of " + entry.fsname +
            ", served by another perchd; stop that one first (or fusermount3 -u " + mountpoint +
            "), or start this one with the same cache directory to take it over",
        core::FailureSite::kLocal);
  }
  if (std::string name = FirstEntry(dir); !name.empty() && !allow_nonempty) {
    return core::InvalidArgumentError(
        "mountpoint " + mountpoint + " is not empty (it holds '" + name +
        "'), and the mount would hide what is there; choose an empty " +
        "directory or pass --allow-nonempty-mountpoint");
  }
  return core::Status::Ok();
}

}  // namespace perch::fuse
