#include "daemon/store/pack_files.h"

#include <fcntl.h>
#include <linux/magic.h>
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <vector>

#include "daemon/store/block_file_format.h"

namespace perch::store {

namespace {

using core::Result;
using core::Status;

// Whether allocating a pack ahead of its writes pays on the filesystem of
// `fd`: on ext4 the writes then fill blocks already found (a quarter less CPU
// per record, issue 14); on tmpfs the allocation zeroes memory that the
// writes overwrite (fallocate was 8 % of perchd's CPU in a cold pass).
bool ReservingPays(int fd) {
  struct statfs fs {};
  return ::fstatfs(fd, &fs) == 0 && fs.f_type == EXT4_SUPER_MAGIC;
}

// The number in a pack's file name; false for any other name.
bool PackNumber(const std::string& name, uint64_t* pack) {
  if (name.size() != 16 + 5 || !name.ends_with(".pack")) return false;
  auto [end, err] = std::from_chars(name.data(), name.data() + 16, *pack, 16);
  return err == std::errc() && end == name.data() + 16;
}

}  // namespace

PackFiles::PackFiles(std::string dir, uint64_t max_bytes, std::chrono::milliseconds grace,
                     size_t open_files, uint64_t reserve_bytes,
                     std::function<bool(const std::string&)> in_use, const core::TimeSource& time)
    : dir_(std::move(dir)),
      max_bytes_(max_bytes),
      grace_(grace),
      reserve_bytes_(reserve_bytes),
      in_use_(std::move(in_use)),
      time_(time),
      open_(open_files) {}

uint64_t PackFiles::ReserveFor(uint64_t quota) {
  const uint64_t r = std::min<uint64_t>(quota / 1024, kMaxReserveBytes);
  return r < (1 << 20) ? 0 : r / kAlign * kAlign;
}

PackFiles::~PackFiles() {
  {
    core::MutexLock l(mu_);
    stopping_ = true;
    TrimLocked();
  }
  holes_cv_.NotifyAll();
  if (puncher_.joinable()) puncher_.join();
  Punch(/*all=*/true);
}

void PackFiles::PunchLoop() {
  for (;;) {
    {
      core::MutexLock l(mu_);
      if (stopping_) return;
      if (holes_.empty()) {
        holes_cv_.Wait(mu_);
        continue;
      }
      if (holes_.front().due > time_.Now()) {
        // A copy: wait_until reads its deadline again after each wake-up, by
        // which time another thread's Punch may have popped this hole (ASan
        // found the read of the freed deque element under the scrub's race
        // test).
        const auto due = holes_.front().due;
        time_.WaitUntil(holes_cv_, mu_, due);
        continue;
      }
    }
    Punch(/*all=*/false);
  }
}

std::string PackFiles::PathOf(uint64_t pack) const {
  char name[32];
  std::snprintf(name, sizeof(name), "%016llx.pack", static_cast<unsigned long long>(pack));
  return dir_ + "/" + name;
}

void PackFiles::StartLocked() {
  if (started_) return;
  started_ = true;
  uint64_t last = 0;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    uint64_t n = 0;
    if (PackNumber(it->path().filename().string(), &n)) last = std::max(last, n);
  }
  first_ = last + 1;
}

Result<PackFiles::Placed> PackFiles::Append(std::string_view header, std::string_view data) {
  const uint64_t extent = Extent(header.size() + data.size());
  Placed placed;
  {
    core::MutexLock l(mu_);
    StartLocked();
    if (active_file_.fd == nullptr || (active_end_ > 0 && active_end_ + extent > max_bytes_)) {
      // A new pack (under mu_: appends wait for it, which is once per
      // max_bytes). The one it follows goes if nothing in it is left.
      const uint64_t next = active_ == 0 ? first_ : active_ + 1;
      const std::string path = PathOf(next);
      Fd f;
      f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      if (f.fd < 0 && errno == ENOENT) {
        // Private to the daemon (0700), whatever the umask.
        if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST)
          return ErrnoStatus("mkdir", dir_, errno);
        f.fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
      }
      if (f.fd < 0) return ErrnoStatus("create", path, errno);
      struct stat st {};
      if (::fstat(f.fd, &st) != 0) return ErrnoStatus("stat", path, errno);
      const uint64_t before = active_;
      TrimLocked();
      active_ = next;
      active_end_ = 0;
      reserve_works_ = reserve_bytes_ > 0 && ReservingPays(f.fd);
      active_file_ =
          File{std::make_shared<const core::BlockFd>(f.fd), static_cast<uint64_t>(st.st_ino)};
      f.fd = -1;
      open_.Put(active_, active_file_);
      live_[active_];  // counted from 0
      if (before != 0 && live_[before] == 0) RemoveLocked(before);
    }
    placed.pack = active_;
    placed.offset = active_end_;
    placed.file = active_file_;
    active_end_ += extent;
    if (active_end_ > reserved_end_) ReserveLocked(placed.offset);
    live_[active_]++;
  }
  if (!PwriteAll(placed.file.fd->fd(), header, data, placed.offset)) {
    const int err = errno;
    Drop(placed.pack, placed.offset, header.size() + data.size());
    return ErrnoStatus("write", PathOf(placed.pack), err == 0 ? EIO : err);
  }
  return placed;
}

void PackFiles::ReserveLocked(uint64_t from) {
  // Allocated ahead of the writes (the file grows to reserved_end_, zeros
  // past its last record), on ext4 only (ReservingPays). Where that fails
  // (a full disk), the writes allocate as before (and fail with kNoSpace).
  if (!reserve_works_) return;
  from = std::max(from, reserved_end_);
  const uint64_t to = std::max(active_end_, std::min(active_end_ + reserve_bytes_, max_bytes_));
  if (::fallocate(active_file_.fd->fd(), 0, static_cast<off_t>(from),
                  static_cast<off_t>(to - from)) == 0) {
    reserved_end_ = to;
  } else if (errno == EOPNOTSUPP) {
    reserve_works_ = false;
  }
}

void PackFiles::TrimLocked() {
  // What was reserved past the last record goes back to the filesystem. The
  // writes in flight are all below active_end_, so none is cut.
  if (active_file_.fd != nullptr && reserved_end_ > active_end_ &&
      ::ftruncate(active_file_.fd->fd(), static_cast<off_t>(active_end_)) != 0) {
    spdlog::debug("cache: could not trim {}: {}", PathOf(active_), std::strerror(errno));
  }
  reserved_end_ = 0;
}

Result<PackFiles::File> PackFiles::Open(uint64_t pack) {
  if (auto f = open_.Find(pack)) return *std::move(f);
  const std::string path = PathOf(pack);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
  if (f.fd < 0 && errno == ENOENT)
    return core::NotFoundError("no pack " + path, core::FailureSite::kLocal);
  if (f.fd < 0) return ErrnoStatus("open", path, errno);
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return ErrnoStatus("stat", path, errno);
  File file{std::make_shared<const core::BlockFd>(f.fd), static_cast<uint64_t>(st.st_ino)};
  f.fd = -1;
  open_.Put(pack, file);
  return file;
}

void PackFiles::RemoveLocked(uint64_t pack) {
  live_.erase(pack);
  open_.Erase(pack);  // a slice still being served keeps its descriptor
  const std::string path = PathOf(pack);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("cache: could not remove empty pack {}: {}", path, std::strerror(errno));
}

void PackFiles::Drop(uint64_t pack, uint64_t offset, uint64_t length,
                     const std::string& object_id) {
  {
    core::MutexLock l(mu_);
    StartLocked();
    auto it = pack >= first_ ? live_.find(pack) : live_.end();
    if (it != live_.end() && it->second > 0 && --it->second == 0 && pack != active_) {
      RemoveLocked(pack);  // the whole file goes: no hole to punch
    } else {
      holes_.push_back(Hole{pack, offset, Extent(length), time_.Now() + grace_, object_id});
      if (grace_.count() > 0) StartPuncherLocked();
    }
  }
  if (grace_.count() == 0) {
    Punch(/*all=*/true);
  } else {
    holes_cv_.NotifyOne();
  }
}

void PackFiles::StartPuncherLocked() {
  if (puncher_.joinable() || stopping_) return;
  puncher_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "perch-punch");
    PunchLoop();
  });
}

void PackFiles::Punch(bool all) {
  std::vector<Hole> due;
  bool stopping = false;
  {
    core::MutexLock l(mu_);
    const auto now = time_.Now();
    while (!holes_.empty() && (all || holes_.front().due <= now)) {
      due.push_back(std::move(holes_.front()));
      holes_.pop_front();
    }
    stopping = stopping_;
  }
  // A record still in use (a reply sending it, a read) keeps its bytes: its
  // hole waits (not under mu_: in_use_ takes the store's lock).
  std::vector<Hole> now, later;
  for (Hole& h : due) {
    const bool used = !stopping && in_use_ && !h.object_id.empty() && in_use_(h.object_id);
    (used ? later : now).push_back(std::move(h));
  }
  if (!later.empty()) {
    {
      core::MutexLock l(mu_);
      // Another grace (at least kRetry, for a grace of 0): appended, since
      // every hole queued before is due no later.
      const auto due_again = time_.Now() + std::max<std::chrono::milliseconds>(grace_, kRetry);
      for (Hole& h : later) {
        h.due = due_again;
        holes_.push_back(std::move(h));
      }
      StartPuncherLocked();
    }
    holes_cv_.NotifyOne();
  }
  for (const Hole& h : now) {
    auto file = Open(h.pack);
    if (!file.ok()) continue;  // removed meanwhile: nothing left to free
    // Where the filesystem cannot punch holes, the bytes stay until the
    // pack goes (as its last record is dropped, or by a later start's walk).
    if (::fallocate(file->fd->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                    static_cast<off_t>(h.offset), static_cast<off_t>(h.length)) != 0 &&
        errno != EOPNOTSUPP) {
      spdlog::debug("cache: could not free a record of {}: {}", PathOf(h.pack),
                    std::strerror(errno));
    }
  }
  {
    core::MutexLock l(mu_);
    punch_passes_++;
  }
  passes_cv_.NotifyAll();
}

uint64_t PackFiles::PunchPassesForTest() {
  core::MutexLock l(mu_);
  return punch_passes_;
}

bool PackFiles::AwaitPunchPassForTest(uint64_t passes) {
  const auto until = core::Clock::now() + std::chrono::seconds(10);
  core::MutexLock l(mu_);
  while (punch_passes_ <= passes) {
    if (!passes_cv_.WaitUntil(mu_, until)) return punch_passes_ > passes;
  }
  return true;
}

std::vector<uint64_t> PackFiles::Unnamed(const std::map<uint64_t, uint64_t>& named) {
  std::vector<uint64_t> out;
  core::MutexLock l(mu_);
  StartLocked();
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir_, ec), end; !ec && it != end; it.increment(ec)) {
    uint64_t n = 0;
    // Only earlier processes' packs: records are never added to those.
    if (PackNumber(it->path().filename().string(), &n) && n < first_ && !named.count(n))
      out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

void PackFiles::RemoveEarlier(uint64_t pack, uint64_t* removed, uint64_t* bytes) {
  const std::string path = PathOf(pack);
  struct stat st {};
  const uint64_t size =
      ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_blocks) * 512 : 0;
  open_.Erase(pack);
  if (::unlink(path.c_str()) == 0) {
    ++*removed;
    *bytes += size;
  }
}

}  // namespace perch::store
