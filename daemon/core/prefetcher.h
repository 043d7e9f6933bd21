// Prefetcher: fetches what is about to be read before it is asked for.
//
// Design. Three kinds of knowledge, three mechanisms, one scheduler:
//
// 1. Sequential read-ahead, per open file. Reads that continue where the
//    last one ended grow a window of blocks fetched ahead of the reader,
//    starting at one block and doubling up to `max_window_bytes` (the memory
//    that blocks on their way may take). A read elsewhere resets the window
//    and withdraws what is still queued; so does closing the file. This is
//    what makes one large file stream at link speed instead of one block
//    round trip at a time.
//
// 2. Directory prefetch. Small-file datasets (ImageNet: ~110 KB JPEGs, a
//    directory per class) are latency-bound: one file at a time at 20-50 ms
//    a GET is tens of files per second. The first open in a directory
//    fetches its other files, in name order starting after the opened one,
//    as speculative fetches; the scheduler keeps enough of them in flight to
//    cover the latency and lets any demand read pass. Huge directories (more
//    than `dir_max_entries` files or `dir_max_bytes`) are left alone, since
//    they would push useful data out of a cache smaller than them. Sizes
//    come from a server: the byte total saturates instead of wrapping, and
//    no file gets more than `file_max_bytes` of speculative fetches. The
//    next sibling directory (in name order) is listed too, not fetched: a
//    reader that walks directories in order (a sorted file list, `find`,
//    `tar`) would otherwise wait for each listing when it gets there, and
//    every reader with it (a listing of 200 files is 1-5 ms on loopback).
//
// 3. Hints. A job that knows its order (a trainer's sampler) announces the
//    list of paths it will read. The prefetcher fetches them in that order,
//    at most `hint_window` files ahead of the reader's position (the latest
//    hinted file opened), so that even a cache smaller than the dataset hits:
//    nothing is fetched so early that it is evicted before it is read.
//
// Blocking work (listing a directory, stat of a hinted path) runs on the
// `exec` executor; the FUSE thread that reports an open or a read only
// records it and submits fetches, which never block.
//
// Thread-safety: all methods are safe from any thread. mu_ is never held
// across calls into the BlockReader or the NamespaceCache.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/block_reader.h"
#include "daemon/core/defaults.h"
#include "daemon/core/executor.h"
#include "daemon/core/mutex.h"
#include "daemon/core/namespace_cache.h"

namespace perch::core {

struct PrefetchOptions {
  bool sequential = true;
  uint64_t max_window_bytes = 64ULL << 20;  // read-ahead per open file
  bool directories = true;
  size_t dir_max_entries = 4096;         // larger directories are not prefetched
  uint64_t dir_max_bytes = 1ULL << 30;   // ... nor those holding more bytes than this
  uint64_t file_max_bytes = 1ULL << 30;  // speculative fetches of one listed or hinted file
  std::chrono::seconds dir_repeat{600};  // a directory is prefetched at most once per this
  size_t hint_window = 512;              // hinted files fetched ahead of the reader
  uint64_t hint_window_bytes = 0;        // ... and at most these bytes of them (0: no bound)
  std::chrono::milliseconds lookup_timeout = kDefaultOpTimeout;
};

struct PrefetchStats {
  std::atomic<uint64_t> sequential_blocks{0};         // read-ahead blocks asked for
  std::atomic<uint64_t> directory_files{0};           // files asked for by directory prefetch
  std::atomic<uint64_t> directories_listed_ahead{0};  // next sibling directories listed
  std::atomic<uint64_t> hinted_files{0};              // files asked for from hint lists
  std::atomic<uint64_t> withdrawn{0};  // queued prefetches withdrawn (pattern broke, file closed)
};

class Prefetcher {
 public:
  using ObjectIdFn = std::function<std::string(const ObjectPath&, const FileAttr&)>;

  Prefetcher(NamespaceCache& names, BlockReader& reader, Executor& exec, PrefetchOptions options,
             ObjectIdFn object_id);
  ~Prefetcher();
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  // A file was opened (handle `handle`, version `attr`, store id `object_id`).
  void Opened(uint64_t handle, const ObjectPath& path, const FileAttr& attr,
              const std::string& object_id);
  // The reader of `handle` asks for `size` bytes at `offset`.
  void Read(uint64_t handle, uint64_t offset, uint64_t size);
  // `handle` was closed: its queued read-ahead is withdrawn.
  void Released(uint64_t handle);

  // Replaces job `job`'s list of upcoming paths (an empty list forgets the job).
  void Hint(const std::string& job, std::vector<ObjectPath> paths);

  // Calls fn(path, ahead) for the next `horizon` paths of each job's list
  // past its reader (ahead: 0 for the next one it reads), under the lock:
  // fn must not call back. For the eviction order (CacheCatalog).
  void FutureUses(size_t horizon,
                  const std::function<void(const ObjectPath&, uint64_t ahead)>& fn) const;

  const PrefetchStats& stats() const { return stats_; }

  // Stops issuing work (pending executor tasks become no-ops).
  void Shutdown();

 private:
  struct OpenState {
    ObjectPath path;
    FileAttr attr;
    std::string object_id;
    uint64_t next_offset = 0;
    uint64_t last_block = 0;
    uint64_t window = 1;        // blocks
    uint64_t issued_until = 0;  // blocks [.., issued_until) were asked for
    std::vector<BlockKey> issued;
    bool read_once = false;
  };
  struct HintJob {
    std::vector<ObjectPath> paths;
    std::unordered_map<std::string, size_t> index;  // path -> first position
    size_t pos = 0;                                 // the reader is at or past this position
    size_t issued = 0;                              // paths [0, issued) were asked for
    std::vector<uint64_t> issued_bytes;  // [i]: bytes of paths [0, i) asked for (i <= issued)
    bool pumping = false;
    uint64_t generation = 0;
  };

  void Withdraw(std::vector<BlockKey> keys);
  void PrefetchDirectory(const ObjectPath& dir, const std::string& after);  // on exec
  // Lists the first directory after `dir` among its parent's entries (on exec).
  void ListNextDirectory(const ObjectPath& dir);
  void PumpHints(const std::string& job, uint64_t generation);  // on exec
  // Whether job `h`'s list should be fetched further: within hint_window
  // files and hint_window_bytes of its reader.
  bool WantsMore(const HintJob& h) const PERCH_REQUIRES(mu_);
  // The reader of every list holding `path` is at it: positions move on, and
  // the jobs whose lists want more are added to `pump` (job, generation).
  void ReaderAt(const ObjectPath& path, std::vector<std::pair<std::string, uint64_t>>* pump)
      PERCH_REQUIRES(mu_);
  void Pump(const std::vector<std::pair<std::string, uint64_t>>& jobs);  // PumpHints on exec
  void PrefetchFile(const ObjectPath& path, const FileAttr& attr, const FetchClass& cls);

  // Constant after construction.
  NamespaceCache& names_;
  BlockReader& reader_;
  Executor& exec_;
  const PrefetchOptions options_;
  const ObjectIdFn object_id_;

  PrefetchStats stats_;
  // Shared with executor tasks, which check it before doing anything.
  std::shared_ptr<std::atomic<bool>> alive_ = std::make_shared<std::atomic<bool>>(true);

  mutable Mutex mu_;
  std::unordered_map<uint64_t, OpenState> open_ PERCH_GUARDED_BY(mu_);
  std::map<std::string, Clock::time_point> dirs_done_ PERCH_GUARDED_BY(mu_);
  std::map<std::string, HintJob> hints_ PERCH_GUARDED_BY(mu_);
  std::atomic<bool> hints_empty_{true};  // hints_.empty(), read without mu_ by every read
  uint64_t next_generation_ PERCH_GUARDED_BY(mu_) = 1;
};

}  // namespace perch::core
