#include "fuse/open_policy.h"

#include <utility>

namespace perch::fuse {

void OpenPolicy::Start(bool passthrough, bool no_open) {
  no_open_ = !passthrough && no_open;
  deciding_ = passthrough && no_open;
}

OpenPolicy::Mode OpenPolicy::Place(Inode& inode, uint64_t fh, bool direct) {
  (direct ? inode.direct_opens : inode.cached_opens)++;
  if (direct) direct_opens_++;
  direct_[fh] = direct;
  return Mode{direct, direct ? inode.backing_id : 0};
}

std::optional<OpenPolicy::Mode> OpenPolicy::Join(uint64_t ino, uint64_t fh) {
  core::MutexLock l(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return std::nullopt;
  return Place(it->second, fh, it->second.direct_opens > 0);
}

void OpenPolicy::Count(bool large) {
  if (!deciding_.load(std::memory_order_relaxed)) return;
  opens_++;
  if (large) large_opens_++;
}

OpenPolicy::Settled OpenPolicy::Settle(uint64_t ino, uint64_t fh, int32_t backing_id,
                                       const Backing& backing) {
  core::MutexLock l(mu_);
  auto [it, first] = inodes_.try_emplace(ino);
  Inode& inode = it->second;
  if (backing_id > 0 && first && !no_passthrough_) {
    inode.backing_id = backing_id;
    inode.backing = backing;
    return Settled{Place(inode, fh, true), true};
  }
  // Another open of the inode settled its mode meanwhile (or nothing to
  // pass, or passthrough is over: Decide).
  return Settled{Place(inode, fh, inode.direct_opens > 0), false};
}

OpenPolicy::Decision OpenPolicy::Decide() {
  Decision d;
  d.opens = opens_.load();
  d.large_opens = large_opens_.load();
  if (d.opens < decide_after_ || !deciding_.exchange(false)) return d;
  if (d.large_opens * 100 >= d.opens) {
    d.kind = Decision::kPassthrough;
    return d;
  }
  // The kernel refuses an open it makes itself (no-open) of an inode that
  // is open in passthrough (EIO until that file is closed): no file starts
  // passing through from now on, and no-open waits for those that do.
  core::MutexLock l(mu_);
  no_passthrough_ = true;
  d.direct_opens = direct_opens_;
  if (direct_opens_ == 0) no_open_ = true;  // the next open answers ENOSYS
  d.kind = direct_opens_ == 0 ? Decision::kNoOpen : Decision::kNoOpenLater;
  return d;
}

OpenPolicy::Released OpenPolicy::Release(uint64_t ino, uint64_t fh) {
  Released r;
  core::MutexLock l(mu_);
  auto open = direct_.find(fh);
  if (open == direct_.end()) return r;
  r.known = true;
  r.direct = open->second;
  direct_.erase(open);
  if (r.direct && direct_opens_ > 0) direct_opens_--;
  // The last file open in passthrough is closed: the switch Decide put off.
  if (r.direct && direct_opens_ == 0 && no_passthrough_ && !no_open_) {
    no_open_ = true;
    r.now_no_open = true;
  }
  auto it = inodes_.find(ino);
  if (it != inodes_.end()) {
    Inode& inode = it->second;
    uint32_t& count = r.direct ? inode.direct_opens : inode.cached_opens;
    if (count > 0) count--;
    if (r.direct && inode.direct_opens == 0) {
      // The inode's last file in passthrough: its backing file goes.
      r.close_backing = inode.backing_id;
      inode.backing_id = 0;
      r.backing = std::move(inode.backing);
    }
    if (inode.direct_opens == 0 && inode.cached_opens == 0) inodes_.erase(it);
  }
  return r;
}

void OpenPolicy::Save(SessionState* s) const {
  s->no_open = no_open_;
  s->deciding = deciding_;
  s->opens = opens_;
  s->large_opens = large_opens_;
  core::MutexLock l(mu_);
  s->no_passthrough = no_passthrough_;
  for (const auto& [ino, inode] : inodes_) {
    if (inode.direct_opens > 0) s->backings.push_back({ino, inode.backing_id});
  }
  for (SessionState::File& f : s->files) {
    auto d = direct_.find(f.fh);
    f.direct = d != direct_.end() && d->second;
  }
}

void OpenPolicy::Restore(const SessionState& s, std::unordered_map<uint64_t, Backing> backings) {
  {
    core::MutexLock l(mu_);
    no_passthrough_ = s.no_passthrough;
    if (s.passthrough_agreed) {
      for (const SessionState::File& f : s.files) {
        direct_[f.fh] = f.direct;
        Inode& inode = inodes_[f.ino];
        (f.direct ? inode.direct_opens : inode.cached_opens)++;
        if (f.direct) direct_opens_++;
      }
    }
    for (const SessionState::Backing& b : s.backings) {
      Inode& inode = inodes_[b.ino];
      inode.backing_id = b.id;
      auto held = backings.find(b.ino);
      inode.backing = held != backings.end() ? std::move(held->second) : nullptr;
    }
  }
  no_open_ = s.no_open;
  deciding_ = s.deciding;
  opens_ = s.opens;
  large_opens_ = s.large_opens;
}

}  // namespace perch::fuse
