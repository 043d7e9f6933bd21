#include "daemon/core/warmer.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <thread>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/mutex.h"

namespace perch::core {

Warmer::Warmer(FileSystem& fs, BlockReader& reader, CacheCatalog& catalog, Executor& jobs,
               WarmerOptions options)
    : fs_(fs), reader_(reader), catalog_(catalog), jobs_executor_(jobs), options_(options) {}

Warmer::~Warmer() { Shutdown(std::chrono::seconds(5)); }

std::shared_ptr<WarmJob> Warmer::Start(std::vector<ObjectPath> paths, bool recursive,
                                       UpdateFn on_update) {
  std::shared_ptr<WarmJob> job;
  {
    MutexLock l(mu_);
    job.reset(new WarmJob(next_id_++, std::move(paths), recursive, std::move(on_update), fs_,
                          reader_, catalog_, jobs_executor_, options_));
    jobs_.push_back(job);
    // Keep every running job and the newest finished ones.
    size_t finished = 0;
    for (const auto& j : jobs_) finished += j->finished() ? 1 : 0;
    for (auto it = jobs_.begin(); it != jobs_.end() && finished > options_.finished_jobs_kept;) {
      if ((*it)->finished()) {
        it = jobs_.erase(it);
        --finished;
      } else {
        ++it;
      }
    }
  }
  jobs_executor_.Post([job] { job->Walk(); });
  return job;
}

std::vector<WarmProgress> Warmer::Jobs() const {
  std::vector<std::shared_ptr<WarmJob>> jobs;
  {
    MutexLock l(mu_);
    jobs.assign(jobs_.begin(), jobs_.end());
  }
  std::vector<WarmProgress> out;
  for (const auto& j : jobs) out.push_back(j->Progress());
  return out;
}

void Warmer::Shutdown(std::chrono::milliseconds timeout) {
  std::vector<std::shared_ptr<WarmJob>> jobs;
  {
    MutexLock l(mu_);
    jobs.assign(jobs_.begin(), jobs_.end());
  }
  for (const auto& j : jobs) j->Cancel();
  auto until = Clock::now() + timeout;
  for (const auto& j : jobs) {
    while (!j->finished() && Clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

WarmJob::WarmJob(uint64_t id, std::vector<ObjectPath> paths, bool recursive,
                 Warmer::UpdateFn on_update, FileSystem& fs, BlockReader& reader,
                 CacheCatalog& catalog, Executor& executor, const WarmerOptions& options)
    : roots_(std::move(paths)),
      recursive_(recursive),
      on_update_(std::move(on_update)),
      fs_(fs),
      reader_(reader),
      catalog_(catalog),
      executor_(executor),
      options_(options),
      id_(id) {
  progress_.id = id;
  for (const ObjectPath& p : roots_)
    progress_.paths.push_back(options_.path_name ? options_.path_name(p) : p.str());
}

WarmProgress WarmJob::Progress() const {
  MutexLock l(mu_);
  return progress_;
}

bool WarmJob::finished() const {
  MutexLock l(mu_);
  return progress_.finished;
}

void WarmJob::Cancel() {
  {
    MutexLock l(mu_);
    if (progress_.finished || progress_.cancelled) return;
    progress_.cancelled = true;
    pending_.clear();
  }
  FinishIfDone();
}

void WarmJob::NoteError(const ObjectPath& path, const Status& s) {
  if (progress_.errors.size() < WarmProgress::kMaxErrors) {
    const std::string shown = options_.path_name ? options_.path_name(path) : path.str();
    progress_.errors.push_back(EscapeForLog(shown) + ": " + EscapeForLog(s.ToString()));
  }
}

void WarmJob::Walk() {
  // Breadth-first over the roots; each directory listing may block on the
  // federation (bounded by the filesystem's op timeout).
  if (!walk_started_) {
    walk_started_ = true;
    for (const ObjectPath& p : roots_) walk_todo_.emplace_back(p, true);
  }
  bool cancelled = false;
  while (!cancelled) {
    // The rest of the directory being listed (a paused walk goes on here).
    while (walk_next_ < walk_entries_.size()) {
      const DirEntry& e = walk_entries_[walk_next_++];
      auto child = walk_dir_.Child(e.name);
      if (!child.ok()) continue;
      if (e.attr.is_dir) {
        walk_todo_.emplace_back(*child, recursive_);
        continue;
      }
      if (!AddFile(*child, e.attr)) {
        cancelled = true;
        break;
      }
      if (PauseIfQueueFull()) return;
    }
    std::vector<DirEntry>().swap(walk_entries_);
    walk_next_ = 0;
    if (cancelled || walk_todo_.empty()) break;
    {
      MutexLock l(mu_);
      if (progress_.cancelled) break;
    }
    auto [path, descend] = walk_todo_.front();
    walk_todo_.pop_front();
    auto attr = fs_.GetAttr(path);
    if (!attr.ok()) {
      MutexLock l(mu_);
      NoteError(path, attr.status());
      progress_.files_failed++;
      continue;
    }
    if (!attr->is_dir) {
      AddFile(path, *attr);
      if (PauseIfQueueFull()) return;
      continue;
    }
    if (!descend) continue;
    auto entries = fs_.ReadDir(path);
    if (!entries.ok()) {
      MutexLock l(mu_);
      NoteError(path, entries.status());
      progress_.files_failed++;
      continue;
    }
    walk_dir_ = path;
    walk_entries_ = *std::move(entries);
  }
  walk_todo_.clear();
  {
    MutexLock l(mu_);
    progress_.listing_done = true;
  }
  Notify();
  FinishIfDone();
}

bool WarmJob::PauseIfQueueFull() {
  MutexLock l(mu_);
  // Fetches are in flight whenever files wait (Pump fills the slots), so a
  // completion's Pump comes to resume the walk.
  if (progress_.cancelled || pending_.size() < std::max<size_t>(options_.max_files_queued, 1)) {
    return false;
  }
  walk_paused_ = true;
  return true;
}

bool WarmJob::AddFile(const ObjectPath& path, const FileAttr& attr) {
  const uint64_t blocks = BlockCount(attr.size, reader_.block_size());
  {
    MutexLock l(mu_);
    if (progress_.cancelled) return false;
    size_t file = files_.size();
    files_.push_back(File{blocks, false});
    progress_.files_total++;
    progress_.bytes_total = SaturatingAdd(progress_.bytes_total, attr.size);
    if (blocks == 0) {
      progress_.files_done++;
    } else {
      pending_.push_back(Cursor{path, ObjectVersion{attr.size, attr.etag}, fs_.ObjectId(path, attr),
                                0, blocks, file});
    }
  }
  Pump();
  return true;
}

void WarmJob::FileBlockResolved(size_t file) {
  File& f = files_[file];
  if (--f.remaining == 0) {
    if (f.failed) {
      progress_.files_failed++;
    } else {
      progress_.files_done++;
    }
  }
}

std::optional<WarmJob::Block> WarmJob::NextBlock() {
  const uint64_t bs = reader_.block_size();
  while (!progress_.cancelled && !pending_.empty() && in_flight_ < options_.max_blocks_in_flight) {
    Cursor& c = pending_.front();
    File& f = files_[c.file];
    if (f.failed) {
      // Count the blocks never issued as resolved: the file is finished (failed).
      f.remaining -= c.blocks - c.next - 1;
      FileBlockResolved(c.file);
      pending_.pop_front();
      continue;
    }
    // c.next < c.blocks, so c.next * bs < size: no overflow.
    const uint64_t offset = c.next * bs;
    Block b{c.path, c.version, c.object_id, c.next, std::min(bs, c.version.size - offset), c.file};
    if (++c.next == c.blocks) pending_.pop_front();
    in_flight_++;  // held while the catalog is asked, so the job cannot finish under us
    return b;
  }
  return std::nullopt;
}

void WarmJob::Pump() {
  auto self = shared_from_this();
  bool skipped = false;
  for (;;) {
    std::optional<Block> b;
    {
      MutexLock l(mu_);
      b = NextBlock();
    }
    if (!b) break;
    if (catalog_.Contains(BlockKey{b->object_id, b->index})) {
      MutexLock l(mu_);
      in_flight_--;
      progress_.bytes_done = SaturatingAdd(progress_.bytes_done, b->length);
      FileBlockResolved(b->file);
      skipped = true;
      continue;
    }
    const uint64_t bs = reader_.block_size();
    reader_.Read(
        b->path, b->version, b->object_id, ByteRange{b->index * bs, b->length},
        DeadlineAfter(options_.block_timeout),
        [self, b = *b](Result<Bytes> r) {
          // Completions run on the net loop: hand the bookkeeping and
          // the next fetches to the executor.
          Status s = r.ok() ? Status::Ok() : r.status();
          self->executor_.Post([self, b, s] { self->BlockDone(b, s); });
        },
        FetchClass{Priority::kWarm, "warm#" + std::to_string(id_)});
  }
  bool resume = false;
  {
    MutexLock l(mu_);
    if (walk_paused_ && !progress_.cancelled && pending_.size() <= options_.max_files_queued / 2) {
      walk_paused_ = false;
      resume = true;
    }
  }
  if (resume) executor_.Post([self] { self->Walk(); });
  if (skipped) FinishIfDone();
}

void WarmJob::BlockDone(const Block& b, const Status& s) {
  {
    MutexLock l(mu_);
    in_flight_--;
    File& f = files_[b.file];
    if (s.ok()) {
      progress_.bytes_done = SaturatingAdd(progress_.bytes_done, b.length);
    } else if (!f.failed) {
      f.failed = true;
      NoteError(b.path, s);
    }
    FileBlockResolved(b.file);
  }
  Notify();
  Pump();
  FinishIfDone();
}

void WarmJob::FinishIfDone() {
  bool now_finished = false;
  {
    MutexLock l(mu_);
    if (progress_.finished || in_flight_ > 0) return;
    if (!progress_.cancelled && (!progress_.listing_done || !pending_.empty())) return;
    progress_.finished = true;
    now_finished = true;
    // Nothing refers to them any more (no block in flight, none to issue);
    // the job itself is kept for Jobs().
    std::vector<File>().swap(files_);
    std::deque<Cursor>().swap(pending_);
  }
  if (now_finished) {
    WarmProgress p = Progress();
    spdlog::info("warm #{}: {} of {} files, {} bytes cached{}{}", p.id, p.files_done, p.files_total,
                 p.bytes_done, p.files_failed ? fmt::format(", {} failed", p.files_failed) : "",
                 p.cancelled ? " (cancelled)" : "");
    Notify();
  }
}

void WarmJob::Notify() {
  if (!on_update_) return;
  // Snapshot and delivery under one lock: listeners see progress in order,
  // so the finished snapshot is never overtaken by an older one.
  MutexLock l(notify_mu_);
  WarmProgress p = Progress();
  if (options_.before_notify_for_test) options_.before_notify_for_test(p);
  on_update_(p);
}

}  // namespace perch::core
