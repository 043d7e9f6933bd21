// Scrubber: re-reads what the cache holds and checks it, so that a block that
// rotted on disk after it was checked (a bad sector, a flipped bit) is found
// before a reader gets it (issue 30, item 5): a read checks a block on its
// first read in a run, and a read of part of it after that takes it as it is
// (a file the kernel reads in passthrough, too).
//
// Design. A walk goes over the catalog's blocks in object id order
// (CacheCatalog::ScrubPage, a page at a time, its lock held only to copy the
// page) and asks the store to check each one against its CRC32C
// (BlockStore::Verify: the whole block read again, whatever a read would
// skip). A block that fails is dropped by the store and forgotten by the
// catalog, counted, logged once with its path, and fetched again by its next
// read. A block gone before its turn (evicted, or dropped by a reader) is
// skipped, not counted as bad. When every block of an object passed and they
// make the whole object, and an origin's digest is recorded for it
// (ObjectDigests, which the daemon wires where digests are kept), the object's
// bytes are read once more, a block at a time, and checked against the digest;
// a mismatch drops all its blocks. Memory: a page of block keys and one block.
//
// Two kinds of walks:
//  - the background scrub (Start): one walk after another over the whole
//    cache at `rate_bytes_per_second` (0: none), pausing between steps so
//    that the bytes read per second stay at the rate; it waits for the
//    catalog's start-up walk first. Its cursor (object id, block) is kept in
//    the index ("scrub/cursor", written every `cursor_every` and at Stop), so
//    a restart goes on where the last run stopped.
//  - verify jobs (Verify, `perchctl verify`): one walk over the blocks under
//    a path, as fast as the disk allows, a step of `job_step_bytes` at a time
//    so that other jobs of the executor get their turn. Their progress goes
//    to a callback, like a warm's.
//
// Pinned blocks are walked like any other (the walk does not look at pins).
//
// Thread-safety: all methods from any thread. Steps run on the `jobs`
// executor, one at a time per walk; progress callbacks run there, one at a
// time and in order, and must not block. Lock order: a job's mu_ before
// nothing (leaf), never held across a store, catalog or index call.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/block_store.h"
#include "daemon/core/cache_catalog.h"
#include "daemon/core/defaults.h"
#include "daemon/core/executor.h"
#include "daemon/core/index.h"
#include "daemon/core/index_keys.h"
#include "daemon/core/mutex.h"
#include "daemon/core/object_digest.h"

namespace perch::core {

// The origin's digests of whole objects, where the daemon keeps them.
class ObjectDigests {
 public:
  // One object's bytes, in order, against its digest.
  class Check {
   public:
    virtual ~Check() = default;
    virtual void Update(std::string_view bytes) = 0;
    // After the last byte: true if the bytes have the digest.
    virtual bool Matches() = 0;
    // The digest, for the log ("adler32=1e720467").
    virtual std::string Describe() const = 0;
  };
  virtual ~ObjectDigests() = default;
  // A check of object `object_id` (`size` bytes) against its recorded
  // digest; null when none is recorded, or none perch can compute.
  virtual std::unique_ptr<Check> Start(const std::string& object_id, uint64_t size) = 0;
  // What else is known of `object_id` when Start gave no check (why it was
  // served unverified, a mismatch found when it was read); kUnknown if nothing.
  virtual DigestVerdict Verdict(const std::string& object_id) const = 0;
  // The walk found the cached copy of `object_id` not matching (`what`).
  virtual void Mismatched(const std::string& object_id, std::string what) = 0;
};

// What a verify job found of one file.
struct FileVerdict {
  std::string path;  // as users name it
  DigestVerdict verdict;
};

struct ScrubProgress {
  uint64_t id = 0;
  std::string path;  // what was asked, as users name it
  // Cached under the path when the job began (final once `counted`).
  uint64_t blocks_total = 0, bytes_total = 0;
  bool counted = false;
  uint64_t blocks_done = 0;  // checked (good or bad)
  uint64_t bytes_done = 0;   // bytes read to check them (of bytes_total)
  // Bytes read a second time to check whole objects against their digests
  // (not progress: bytes_done stays within bytes_total).
  uint64_t digest_bytes = 0;
  uint64_t objects_done = 0;
  uint64_t missing_blocks = 0;      // gone before their turn (evicted): not checked
  uint64_t unreadable_blocks = 0;   // the disk failed to read them (not dropped)
  uint64_t corrupt_blocks = 0;      // failed their CRC32C: dropped
  uint64_t digests_verified = 0;    // whole objects that matched the origin's digest
  uint64_t digest_mismatches = 0;   // whole objects that did not: all their blocks dropped
  uint64_t objects_unverified = 0;  // neither: held in part, or no digest known (FileVerdict)
  bool finished = false;
  bool cancelled = false;
  // "path (block N)" of each bad block, then "path (digest)" of each object
  // that failed its digest: the first kMaxReported.
  std::vector<std::string> corrupt;
  static constexpr size_t kMaxReported = 1000;
  // Verify jobs, once finished: each object's verdict, in the walk's order,
  // the first kMaxFiles (files_not_listed counts the rest).
  std::vector<FileVerdict> files;
  uint64_t files_not_listed = 0;
  static constexpr size_t kMaxFiles = 10000;
};

// What every walk did since start (stats and metrics).
struct ScrubCounters {
  std::atomic<uint64_t> bytes{0};  // read to check blocks and digests
  std::atomic<uint64_t> blocks{0};
  std::atomic<uint64_t> corrupt_blocks{0};
  std::atomic<uint64_t> digests_verified{0};
  std::atomic<uint64_t> digest_mismatches{0};
  std::atomic<uint64_t> passes{0};  // background walks over the whole cache finished
};

struct ScrubOptions {
  uint64_t block_size = kDefaultBlockSize;   // the readers' (an object's blocks from its size)
  uint64_t rate_bytes_per_second = 0;        // the background scrub's; 0: no background scrub
  std::chrono::milliseconds start_delay{0};  // the background scrub begins this long after Start
  size_t page_blocks = 64;                   // blocks copied out of the catalog at once
  size_t page_objects = 4096;                // objects looked at per page, at most
  uint64_t job_step_bytes = 64 << 20;        // a verify job's step
  // An empty cache (or one not yet walked at start) is looked at again after this.
  std::chrono::milliseconds idle{30000};
  std::chrono::milliseconds cursor_every{10000};  // the background cursor is saved this often
  // How reports and logs name a catalog path (a federation path); null: as it is.
  std::function<std::string(const ObjectPath&)> path_name;
};

class ScrubJob;
class ScrubWalk;

class Scrubber {
 public:
  using UpdateFn = std::function<void(const ScrubProgress&)>;

  // `digests` (may be null) outlives the scrubber.
  Scrubber(CacheCatalog& catalog, BlockStore& store, Index& index, Executor& jobs,
           ScrubOptions options, ObjectDigests* digests = nullptr);
  // REQUIRES: Stop() was called (or Start never was and no job was started).
  ~Scrubber();
  Scrubber(const Scrubber&) = delete;
  Scrubber& operator=(const Scrubber&) = delete;

  // Starts the background scrub, where the saved cursor says (nothing when
  // the rate is 0).
  void Start();
  // Stops the background scrub and cancels every verify job; waits for a
  // step under way; saves the background cursor. Steps posted later do nothing.
  void Stop();

  // Starts checking every block under catalog path `prefix` (shown as
  // `shown`); `on_update` (may be empty) hears of progress and, last, of the
  // finished job.
  std::shared_ptr<ScrubJob> Verify(const ObjectPath& prefix, std::string shown, UpdateFn on_update);

  const ScrubCounters& counters() const { return counters_; }
  const ScrubOptions& options() const { return options_; }

  // The index key of the background cursor.
  static constexpr std::string_view kCursorKey = index_keys::kScrubCursor;

 private:
  friend class ScrubJob;
  friend class ScrubWalk;
  // Shared with posted steps, which may run after Stop (then they do nothing).
  struct Life {
    Mutex mu;
    CondVar cv;  // running fell to 0
    bool stopping PERCH_GUARDED_BY(mu) = false;
    int running PERCH_GUARDED_BY(mu) = 0;  // steps inside the scrubber now
  };
  // True (and counted as running) unless stopping; pair with Leave.
  static bool Enter(Life& life);
  static void Leave(Life& life);
  void BackgroundStep();
  void SaveCursor();
  std::string Shown(const std::string& catalog_path, const std::string& object_id) const;

  // Constant after construction.
  CacheCatalog& catalog_;
  BlockStore& store_;
  Index& index_;
  Executor& jobs_;
  const ScrubOptions options_;
  ObjectDigests* const digests_;
  const std::shared_ptr<Life> life_ = std::make_shared<Life>();

  ScrubCounters counters_;
  std::unique_ptr<ScrubWalk> background_;  // touched by one step at a time (and Stop)
  Clock::time_point last_saved_;           // with background_
  std::atomic<uint64_t> next_id_{1};
};

// One verify, shared by the Scrubber, its posted steps and the caller.
class ScrubJob : public std::enable_shared_from_this<ScrubJob> {
 public:
  ~ScrubJob();
  ScrubProgress Progress() const;
  void Cancel() { cancelled_ = true; }
  bool finished() const;

 private:
  friend class Scrubber;
  ScrubJob(Scrubber& scrubber, std::shared_ptr<Scrubber::Life> life, const ObjectPath& prefix,
           std::string shown, uint64_t id, Scrubber::UpdateFn on_update);
  void Step();
  void Finish(bool cancelled);

  Scrubber& scrubber_;
  const std::shared_ptr<Scrubber::Life> life_;
  const ObjectPath prefix_;
  const Scrubber::UpdateFn on_update_;
  std::atomic<bool> cancelled_{false};
  // Touched by one step at a time.
  std::unique_ptr<ScrubWalk> walk_;
  ScrubCursor count_cursor_;
  mutable Mutex mu_;
  ScrubProgress progress_ PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core
