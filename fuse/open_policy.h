// OpenPolicy: the kernel's side of an open. Whether the mount answers opens
// at all (FUSE no-open), and whether a file opened passes through to the
// cache's file of its object (FUSE passthrough) or is read through perchd
// and the page cache. Inputs in, decisions out: no libfuse and no I/O here;
// FuseServer asks the kernel and the cache, then does what this decides.
//
// The mount as a whole (Start, Decide):
//  - passthrough alone (wanted, offered by the kernel): opens are answered,
//    each says whether the file passes through;
//  - no-open alone: opens are not answered (ENOSYS to the first tells the
//    kernel to open every file itself, keep_cache implied);
//  - both: the mount decides once. After `decide_after` opens, if fewer than
//    1 in 100 were of objects a block or larger (a small-file workload), no
//    file starts passing through from then on, and once no file is open in
//    passthrough (the kernel refuses a no-open open of an inode that is) opens
//    are answered no more; otherwise opens stay answered, for good.
//
// An inode (Join, Settle, Release): the kernel wants every open of an inode
// in one mode. While files of it are open through the page cache none may
// pass through, and while some pass through all must, to the same backing
// file. So an open joins the mode of the inode's open files; the first open
// passes through if the kernel took the object's whole cached file as a
// backing file, unless passthrough is over. Modes are kept for inodes with
// open files only (a `find` remembers millions of inodes).
//
// Thread-safety: all methods from any thread; mu_ is a leaf lock. no_open()
// and deciding() take no lock (every open asks).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <unordered_map>

#include "daemon/core/mutex.h"
#include "fuse/session_state.h"

namespace perch::core {
class BlockFd;
}

namespace perch::fuse {

class OpenPolicy {
 public:
  // A cached object's file the kernel reads a file that passes through from;
  // held (kept from eviction) while files pass through to it.
  using Backing = std::shared_ptr<const core::BlockFd>;

  explicit OpenPolicy(uint32_t decide_after) : decide_after_(decide_after) {}
  OpenPolicy(const OpenPolicy&) = delete;
  OpenPolicy& operator=(const OpenPolicy&) = delete;

  // At INIT: `passthrough`, wanted and offered by the kernel; `no_open`,
  // likewise. Sets the mount's mode (above).
  void Start(bool passthrough, bool no_open);
  // Opens are not answered: ENOSYS (the kernel opens files itself).
  bool no_open() const { return no_open_.load(); }
  // Passthrough and no-open both wanted, not yet decided: opens are counted.
  bool deciding() const { return deciding_.load(std::memory_order_relaxed); }

  // How an open file is served: passing through to backing file
  // `backing_id` (the kernel's id for it), or through the page cache.
  struct Mode {
    bool direct = false;
    int32_t backing_id = 0;  // if direct
  };
  // Open `fh` of `ino`, which has other open files: it joins their mode.
  // nullopt if none is open: the caller looks at the object (Count) and
  // offers it as a backing file (Settle).
  std::optional<Mode> Join(uint64_t ino, uint64_t fh);
  // While deciding: one more open, of an object a block or larger (`large`:
  // not known to be shorter than a block).
  void Count(bool large);
  // The first open `fh` of `ino` (Join gave nullopt). `backing_id` > 0: the
  // kernel took `backing` as a backing file; it passes through unless
  // passthrough is over or another first open of `ino` settled meanwhile
  // (this one then joins that mode). `used` false: the caller closes
  // `backing_id` with the kernel.
  struct Settled {
    Mode mode;
    bool used = false;  // backing_id became the inode's backing file
  };
  Settled Settle(uint64_t ino, uint64_t fh, int32_t backing_id, const Backing& backing);

  // Decides the mount's mode once `decide_after` opens are counted (the
  // first call then; later ones find it decided).
  struct Decision {
    enum Kind {
      kNotYet,       // not deciding, or too few opens counted
      kPassthrough,  // 1 in 100 or more were large: opens stay answered
      kNoOpen,       // a small-file workload: no-open from now on
      kNoOpenLater,  // ... once the `direct_opens` files in passthrough close
    };
    Kind kind = kNotYet;
    uint64_t opens = 0, large_opens = 0;
    uint32_t direct_opens = 0;
  };
  Decision Decide();

  // Open file `fh` of `ino` was released (or its open never answered).
  struct Released {
    bool known = false;   // an open this policy placed (else nothing changed)
    bool direct = false;  // it passed through
    // The inode's last file in passthrough closed: the caller closes this
    // backing id with the kernel, and lets `backing` go.
    std::optional<int32_t> close_backing;
    Backing backing;
    bool now_no_open = false;  // the switch to no-open that Decide put off
  };
  Released Release(uint64_t ino, uint64_t fh);

  // The handoff (issue 31): the mount's mode, the inodes' backing ids, and
  // whether each of `s->files` (listed by the caller) passes through.
  void Save(SessionState* s) const;
  // The state `s` saved, with `backings`: inode -> the held file of each
  // backing in s.backings. Call after Start (INIT replayed): it overrides it.
  void Restore(const SessionState& s, std::unordered_map<uint64_t, Backing> backings);

 private:
  // The modes of one inode's open files (only one of the counts is nonzero).
  struct Inode {
    uint32_t cached_opens = 0, direct_opens = 0;
    int32_t backing_id = 0;  // while direct_opens > 0
    Backing backing;         // the file the kernel reads
  };
  Mode Place(Inode& inode, uint64_t fh, bool direct) PERCH_REQUIRES(mu_);

  const uint32_t decide_after_;
  std::atomic<bool> no_open_{false};   // set at Start, or on deciding
  std::atomic<bool> deciding_{false};  // passthrough and no-open both wanted: not yet decided
  std::atomic<uint64_t> opens_{0}, large_opens_{0};  // counted while deciding_

  mutable core::Mutex mu_;
  std::unordered_map<uint64_t, Inode> inodes_ PERCH_GUARDED_BY(mu_);  // with open files
  std::unordered_map<uint64_t, bool> direct_ PERCH_GUARDED_BY(mu_);   // fh -> passes through
  // Opens answered in passthrough and not yet released, over all inodes.
  uint32_t direct_opens_ PERCH_GUARDED_BY(mu_) = 0;
  // Decided: a small-file workload. No inode starts passing through, and
  // no_open_ is set once direct_opens_ is 0.
  bool no_passthrough_ PERCH_GUARDED_BY(mu_) = false;
};

}  // namespace perch::fuse
