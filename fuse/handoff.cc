// FuseServer::Detach and Adopt: the kernel-facing state of a mount
// (SessionState) saved by the perchd that hands it over and served by the
// one that takes it (issue 31). See fuse_server.h.
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <unordered_map>
#include <vector>

#include "fuse/fuse_server.h"

namespace perch::fuse {

using core::ObjectPath;
using core::Status;

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
  inodes_.Save(&s);
  {
    core::MutexLock l(mu_);
    s.next_dh = next_dh_;
    for (const auto& [dh, h] : dirs_) s.dirs.push_back({dh, h->path.str()});
    for (const auto& [fh, ino] : open_files_) s.files.push_back({fh, ino, "", {}, false});
  }
  policy_.Save(&s);  // the mount's mode, the backing ids, which files pass through
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
  if (Status s = inodes_.Restore(state); !s.ok()) return s;
  {
    core::MutexLock l(mu_);
    next_dh_ = std::max<uint64_t>(state.next_dh, 1);
    for (const auto& d : state.dirs) {
      auto path = ObjectPath::Parse(d.path);
      if (!path.ok()) return core::InvalidArgumentError("handoff: bad path " + d.path);
      dirs_.emplace(d.dh, std::make_shared<DirHandle>(*path));
    }
  }
  std::unordered_map<uint64_t, uint64_t> direct_fh_of;  // inode -> one of its passthrough files
  for (const auto& f : state.files) {
    auto path = ObjectPath::Parse(f.path);
    if (!path.ok()) return core::InvalidArgumentError("handoff: bad path " + f.path);
    fs_.AdoptOpenFile(f.fh, *path, f.attr);
    {
      core::MutexLock l(mu_);
      open_files_[f.fh] = f.ino;
    }
    if (state.passthrough_agreed && f.direct) direct_fh_of[f.ino] = f.fh;
  }
  std::unordered_map<uint64_t, OpenPolicy::Backing> held;  // inode -> its backing file
  for (const auto& b : state.backings) {
    // The kernel holds the backing file itself; this hold keeps its blocks
    // from eviction while files pass through to it, as the Open that
    // registered it did.
    if (auto it = direct_fh_of.find(b.ino); it != direct_fh_of.end()) {
      if (auto file = fs_.WholeFile(it->second); file.ok()) held[b.ino] = *std::move(file);
    }
  }
  // libfuse's session has not seen INIT (the kernel sent it to the previous
  // perchd): it is fed the same one, which runs Ops::Init as then, and then
  // the open policy is put back as it was.
  passthrough_.ReplayInit(se_, state.init, state.passthrough_agreed);
  policy_.Restore(state, std::move(held));
  spdlog::info(
      "fuse: took over {} from the previous perchd: {} inodes, {} open files, {} open "
      "directories",
      mountpoint, state.nodes.size(), state.files.size(), state.dirs.size());
  return Status::Ok();
}

}  // namespace perch::fuse
