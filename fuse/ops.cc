// FuseServer::Ops (ops.h): the callback table, INIT, and the callbacks on
// names, attributes and extended attributes, statfs, and the refusals of a
// read-only mount (EROFS).
#define FUSE_USE_VERSION 312
#include "fuse/ops.h"

#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

#include "fuse/guard.h"
#include "fuse/inode_number.h"
#include "fuse/reply_error.h"

namespace perch::fuse {

using core::ObjectPath;
using core::Status;
using core::StatusCode;
using Op = core::OpMetrics::Op;

namespace {

// The longest name statfs promises (as every Linux filesystem's); a longer
// one is ENAMETOOLONG, not a question for the federation.
constexpr size_t kNameMax = 255;

// Write-shaped operations: a read-only filesystem.
void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void MkNod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) { fuse_reply_err(req, EROFS); }
void MkDir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { fuse_reply_err(req, EROFS); }
void Unlink(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void RmDir(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void SymLink(fuse_req_t req, const char*, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
  fuse_reply_err(req, EROFS);
}
void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t, struct fuse_file_info*) {
  fuse_reply_err(req, EROFS);
}
void SetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
  fuse_reply_err(req, EROFS);
}
void RemoveXattr(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }

}  // namespace

FuseServer* FuseServer::Ops::Self(fuse_req_t req) {
  return static_cast<FuseServer*>(fuse_req_userdata(req));
}

void FuseServer::Ops::ReplyStatus(fuse_req_t req, const char* op, const Status& s) {
  ReplyError(req, op, s, Self(req)->options_.metrics);
}

// Every callback, through the one guard (guard.h).
template <OpName kName, auto F>
constexpr auto kGuarded = &Guarded<kName, F, &FuseServer::Ops::Unexpected>::Call;

const struct fuse_lowlevel_ops& FuseServer::LowLevelOps() {
  static const struct fuse_lowlevel_ops kOps = [] {
    struct fuse_lowlevel_ops o {};
    o.init = kGuarded<"init", &Ops::Init>;
    o.lookup = kGuarded<"lookup", &Ops::Lookup>;
    o.forget = kGuarded<"forget", &Ops::Forget>;
    o.forget_multi = kGuarded<"forget_multi", &Ops::ForgetMulti>;
    o.getattr = kGuarded<"getattr", &Ops::GetAttr>;
    o.opendir = kGuarded<"opendir", &Ops::OpenDir>;
    o.readdir = kGuarded<"readdir", &Ops::ReadDir>;
    o.readdirplus = kGuarded<"readdirplus", &Ops::ReadDirPlus>;
    o.releasedir = kGuarded<"releasedir", &Ops::ReleaseDir>;
    o.open = kGuarded<"open", &Ops::Open>;
    o.read = kGuarded<"read", &Ops::Read>;
    o.release = kGuarded<"release", &Ops::Release>;
    o.statfs = kGuarded<"statfs", &Ops::StatFs>;
    o.getxattr = kGuarded<"getxattr", &Ops::GetXattr>;
    o.listxattr = kGuarded<"listxattr", &Ops::ListXattr>;
    o.setattr = kGuarded<"setattr", &SetAttr>;
    o.mknod = kGuarded<"mknod", &MkNod>;
    o.mkdir = kGuarded<"mkdir", &MkDir>;
    o.unlink = kGuarded<"unlink", &Unlink>;
    o.rmdir = kGuarded<"rmdir", &RmDir>;
    o.symlink = kGuarded<"symlink", &SymLink>;
    o.rename = kGuarded<"rename", &Rename>;
    o.link = kGuarded<"link", &Link>;
    o.create = kGuarded<"create", &Create>;
    o.write = kGuarded<"write", &Write>;
    o.setxattr = kGuarded<"setxattr", &SetXattr>;
    o.removexattr = kGuarded<"removexattr", &RemoveXattr>;
    return o;
  }();
  return kOps;
}

void FuseServer::Ops::Unexpected(const Thrown& t) noexcept {
  const char* what = "an exception that is not a std::exception";
  try {
    std::rethrow_exception(t.error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  try {
    spdlog::error("fuse {}: unexpected exception: {}", t.op, what);
  } catch (...) {  // the log may fail as the callback did (bad_alloc): answer anyway
  }
  if (t.req == nullptr) {
    // INIT: the session cannot be trusted to have started; end it, as an
    // unmount would, rather than serve half set up.
    fuse_session_exit(static_cast<FuseServer*>(t.userdata)->se_);
    return;
  }
  if (std::strcmp(t.op, "forget") == 0 || std::strcmp(t.op, "forget_multi") == 0) {
    fuse_reply_none(t.req);  // FORGET takes no answer
    return;
  }
  fuse_reply_err(t.req, EIO);
}

void FuseServer::Ops::Init(void* userdata, struct fuse_conn_info* conn) {
  auto* self = static_cast<FuseServer*>(userdata);
  conn->max_read = self->options_.max_io;  // must match the max_read mount option
  conn->max_readahead =
      static_cast<unsigned>(std::max<uint64_t>(self->options_.max_io, self->options_.read_ahead));
  conn->max_background = self->options_.max_background;
  conn->congestion_threshold = std::max(1u, self->options_.max_background * 3 / 4);
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_SPLICE_MOVE) conn->want |= FUSE_CAP_SPLICE_MOVE;
  if (conn->capable & FUSE_CAP_CACHE_SYMLINKS) conn->want |= FUSE_CAP_CACHE_SYMLINKS;
  // A file with a freshness lifetime: its pages go when a GETATTR after its
  // attr timeout shows another modification time (FuseServer::AttrTimeout).
  if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA) conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  // With no-open, an ENOSYS answer to the first open tells the kernel to
  // open every later file itself (no OPEN, no RELEASE, keep_cache implied);
  // reads then come with no handle and are served by path.
  // Passthrough is decided per open, so opens must be asked.
  const bool direct = self->options_.passthrough && self->passthrough_.offered();
  if (direct) self->passthrough_.Want();
  const bool no_open = self->options_.no_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT);
  self->policy_.Start(direct, no_open);
  spdlog::info("fuse: protocol {}.{}, max_read {} KiB, {}", conn->proto_major, conn->proto_minor,
               self->options_.max_io / 1024,
               direct                       ? "passthrough for complete cached objects"
               : self->options_.passthrough ? "no passthrough (the kernel offers none)"
                                            : "passthrough off");
}

void FuseServer::Ops::Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  FuseServer* self = Self(req);
  core::ScopedLatency timer(self->LatencyOf(Op::kLookup));
  if (std::strlen(name) > kNameMax) return (void)fuse_reply_err(req, ENAMETOOLONG);
  ObjectPath dir;
  if (!self->inodes_.PathOf(parent, &dir)) return (void)fuse_reply_err(req, ESTALE);
  auto attr = self->fs_.Lookup(dir, name);
  if (!attr.ok()) {
    if (attr.status().code() == StatusCode::kNotFound) {
      fuse_entry_param e{};
      e.ino = 0;  // a negative entry the kernel caches
      e.entry_timeout = self->options_.negative_timeout;
      return (void)fuse_reply_entry(req, &e);
    }
    return ReplyStatus(req, "lookup", attr.status());
  }
  ObjectPath child = *dir.Child(name);
  fuse_entry_param e{};
  e.ino = self->inodes_.Remember(child);
  e.attr_timeout = self->AttrTimeout(*attr);
  e.entry_timeout = self->EntryTimeout(*attr);
  self->FillStat(child, *attr, &e.attr);
  if (fuse_reply_entry(req, &e) != 0) self->inodes_.Forget(e.ino, 1);  // the kernel never got it
}

void FuseServer::Ops::Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Self(req)->inodes_.Forget(ino, nlookup);
  fuse_reply_none(req);
}

void FuseServer::Ops::ForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Self(req)->inodes_.Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void FuseServer::Ops::GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
  FuseServer* self = Self(req);
  core::ScopedLatency timer(self->LatencyOf(Op::kGetAttr));
  ObjectPath path;
  if (!self->inodes_.PathOf(ino, &path)) return (void)fuse_reply_err(req, ESTALE);
  auto attr = self->fs_.GetAttr(path);
  if (!attr.ok()) return ReplyStatus(req, "getattr", attr.status());
  struct stat st {};
  self->FillStat(path, *attr, &st);
  fuse_reply_attr(req, &st, self->AttrTimeout(*attr));
}

void FuseServer::Ops::StatFs(fuse_req_t req, fuse_ino_t) {
  FuseServer* self = Self(req);
  core::ScopedLatency timer(self->LatencyOf(Op::kStatFs));
  struct statvfs st {};
  st.f_bsize = 4096;
  st.f_frsize = 4096;
  st.f_namemax = kNameMax;
  if (self->options_.statfs) self->options_.statfs(&st);
  fuse_reply_statfs(req, &st);
}

// The path and attributes of `ino` for an xattr call; false with `*err` set.
bool FuseServer::Ops::XattrTarget(FuseServer* self, fuse_ino_t ino, ObjectPath* path,
                                  core::FileAttr* attr, int* err) {
  if (!self->inodes_.PathOf(ino, path)) {
    *err = ESTALE;
    return false;
  }
  auto a = self->fs_.GetAttr(*path);
  if (!a.ok()) {
    self->CountError(a.status());
    *err = ToErrno(a.status());
    return false;
  }
  *attr = *std::move(a);
  *err = 0;
  return true;
}

std::map<std::string, std::string> FuseServer::Ops::Xattrs(fuse_req_t req, fuse_ino_t ino,
                                                           int* err) {
  FuseServer* self = Self(req);
  core::ScopedLatency timer(self->LatencyOf(Op::kXattr));
  ObjectPath path;
  core::FileAttr attr;
  if (!XattrTarget(self, ino, &path, &attr, err)) return {};
  return self->options_.xattrs ? self->options_.xattrs(path, attr)
                               : std::map<std::string, std::string>{};
}

// The value of attribute `name` of `ino`, or an errno (ENODATA: none such).
std::string FuseServer::Ops::Xattr(fuse_req_t req, fuse_ino_t ino, const char* name, int* err) {
  FuseServer* self = Self(req);
  if (!self->options_.xattr) {
    auto all = Xattrs(req, ino, err);
    if (*err) return "";
    auto it = all.find(name);
    if (it == all.end()) *err = ENODATA;
    return it == all.end() ? "" : it->second;
  }
  core::ScopedLatency timer(self->LatencyOf(Op::kXattr));
  ObjectPath path;
  core::FileAttr attr;
  if (!XattrTarget(self, ino, &path, &attr, err)) return "";
  auto value = self->options_.xattr(path, attr, name);
  if (value.ok()) return *std::move(value);
  if (value.status().code() == core::StatusCode::kNotFound) {
    *err = ENODATA;
  } else {
    self->CountError(value.status());
    *err = ToErrno(value.status());
  }
  return "";
}

void FuseServer::Ops::GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  int err = 0;
  std::string value = Xattr(req, ino, name, &err);
  if (err) return (void)fuse_reply_err(req, err);
  if (size == 0) return (void)fuse_reply_xattr(req, value.size());
  if (size < value.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, value.data(), value.size());
}

void FuseServer::Ops::ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  int err = 0;
  auto all = Xattrs(req, ino, &err);
  if (err) return (void)fuse_reply_err(req, err);
  std::string names;
  for (const auto& [k, v] : all) names.append(k).push_back('\0');
  if (size == 0) return (void)fuse_reply_xattr(req, names.size());
  if (size < names.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, names.data(), names.size());
}

double FuseServer::AttrTimeout(const core::FileAttr& a) const {
  if (a.is_dir || a.max_age < 0) return options_.attr_timeout;
  return std::min(options_.attr_timeout, static_cast<double>(a.max_age));
}

double FuseServer::EntryTimeout(const core::FileAttr& a) const {
  if (a.is_dir || a.max_age < 0) return options_.entry_timeout;
  return std::min(options_.entry_timeout, static_cast<double>(a.max_age));
}

void FuseServer::FillStat(const ObjectPath& path, const core::FileAttr& a, struct stat* st) const {
  std::memset(st, 0, sizeof(*st));
  st->st_ino = InodeNumberOf(path);
  if (a.restricted) {
    // Readable by root and the configured group only: the daemon reads with
    // its token, so the mount must not hand the bytes to every local user.
    mode_t perm =
        options_.restricted_gid >= 0 ? (a.is_dir ? 0550 : 0440) : (a.is_dir ? 0500 : 0400);
    st->st_mode = (a.is_dir ? S_IFDIR : S_IFREG) | perm;
    st->st_uid = ::getuid();  // root for a system perchd; the user for a user's own mount
    st->st_gid =
        options_.restricted_gid >= 0 ? static_cast<gid_t>(options_.restricted_gid) : ::getgid();
  } else {
    st->st_mode = a.is_dir ? (S_IFDIR | 0555) : (S_IFREG | 0444);
  }
  st->st_nlink = a.is_dir ? 2 : 1;
  st->st_size = static_cast<off_t>(a.size);
  st->st_blksize = 1 << 20;
  st->st_blocks = static_cast<blkcnt_t>((a.size + 511) / 512);
  st->st_mtime = st->st_ctime = st->st_atime = static_cast<time_t>(a.mtime);
}

}  // namespace perch::fuse
