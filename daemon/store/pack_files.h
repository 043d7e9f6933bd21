// PackFiles: the files that small objects share (FileBlockStore; docs/design.md
// "On-disk format"):
//
//   <dir>/<16 hex digits>.pack
//
// A record (a block header and the block's bytes, block_file_format.h) is
// appended to the active pack at the next 4 KiB-aligned offset; once the
// next one would take the pack past `max_bytes`, a pack with the next number
// becomes the active one. A new small file thus costs one pwrite into a file
// that exists, not a new inode, a directory entry and a rename: on this
// project's reference machine creating the file was the largest single cost of
// a cold small file (issue 14).
//
// On ext4 the active pack is allocated `reserve_bytes` ahead of its writes
// (fallocate; fewer allocations per record), and cut back to its last record
// when it is left or the class is destroyed. What is allocated ahead is disk
// the cache's quota does not count: perchd sizes it by the quota (ReserveFor).
//
// Dropping a record frees its bytes by punching a hole over them
// (fallocate), `grace` later (on `time`, core/clock.h), on a thread of this
// class's, and not while `in_use` says its object's block is in use (a reply splicing or sending
// it, a read): the hole then waits another grace, and again, until that use is over (a grace of 0
// punches at once, in Drop, unless in use). A pack of this process whose records were all dropped
// is removed at once (unless it is the active one). Packs of earlier processes are looked at by the
// start-up walk when nothing names any record in them (FileBlockStore
// re-adopts the records there, or removes the pack); until then their
// dropped records are holes.
//
// What a record holds and what names it (the index's "sp/" records) is
// FileBlockStore's business; this class only places, opens and frees.
//
// Thread-safety: all methods from any thread. mu_ is a leaf, not held
// across I/O except the creation of a new pack.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "daemon/core/block_store.h"
#include "daemon/core/clock.h"
#include "daemon/core/mutex.h"
#include "daemon/core/result.h"
#include "daemon/store/open_block_cache.h"

namespace perch::store {

class PackFiles {
 public:
  static constexpr uint64_t kAlign = 4096;
  static constexpr uint64_t kDefaultMaxBytes = 64 << 20;
  static constexpr std::chrono::milliseconds kDefaultGrace{1000};
  static constexpr size_t kDefaultOpenFiles = 64;
  // The most the active pack is allocated ahead of its writes.
  static constexpr uint64_t kMaxReserveBytes = 8 << 20;

  // `reserve_bytes`: how far ahead of its writes the active pack is
  // allocated (0: not at all; on ext4 only).
  // `in_use(object_id)` (may be null: never): whether the record of
  // `object_id` that a Drop named may still be read.
  // `time`: what the grace is measured on; outlives the class.
  explicit PackFiles(std::string dir, uint64_t max_bytes = kDefaultMaxBytes,
                     std::chrono::milliseconds grace = kDefaultGrace,
                     size_t open_files = kDefaultOpenFiles, uint64_t reserve_bytes = 0,
                     std::function<bool(const std::string& object_id)> in_use = nullptr,
                     const core::TimeSource& time = core::TimeSource::Steady());
  // What to allocate ahead for a cache of `quota` bytes: a 1024th of it, at
  // most kMaxReserveBytes, and nothing for a quota under 1 GiB (a small quota
  // is not overshot by more than a record's padding).
  static uint64_t ReserveFor(uint64_t quota);
  // Punches what still waits for its grace (nothing reads any more).
  ~PackFiles();
  PackFiles(const PackFiles&) = delete;
  PackFiles& operator=(const PackFiles&) = delete;

  // A pack, open read-write (the descriptor slices and holes use).
  struct File {
    std::shared_ptr<const core::BlockFd> fd;
    uint64_t ino = 0;
  };
  // Where a record went.
  struct Placed {
    uint64_t pack = 0, offset = 0;
    File file;
  };

  // Writes `header` then `data` as one record. kNoSpace when the disk is full.
  core::Result<Placed> Append(std::string_view header, std::string_view data);
  // Pack `pack`, opened (kept open, up to `open_files` packs); kNotFound if
  // there is no such file.
  core::Result<File> Open(uint64_t pack);
  // The record of `length` bytes at `offset` of `pack` (of object
  // `object_id`; "" for one nothing ever named) is named by nothing any
  // more: its bytes go once nobody uses them (see the header comment).
  void Drop(uint64_t pack, uint64_t offset, uint64_t length, const std::string& object_id = "");
  // The start-up walk: the packs of earlier processes that `named` (records
  // the index names, by pack) has none in, in order.
  std::vector<uint64_t> Unnamed(const std::map<uint64_t, uint64_t>& named);
  // Removes pack `pack` of an earlier process; adds 1 and the bytes it held
  // to `*removed` / `*bytes`.
  void RemoveEarlier(uint64_t pack, uint64_t* removed, uint64_t* bytes);

  std::string PathOf(uint64_t pack) const;

  // How many passes over the holes due have ended (on the puncher thread, or
  // in Drop for a grace of 0), and a wait until more than `passes` have: a
  // test that moved its time on knows the puncher has looked (false after
  // 10 s of real time without).
  uint64_t PunchPassesForTest();
  bool AwaitPunchPassForTest(uint64_t passes);
  // Bytes a record of `length` bytes takes in its pack.
  static uint64_t Extent(uint64_t length) { return (length + kAlign - 1) / kAlign * kAlign; }

 private:
  struct Hole {
    uint64_t pack, offset, length;
    core::Clock::time_point due;
    std::string object_id;  // whose record it was ("": nobody's)
  };
  // Lists the directory once: the first pack number of this process.
  void StartLocked() PERCH_REQUIRES(mu_);
  // Allocates the active pack from `from` (a record's offset) to
  // reserve_bytes_ past active_end_, once active_end_ has passed
  // reserved_end_.
  void ReserveLocked(uint64_t from) PERCH_REQUIRES(mu_);
  // Frees what the active pack has reserved past its last record (as the
  // pack is left, and at shutdown).
  void TrimLocked() PERCH_REQUIRES(mu_);
  // Removes pack `pack` (all its records dropped).
  void RemoveLocked(uint64_t pack) PERCH_REQUIRES(mu_);
  // Punches the holes due by now (all of them if `all`); one whose record is
  // in use waits another grace, unless the class is being destroyed.
  void Punch(bool all) PERCH_EXCLUDES(mu_);
  // The puncher thread: waits for holes to fall due.
  void PunchLoop() PERCH_EXCLUDES(mu_);
  // Starts the puncher thread unless it runs (or the class is being destroyed).
  void StartPuncherLocked() PERCH_REQUIRES(mu_);
  // How soon a hole whose record was in use is looked at again, at least.
  static constexpr std::chrono::milliseconds kRetry{50};

  const std::string dir_;
  const uint64_t max_bytes_;
  const std::chrono::milliseconds grace_;
  const uint64_t reserve_bytes_;
  const std::function<bool(const std::string&)> in_use_;
  const core::TimeSource& time_;
  OpenFileCache<uint64_t, File> open_;

  core::Mutex mu_;
  bool started_ PERCH_GUARDED_BY(mu_) = false;
  uint64_t first_ PERCH_GUARDED_BY(mu_) = 0;   // packs >= this are this process's
  uint64_t active_ PERCH_GUARDED_BY(mu_) = 0;  // 0 before the first append
  uint64_t active_end_ PERCH_GUARDED_BY(mu_) = 0;
  // The active pack is allocated, and sized, up to here (0: nothing reserved).
  uint64_t reserved_end_ PERCH_GUARDED_BY(mu_) = 0;
  // Whether to allocate the active pack ahead (decided as it is made, by its
  // filesystem; false once it said EOPNOTSUPP).
  bool reserve_works_ PERCH_GUARDED_BY(mu_) = false;
  File active_file_ PERCH_GUARDED_BY(mu_);
  // Records in each pack of this process not yet dropped.
  std::map<uint64_t, uint64_t> live_ PERCH_GUARDED_BY(mu_);
  std::deque<Hole> holes_ PERCH_GUARDED_BY(mu_);  // in order of `due`
  bool stopping_ PERCH_GUARDED_BY(mu_) = false;
  core::CondVar holes_cv_;  // a hole was queued, or stopping_
  uint64_t punch_passes_ PERCH_GUARDED_BY(mu_) = 0;
  core::CondVar passes_cv_;  // punch_passes_ grew
  std::thread puncher_;      // started with the first hole (grace > 0)
};

}  // namespace perch::store
