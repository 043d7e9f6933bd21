// FuseServer::Ops (ops.h): open, read and release of files. An open is
// answered in the mode the open policy gives its inode (passthrough or
// through the page cache); a read (FileSystem::Read) is answered with its
// pieces, block files spliced and bytes in memory, by the worker that asked
// when they are at hand (hits), or later by whichever thread has them
// (PendingReplies).
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

#include "daemon/core/mutex.h"
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

using Pieces = core::Result<std::vector<core::ReadPiece>>;

uint64_t ReplyBytes(const Pieces& r) {
  uint64_t n = 0;
  if (r.ok())
    for (const core::ReadPiece& p : *r) n += p.length();
  return n;
}

void Observe(core::LatencyHistogram* hist, std::chrono::steady_clock::time_point started) {
  if (hist != nullptr) hist->Observe(std::chrono::steady_clock::now() - started);
}

// Replies with the pieces a read yields (or its error). Slices (hits) are
// moved from their files (spliced when the kernel allows it, one after the
// other), bytes in memory go as they are; a reply of bytes only is one iovec
// write. The slices keep their blocks in use until the caller lets them go,
// after this returns: by then the kernel has copied every spliced byte into
// the reply (a hole punched while a splice reads reads as zeros).
void ReplyPieces(fuse_req_t req, const Pieces& r) {
  if (!r.ok()) return FuseServer::Ops::ReplyStatus(req, "read", r.status());
  if (r->empty()) return (void)fuse_reply_buf(req, nullptr, 0);
  const bool any_slice =
      std::any_of(r->begin(), r->end(), [](const core::ReadPiece& p) { return p.slice(); });
  if (!any_slice) {
    std::vector<struct iovec> iov;
    iov.reserve(r->size());
    for (const core::ReadPiece& p : *r) {
      const std::string_view v = p.bytes()->view();
      iov.push_back({const_cast<char*>(v.data()), v.size()});
    }
    fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
    return;
  }
  // fuse_bufvec ends in a one-element array: room for the others after it.
  std::vector<std::byte> storage(sizeof(fuse_bufvec) + (r->size() - 1) * sizeof(fuse_buf));
  auto* bv = new (storage.data()) fuse_bufvec{};
  bv->count = r->size();
  for (size_t i = 0; i < r->size(); ++i) {
    const core::ReadPiece& p = (*r)[i];
    fuse_buf& b = bv->buf[i];
    b = fuse_buf{};
    b.size = p.length();
    if (const core::BlockSlice* slice = p.slice()) {
      b.flags = static_cast<enum fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      b.fd = slice->fd();
      b.pos = static_cast<off_t>(slice->file_offset());
    } else {
      b.mem = const_cast<char*>(p.bytes()->view().data());
    }
  }
  fuse_reply_data(req, bv, FUSE_BUF_SPLICE_MOVE);
}

// One read on its way to its answer. A completion that comes before
// FileSystem::Read returns (a hit, an error found at once) is answered by
// the FUSE worker that asked, with no deadline to watch; one that comes
// later, from whichever thread has the bytes, through PendingReplies, which
// answers EIO at the deadline if it does not come in time.
struct ReadCall {
  core::Mutex mu;  // before PendingReplies' own (Add is called under it)
  bool returned PERCH_GUARDED_BY(mu) = false;        // FileSystem::Read returned
  std::optional<Pieces> early PERCH_GUARDED_BY(mu);  // what came before that
  uint64_t token PERCH_GUARDED_BY(mu) = 0;           // PendingReplies' (0: none; it is answered)
};

// The object changed at the origin, or its cached copy failed its digest:
// the kernel's pages of the old version (or of the wrong bytes) must go
// before any read of the new one is answered.
bool PagesMustGo(const core::Status& s) {
  return s.code() == StatusCode::kStale || s.code() == StatusCode::kCorrupt;
}

}  // namespace

void FuseServer::Ops::Open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
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
  // A copy that failed its digest drops the pages of it the kernel holds;
  // so does a file whose answers carry a freshness lifetime: its pages may
  // be of a version the origin replaced (this open revalidated it).
  bool pages_wrong = false;
  const bool direct = self->OpenDirect(ino, *h, &pages_wrong);
  fi->keep_cache = direct || pages_wrong || self->fs_.MaxAge(*h) >= 0 ? 0 : 1;
  if (fuse_reply_open(req, fi) != 0) {
    self->Released(ino, *h);
    self->fs_.Release(*h);
  }
}

void FuseServer::Ops::Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info* fi) {
  FuseServer* self = Self(req);
  const auto started = std::chrono::steady_clock::now();
  core::LatencyHistogram* hist = self->LatencyOf(Op::kRead);
  ObjectPath path;  // no handle (no-open): the file is named by its inode
  if (self->stale_->Contains(ino) || (fi->fh == 0 && !self->inodes_.PathOf(ino, &path))) {
    fuse_reply_err(req, ESTALE);
    return Observe(hist, started);
  }
  ReadAndReply(self, req, ino,
               fi->fh != 0 ? core::FileRef::Handle(fi->fh) : core::FileRef::Path(std::move(path)),
               static_cast<uint64_t>(off), size, started);
}

void FuseServer::Ops::ReadAndReply(FuseServer* self, fuse_req_t req, fuse_ino_t ino,
                                   const core::FileRef& file, uint64_t off, size_t size,
                                   std::chrono::steady_clock::time_point started) {
  core::LatencyHistogram* hist = self->LatencyOf(Op::kRead);
  auto call = std::make_shared<ReadCall>();
  auto replies = self->replies_;
  StaleInodes* stale = self->stale_.get();
  ReplyPool* pool = self->reply_pool_.get();
  auto done = [call, replies, stale, pool, ino, hist, started](Pieces r) {
    uint64_t token = 0;
    {
      core::MutexLock l(call->mu);
      if (!call->returned) {  // the worker that asked answers it
        call->early.emplace(std::move(r));
        return;
      }
      token = call->token;
    }
    fuse_req_t claimed = replies->Claim(token);
    if (claimed == nullptr) return;  // answered already: its time was up
    if (PagesMustGo(r.status())) stale->Mark(ino);
    // Claimed: the server (and its pool) stays until Answered().
    auto reply = [replies, claimed, hist, started, r = std::move(r)] {
      try {
        ReplyPieces(claimed, r);
      } catch (const std::exception& e) {
        spdlog::error("fuse read: unexpected exception: {}", e.what());
        fuse_reply_err(claimed, EIO);
      }
      Observe(hist, started);
      replies->Answered();
    };
    // A large reply is copied into the kernel by the reply threads, not by
    // the thread that completed the fetch (the net loop).
    if (ReplyBytes(r) <= kInlineReplyBytes) return reply();
    auto job = std::make_shared<decltype(reply)>(std::move(reply));
    try {
      boost::asio::post(pool->threads, [job] { (*job)(); });
    } catch (const std::exception&) {
      (*job)();  // claimed: it must be answered, here if not there
    }
  };
  bool failed = false;
  try {
    self->fs_.Read(file, off, size, std::move(done));
  } catch (const std::exception& e) {
    spdlog::error("fuse read: unexpected exception: {}", e.what());
    failed = true;
  }
  std::optional<Pieces> early;
  {
    core::MutexLock l(call->mu);
    call->returned = true;
    early.swap(call->early);
    if (!early && !failed) {
      // Registered under the call's lock: a completion now waits for the
      // token. The deadline is taken now, as PendingReplies asks (deadlines
      // in the order of the Adds): op_timeout from here, plus the slack.
      call->token = replies->Add(req, self->fs_.NewDeadline() + core::kAnswerSlack);
      return;
    }
  }
  if (early) {
    // Answered here, by the worker that asked.
    if (PagesMustGo(early->status())) stale->Mark(ino);
    ReplyPieces(req, *early);
    early.reset();  // the slices go once the kernel has the bytes
  } else {
    fuse_reply_err(req, EIO);  // no answer came, and none will be taken (token 0)
  }
  Observe(hist, started);
}

void FuseServer::Ops::Release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info* fi) {
  if (fi->fh != 0) {
    Self(req)->Released(ino, fi->fh);
    Self(req)->fs_.Release(fi->fh);
  }
  fuse_reply_err(req, 0);
}

bool FuseServer::OpenDirect(uint64_t ino, uint64_t fh, bool* pages_wrong) {
  if (!passthrough_.agreed()) return false;
  const bool direct = OpenDirectly(ino, fh, pages_wrong);
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

bool FuseServer::OpenDirectly(uint64_t ino, uint64_t fh, bool* pages_wrong) {
  std::optional<OpenPolicy::Mode> mode = policy_.Join(ino, fh);
  if (!mode) {
    // No open file yet: the whole object, if cached, becomes the inode's
    // backing file (disk I/O and an ioctl: under no lock).
    auto file = fs_.WholeFile(fh);
    if (file.status().code() == StatusCode::kCorrupt) *pages_wrong = true;
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
