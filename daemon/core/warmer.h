// Warmer: fills the block cache with whole files or directory trees ahead of
// the jobs that will read them (perchctl warm).
//
// Design. A warm job walks its paths through the FileSystem (the same
// namespace cache the mount uses), turns every file into its blocks and
// fetches the blocks the catalog does not hold through the BlockReader: the
// same single-flight fetch path, failover and request budget as reads, so a
// warm and a reader wanting the same block share one fetch. At most
// `max_blocks_in_flight` blocks of one job are in flight, which leaves the
// rest of the request budget to readers. A file's blocks are made one at a
// time as slots free up (memory stays bounded whatever size a server
// claims), totals saturate instead of wrapping, and a file stops at its
// first failed block.
//
// The walk blocks (metadata may come from the network), so it runs on the
// `jobs` executor, never on the caller's thread; block completions only
// post the next step back to that executor. Cancel() stops issuing fetches;
// the job finishes when the fetches in flight have come back.
//
// Thread-safety: all methods are safe from any thread. Progress callbacks run
// on the jobs executor or a fetch-completion thread, one at a time and in
// order (each sees progress at least as new as the last); they must not
// block or call back into the job's Notify path.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/block_reader.h"
#include "daemon/core/cache_catalog.h"
#include "daemon/core/executor.h"
#include "daemon/core/filesystem.h"
#include "daemon/core/mutex.h"

namespace perch::core {

struct WarmProgress {
  uint64_t id = 0;
  std::vector<std::string> paths;  // what was asked for
  uint64_t files_total = 0;        // files found so far (final once listing_done)
  uint64_t files_done = 0;         // files wholly cached
  uint64_t files_failed = 0;       // files with a block that could not be fetched
  uint64_t bytes_total = 0;
  uint64_t bytes_done = 0;  // bytes cached (already or by this job)
  bool listing_done = false;
  bool finished = false;
  bool cancelled = false;
  std::vector<std::string> errors;  // "path: message", the first kMaxErrors
  static constexpr size_t kMaxErrors = 20;
};

struct WarmerOptions {
  size_t max_blocks_in_flight = 64;  // per job
  std::chrono::milliseconds block_timeout{120000};
  size_t finished_jobs_kept = 8;  // for Jobs()
  // The walk pauses while this many files wait for their fetches and goes on
  // once half of them are issued (issue 14: a walk of 1 M files ran far ahead
  // of the fetches and held them all, ~250 bytes each, at the warm's peak).
  size_t max_files_queued = 4096;
  // How progress names the paths asked for (the federation path); null: the object path.
  std::function<std::string(const ObjectPath&)> path_name;
  // Called between taking a progress snapshot and delivering it (tests widen races here).
  std::function<void(const WarmProgress&)> before_notify_for_test;
};

class WarmJob;

class Warmer {
 public:
  Warmer(FileSystem& fs, BlockReader& reader, CacheCatalog& catalog, Executor& jobs,
         WarmerOptions options);
  ~Warmer();
  Warmer(const Warmer&) = delete;
  Warmer& operator=(const Warmer&) = delete;

  using UpdateFn = std::function<void(const WarmProgress&)>;

  // Starts warming `paths`: files, and directories with the files in them
  // (and in their subdirectories when `recursive`). `on_update` (may be
  // empty) hears of progress and, last, of the finished job.
  std::shared_ptr<WarmJob> Start(std::vector<ObjectPath> paths, bool recursive, UpdateFn on_update);

  // Running jobs and the last few finished ones, oldest first.
  std::vector<WarmProgress> Jobs() const;

  // Cancels every job and waits (up to `timeout`) until none has a fetch in flight.
  void Shutdown(std::chrono::milliseconds timeout);

 private:
  // Constant after construction.
  FileSystem& fs_;
  BlockReader& reader_;
  CacheCatalog& catalog_;
  Executor& jobs_executor_;
  const WarmerOptions options_;

  mutable Mutex mu_;
  uint64_t next_id_ PERCH_GUARDED_BY(mu_) = 1;
  std::deque<std::shared_ptr<WarmJob>> jobs_ PERCH_GUARDED_BY(mu_);
};

// One warm, shared by the Warmer, its executor tasks and the caller.
class WarmJob : public std::enable_shared_from_this<WarmJob> {
 public:
  WarmProgress Progress() const;
  void Cancel();
  bool finished() const;

 private:
  friend class Warmer;
  struct Block {
    ObjectPath path;
    ObjectVersion version;
    std::string object_id;
    uint64_t index = 0;
    uint64_t length = 0;
    size_t file = 0;  // index into files_
  };
  // A file's blocks not yet issued. Blocks are made one at a time as fetch
  // slots free up, never all up front: a size comes from a server, and a
  // listing claiming a petabyte must not become 2^28 queued blocks.
  struct Cursor {
    ObjectPath path;
    ObjectVersion version;
    std::string object_id;
    uint64_t next = 0;    // the next block to issue
    uint64_t blocks = 0;  // blocks in the file
    size_t file = 0;      // index into files_
  };
  // 16 bytes per file of the job (issue 14: a warm of 1 M files), its path
  // is in its Cursor and Blocks; dropped when the job finishes.
  struct File {
    uint64_t remaining = 0;  // blocks neither found cached nor back from a fetch
    bool failed = false;     // a block failed: the file's other blocks are not fetched
  };

  WarmJob(uint64_t id, std::vector<ObjectPath> paths, bool recursive, Warmer::UpdateFn on_update,
          FileSystem& fs, BlockReader& reader, CacheCatalog& catalog, Executor& executor,
          const WarmerOptions& options);

  // Lists the roots and adds their files; runs on the executor, again after
  // each pause, until the listing is done or the job is cancelled.
  void Walk();
  // True if the walk is to pause now (then walk_paused_ is set).
  bool PauseIfQueueFull() PERCH_EXCLUDES(mu_);
  bool AddFile(const ObjectPath& path, const FileAttr& attr);  // false once cancelled
  // Issues fetches up to the limit, skipping cached blocks; runs on the
  // executor. Never holds mu_ across a catalog or reader call, and stops as
  // soon as the job is cancelled.
  void Pump();
  // The next block to fetch, or nullopt when none may start now. Blocks that
  // belong to a failed file are dropped here.
  std::optional<Block> NextBlock() PERCH_REQUIRES(mu_);
  void FileBlockResolved(size_t file) PERCH_REQUIRES(mu_);
  void BlockDone(const Block& b, const Status& s);
  // Names `path` as progress does (the federation path, as the user gave it).
  void NoteError(const ObjectPath& path, const Status& s) PERCH_REQUIRES(mu_);
  void FinishIfDone() PERCH_EXCLUDES(mu_);
  void Notify();

  // Constant after construction.
  const std::vector<ObjectPath> roots_;
  const bool recursive_;
  const Warmer::UpdateFn on_update_;
  FileSystem& fs_;
  BlockReader& reader_;
  CacheCatalog& catalog_;
  Executor& executor_;
  const WarmerOptions options_;
  const uint64_t id_;

  // The walk's state between its runs, touched only by the one running Walk
  // (the next run is posted by the Pump that clears walk_paused_).
  std::deque<std::pair<ObjectPath, bool>> walk_todo_;  // (path, descend into directories)
  ObjectPath walk_dir_;                                // the directory being listed
  std::vector<DirEntry> walk_entries_;                 // its entries, from walk_next_ on
  size_t walk_next_ = 0;
  bool walk_started_ = false;

  // Lock order: notify_mu_ before mu_; on_update_ runs under notify_mu_ only.
  Mutex notify_mu_;
  mutable Mutex mu_;
  WarmProgress progress_ PERCH_GUARDED_BY(mu_);
  std::vector<File> files_ PERCH_GUARDED_BY(mu_);
  std::deque<Cursor> pending_ PERCH_GUARDED_BY(mu_);
  size_t in_flight_ PERCH_GUARDED_BY(mu_) = 0;
  bool walk_paused_ PERCH_GUARDED_BY(mu_) = false;
};

}  // namespace perch::core
