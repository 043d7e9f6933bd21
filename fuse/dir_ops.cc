// FuseServer::Ops (ops.h): open directories. A listing is taken at opendir
// and kept with the handle, so that offsets stay stable across READDIRs;
// READDIRPLUS entries are lookups (InodeTable::Remember), forgotten again if
// they do not fit the reply.
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <sys/stat.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "fuse/inode_number.h"
#include "fuse/ops.h"
#include "fuse/reply_error.h"

namespace perch::fuse {

using core::ObjectPath;
using Op = core::OpMetrics::Op;

void FuseServer::Ops::OpenDir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  FuseServer* self = Self(req);
  core::ScopedLatency timer(self->LatencyOf(Op::kOpenDir));
  ObjectPath path;
  if (!self->inodes_.PathOf(ino, &path)) return (void)fuse_reply_err(req, ESTALE);
  auto entries = self->fs_.ReadDir(path);
  if (!entries.ok()) return ReplyStatus(req, "opendir", entries.status());
  auto h = std::make_shared<DirHandle>(path);
  {
    core::MutexLock hl(h->mu);
    h->entries = std::move(*entries);
    h->listed = true;
  }
  {
    core::MutexLock l(self->mu_);
    fi->fh = self->next_dh_++;
    self->dirs_.emplace(fi->fh, h);
  }
  fi->keep_cache = 1;
  fi->cache_readdir = 1;
  if (fuse_reply_open(req, fi) != 0) {
    core::MutexLock l(self->mu_);
    self->dirs_.erase(fi->fh);
  }
}

void FuseServer::Ops::ReadDirCommon(fuse_req_t req, fuse_ino_t, size_t size, off_t off,
                                    struct fuse_file_info* fi, bool plus) {
  FuseServer* self = Self(req);
  core::ScopedLatency timer(self->LatencyOf(Op::kReadDir));
  std::shared_ptr<DirHandle> h;
  {
    core::MutexLock l(self->mu_);
    auto it = self->dirs_.find(fi->fh);
    if (it != self->dirs_.end()) h = it->second;
  }
  if (h == nullptr) return (void)fuse_reply_err(req, EBADF);
  core::MutexLock hl(h->mu);
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
        e.ino = self->inodes_.Remember(child);
        e.attr_timeout = self->AttrTimeout(attr);
        e.entry_timeout = self->EntryTimeout(attr);
        self->FillStat(child, attr, &e.attr);
      }
      n = fuse_add_direntry_plus(req, buf.data() + used, size - used, name, &e,
                                 static_cast<off_t>(i + 1));
      if (n > size - used) {
        if (!dot) self->inodes_.Forget(e.ino, 1);  // not sent: the kernel holds no reference
        break;
      }
    }
    used += n;
  }
  fuse_reply_buf(req, buf.data(), used);
}

void FuseServer::Ops::ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                              struct fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, false);
}
void FuseServer::Ops::ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                                  struct fuse_file_info* fi) {
  ReadDirCommon(req, ino, size, off, fi, true);
}

void FuseServer::Ops::ReleaseDir(fuse_req_t req, fuse_ino_t, struct fuse_file_info* fi) {
  FuseServer* self = Self(req);
  std::shared_ptr<DirHandle> h;  // let go after the unlock
  {
    core::MutexLock l(self->mu_);
    auto it = self->dirs_.find(fi->fh);
    if (it != self->dirs_.end()) {
      h = std::move(it->second);
      self->dirs_.erase(it);
    }
  }
  fuse_reply_err(req, 0);
}

}  // namespace perch::fuse
