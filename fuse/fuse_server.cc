#define FUSE_USE_VERSION 312
#include "fuse/fuse_server.h"

#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <boost/asio/thread_pool.hpp>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "daemon/core/log_escape.h"
#include "daemon/core/wait.h"
#include "fuse/inode_number.h"
#include "fuse/kernel_tuning.h"

namespace perch::fuse {

using core::ObjectPath;
using core::Status;
using core::StatusCode;

int ToErrno(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kNotFound:
      return ENOENT;
    case StatusCode::kPermissionDenied:
      return EACCES;
    case StatusCode::kInvalidArgument:
      return EINVAL;
    case StatusCode::kCancelled:
      return EINTR;
    case StatusCode::kNoSpace:
      return ENOSPC;
    case StatusCode::kStale:
      return ESTALE;
    case StatusCode::kUnavailable:
    case StatusCode::kDeadlineExceeded:
    case StatusCode::kCorrupt:
    case StatusCode::kInternal:
      return EIO;
  }
  return EIO;
}

namespace {

FuseServer* Self(fuse_req_t req) { return static_cast<FuseServer*>(fuse_req_userdata(req)); }

using Op = core::OpMetrics::Op;

// A reply up to this size is copied into the kernel by the thread that has
// its bytes (a small file's whole reply); a larger one goes to the reply
// threads, which keeps 1 MiB copies off the net loop.
constexpr uint64_t kInlineReplyBytes = 256 << 10;

// Logs, counts and answers an error. Expected misses (ENOENT), refusals
// (EACCES: the federation client logs a namespace without a token once) and
// replaced objects (ESTALE: core's VersionGuard logs each once) are logged at
// debug level only: every user's `ls` must not flood the log.
void ReplyStatus(fuse_req_t req, const char* op, const Status& s) {
  Self(req)->CountError(s);
  int err = ToErrno(s);
  spdlog::log(
      err == ENOENT || err == EACCES || err == ESTALE ? spdlog::level::debug : spdlog::level::warn,
      "fuse {}: {} -> {}", op, core::EscapeForLog(s.ToString()), std::strerror(err));
  fuse_reply_err(req, err);
}

}  // namespace

// A directory listing taken at opendir, so offsets stay stable across calls.
// One handed over by the previous perchd is listed again at its first read
// (from the namespace cache, as that perchd listed it).
struct FuseServer::DirHandle {
  ObjectPath path;
  std::mutex mu;
  bool listed = false;                  // Protected by mu
  std::vector<core::DirEntry> entries;  // Protected by mu
};

// Every callback body runs inside Guard: no exception reaches libfuse.
#define PERCH_FUSE_GUARD(req, op, body)                               \
  try {                                                               \
    body                                                              \
  } catch (const std::exception& e) {                                 \
    spdlog::error("fuse {}: unexpected exception: {}", op, e.what()); \
    fuse_reply_err(req, EIO);                                         \
  } catch (...) {                                                     \
    spdlog::error("fuse {}: unexpected exception", op);               \
    fuse_reply_err(req, EIO);                                         \
  }

struct FuseServer::ReplyPool {
  boost::asio::thread_pool threads{2};
};

struct FuseServer::Ops {
  static void Init(void* userdata, struct fuse_conn_info* conn) {
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
    conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
    // With no-open, an ENOSYS answer to the first open tells the kernel to
    // open every later file itself (no OPEN, no RELEASE, keep_cache implied);
    // reads then come with no handle and are served by path.
    // Passthrough is decided per open, so opens must be asked.
    const bool direct = self->options_.passthrough && self->passthrough_.offered();
    if (direct) self->passthrough_.Want();
    const bool no_open = self->options_.no_open && (conn->capable & FUSE_CAP_NO_OPEN_SUPPORT);
    self->no_open_ = !direct && no_open;
    self->deciding_ = direct && no_open;
    spdlog::info("fuse: protocol {}.{}, max_read {} KiB, {}", conn->proto_major, conn->proto_minor,
                 self->options_.max_io / 1024,
                 direct                       ? "passthrough for complete cached objects"
                 : self->options_.passthrough ? "no passthrough (the kernel offers none)"
                                              : "passthrough off");
  }

  static void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
    PERCH_FUSE_GUARD(req, "lookup", {
      FuseServer* self = Self(req);
      core::ScopedLatency timer(self->LatencyOf(Op::kLookup));
      ObjectPath dir;
      if (!self->PathOf(parent, &dir)) return (void)fuse_reply_err(req, ESTALE);
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
      e.ino = self->Remember(child);
      e.attr_timeout = self->options_.attr_timeout;
      e.entry_timeout = self->options_.entry_timeout;
      self->FillStat(child, *attr, &e.attr);
      if (fuse_reply_entry(req, &e) != 0) self->Forget(e.ino, 1);  // the kernel never got it
    })
  }

  static void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
    Self(req)->Forget(ino, nlookup);
    fuse_reply_none(req);
  }

  static void ForgetMulti(fuse_req_t req, size_t count, struct fuse_forget_data* forgets) {
    for (size_t i = 0; i < count; ++i) Self(req)->Forget(forgets[i].ino, forgets[i].nlookup);
    fuse_reply_none(req);
  }

  static void GetAttr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info*) {
    PERCH_FUSE_GUARD(req, "getattr", {
      FuseServer* self = Self(req);
      core::ScopedLatency timer(self->LatencyOf(Op::kGetAttr));
      ObjectPath path;
      if (!self->PathOf(ino, &path)) return (void)fuse_reply_err(req, ESTALE);
      auto attr = self->fs_.GetAttr(path);
      if (!attr.ok()) return ReplyStatus(req, "getattr", attr.status());
      struct stat st {};
      self->FillStat(path, *attr, &st);
      fuse_reply_attr(req, &st, self->options_.attr_timeout);
    })
  }

  static void OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
    PERCH_FUSE_GUARD(req, "opendir", {
      FuseServer* self = Self(req);
      core::ScopedLatency timer(self->LatencyOf(Op::kOpenDir));
      ObjectPath path;
      if (!self->PathOf(ino, &path)) return (void)fuse_reply_err(req, ESTALE);
      auto entries = self->fs_.ReadDir(path);
      if (!entries.ok()) return ReplyStatus(req, "opendir", entries.status());
      auto h = std::make_shared<DirHandle>();
      h->path = path;
      h->entries = std::move(*entries);
      h->listed = true;
      {
        std::lock_guard<std::mutex> l(self->mu_);
        fi->fh = self->next_dh_++;
        self->dirs_.emplace(fi->fh, h);
      }
      fi->keep_cache = 1;
      fi->cache_readdir = 1;
      if (fuse_reply_open(req, fi) != 0) {
        std::lock_guard<std::mutex> l(self->mu_);
        self->dirs_.erase(fi->fh);
      }
    })
  }

  static void ReadDirCommon(fuse_req_t req, fuse_ino_t, size_t size, off_t off,
                            struct fuse_file_info* fi, bool plus) {
    PERCH_FUSE_GUARD(req, plus ? "readdirplus" : "readdir", {
      FuseServer* self = Self(req);
      core::ScopedLatency timer(self->LatencyOf(Op::kReadDir));
      std::shared_ptr<DirHandle> h;
      {
        std::lock_guard<std::mutex> l(self->mu_);
        auto it = self->dirs_.find(fi->fh);
        if (it != self->dirs_.end()) h = it->second;
      }
      if (h == nullptr) return (void)fuse_reply_err(req, EBADF);
      std::lock_guard<std::mutex> hl(h->mu);
      if (!h->listed) {
        auto entries = self->fs_.ReadDir(h->path);
        if (!entries.ok()) return ReplyStatus(req, "readdir", entries.status());
        h->entries = std::move(*entries);
        h->listed = true;
      }
      std::vector<char> buf(size);
      size_t used = 0;
      const size_t total = h->entries.size() + 2;
      for (size_t i = static_cast<size_t>(off); i < total; ++i) {
        const char* name;
        core::FileAttr attr;
        bool dot = i < 2;
        if (dot) {
          name = i == 0 ? "." : "..";
          attr.is_dir = true;
        } else {
          name = h->entries[i - 2].name.c_str();
          attr = h->entries[i - 2].attr;
        }
        size_t n;
        if (!plus) {
          struct stat st {};
          // Never 0: glibc's readdir() skips such entries.
          st.st_ino = dot ? (i == 0 ? InodeNumberOf(h->path) : FUSE_ROOT_ID)
                          : InodeNumberOf(*h->path.Child(name));
          st.st_mode = attr.is_dir ? S_IFDIR : S_IFREG;
          n = fuse_add_direntry(req, buf.data() + used, size - used, name, &st,
                                static_cast<off_t>(i + 1));
          if (n > size - used) break;
        } else {
          fuse_entry_param e{};
          if (dot) {
            e.attr.st_ino = i == 0 ? InodeNumberOf(h->path) : FUSE_ROOT_ID;
            e.attr.st_mode = S_IFDIR;
          } else {
            ObjectPath child = *h->path.Child(name);
            e.ino = self->Remember(child);
            e.attr_timeout = self->options_.attr_timeout;
            e.entry_timeout = self->options_.entry_timeout;
            self->FillStat(child, attr, &e.attr);
          }
          n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e,
                                     static_cast<off_t>(i + 1));
          if (n > size - used) {
            if (!dot) self->Forget(e.ino, 1);  // not sent: the kernel holds no reference
            break;
          }
        }
        used += n;
      }
      fuse_reply_buf(req, buf.data(), used);
    })
  }

  static void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                      struct fuse_file_info* fi) {
    ReadDirCommon(req, ino, size, off, fi, false);
  }
  static void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                          struct fuse_file_info* fi) {
    ReadDirCommon(req, ino, size, off, fi, true);
  }

  static void ReleaseDir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
    std::shared_ptr<DirHandle> h;  // let go after the unlock
    {
      std::lock_guard<std::mutex> l(Self(req)->mu_);
      auto it = Self(req)->dirs_.find(fi->fh);
      if (it != Self(req)->dirs_.end()) {
        h = std::move(it->second);
        Self(req)->dirs_.erase(it);
      }
    }
    fuse_reply_err(req, 0);
  }

  static void Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
    PERCH_FUSE_GUARD(req, "open", {
      FuseServer* self = Self(req);
      core::ScopedLatency timer(self->LatencyOf(Op::kOpen));
      if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
        return (void)fuse_reply_err(req, EROFS);
      }
      if (self->no_open_) return (void)fuse_reply_err(req, ENOSYS);
      ObjectPath path;
      if (!self->PathOf(ino, &path)) return (void)fuse_reply_err(req, ESTALE);
      auto h = self->fs_.Open(path);
      if (!h.ok()) {
        return (void)(h.status().code() == StatusCode::kInvalidArgument
                          ? fuse_reply_err(req, EISDIR)
                          : (ReplyStatus(req, "open", h.status()), 0));
      }
      fi->fh = *h;
      fi->noflush = 1;
      {
        std::lock_guard<std::mutex> l(self->mu_);
        self->open_files_[*h] = ino;
      }
      // Immutable objects: the page cache stays valid (keep_cache), unless
      // the kernel reads the cache's file itself (it then has that file's).
      fi->keep_cache = self->OpenDirect(ino, *h) ? 0 : 1;
      if (fuse_reply_open(req, fi) != 0) {
        self->Released(ino, *h);
        self->fs_.Release(*h);
      }
    })
  }

  static void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                   struct fuse_file_info* fi) {
    PERCH_FUSE_GUARD(req, "read", {
      FuseServer* self = Self(req);
      const auto started = std::chrono::steady_clock::now();
      ObjectPath path;  // no handle (no-open): the file is named by its inode
      if (self->stale_->Contains(ino) || (fi->fh == 0 && !self->PathOf(ino, &path))) {
        fuse_reply_err(req, ESTALE);
        return Observe(self->LatencyOf(Op::kRead), started);
      }
      // A hit: hand the kernel the block files (spliced when the kernel
      // allows it, one file after the other for a read that spans blocks)
      // instead of copying the bytes through us.
      if (auto slices = fi->fh != 0
                            ? self->fs_.ReadSlice(fi->fh, static_cast<uint64_t>(off), size)
                            : self->fs_.ReadSlicePath(path, static_cast<uint64_t>(off), size)) {
        ReplySlices(req, *slices);
        Observe(self->LatencyOf(Op::kRead), started);
        return;
      }
      ReadLater(self, req, ino, fi->fh, path, static_cast<uint64_t>(off), size, started);
    })
  }

  // A read of bytes that are not in a block file (a miss, or a block still in
  // memory): answered by whichever thread has them, without a copy of ours;
  // this worker returns to the queue at once.
  static void ReadLater(FuseServer* self, fuse_req_t req, fuse_ino_t ino, uint64_t fh,
                        const ObjectPath& path, uint64_t off, size_t size,
                        std::chrono::steady_clock::time_point started) {
    auto replies = self->replies_;
    const uint64_t token = replies->Add(req, self->fs_.NewDeadline() + core::kAnswerSlack);
    auto done = [replies, token, hist = self->LatencyOf(Op::kRead), started, ino,
                 stale = self->stale_.get(),
                 pool = self->reply_pool_.get()](core::Result<std::vector<core::SharedBytes>> r) {
      fuse_req_t claimed = replies->Claim(token);
      if (claimed == nullptr) return;  // answered already: its time was up
      // The object changed at the origin: the kernel's pages of the old
      // version must go before any read of the new one is answered.
      if (r.status().code() == StatusCode::kStale) stale->Mark(ino);
      // Claimed: the server (and its pool) stays until Answered().
      auto reply = [replies, claimed, hist, started, r = std::move(r)] {
        try {
          ReplyParts(claimed, r);
        } catch (const std::exception& e) {
          spdlog::error("fuse read: unexpected exception: {}", e.what());
          fuse_reply_err(claimed, EIO);
        }
        Observe(hist, started);
        replies->Answered();
      };
      if (ReplyBytes(r) <= kInlineReplyBytes) return reply();
      auto job = std::make_shared<decltype(reply)>(std::move(reply));
      try {
        boost::asio::post(pool->threads, [job] { (*job)(); });
      } catch (const std::exception&) {
        (*job)();  // claimed: it must be answered, here if not there
      }
    };
    try {
      if (fh != 0) {
        self->fs_.ReadAsync(fh, off, size, std::move(done));
      } else {
        self->fs_.ReadPathAsync(path, off, size, std::move(done));
      }
    } catch (const std::exception& e) {
      spdlog::error("fuse read: unexpected exception: {}", e.what());
      if (fuse_req_t claimed = replies->Claim(token)) {
        fuse_reply_err(claimed, EIO);
        replies->Answered();
      }
    }
  }

  static uint64_t ReplyBytes(const core::Result<std::vector<core::SharedBytes>>& r) {
    uint64_t n = 0;
    if (r.ok())
      for (const core::SharedBytes& p : *r) n += p.length;
    return n;
  }

  // Replies with the parts of blocks a read yields (or its error).
  static void ReplyParts(fuse_req_t req, const core::Result<std::vector<core::SharedBytes>>& r) {
    if (!r.ok()) return ReplyStatus(req, "read", r.status());
    if (r->empty()) return (void)fuse_reply_buf(req, nullptr, 0);
    std::vector<struct iovec> iov;
    iov.reserve(r->size());
    for (const core::SharedBytes& p : *r) {
      const std::string_view v = p.view();
      iov.push_back({const_cast<char*>(v.data()), v.size()});
    }
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
  }

  static void Observe(core::LatencyHistogram* hist, std::chrono::steady_clock::time_point started) {
    if (hist != nullptr) hist->Observe(std::chrono::steady_clock::now() - started);
  }

  // Replies with the bytes of `slices`, in order, moved from their files.
  // The slices keep their blocks in use until the caller lets them go, after
  // this returns: by then the kernel has copied every spliced byte into the
  // reply (a hole punched while a splice reads reads as zeros).
  static void ReplySlices(fuse_req_t req, const std::vector<core::BlockSlice>& slices) {
    // fuse_bufvec ends in a one-element array: room for the others after it.
    const size_t n = std::max<size_t>(slices.size(), 1);
    std::vector<std::byte> storage(sizeof(fuse_bufvec) + (n - 1) * sizeof(fuse_buf));
    auto* bv = new (storage.data()) fuse_bufvec{};
    bv->count = slices.size();
    for (size_t i = 0; i < slices.size(); ++i) {
      fuse_buf& b = bv->buf[i];
      b = fuse_buf{};
      b.size = slices[i].length();
      b.flags = static_cast<enum fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = slices[i].fd();
      b.pos = static_cast<off_t>(slices[i].file_offset());
    }
    fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
  }

  static void Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
    if (fi->fh != 0) {
      Self(req)->Released(ino, fi->fh);
      Self(req)->fs_.Release(fi->fh);
    }
    fuse_reply_err(req, 0);
  }

  static void StatFs(fuse_req_t req, fuse_ino_t) {
    PERCH_FUSE_GUARD(req, "statfs", {
      FuseServer* self = Self(req);
      core::ScopedLatency timer(self->LatencyOf(Op::kStatFs));
      struct statvfs st {};
      st.f_bsize = 4096;
      st.f_frsize = 4096;
      st.f_namemax = 255;
      if (self->options_.statfs) self->options_.statfs(&st);
      fuse_reply_statfs(req, &st);
    })
  }

  // The path and attributes of `ino` for an xattr call; false with `*err` set.
  static bool XattrTarget(FuseServer* self, fuse_ino_t ino, ObjectPath* path, core::FileAttr* attr,
                          int* err) {
    if (!self->PathOf(ino, path)) {
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

  static std::map<std::string, std::string> Xattrs(fuse_req_t req, fuse_ino_t ino, int* err) {
    FuseServer* self = Self(req);
    core::ScopedLatency timer(self->LatencyOf(Op::kXattr));
    ObjectPath path;
    core::FileAttr attr;
    if (!XattrTarget(self, ino, &path, &attr, err)) return {};
    return self->options_.xattrs ? self->options_.xattrs(path, attr)
                                 : std::map<std::string, std::string>{};
  }

  // The value of attribute `name` of `ino`, or an errno (ENODATA: none such).
  static std::string Xattr(fuse_req_t req, fuse_ino_t ino, const char* name, int* err) {
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

  static void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
    PERCH_FUSE_GUARD(req, "getxattr", {
      int err = 0;
      std::string value = Xattr(req, ino, name, &err);
      if (err) return (void)fuse_reply_err(req, err);
      if (size == 0) return (void)fuse_reply_xattr(req, value.size());
      if (size < value.size()) return (void)fuse_reply_err(req, ERANGE);
      fuse_reply_buf(req, value.data(), value.size());
    })
  }

  static void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    PERCH_FUSE_GUARD(req, "listxattr", {
      int err = 0;
      auto all = Xattrs(req, ino, &err);
      if (err) return (void)fuse_reply_err(req, err);
      std::string names;
      for (const auto& [k, v] : all) names.append(k).push_back('\0');
      if (size == 0) return (void)fuse_reply_xattr(req, names.size());
      if (size < names.size()) return (void)fuse_reply_err(req, ERANGE);
      fuse_reply_buf(req, names.data(), names.size());
    })
  }

  // Write-shaped operations: a read-only filesystem.
  static void SetAttr(fuse_req_t req, fuse_ino_t, struct stat*, int, struct fuse_file_info*) {
    fuse_reply_err(req, EROFS);
  }
  static void MkNod(fuse_req_t req, fuse_ino_t, const char*, mode_t, dev_t) {
    fuse_reply_err(req, EROFS);
  }
  static void MkDir(fuse_req_t req, fuse_ino_t, const char*, mode_t) { fuse_reply_err(req, EROFS); }
  static void Unlink(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
  static void RmDir(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
  static void SymLink(fuse_req_t req, const char*, fuse_ino_t, const char*) {
    fuse_reply_err(req, EROFS);
  }
  static void Rename(fuse_req_t req, fuse_ino_t, const char*, fuse_ino_t, const char*, unsigned) {
    fuse_reply_err(req, EROFS);
  }
  static void Link(fuse_req_t req, fuse_ino_t, fuse_ino_t, const char*) {
    fuse_reply_err(req, EROFS);
  }
  static void Create(fuse_req_t req, fuse_ino_t, const char*, mode_t, struct fuse_file_info*) {
    fuse_reply_err(req, EROFS);
  }
  static void Write(fuse_req_t req, fuse_ino_t, const char*, size_t, off_t,
                    struct fuse_file_info*) {
    fuse_reply_err(req, EROFS);
  }
  static void SetXattr(fuse_req_t req, fuse_ino_t, const char*, const char*, size_t, int) {
    fuse_reply_err(req, EROFS);
  }
  static void RemoveXattr(fuse_req_t req, fuse_ino_t, const char*) { fuse_reply_err(req, EROFS); }
};

FuseServer::FuseServer(core::FileSystem& fs, FuseOptions options)
    : fs_(fs),
      options_(std::move(options)),
      replies_(std::make_shared<PendingReplies>([](fuse_req_t req) {
        ReplyStatus(req, "read", core::DeadlineExceededError("no answer before the deadline"));
      })),
      reply_pool_(std::make_unique<ReplyPool>()),
      stale_(std::make_unique<StaleInodes>([this](uint64_t ino) {
        if (se_ == nullptr || !mounted_) return;
        int rc = fuse_lowlevel_notify_inval_inode(se_, ino, 0, 0);
        if (rc != 0 && rc != -ENOENT) {
          spdlog::warn("fuse: could not drop the kernel's pages of inode {}: {}", ino,
                       std::strerror(-rc));
        }
      })) {
  options_.max_io = LoggedSpliceableMaxIo(options_.max_io);
  // A read-ahead window that is not a multiple of the request size ends in a
  // short request (1 MiB over 1008 KiB requests: two requests per window).
  if (options_.read_ahead > options_.max_io)
    options_.read_ahead = options_.read_ahead / options_.max_io * options_.max_io;
  auto root = inodes_.emplace(FUSE_ROOT_ID, Inode{ObjectPath(), 1}).first;
  by_path_.emplace(root->second.path.str(), FUSE_ROOT_ID);
}

FuseServer::~FuseServer() {
  replies_->Close();  // answers what still waits (and waits for the reply threads)
  reply_pool_->threads.join();
  stale_->Stop();
  Unmount();
  if (se_ == nullptr) return;
  if (detached_ && !adopted_) {
    // libfuse 3.14 frees the mountpoint it recorded at fuse_session_mount
    // only in fuse_session_unmount, which unmounts, and the mount is the
    // next perchd's now (docs/quirks.md): the session is kept, reachable,
    // for the little while this process has left (its descriptor closed).
    ::close(fuse_session_fd(se_));
    static std::mutex kept_mu;
    static std::vector<struct fuse_session*>* kept = new std::vector<struct fuse_session*>();
    std::lock_guard<std::mutex> l(kept_mu);
    kept->push_back(se_);
    return;
  }
  fuse_session_destroy(se_);
}

uint64_t FuseServer::Remember(const ObjectPath& path) {
  std::lock_guard<std::mutex> l(mu_);
  if (auto it = by_path_.find(path.str()); it != by_path_.end()) {
    inodes_[it->second].lookups++;
    return it->second;
  }
  const uint64_t ino = next_ino_++;
  auto node = inodes_.emplace(ino, Inode{path, 1}).first;
  by_path_.emplace(node->second.path.str(), ino);  // a view of the node's path
  return ino;
}

void FuseServer::Forget(uint64_t ino, uint64_t n) {
  if (ino == FUSE_ROOT_ID) return;
  std::lock_guard<std::mutex> l(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  it->second.lookups = n >= it->second.lookups ? 0 : it->second.lookups - n;
  if (it->second.lookups == 0) {
    by_path_.erase(it->second.path.str());
    inodes_.erase(it);
  }
}

core::LatencyHistogram* FuseServer::LatencyOf(core::OpMetrics::Op op) {
  return options_.metrics != nullptr ? &options_.metrics->latency(op) : nullptr;
}

void FuseServer::CountError(const Status& s) {
  if (options_.metrics != nullptr) options_.metrics->errors().Count(s.code());
}

bool FuseServer::PathOf(uint64_t ino, ObjectPath* out) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return false;
  *out = it->second.path;
  return true;
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

Status FuseServer::Mount(const std::string& mountpoint) {
  struct stat st {};
  if (::stat(mountpoint.c_str(), &st) != 0) {
    return core::InvalidArgumentError("mountpoint " + mountpoint + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode))
    return core::InvalidArgumentError("mountpoint " + mountpoint + " is not a directory");
  if (::access("/dev/fuse", R_OK | W_OK) != 0) {
    return core::InvalidArgumentError(std::string("cannot use /dev/fuse: ") + std::strerror(errno) +
                                      " (is the fuse module loaded, and are you root?)");
  }
  if (Status s = NewSession(mountpoint); !s.ok()) return s;
  mounted_ = true;
  mountpoint_ = mountpoint;
  return Status::Ok();
}

Status FuseServer::NewSession(const std::string& mountpoint) {
  static const struct fuse_lowlevel_ops kOps = [] {
    struct fuse_lowlevel_ops o {};
    o.init = &Ops::Init;
    o.lookup = &Ops::Lookup;
    o.forget = &Ops::Forget;
    o.forget_multi = &Ops::ForgetMulti;
    o.getattr = &Ops::GetAttr;
    o.opendir = &Ops::OpenDir;
    o.readdir = &Ops::ReadDir;
    o.readdirplus = &Ops::ReadDirPlus;
    o.releasedir = &Ops::ReleaseDir;
    o.open = &Ops::Open;
    o.read = &Ops::Read;
    o.release = &Ops::Release;
    o.statfs = &Ops::StatFs;
    o.getxattr = &Ops::GetXattr;
    o.listxattr = &Ops::ListXattr;
    o.setattr = &Ops::SetAttr;
    o.mknod = &Ops::MkNod;
    o.mkdir = &Ops::MkDir;
    o.unlink = &Ops::Unlink;
    o.rmdir = &Ops::RmDir;
    o.symlink = &Ops::SymLink;
    o.rename = &Ops::Rename;
    o.link = &Ops::Link;
    o.create = &Ops::Create;
    o.write = &Ops::Write;
    o.setxattr = &Ops::SetXattr;
    o.removexattr = &Ops::RemoveXattr;
    return o;
  }();
  // fsname is a URL and may hold ',' (an option separator), '\\' or spaces:
  // percent-escape them, it is only a label in /proc/mounts.
  std::string fsname;
  for (unsigned char c : options_.fsname) {
    if (c == ',' || c == '\\' || c <= ' ' || c == 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      fsname += buf;
    } else {
      fsname += static_cast<char>(c);
    }
  }
  std::string opts = "ro,default_permissions,fsname=" + fsname +
                     ",subtype=perch,max_read=" + std::to_string(options_.max_io);
  if (::getuid() == 0) opts += ",allow_other";
  std::vector<std::string> argv_s = {"perchd", "-o", opts};
  std::vector<char*> argv;
  for (auto& s : argv_s) argv.push_back(s.data());
  struct fuse_args args = FUSE_ARGS_INIT(static_cast<int>(argv.size()), argv.data());
  se_ = fuse_session_new(&args, &kOps, sizeof(kOps), this);
  fuse_opt_free_args(&args);  // libfuse may have copied them into its own allocation
  if (se_ == nullptr) return core::InternalError("fuse_session_new failed (see messages above)");
  if (fuse_session_mount(se_, mountpoint.c_str()) != 0) {
    return core::InvalidArgumentError("cannot mount at " + mountpoint +
                                      " (already mounted? see messages above)");
  }
  // The backing-file ioctls need CAP_SYS_ADMIN: only root asks the kernel.
  if (::geteuid() != 0) options_.passthrough = false;
  // The hooks go on every session: a handoff needs them (Passthrough).
  if (Status s = Passthrough::Install(
          se_, [](void* userdata) { return &static_cast<FuseServer*>(userdata)->passthrough_; });
      !s.ok()) {
    return core::InternalError("fuse: cannot install the device's I/O hooks: " + s.message());
  }
  return Status::Ok();
}

bool FuseServer::PauseReading(std::chrono::steady_clock::time_point deadline) {
  if (se_ == nullptr) return true;
  // A worker blocked in read(2) is woken by SIGUSR2 (perchd's handler has no
  // SA_RESTART: the read fails with EINTR, having taken no request).
  if (passthrough_.StopReading([](pthread_t t) { pthread_kill(t, SIGUSR2); }, deadline)) {
    return true;
  }
  passthrough_.ResumeReading();
  return false;
}

void FuseServer::ResumeReading() { passthrough_.ResumeReading(); }

void FuseServer::EndForHandoff() {
  if (se_ == nullptr) return;
  fuse_session_exit(se_);
  passthrough_.EndReading();
}

core::Result<SessionState> FuseServer::Detach(std::chrono::steady_clock::time_point deadline,
                                              int* fd) {
  if (se_ == nullptr || !mounted_) return core::InternalError("fuse: nothing mounted to hand over");
  if (!replies_->Drain(deadline)) {
    spdlog::warn("fuse: {} reads still wait for their bytes; they are answered EIO",
                 replies_->pending());
  }
  replies_->Close();  // answers what is left (nothing, unless the drain timed out)
  stale_->Stop();     // the kernel drops the pages of replaced objects now, still ours
  SessionState s;
  s.init = passthrough_.init();
  if (s.init.empty()) return core::InternalError("fuse: the kernel's INIT was never seen");
  s.passthrough_offered = passthrough_.offered();
  s.passthrough_agreed = passthrough_.agreed();
  s.no_open = no_open_;
  s.deciding = deciding_;
  s.opens = opens_;
  s.large_opens = large_opens_;
  std::unordered_map<uint64_t, uint64_t> files;
  {
    std::lock_guard<std::mutex> l(mu_);
    s.no_passthrough = no_passthrough_;
    s.next_ino = next_ino_;
    s.nodes.reserve(inodes_.size());
    for (const auto& [ino, node] : inodes_) s.nodes.push_back({ino, node.path.str(), node.lookups});
    s.next_dh = next_dh_;
    for (const auto& [dh, h] : dirs_) s.dirs.push_back({dh, h->path.str()});
    for (const auto& [ino, modes] : open_modes_) {
      if (modes.direct_opens > 0) s.backings.push_back({ino, modes.backing_id});
    }
    files = open_files_;
    for (const auto& [fh, ino] : files) {
      auto d = open_direct_.find(fh);
      s.files.push_back({fh, ino, "", {}, d != open_direct_.end() && d->second});
    }
  }
  auto open = fs_.OpenFiles();
  std::unordered_map<uint64_t, const core::OpenFile*> by_fh;
  for (const auto& [fh, f] : open) by_fh[fh] = &f;
  std::erase_if(s.files, [&](SessionState::File& f) {
    auto it = by_fh.find(f.fh);
    if (it == by_fh.end()) return true;  // released meanwhile
    f.path = it->second->path.str();
    f.attr = it->second->attr;
    return false;
  });
  *fd = ::fcntl(fuse_session_fd(se_), F_DUPFD_CLOEXEC, 3);
  if (*fd < 0) return core::InternalError(std::string("fuse: dup: ") + std::strerror(errno));
  mounted_ = false;  // the next perchd's now: never unmounted from here
  detached_ = true;
  return s;
}

Status FuseServer::Adopt(int fd, const std::string& mountpoint, const SessionState& state) {
  if (Status s = NewSession("/dev/fd/" + std::to_string(fd)); !s.ok()) {
    ::close(fd);
    return s;
  }
  adopted_ = true;
  mounted_ = true;
  mountpoint_ = mountpoint;
  {
    std::lock_guard<std::mutex> l(mu_);
    inodes_.clear();
    by_path_.clear();
    for (const auto& n : state.nodes) {
      auto path = ObjectPath::Parse(n.path);
      if (!path.ok()) return core::InvalidArgumentError("handoff: bad path " + n.path);
      auto node = inodes_.emplace(n.ino, Inode{*path, n.lookups}).first;
      by_path_.emplace(node->second.path.str(), n.ino);
    }
    if (inodes_.find(FUSE_ROOT_ID) == inodes_.end()) {
      auto root = inodes_.emplace(FUSE_ROOT_ID, Inode{ObjectPath(), 1}).first;
      by_path_.emplace(root->second.path.str(), FUSE_ROOT_ID);
    }
    next_ino_ = std::max<uint64_t>(state.next_ino, 2);
    next_dh_ = std::max<uint64_t>(state.next_dh, 1);
    for (const auto& d : state.dirs) {
      auto path = ObjectPath::Parse(d.path);
      if (!path.ok()) return core::InvalidArgumentError("handoff: bad path " + d.path);
      auto h = std::make_shared<DirHandle>();
      h->path = *path;
      dirs_.emplace(d.dh, std::move(h));
    }
    no_passthrough_ = state.no_passthrough;
  }
  std::unordered_map<uint64_t, uint64_t> direct_fh_of;  // inode -> one of its passthrough files
  for (const auto& f : state.files) {
    auto path = ObjectPath::Parse(f.path);
    if (!path.ok()) return core::InvalidArgumentError("handoff: bad path " + f.path);
    fs_.AdoptOpenFile(f.fh, *path, f.attr);
    std::lock_guard<std::mutex> l(mu_);
    open_files_[f.fh] = f.ino;
    if (!state.passthrough_agreed) continue;
    open_direct_[f.fh] = f.direct;
    OpenModes& modes = open_modes_[f.ino];
    (f.direct ? modes.direct_opens : modes.cached_opens)++;
    if (f.direct) {
      direct_opens_++;
      direct_fh_of[f.ino] = f.fh;
    }
  }
  for (const auto& b : state.backings) {
    // The kernel holds the backing file itself; this hold keeps its blocks
    // from eviction while files pass through to it, as the Open that
    // registered it did.
    std::shared_ptr<const core::BlockFd> held;
    if (auto it = direct_fh_of.find(b.ino); it != direct_fh_of.end()) {
      if (auto file = fs_.WholeFile(it->second); file.ok()) held = *std::move(file);
    }
    std::lock_guard<std::mutex> l(mu_);
    OpenModes& modes = open_modes_[b.ino];
    modes.backing_id = b.id;
    modes.backing = std::move(held);
  }
  // libfuse's session has not seen INIT (the kernel sent it to the previous
  // perchd): it is fed the same one, which runs Ops::Init as then.
  passthrough_.ReplayInit(se_, state.init, state.passthrough_agreed);
  no_open_ = state.no_open;
  deciding_ = state.deciding;
  opens_ = state.opens;
  large_opens_ = state.large_opens;
  spdlog::info(
      "fuse: took over {} from the previous perchd: {} inodes, {} open files, {} open "
      "directories",
      mountpoint, state.nodes.size(), state.files.size(), state.dirs.size());
  return Status::Ok();
}

bool FuseServer::OpenDirect(uint64_t ino, uint64_t fh) {
  if (!passthrough_.agreed()) return false;
  const bool direct = OpenDirectly(ino, fh);
  if (deciding_.load(std::memory_order_relaxed)) Decide();
  return direct;
}

void FuseServer::Decide() {
  const uint64_t opens = opens_.load(), large = large_opens_.load();
  if (opens < options_.decide_after || !deciding_.exchange(false)) return;
  if (large * 100 >= opens) {
    spdlog::info(
        "fuse: {} of the first {} opened files are a block or larger: opens stay "
        "answered (passthrough)",
        large, opens);
    return;
  }
  // The kernel refuses an open it makes itself (no-open) of an inode that
  // is open in passthrough (EIO until that file is closed): no file starts
  // passing through from now on, and no-open waits for those that do.
  uint32_t direct = 0;
  {
    std::lock_guard<std::mutex> l(mu_);
    no_passthrough_ = true;
    direct = direct_opens_;
    if (direct == 0) no_open_ = true;  // the next open answers ENOSYS: the kernel opens files
  }
  if (direct == 0) {
    spdlog::info(
        "fuse: {} of the first {} opened files are a block or larger: a small-file "
        "workload; no-open from now on (two fewer requests per file, no passthrough)",
        large, opens);
  } else {
    spdlog::info(
        "fuse: {} of the first {} opened files are a block or larger: a small-file "
        "workload; no passthrough from now on, and no-open once the {} opens in passthrough "
        "are closed",
        large, opens, direct);
  }
}

bool FuseServer::OpenDirectly(uint64_t ino, uint64_t fh) {
  auto settle = [&](OpenModes& modes, bool direct) {
    (direct ? modes.direct_opens : modes.cached_opens)++;
    if (direct) direct_opens_++;
    open_direct_[fh] = direct;
    if (direct) passthrough_.Direct(fh, modes.backing_id);
    return direct;
  };
  {
    std::lock_guard<std::mutex> l(mu_);
    auto it = open_modes_.find(ino);
    if (it != open_modes_.end()) return settle(it->second, it->second.direct_opens > 0);
  }
  // No open file yet: the whole object, if cached, becomes the inode's
  // backing file (disk I/O and an ioctl: not under mu_).
  auto file = fs_.WholeFile(fh);
  if (deciding_.load(std::memory_order_relaxed)) {
    opens_++;
    if (file.ok() || file.status().code() != StatusCode::kInvalidArgument) large_opens_++;
  }
  int32_t id = 0;
  if (file.ok()) {
    auto opened = passthrough_.OpenBacking(fuse_session_fd(se_), (*file)->fd());
    if (opened.ok()) {
      id = *opened;
    } else if (!backing_refused_.exchange(true)) {  // the same for every file: said once
      spdlog::warn("fuse: {}; such files are read through perchd", opened.status().message());
    }
  }
  std::shared_ptr<const core::BlockFd> unused;  // let go after the unlock
  std::lock_guard<std::mutex> l(mu_);
  auto [it, first] = open_modes_.try_emplace(ino);
  OpenModes& modes = it->second;
  if (id > 0 && first && !no_passthrough_) {
    modes.backing_id = id;
    modes.backing = *std::move(file);
    return settle(modes, true);
  }
  // Another open of the inode settled its mode meanwhile (or nothing to
  // pass, or passthrough is over: Decide).
  if (id > 0) passthrough_.CloseBacking(fuse_session_fd(se_), id);
  if (file.ok()) unused = *std::move(file);
  return settle(modes, modes.direct_opens > 0);
}

void FuseServer::Released(uint64_t ino, uint64_t fh) {
  std::shared_ptr<const core::BlockFd> backing;  // let go after the unlock
  bool now_no_open = false;
  {
    std::lock_guard<std::mutex> l(mu_);
    open_files_.erase(fh);
    auto open = open_direct_.find(fh);
    if (open == open_direct_.end()) return;
    const bool direct = open->second;
    open_direct_.erase(open);
    passthrough_.Undo(fh);  // a reply never sent
    if (direct && direct_opens_ > 0) direct_opens_--;
    // The last file open in passthrough is closed: the switch Decide put off.
    if (direct && direct_opens_ == 0 && no_passthrough_ && !no_open_) {
      no_open_ = true;
      now_no_open = true;
    }
    auto it = open_modes_.find(ino);
    if (it != open_modes_.end()) {
      OpenModes& modes = it->second;
      uint32_t& count = direct ? modes.direct_opens : modes.cached_opens;
      if (count > 0) count--;
      if (direct && modes.direct_opens == 0) {
        // The kernel let go of the inode's backing file before it sent this release.
        passthrough_.CloseBacking(fuse_session_fd(se_), modes.backing_id);
        modes.backing_id = 0;
        backing = std::move(modes.backing);
      }
      if (modes.direct_opens == 0 && modes.cached_opens == 0) open_modes_.erase(it);
    }
  }
  if (now_no_open) {
    spdlog::info("fuse: the last file open in passthrough is closed: no-open from now on");
  }
}

Status FuseServer::Run() {
  if (fuse_set_signal_handlers(se_) != 0)
    return core::InternalError("cannot install signal handlers");
  handlers_ = true;
  struct fuse_loop_config* cfg = fuse_loop_cfg_create();
  fuse_loop_cfg_set_clone_fd(cfg, options_.clone_fd ? 1 : 0);
  fuse_loop_cfg_set_max_threads(cfg, options_.max_threads);
  if (options_.read_ahead > 0 && mounted_)
    std::thread(SetReadAhead, mountpoint_, options_.read_ahead).detach();
  int rc = fuse_session_loop_mt(se_, cfg);
  fuse_loop_cfg_destroy(cfg);
  fuse_remove_signal_handlers(se_);
  handlers_ = false;
  if (rc != 0 && rc != SIGINT && rc != SIGTERM && rc != SIGHUP) {
    return core::InternalError("fuse loop ended with " + std::to_string(rc));
  }
  return Status::Ok();
}

void FuseServer::Exit() {
  if (se_ != nullptr) fuse_session_exit(se_);
}

void FuseServer::Unmount() {
  if (mounted_ && se_ != nullptr) {
    if (adopted_) {
      // libfuse did not mount it (Adopt): unmount as it would have.
      if (::geteuid() == 0) {
        ::umount2(mountpoint_.c_str(), MNT_DETACH);
      } else {
        std::string cmd = "fusermount3 -u -z -- '" + mountpoint_ + "' 2>/dev/null";
        if (std::system(cmd.c_str()) != 0) spdlog::warn("fusermount3 -u {} failed", mountpoint_);
      }
    } else {
      fuse_session_unmount(se_);
    }
    mounted_ = false;
  }
}

}  // namespace perch::fuse
