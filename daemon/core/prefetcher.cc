#include "daemon/core/prefetcher.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/mutex.h"

namespace perch::core {

Prefetcher::Prefetcher(NamespaceCache& names, BlockReader& reader, Executor& exec,
                       PrefetchOptions options, ObjectIdFn object_id)
    : names_(names),
      reader_(reader),
      exec_(exec),
      options_(options),
      object_id_(std::move(object_id)) {}

Prefetcher::~Prefetcher() { Shutdown(); }

void Prefetcher::Shutdown() { alive_->store(false); }

void Prefetcher::PrefetchFile(const ObjectPath& path, const FileAttr& attr, const FetchClass& cls) {
  const std::string id = object_id_(path, attr);
  const ObjectVersion version{attr.size, attr.etag};
  // The size comes from a server: count blocks without overflow and fetch at
  // most file_max_bytes of one file speculatively (sequential read-ahead
  // takes over once the file is read).
  const uint64_t bs = reader_.block_size();
  const uint64_t blocks =
      std::min(BlockCount(attr.size, bs), std::max<uint64_t>(1, options_.file_max_bytes / bs));
  for (uint64_t b = 0; b < blocks && alive_->load(); ++b)
    reader_.Prefetch(path, version, id, b, cls);
}

void Prefetcher::Opened(uint64_t handle, const ObjectPath& path, const FileAttr& attr,
                        const std::string& object_id) {
  bool list_dir = false;
  std::vector<std::pair<std::string, uint64_t>> pump;  // (job, generation)
  {
    MutexLock l(mu_);
    OpenState& st = open_[handle];
    st = OpenState();
    st.path = path;
    st.attr = attr;
    st.object_id = object_id;
    if (options_.directories && !path.IsRoot()) {
      const std::string dir = path.Parent().str();
      auto now = Clock::now();
      auto [it, inserted] = dirs_done_.try_emplace(dir, now);
      if (inserted || now - it->second > options_.dir_repeat) {
        it->second = now;
        list_dir = true;
      }
      if (dirs_done_.size() > 100000)
        dirs_done_.clear();  // bounded memory; at worst a directory again
    }
    ReaderAt(path, &pump);
  }
  auto alive = alive_;
  Pump(pump);
  if (list_dir) {
    exec_.Post([this, alive, dir = path.Parent(), name = std::string(path.Name())] {
      if (!alive->load()) return;
      PrefetchDirectory(dir, name);
      ListNextDirectory(dir);  // also after a directory too large to prefetch
    });
  }
}

void Prefetcher::ReaderAt(const ObjectPath& path,
                          std::vector<std::pair<std::string, uint64_t>>* pump) {
  // The reader's position in each hint list moves to this file.
  for (auto& [job, h] : hints_) {
    auto idx = h.index.find(path.str());
    if (idx == h.index.end() || idx->second < h.pos) continue;
    h.pos = idx->second + 1;
    if (!h.pumping && WantsMore(h)) {
      h.pumping = true;
      pump->emplace_back(job, h.generation);
    }
  }
}

void Prefetcher::Pump(const std::vector<std::pair<std::string, uint64_t>>& jobs) {
  auto alive = alive_;
  for (const auto& [job, gen] : jobs) {
    exec_.Post([this, alive, job = job, gen = gen] {
      if (alive->load()) PumpHints(job, gen);
    });
  }
}

void Prefetcher::Read(uint64_t handle, uint64_t offset, uint64_t size) {
  if (offset == 0 && !hints_empty_.load()) {
    // A read from the start is the reader at this file, also where no open
    // said so: a file read again through a handle kept open (FUSE no-open
    // reads by path, FileSystem::ImplicitHandle), as a second epoch does.
    std::vector<std::pair<std::string, uint64_t>> pump;
    {
      MutexLock l(mu_);
      auto it = open_.find(handle);
      if (it != open_.end()) ReaderAt(it->second.path, &pump);
    }
    Pump(pump);
  }
  if (!options_.sequential || size == 0) return;
  const uint64_t bs = reader_.block_size();
  const uint64_t max_window = std::max<uint64_t>(1, options_.max_window_bytes / bs);
  std::vector<BlockKey> withdraw;
  std::vector<uint64_t> blocks;
  ObjectPath path;
  FileAttr attr;
  std::string id;
  {
    MutexLock l(mu_);
    auto it = open_.find(handle);
    if (it == open_.end()) return;
    OpenState& st = it->second;
    if (st.attr.size <= bs) return;  // one block: the read itself fetches it
    const uint64_t block = offset / bs;
    if (!st.read_once || offset == st.next_offset) {
      if (st.read_once && block != st.last_block) {
        st.window =
            std::min(st.window * 2, max_window);  // a new block, still in order: look further
      }
    } else {
      // The pattern broke: what was queued for the old position is not wanted.
      withdraw = std::move(st.issued);
      st.issued.clear();
      st.window = 1;
      st.issued_until = 0;
    }
    st.read_once = true;
    st.last_block = block;
    st.next_offset = SaturatingAdd(offset, size);
    const uint64_t nblocks = BlockCount(st.attr.size, bs);
    const uint64_t last_read = (st.next_offset - 1) / bs;
    const uint64_t from = std::max(st.issued_until, last_read + 1);
    const uint64_t to = std::min(nblocks, SaturatingAdd(last_read + 1, st.window));
    for (uint64_t b = from; b < to; ++b) {
      blocks.push_back(b);
      st.issued.push_back(BlockKey{st.object_id, b});
    }
    if (to > st.issued_until) st.issued_until = to;
    // Keep only what may still be queued: the window's worth.
    if (st.issued.size() > 2 * max_window) {
      st.issued.erase(st.issued.begin(), st.issued.end() - static_cast<long>(2 * max_window));
    }
    path = st.path;
    attr = st.attr;
    id = st.object_id;
  }
  Withdraw(std::move(withdraw));
  const ObjectVersion version{attr.size, attr.etag};
  for (uint64_t b : blocks) {
    reader_.Prefetch(path, version, id, b, FetchClass{Priority::kSpeculative, ""});
  }
  stats_.sequential_blocks += blocks.size();
}

void Prefetcher::Released(uint64_t handle) {
  std::vector<BlockKey> withdraw;
  {
    MutexLock l(mu_);
    auto it = open_.find(handle);
    if (it == open_.end()) return;
    withdraw = std::move(it->second.issued);
    open_.erase(it);
  }
  Withdraw(std::move(withdraw));
}

void Prefetcher::Withdraw(std::vector<BlockKey> keys) {
  for (const BlockKey& k : keys) {
    if (reader_.CancelPrefetch(k)) stats_.withdrawn++;
  }
}

void Prefetcher::PrefetchDirectory(const ObjectPath& dir, const std::string& after) {
  auto entries = names_.ReadDir(dir, DeadlineAfter(options_.lookup_timeout));
  if (!entries.ok()) {
    spdlog::debug("prefetch: cannot list {}: {}", EscapeForLog(dir.str()),
                  EscapeForLog(entries.status().ToString()));
    return;
  }
  std::vector<const DirEntry*> files;
  uint64_t bytes = 0;
  for (const DirEntry& e : *entries) {
    if (e.attr.is_dir) continue;
    files.push_back(&e);
    bytes = SaturatingAdd(bytes, e.attr.size);  // sizes come from a server: never wrap
    if (files.size() > options_.dir_max_entries || bytes > options_.dir_max_bytes) {
      spdlog::debug("prefetch: {} has more than {} files or {} bytes: too large to prefetch",
                    EscapeForLog(dir.str()), options_.dir_max_entries, options_.dir_max_bytes);
      return;
    }
  }
  if (files.size() <= 1) return;
  // Entries are sorted by name: start after the file that was opened, wrap around.
  auto start =
      std::upper_bound(files.begin(), files.end(), after,
                       [](const std::string& name, const DirEntry* e) { return name < e->name; });
  std::rotate(files.begin(), start, files.end());
  const FetchClass cls{Priority::kSpeculative, ""};
  for (const DirEntry* e : files) {
    if (!alive_->load()) return;
    if (e->name == after) continue;
    auto child = dir.Child(e->name);
    if (!child.ok()) continue;
    PrefetchFile(*child, e->attr, cls);
    stats_.directory_files++;
  }
}

void Prefetcher::ListNextDirectory(const ObjectPath& dir) {
  if (dir.IsRoot() || !alive_->load()) return;
  auto siblings = names_.ReadDir(dir.Parent(), DeadlineAfter(options_.lookup_timeout));
  if (!siblings.ok()) return;
  // Entries are sorted by name: the first directory after this one.
  auto it = std::upper_bound(
      siblings->begin(), siblings->end(), dir.Name(),
      [](std::string_view name, const DirEntry& e) { return name < std::string_view(e.name); });
  it = std::find_if(it, siblings->end(), [](const DirEntry& e) { return e.attr.is_dir; });
  if (it == siblings->end()) return;
  auto next = dir.Parent().Child(it->name);
  if (!next.ok()) return;
  if (auto listed = names_.ReadDir(*next, DeadlineAfter(options_.lookup_timeout)); listed.ok())
    stats_.directories_listed_ahead++;
}

void Prefetcher::Hint(const std::string& job, std::vector<ObjectPath> paths) {
  uint64_t gen = 0;
  {
    MutexLock l(mu_);
    if (paths.empty()) {
      hints_.erase(job);
      hints_empty_.store(hints_.empty());
      return;
    }
    HintJob& h = hints_[job];
    h = HintJob{};
    h.paths = std::move(paths);
    h.issued_bytes = {0};
    for (size_t i = 0; i < h.paths.size(); ++i) h.index.try_emplace(h.paths[i].str(), i);
    h.generation = gen = next_generation_++;
    h.pumping = true;
    hints_empty_.store(false);
  }
  auto alive = alive_;
  exec_.Post([this, alive, job, gen] {
    if (alive->load()) PumpHints(job, gen);
  });
}

void Prefetcher::PumpHints(const std::string& job, uint64_t generation) {
  const FetchClass cls{Priority::kHint, "hint:" + job};
  // One listing per directory answers the stat of every hinted file in it
  // (one round trip per directory instead of one per file).
  std::set<std::string> listed;
  for (;;) {
    ObjectPath next;
    {
      MutexLock l(mu_);
      auto it = hints_.find(job);
      if (it == hints_.end() || it->second.generation != generation) return;  // replaced or dropped
      HintJob& h = it->second;
      if (!alive_->load() || !WantsMore(h)) {
        h.pumping = false;
        return;
      }
      next = h.paths[h.issued++];
    }
    uint64_t bytes = 0;  // what it asks for: the file's size (0 if it is not one)
    // In list order, one at a time: the scheduler keeps a flow's fetches in order.
    if (!next.IsRoot() && listed.insert(next.Parent().str()).second) {
      names_.ReadDir(next.Parent(), DeadlineAfter(options_.lookup_timeout)).IgnoreError();
    }
    auto attr = names_.GetAttr(next, DeadlineAfter(options_.lookup_timeout));
    if (attr.ok() && !attr->is_dir) {
      PrefetchFile(next, *attr, cls);
      stats_.hinted_files++;
      bytes = std::min(attr->size, options_.file_max_bytes);
    }
    MutexLock l(mu_);
    auto it = hints_.find(job);
    if (it == hints_.end() || it->second.generation != generation) return;
    it->second.issued_bytes.push_back(it->second.issued_bytes.back() + bytes);
  }
}

bool Prefetcher::WantsMore(const HintJob& h) const {
  if (h.issued >= std::min(h.paths.size(), h.pos + options_.hint_window)) return false;
  if (options_.hint_window_bytes == 0 || h.pos >= h.issued) return true;
  // Bytes asked for and not yet read: those of paths [pos, issued).
  const uint64_t ahead =
      h.issued_bytes.back() - h.issued_bytes[std::min(h.pos, h.issued_bytes.size() - 1)];
  return ahead < options_.hint_window_bytes;
}

void Prefetcher::FutureUses(size_t horizon,
                            const std::function<void(const ObjectPath&, uint64_t)>& fn) const {
  MutexLock l(mu_);
  for (const auto& [job, h] : hints_) {
    const size_t end = std::min(h.paths.size(), h.pos + horizon);
    for (size_t i = h.pos; i < end; ++i) fn(h.paths[i], i - h.pos);
  }
}

}  // namespace perch::core
