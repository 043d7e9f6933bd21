// FuseServer::Ops (ops.h): open, read and release of files. An open is
// answered in the mode the open policy gives its inode (passthrough or
// through the page cache); a read is answered with spliced block files (a
// hit) or later, by whichever thread has its bytes (PendingReplies).
#define FUSE_USE_VERSION 312
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <spdlog/spdlog.h>
#include <sys/uio.h>

#include <algorithm>
#include <boost/asio/post.hpp>
#include <chrono>
#include <cstddef>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "daemon/core/wait.h"
#include "fuse/ops.h"
#include "fuse/reply_error.h"
#include "fuse/reply_pool.h"

namespace perch::fuse {

using core::ObjectPath;
using core::Status;
using core::StatusCode;
using Op = core::OpMetrics::Op;

namespace {

// A reply up to this size is copied into the kernel by the thread that has
// its bytes (a small file's whole reply); a larger one goes to the reply
// threads, which keeps 1 MiB copies off the net loop.
constexpr uint64_t kInlineReplyBytes = 256 << 10;

uint64_t ReplyBytes(const core::Result<std::vector<core::SharedBytes>>& r) {
  uint64_t n = 0;
  if (r.ok())
    for (const core::SharedBytes& p : *r) n += p.length;
  return n;
}

// Replies with the parts of blocks a read yields (or its error).
void ReplyParts(fuse_req_t req, const core::Result<std::vector<core::SharedBytes>>& r) {
  if (!r.ok()) return FuseServer::Ops::ReplyStatus(req, "read", r.status());
  if (r->empty()) return (void)fuse_reply_buf(req, nullptr, 0);
  std::vector<struct iovec> iov;
  iov.reserve(r->size());
  for (const core::SharedBytes& p : *r) {
    const std::string_view v = p.view();
    iov.push_back({const_cast<char*>(v.data()), v.size()});
  }
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
}

void Observe(core::LatencyHistogram* hist, std::chrono::steady_clock::time_point started) {
  if (hist != nullptr) hist->Observe(std::chrono::steady_clock::now() - started);
}

// Replies with the bytes of `slices`, in order, moved from their files.
// The slices keep their blocks in use until the caller lets them go, after
// this returns: by then the kernel has copied every spliced byte into the
// reply (a hole punched while a splice reads reads as zeros).
void ReplySlices(fuse_req_t req, const std::vector<core::BlockSlice>& slices) {
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

}  // namespace

void FuseServer::Ops::Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  PERCH_FUSE_GUARD(req, "open", {
    FuseServer* self = Self(req);
    core::ScopedLatency timer(self->LatencyOf(Op::kOpen));
    if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
      return (void)fuse_reply_err(req, EROFS);
    }
    if (self->policy_.no_open()) return (void)fuse_reply_err(req, ENOSYS);
    ObjectPath path;
    if (!self->inodes_.PathOf(ino, &path)) return (void)fuse_reply_err(req, ESTALE);
    auto h = self->fs_.Open(path);
    if (!h.ok()) {
      return (void)(h.status().code() == StatusCode::kInvalidArgument
                        ? fuse_reply_err(req, EISDIR)
                        : (ReplyStatus(req, "open", h.status()), 0));
    }
    fi->fh = *h;
    fi->noflush = 1;
    {
      core::MutexLock l(self->mu_);
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

void FuseServer::Ops::Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info* fi) {
  PERCH_FUSE_GUARD(req, "read", {
    FuseServer* self = Self(req);
    const auto started = std::chrono::steady_clock::now();
    ObjectPath path;  // no handle (no-open): the file is named by its inode
    if (self->stale_->Contains(ino) || (fi->fh == 0 && !self->inodes_.PathOf(ino, &path))) {
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
void FuseServer::Ops::ReadLater(FuseServer* self, fuse_req_t req, fuse_ino_t ino, uint64_t fh,
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

void FuseServer::Ops::Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  if (fi->fh != 0) {
    Self(req)->Released(ino, fi->fh);
    Self(req)->fs_.Release(fi->fh);
  }
  fuse_reply_err(req, 0);
}

bool FuseServer::OpenDirect(uint64_t ino, uint64_t fh) {
  if (!passthrough_.agreed()) return false;
  const bool direct = OpenDirectly(ino, fh);
  if (policy_.deciding()) Decide();
  return direct;
}

void FuseServer::Decide() {
  const OpenPolicy::Decision d = policy_.Decide();
  switch (d.kind) {
    case OpenPolicy::Decision::kNotYet:
      return;
    case OpenPolicy::Decision::kPassthrough:
      return spdlog::info(
          "fuse: {} of the first {} opened files are a block or larger: opens stay "
          "answered (passthrough)",
          d.large_opens, d.opens);
    case OpenPolicy::Decision::kNoOpen:
      return spdlog::info(
          "fuse: {} of the first {} opened files are a block or larger: a small-file "
          "workload; no-open from now on (two fewer requests per file, no passthrough)",
          d.large_opens, d.opens);
    case OpenPolicy::Decision::kNoOpenLater:
      return spdlog::info(
          "fuse: {} of the first {} opened files are a block or larger: a small-file "
          "workload; no passthrough from now on, and no-open once the {} opens in passthrough "
          "are closed",
          d.large_opens, d.opens, d.direct_opens);
  }
}

bool FuseServer::OpenDirectly(uint64_t ino, uint64_t fh) {
  std::optional<OpenPolicy::Mode> mode = policy_.Join(ino, fh);
  if (!mode) {
    // No open file yet: the whole object, if cached, becomes the inode's
    // backing file (disk I/O and an ioctl: under no lock).
    auto file = fs_.WholeFile(fh);
    policy_.Count(file.ok() || file.status().code() != StatusCode::kInvalidArgument);
    int32_t id = 0;
    if (file.ok()) {
      auto opened = passthrough_.OpenBacking(fuse_session_fd(se_), (*file)->fd());
      if (opened.ok()) {
        id = *opened;
      } else if (!backing_refused_.exchange(true)) {  // the same for every file: said once
        spdlog::warn("fuse: {}; such files are read through perchd", opened.status().message());
      }
    }
    const OpenPolicy::Settled settled =
        policy_.Settle(ino, fh, id, file.ok() ? *file : OpenPolicy::Backing());
    if (id > 0 && !settled.used) passthrough_.CloseBacking(fuse_session_fd(se_), id);
    mode = settled.mode;
  }
  if (mode->direct) passthrough_.Direct(fh, mode->backing_id);
  return mode->direct;
}

void FuseServer::Released(uint64_t ino, uint64_t fh) {
  {
    core::MutexLock l(mu_);
    open_files_.erase(fh);
  }
  const OpenPolicy::Released r = policy_.Release(ino, fh);  // its backing let go at the end
  if (!r.known) return;
  passthrough_.Undo(fh);  // a reply never sent
  if (r.close_backing) {
    // The kernel let go of the inode's backing file before it sent this release.
    passthrough_.CloseBacking(fuse_session_fd(se_), *r.close_backing);
  }
  if (r.now_no_open) {
    spdlog::info("fuse: the last file open in passthrough is closed: no-open from now on");
  }
}

}  // namespace perch::fuse
