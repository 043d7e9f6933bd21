#include "daemon/core/scrubber.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "daemon/core/codec.h"
#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"

namespace perch::core {

// One walk over the catalog's blocks under a prefix (see the header's
// Design). Used by one step at a time.
class ScrubWalk {
 public:
  // `verdicts`: each object's verdict goes to progress.files (verify jobs).
  ScrubWalk(Scrubber& s, ObjectPath prefix, ScrubCursor cursor, bool verdicts = false)
      : s_(s), prefix_(std::move(prefix)), cursor_(std::move(cursor)), verdicts_(verdicts) {}

  // Checks blocks until `budget` bytes were read (at least one block, at
  // most 64 pages of the catalog looked at); false once the walk is over.
  // Returns early, true, when `stop()` says so.
  bool Step(uint64_t budget, const std::function<bool()>& stop) {
    uint64_t read = 0;
    int pages = 0;
    while (read < budget) {
      if (stop()) return true;
      if (pending_.empty()) {
        if (!more_) {
          EndObject();
          return false;
        }
        if (pages++ >= 64) return true;
        std::vector<ScrubItem> page;
        more_ = s_.catalog_.ScrubPage(prefix_, &cursor_, s_.options_.page_blocks,
                                      s_.options_.page_objects, &page);
        pending_.insert(pending_.end(), std::make_move_iterator(page.begin()),
                        std::make_move_iterator(page.end()));
        continue;
      }
      ScrubItem item = std::move(pending_.front());
      pending_.pop_front();
      if (item.key.object_id != object_) {
        read += EndObject();
        object_ = item.key.object_id;
        object_size_ = item.object_size;
        good_bytes_ = 0;
        bad_ = false;
        first_corrupt_.reset();
        // Named before a bad block or a mismatch drops it (its last block
        // takes its record).
        if (verdicts_ && progress.files.size() < ScrubProgress::kMaxFiles)
          shown_ = s_.Shown(s_.catalog_.PathOf(object_), object_);
      }
      read += Check(item);
    }
    return true;
  }

  // Where the walk goes on: the next block not checked.
  std::pair<std::string, uint64_t> Position() const {
    if (!pending_.empty()) return {pending_.front().key.object_id, pending_.front().key.index};
    return {cursor_.object_id, cursor_.index};
  }

  ScrubProgress progress;  // the counts only

 private:
  // Checks one block; the bytes read.
  uint64_t Check(const ScrubItem& item) {
    Result<uint64_t> v = s_.store_.Verify(item.key);
    if (v.ok()) {
      progress.blocks_done++;
      progress.bytes_done += *v;
      s_.counters_.blocks++;
      s_.counters_.bytes += *v;
      good_bytes_ += *v;
      return *v;
    }
    bad_ = true;
    switch (v.status().code()) {
      case StatusCode::kNotFound:  // evicted (or dropped by a reader) meanwhile
        progress.missing_blocks++;
        return 0;
      case StatusCode::kCorrupt: {
        // The store dropped it; the catalog forgets it (after naming it: its
        // last block takes the object's record); its next read fetches it.
        const std::string shown = s_.Shown(s_.catalog_.PathOf(item.key.object_id), object_);
        s_.catalog_.Dropped(item.key);
        if (!first_corrupt_) first_corrupt_ = item.key.index;
        progress.blocks_done++;
        progress.corrupt_blocks++;
        progress.bytes_done += item.length;
        s_.counters_.blocks++;
        s_.counters_.corrupt_blocks++;
        s_.counters_.bytes += item.length;
        spdlog::warn("cache: scrub: block {} of {} ({}) failed its check: {}; dropped",
                     item.key.index, EscapeForLog(shown), item.key.object_id, v.status().message());
        Report(shown + " (block " + std::to_string(item.key.index) + ")");
        return item.length;
      }
      default:
        progress.unreadable_blocks++;
        spdlog::warn("cache: scrub: could not read block {}#{}: {}", item.key.object_id,
                     item.key.index, v.status().ToString());
        return 0;
    }
  }

  // The object walked so far is done: its digest is checked where one is
  // recorded and every block of it passed. The bytes read.
  uint64_t EndObject() {
    if (object_.empty()) return 0;
    progress.objects_done++;
    uint64_t read = 0;
    DigestVerdict verdict;
    const bool whole = !bad_ && good_bytes_ == object_size_;
    if (first_corrupt_) {
      verdict = {DigestVerdict::kMismatched,
                 "block " + std::to_string(*first_corrupt_) +
                     " failed its CRC32C on disk; dropped, fetched again by its next read"};
    } else if (!whole) {
      verdict = {DigestVerdict::kUnverified, "held in part (" + std::to_string(good_bytes_) +
                                                 " of " + std::to_string(object_size_) +
                                                 " bytes); checked once read whole"};
    } else if (object_size_ == 0) {
      verdict = {DigestVerdict::kVerified, "empty"};
    } else if (s_.digests_ == nullptr) {
      verdict = {DigestVerdict::kUnverified, "perch computes no digests here"};
    } else {
      read = CheckDigest(&verdict);
    }
    if (verdicts_) {
      if (verdict.kind == DigestVerdict::kUnverified) progress.objects_unverified++;
      if (progress.files.size() < ScrubProgress::kMaxFiles) {
        progress.files.push_back({std::move(shown_), verdict});
      } else {
        progress.files_not_listed++;
      }
    }
    object_.clear();
    return read;
  }

  // The whole object against its recorded digest; `verdict` gets what was found.
  uint64_t CheckDigest(DigestVerdict* verdict) {
    std::unique_ptr<ObjectDigests::Check> check = s_.digests_->Start(object_, object_size_);
    if (!check) {
      *verdict = s_.digests_->Verdict(object_);
      if (verdict->kind == DigestVerdict::kUnknown || verdict->kind == DigestVerdict::kVerified) {
        *verdict = {DigestVerdict::kUnverified,
                    "no server's digest checked for this copy yet (it is checked when "
                    "read to its end or opened whole; or it was cached with checks off)"};
      }
      return 0;
    }
    const uint64_t bs = s_.options_.block_size;
    const uint64_t blocks = BlockCount(object_size_, bs);
    uint64_t read = 0;
    for (uint64_t i = 0; i < blocks; ++i) {
      const uint64_t len = std::min(bs, object_size_ - i * bs);
      Result<Bytes> bytes = s_.store_.Read(BlockKey{object_, i}, 0, len);
      if (!bytes.ok() || bytes->size() != len) {
        if (!bytes.ok() && bytes.status().code() == StatusCode::kCorrupt)
          s_.catalog_.Dropped(BlockKey{object_, i});  // as a read would
        *verdict = {DigestVerdict::kUnverified, "changed while it was checked; check it again"};
        return read;  // gone meanwhile: not checked this time
      }
      check->Update(*bytes);
      read += len;
    }
    progress.digest_bytes += read;
    s_.counters_.bytes += read;
    if (check->Matches()) {
      progress.digests_verified++;
      s_.counters_.digests_verified++;
      *verdict = {DigestVerdict::kVerified, check->Describe()};
      return read;
    }
    progress.digest_mismatches++;
    s_.counters_.digest_mismatches++;
    // Every block passed its CRC32C: the bytes were stored wrong (a server
    // sent them so). All of them go; the next read fetches the object again.
    const std::string shown = s_.Shown(s_.catalog_.PathOf(object_), object_);
    for (uint64_t i = 0; i < blocks; ++i) {
      const BlockKey key{object_, i};
      if (s_.store_.Remove(key).ok()) s_.catalog_.Dropped(key);
    }
    spdlog::warn("cache: scrub: {} ({}) does not match the origin's digest {}; its blocks dropped",
                 EscapeForLog(shown), object_, check->Describe());
    Report(shown + " (digest)");
    *verdict = {DigestVerdict::kMismatched, "the cached copy did not match " + check->Describe() +
                                                "; dropped, fetched again by its next read"};
    s_.digests_->Mismatched(object_, verdict->detail);
    return read;
  }

  void Report(std::string what) {
    if (progress.corrupt.size() < ScrubProgress::kMaxReported)
      progress.corrupt.push_back(std::move(what));
  }

  Scrubber& s_;
  const ObjectPath prefix_;
  ScrubCursor cursor_;
  std::deque<ScrubItem> pending_;
  bool more_ = true;
  // The object being walked.
  std::string object_;
  uint64_t object_size_ = 0;
  uint64_t good_bytes_ = 0;                // of its blocks that passed
  bool bad_ = false;                       // a block of it failed or was missing
  std::optional<uint64_t> first_corrupt_;  // the first block of it that failed its CRC32C
  std::string shown_;                      // its name (verify jobs)
  const bool verdicts_;
};

Scrubber::Scrubber(CacheCatalog& catalog, BlockStore& store, Index& index, Executor& jobs,
                   ScrubOptions options, ObjectDigests* digests)
    : catalog_(catalog),
      store_(store),
      index_(index),
      jobs_(jobs),
      options_(std::move(options)),
      digests_(digests) {}

Scrubber::~Scrubber() = default;

bool Scrubber::Enter(Life& life) {
  MutexLock l(life.mu);
  if (life.stopping) return false;
  life.running++;
  return true;
}

void Scrubber::Leave(Life& life) {
  MutexLock l(life.mu);
  if (--life.running == 0) life.cv.NotifyAll();
}

std::string Scrubber::Shown(const std::string& catalog_path, const std::string& object_id) const {
  if (catalog_path.empty()) return "object " + object_id;  // adopted, undescribed
  auto p = ObjectPath::Parse(catalog_path);
  if (!p.ok() || !options_.path_name) return catalog_path;
  return options_.path_name(*p);
}

void Scrubber::Start() {
  if (options_.rate_bytes_per_second == 0) return;
  spdlog::info("cache: scrub at {} bytes/s in the background, from {} s after start",
               options_.rate_bytes_per_second,
               std::chrono::duration_cast<std::chrono::seconds>(options_.start_delay).count());
  jobs_.PostAfter(options_.start_delay, [this, life = life_] {
    if (!Enter(*life)) return;
    BackgroundStep();
    Leave(*life);
  });
}

void Scrubber::BackgroundStep() {
  auto again = [this](std::chrono::milliseconds after) {
    jobs_.PostAfter(after, [this, life = life_] {
      if (!Enter(*life)) return;
      BackgroundStep();
      Leave(*life);
    });
  };
  if (!catalog_.reconciled()) {  // the start-up walk first: it may drop and adopt blocks
    again(std::chrono::milliseconds(1000));
    return;
  }
  if (!background_) {
    ScrubCursor cursor;
    auto saved = index_.Get(kCursorKey);
    if (saved.ok() && *saved) {
      codec::Reader r(**saved);
      std::string id;
      uint64_t block = 0;
      if (r.GetString(&id) && r.GetU64(&block) && id.size() <= 256) {
        cursor.object_id = std::move(id);
        cursor.index = block;
      }
    }
    background_ = std::make_unique<ScrubWalk>(*this, ObjectPath(), std::move(cursor));
    last_saved_ = Clock::now();
  }
  const uint64_t rate = options_.rate_bytes_per_second;
  const uint64_t before = background_->progress.bytes_done + background_->progress.digest_bytes;
  const bool more = background_->Step(std::max<uint64_t>(rate / 4, 1), [life = life_] {
    MutexLock l(life->mu);
    return life->stopping;
  });
  const uint64_t read =
      background_->progress.bytes_done + background_->progress.digest_bytes - before;
  std::chrono::milliseconds pause(read * 1000 / rate);
  if (!more) {
    const ScrubProgress& p = background_->progress;
    counters_.passes++;
    if (p.blocks_done + p.missing_blocks > 0) {
      spdlog::info(
          "cache: scrub pass over: {} blocks ({} bytes) checked, {} bad, {} objects failed their "
          "digest",
          p.blocks_done, p.bytes_done, p.corrupt_blocks, p.digest_mismatches);
    }
    if (p.blocks_done == 0) pause = std::max(pause, options_.idle);
    background_.reset();
    index_.Apply({{std::string(kCursorKey), std::nullopt}}).IgnoreError();
  } else if (Clock::now() - last_saved_ >= options_.cursor_every) {
    SaveCursor();
  }
  again(pause);
}

void Scrubber::SaveCursor() {
  if (!background_) return;
  auto [id, block] = background_->Position();
  std::string v;
  codec::PutString(&v, id);
  codec::PutU64(&v, block);
  index_.Apply({{std::string(kCursorKey), std::move(v)}})
      .IgnoreError();  // without it: the next start begins again
  last_saved_ = Clock::now();
}

void Scrubber::Stop() {
  {
    MutexLock l(life_->mu);
    life_->stopping = true;
    while (life_->running != 0) life_->cv.Wait(life_->mu);
  }
  SaveCursor();
}

std::shared_ptr<ScrubJob> Scrubber::Verify(const ObjectPath& prefix, std::string shown,
                                           UpdateFn on_update) {
  std::shared_ptr<ScrubJob> job(
      new ScrubJob(*this, life_, prefix, std::move(shown), next_id_++, std::move(on_update)));
  jobs_.Post([job] { job->Step(); });
  return job;
}

ScrubJob::ScrubJob(Scrubber& scrubber, std::shared_ptr<Scrubber::Life> life,
                   const ObjectPath& prefix, std::string shown, uint64_t id,
                   Scrubber::UpdateFn on_update)
    : scrubber_(scrubber),
      life_(std::move(life)),
      prefix_(prefix),
      on_update_(std::move(on_update)),
      walk_(std::make_unique<ScrubWalk>(scrubber, prefix, ScrubCursor(), /*verdicts=*/true)) {
  progress_.id = id;
  progress_.path = std::move(shown);
}

ScrubJob::~ScrubJob() = default;

ScrubProgress ScrubJob::Progress() const {
  MutexLock l(mu_);
  return progress_;
}

bool ScrubJob::finished() const {
  MutexLock l(mu_);
  return progress_.finished;
}

void ScrubJob::Finish(bool cancelled) {
  {
    MutexLock l(mu_);
    progress_.finished = true;
    progress_.cancelled = cancelled;
  }
  if (on_update_) on_update_(Progress());
}

void ScrubJob::Step() {
  if (!Scrubber::Enter(*life_)) {
    Finish(true);
    return;
  }
  if (cancelled_) {
    Scrubber::Leave(*life_);
    Finish(true);
    return;
  }
  bool more = true;
  if (!Progress().counted) {
    // The totals first, a few pages at a time (no I/O: the catalog only).
    uint64_t blocks = 0, bytes = 0;
    bool counting = true;
    for (int i = 0; i < 64 && counting; ++i) {
      std::vector<ScrubItem> page;
      counting = scrubber_.catalog_.ScrubPage(prefix_, &count_cursor_, 4096, 4096, &page);
      for (const ScrubItem& item : page) bytes += item.length;
      blocks += page.size();
    }
    MutexLock l(mu_);
    progress_.blocks_total += blocks;
    progress_.bytes_total += bytes;
    progress_.counted = !counting;
  } else {
    more = walk_->Step(scrubber_.options_.job_step_bytes, [this] {
      if (cancelled_) return true;
      MutexLock l(life_->mu);
      return life_->stopping;
    });
    MutexLock l(mu_);
    const ScrubProgress& w = walk_->progress;
    progress_.blocks_done = w.blocks_done;
    progress_.bytes_done = w.bytes_done;
    progress_.digest_bytes = w.digest_bytes;
    progress_.objects_done = w.objects_done;
    progress_.missing_blocks = w.missing_blocks;
    progress_.unreadable_blocks = w.unreadable_blocks;
    progress_.corrupt_blocks = w.corrupt_blocks;
    progress_.digests_verified = w.digests_verified;
    progress_.digest_mismatches = w.digest_mismatches;
    progress_.objects_unverified = w.objects_unverified;
    progress_.corrupt = w.corrupt;
    if (!more || cancelled_) {  // the list goes out once, with the last message
      progress_.files = std::move(walk_->progress.files);
      progress_.files_not_listed = w.files_not_listed;
    }
  }
  if (more && !cancelled_) {
    // Told before the next step is posted: callbacks stay one at a time, in order.
    if (on_update_) on_update_(Progress());
    auto self = shared_from_this();
    scrubber_.jobs_.Post([self] { self->Step(); });  // before Leave: the scrubber is alive
    Scrubber::Leave(*life_);
    return;
  }
  Scrubber::Leave(*life_);
  Finish(cancelled_);
}

}  // namespace perch::core
