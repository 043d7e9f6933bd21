#include "daemon/store/file_block_store.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>

#include "daemon/core/codec.h"
#include "daemon/core/limits.h"

namespace perch::store {

namespace {

using core::Result;
using core::Status;

constexpr char kMagic[8] = {'P', 'E', 'R', 'C', 'H', 'B', 'L', 'K'};
// Format 2 adds the writing run's number after the object id (see
// "Trusted runs" in the header); format 1 files are still read (untrusted).
constexpr uint64_t kFormat = 2;
constexpr uint64_t kFormatNoRun = 1;
constexpr char kTmpPrefix[] = ".tmp.";
constexpr size_t kFixedHeader =
    8 + 6 * 8;  // magic + format, header_len, index, length, crc, id_len

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  std::string msg = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT)
    return Status(core::StatusCode::kNoSpace, msg, core::FailureSite::kLocal);
  return core::InternalError(msg);
}

// Writes both buffers in full, one writev when it all goes at once.
bool WriteAll(int fd, std::string_view a, std::string_view b) {
  while (!a.empty() || !b.empty()) {
    struct iovec iov[2] = {{const_cast<char*>(a.data()), a.size()},
                           {const_cast<char*>(b.data()), b.size()}};
    const int first = a.empty() ? 1 : 0;
    ssize_t w = ::writev(fd, iov + first, 2 - first);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    size_t n = static_cast<size_t>(w);
    const size_t from_a = std::min(n, a.size());
    a.remove_prefix(from_a);
    b.remove_prefix(n - from_a);
  }
  return true;
}

// Reads exactly n bytes at off; false on error or EOF (errno 0 at EOF).
bool PreadAll(int fd, char* p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return true;
}

// CRC32C of `len` bytes of `fd` at `off`, read in pieces through a buffer of
// this thread's that stays in the CPU's cache (a block-sized buffer per check
// cost page faults and a copy through memory). False on a read error or EOF.
bool FileCrc32c(int fd, uint64_t off, uint64_t len, uint32_t* crc_out) {
  constexpr size_t kPiece = 128 << 10;
  thread_local std::unique_ptr<unsigned char[]> buf(new unsigned char[kPiece]);
  uint32_t crc = 0xFFFFFFFFu;
  while (len > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, kPiece));
    if (!PreadAll(fd, reinterpret_cast<char*>(buf.get()), n, static_cast<off_t>(off))) return false;
    crc = crc32_iscsi(buf.get(), static_cast<int>(n), crc);
    off += n;
    len -= n;
  }
  *crc_out = crc ^ 0xFFFFFFFFu;
  return true;
}

uint32_t Crc32c(std::string_view data) {
  return crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data.data())),
                     static_cast<int>(data.size()), 0xFFFFFFFFu) ^
         0xFFFFFFFFu;
}

std::string Header(const core::BlockKey& key, uint64_t length, uint32_t crc, uint64_t run) {
  std::string h(kMagic, sizeof(kMagic));
  size_t header_len = kFixedHeader + key.object_id.size() + 8;
  header_len = (header_len + 63) / 64 * 64;
  core::codec::PutU64(&h, kFormat);
  core::codec::PutU64(&h, header_len);
  core::codec::PutU64(&h, key.index);
  core::codec::PutU64(&h, length);
  core::codec::PutU64(&h, crc);
  core::codec::PutString(&h, key.object_id);
  core::codec::PutU64(&h, run);
  h.resize(header_len, '\0');
  return h;
}

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

FileBlockStore::FileBlockStore(std::string root, uint64_t block_size, size_t open_files,
                               std::string boot_id_file)
    : root_(std::move(root)),
      block_size_(block_size),
      tmp_prefix_(kTmpPrefix + std::to_string(std::random_device{}()) + "."),
      boot_id_file_(std::move(boot_id_file)),
      open_(open_files),
      objects_(open_files) {}

std::string FileBlockStore::PathOf(const core::BlockKey& key) const {
  std::string shard = key.object_id.size() >= 2 ? key.object_id.substr(0, 2) : "00";
  return root_ + "/blocks/" + shard + "/" + key.object_id + "." + std::to_string(key.index);
}

std::string FileBlockStore::ObjectPathOf(const std::string& object_id) const {
  std::string shard = object_id.size() >= 2 ? object_id.substr(0, 2) : "00";
  return root_ + "/objects/" + shard + "/" + object_id;
}

namespace {

// What a block file's header says. Empty `why` when it is well formed.
struct ParsedHeader {
  uint64_t header_len = 0, index = 0, data_len = 0, crc = 0;
  uint64_t run = 0;  // the run that wrote it; 0 in format 1
  std::string id;
  std::string why;     // "" when the header checks out
  int read_errno = 0;  // nonzero: the file could not be read (not a corruption)
};

ParsedHeader ParseHeader(int fd, uint64_t file_size) {
  ParsedHeader h;
  std::string head(kFixedHeader, '\0');
  if (!PreadAll(fd, head.data(), head.size(), 0)) {
    h.read_errno = errno;
    h.why = "shorter than its header";
    return h;
  }
  if (std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0) {
    h.why = "bad magic";
    return h;
  }
  core::codec::Reader r(std::string_view(head).substr(sizeof(kMagic)));
  uint64_t format = 0, id_len = 0;
  r.GetU64(&format);
  r.GetU64(&h.header_len);
  r.GetU64(&h.index);
  r.GetU64(&h.data_len);
  r.GetU64(&h.crc);
  r.GetU64(&id_len);
  const uint64_t run_len = format == kFormat ? 8 : 0;
  if (format != kFormat && format != kFormatNoRun) {
    h.why = "unknown format " + std::to_string(format);
  } else if (id_len > 4096 || h.header_len < kFixedHeader + id_len + run_len ||
             h.header_len > 4096) {
    h.why = "bad header length";
  } else if (h.data_len > file_size || file_size != h.header_len + h.data_len) {
    h.why = "size " + std::to_string(file_size) + " does not match its header";
  } else {
    std::string rest(id_len + run_len, '\0');
    if (!PreadAll(fd, rest.data(), rest.size(), static_cast<off_t>(kFixedHeader))) {
      h.read_errno = errno;
      h.why = "truncated header";
      return h;
    }
    h.id = rest.substr(0, id_len);
    if (run_len > 0) core::codec::Reader(std::string_view(rest).substr(id_len)).GetU64(&h.run);
  }
  return h;
}

}  // namespace

Result<OpenBlock> FileBlockStore::OpenChecked(const core::BlockKey& key) {
  if (auto open = open_.Find(key)) return *std::move(open);
  if (key.index > 0) {
    // In the object's file; else perhaps a block file of an earlier version.
    Result<OpenBlock> in_object = OpenObjectBlock(key);
    if (in_object.ok() || in_object.status().code() != core::StatusCode::kNotFound)
      return in_object;
  }
  const std::string path = PathOf(key);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    // Block 0 of an object of more than one block is in the object's file.
    if (errno == ENOENT && key.index == 0) return OpenObjectBlock(key);
    if (errno == ENOENT) return core::NotFoundError("no block " + path, core::FailureSite::kLocal);
    return ErrnoStatus("open", path, errno);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return ErrnoStatus("stat", path, errno);
  auto corrupt = [&](const std::string& why) {
    Forget(CheckedKey{static_cast<uint64_t>(st.st_ino), 0});
    ::unlink(path.c_str());
    return core::CorruptError("cache block " + path + ": " + why + "; removed",
                              core::FailureSite::kLocal);
  };
  ParsedHeader h = ParseHeader(f.fd, static_cast<uint64_t>(st.st_size));
  if (h.read_errno != 0) return ErrnoStatus("read", path, h.read_errno);
  if (!h.why.empty()) return corrupt(h.why);
  if (h.index != key.index || h.id != key.object_id) return corrupt("header names another block");
  const FileId fid = IdOf(st);
  const CheckedKey checked{fid.ino, 0};
  const FileStamp stamp{fid.size, fid.mtime_ns};
  if (!Trusted(h.run) && !Verified(checked, stamp)) {
    // First use of this file by this process: check the whole block.
    uint32_t crc = 0;
    if (!FileCrc32c(f.fd, h.header_len, h.data_len, &crc)) {
      if (errno != 0) return ErrnoStatus("read", path, errno);
      return corrupt("truncated data");
    }
    if (crc != static_cast<uint32_t>(h.crc)) return corrupt("CRC32C mismatch");
    MarkVerified(checked, stamp);
  }
  OpenBlock open{std::make_shared<const core::BlockFd>(f.fd), h.header_len, h.data_len};
  f.fd = -1;
  open_.Put(key, open);
  return open;
}

Result<core::Bytes> FileBlockStore::Read(const core::BlockKey& key, uint64_t offset,
                                         uint64_t length) {
  Result<OpenBlock> opened = OpenChecked(key);
  if (!opened.ok()) return opened.status();
  const OpenBlock& open = *opened;
  if (offset >= open.data_len) return core::Bytes();
  uint64_t n = std::min(length, open.data_len - offset);
  std::string part(n, '\0');
  if (!PreadAll(open.file->fd(), part.data(), n, static_cast<off_t>(open.data_offset + offset))) {
    open_.Erase(key);
    if (errno != 0) return ErrnoStatus("read", PathOf(key), errno);
    return core::CorruptError("cache block " + PathOf(key) + " shrank while being read",
                              core::FailureSite::kLocal);
  }
  return part;
}

Result<core::BlockSlice> FileBlockStore::Slice(const core::BlockKey& key, uint64_t offset,
                                               uint64_t length) {
  Result<OpenBlock> opened = OpenChecked(key);
  if (!opened.ok()) return opened.status();
  OpenBlock& open = *opened;
  return core::BlockSlice(std::move(open.file), open.data_offset + std::min(offset, open.data_len),
                          offset >= open.data_len ? 0 : std::min(length, open.data_len - offset));
}

Status FileBlockStore::Write(const core::BlockKey& key, std::string_view data) {
  if (InObjectFile(key, data.size())) return WriteObjectBlock(key, data);
  const std::string path = PathOf(key);
  const std::string dir = path.substr(0, path.rfind('/'));
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string tmp = dir + "/" + tmp_prefix_ + std::to_string(rng());
  Fd f;
  // Read-write: the descriptor stays open for the reads that follow (open_).
  f.fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (f.fd < 0 && errno == ENOENT) {
    // First block of this shard (its parents exist but for the first block
    // of a new cache). Directories are private to the daemon (0700),
    // whatever the umask.
    if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
      if (errno != ENOENT) return ErrnoStatus("mkdir", dir, errno);
      for (const std::string& d : {root_, root_ + "/blocks", dir}) {
        if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", d, errno);
      }
    }
    f.fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  }
  if (f.fd < 0) return ErrnoStatus("create", tmp, errno);
  // No fsync: see the header (a block torn by a power cut fails its check).
  std::string header = Header(key, data.size(), Crc32c(data), run_);
  if (!WriteAll(f.fd, header, data)) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("write", tmp, err);
  }
  struct stat st {};
  const bool stamped = ::fstat(f.fd, &st) == 0;  // rename keeps inode, size and mtime
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename", path, err);
  }
  if (stamped) {
    const FileId fid = IdOf(st);
    MarkVerified(CheckedKey{fid.ino, 0}, FileStamp{fid.size, fid.mtime_ns});
  }
  open_.Put(key,
            OpenBlock{std::make_shared<const core::BlockFd>(f.fd), header.size(), data.size()});
  f.fd = -1;
  return Status::Ok();
}

FileBlockStore::FileId FileBlockStore::IdOf(const struct stat& st) {
  return FileId{static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

bool FileBlockStore::Verified(const CheckedKey& key, const FileStamp& stamp) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = verified_.find(key);
  return it != verified_.end() && it->second == stamp;
}

void FileBlockStore::MarkVerified(const CheckedKey& key, const FileStamp& stamp) {
  std::lock_guard<std::mutex> l(mu_);
  if (verified_.size() >= (1u << 18))
    verified_.clear();  // bound memory; re-verifying is only slower
  verified_[key] = stamp;
}

void FileBlockStore::Forget(const CheckedKey& key) {
  std::lock_guard<std::mutex> l(mu_);
  verified_.erase(key);
}

Status FileBlockStore::Remove(const core::BlockKey& key) {
  // Block 0 is a block file unless its object has more blocks; any other
  // block is in the object's file, or a block file of an earlier version.
  const std::string path = PathOf(key);
  open_.Erase(key);
  if (key.index > 0) {
    if (Status s = RemoveObjectBlock(key); !s.ok()) return s;
  }
  if (::unlink(path.c_str()) == 0) return Status::Ok();
  if (errno != ENOENT) return ErrnoStatus("remove", path, errno);
  return key.index == 0 ? RemoveObjectBlock(key) : Status::Ok();
}

bool FileBlockStore::IsRecorded(const std::filesystem::directory_entry& entry,
                                const std::string& name,
                                const std::function<bool(const core::BlockKey&)>& recorded) const {
  // The file type from the directory entry (no stat); a name of this
  // store's form ("<id>.<index>" in the id's shard) gives the key.
  std::error_code ec;
  if (!entry.is_regular_file(ec) || name.starts_with(kTmpPrefix)) return false;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0) return false;
  core::BlockKey key{name.substr(0, dot), 0};
  const char* first = name.data() + dot + 1;
  const char* last = name.data() + name.size();
  auto [end, err] = std::from_chars(first, last, key.index);
  if (err != std::errc() || end != last || entry.path().native() != PathOf(key)) return false;
  return recorded(key);
}

Result<core::BlockScan> FileBlockStore::ForEachBlock(
    const std::function<void(const core::BlockKey&, uint64_t)>& fn,
    const std::function<bool(const core::BlockKey&)>& recorded) {
  namespace fs = std::filesystem;
  core::BlockScan scan;
  if (Status s = ForEachObjectBlock(fn, recorded, &scan); !s.ok()) return s;
  std::error_code ec;
  const fs::path blocks = fs::path(root_) / "blocks";
  if (!fs::exists(blocks, ec)) return scan;
  auto remove = [&](const fs::path& p, uint64_t size) {
    if (::unlink(p.c_str()) == 0) {
      scan.leftovers_removed++;
      scan.leftover_bytes += size;
    }
  };
  for (fs::directory_iterator shard(blocks, ec), end; !ec && shard != end; shard.increment(ec)) {
    if (!shard->is_directory(ec)) continue;
    std::error_code ec2;
    for (fs::directory_iterator it(shard->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
      const fs::path p = it->path();
      const std::string name = p.filename().string();
      if (recorded && IsRecorded(*it, name, recorded)) {
        scan.blocks++;
        continue;
      }
      struct stat st {};
      if (::lstat(p.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
      const uint64_t size = static_cast<uint64_t>(st.st_size);
      if (name.starts_with(kTmpPrefix)) {
        // A write of this object may be under way; other temp files are
        // leftovers of a process that died mid-write.
        if (!name.starts_with(tmp_prefix_)) remove(p, size);
        continue;
      }
      const size_t dot = name.rfind('.');
      Fd f;
      f.fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
      if (f.fd < 0) continue;  // went meanwhile (evicted)
      ParsedHeader h = ParseHeader(f.fd, size);
      if (h.read_errno != 0) continue;
      if (!h.why.empty() || dot == std::string::npos || name.substr(0, dot) != h.id ||
          name.substr(dot + 1) != std::to_string(h.index) ||
          p.string() != PathOf(core::BlockKey{h.id, h.index})) {
        Forget(CheckedKey{static_cast<uint64_t>(st.st_ino), 0});
        remove(p, size);
        continue;
      }
      scan.blocks++;
      fn(core::BlockKey{h.id, h.index}, h.data_len);
    }
  }
  if (ec) return ErrnoStatus("list", blocks.string(), ec.value());
  return scan;
}

}  // namespace perch::store

namespace perch::store {

namespace {

constexpr char kRunMagic[8] = {'P', 'E', 'R', 'C', 'H', 'R', 'U', 'N'};
constexpr uint64_t kRunFormat = 1;

// The run file (README "On-disk format"): magic, format, this boot's id,
// whether the run ended cleanly, its number, the first trusted run.
struct RunRecord {
  std::string boot_id;
  bool clean = false;
  uint64_t run = 0, trusted_from = 0;
};

std::string EncodeRun(const RunRecord& r) {
  std::string out(kRunMagic, sizeof(kRunMagic));
  core::codec::PutU64(&out, kRunFormat);
  core::codec::PutString(&out, r.boot_id);
  core::codec::PutU64(&out, r.clean ? 1 : 0);
  core::codec::PutU64(&out, r.run);
  core::codec::PutU64(&out, r.trusted_from);
  return out;
}

std::optional<RunRecord> DecodeRun(std::string_view in) {
  if (in.size() < sizeof(kRunMagic) || in.size() > 4096 ||
      std::memcmp(in.data(), kRunMagic, sizeof(kRunMagic)) != 0) {
    return std::nullopt;
  }
  core::codec::Reader r(in.substr(sizeof(kRunMagic)));
  RunRecord rec;
  uint64_t format = 0, clean = 0;
  if (!r.GetU64(&format) || format != kRunFormat || !r.GetString(&rec.boot_id) ||
      !r.GetU64(&clean) || !r.GetU64(&rec.run) || !r.GetU64(&rec.trusted_from) || clean > 1 ||
      rec.run == 0 || rec.trusted_from > rec.run) {
    return std::nullopt;
  }
  rec.clean = clean == 1;
  return rec;
}

std::string ReadSmallFile(const std::string& path, int* err) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) {
    *err = errno;
    return "";
  }
  std::string out(4097, '\0');
  ssize_t n = ::pread(f.fd, out.data(), out.size(), 0);
  *err = n < 0 ? errno : 0;
  out.resize(n < 0 ? 0 : static_cast<size_t>(n));
  return out;
}

uint64_t NowNs() {
  struct timespec ts {};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1000000000u + static_cast<uint64_t>(ts.tv_nsec);
}

}  // namespace

Status FileBlockStore::WriteRunFile(const std::string& contents) {
  const std::string path = root_ + "/run";
  const std::string tmp = root_ + "/" + tmp_prefix_ + "run";
  Fd f;
  f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (f.fd < 0) return ErrnoStatus("create", tmp, errno);
  if (!WriteAll(f.fd, contents, {}) || ::fsync(f.fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("write", tmp, err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus("rename", path, err);
  }
  Fd dir;
  dir.fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd < 0 || ::fsync(dir.fd) != 0) return ErrnoStatus("sync", root_, errno);
  return Status::Ok();
}

Result<FileBlockStore::RunTrust> FileBlockStore::BeginRun() {
  int err = 0;
  const std::string boot = ReadSmallFile(boot_id_file_, &err);
  const std::string raw = ReadSmallFile(root_ + "/run", &err);
  if (err != 0 && err != ENOENT) return ErrnoStatus("read", root_ + "/run", err);
  std::optional<RunRecord> prev = DecodeRun(raw);
  RunRecord now;
  now.boot_id = boot;
  now.run = std::max(prev ? prev->run + 1 : 1, NowNs());
  RunTrust trust;
  if (prev && (prev->clean || (!boot.empty() && prev->boot_id == boot))) {
    // Everything the earlier runs wrote is on disk as written: synced by a
    // clean end, or still the kernel's (same boot: no crash since).
    now.trusted_from = prev->trusted_from;
    trust.inherited = true;
  } else {
    now.trusted_from = now.run;  // an OS crash, a first run or an unreadable record
  }
  trust.run = now.run;
  trust.trusted_from = now.trusted_from;
  // Written (durably) before any block of this run: were this run to end in
  // an OS crash, the next one must not find an older clean record.
  if (Status s = WriteRunFile(EncodeRun(now)); !s.ok()) return s;
  boot_id_ = boot;
  trusted_from_.store(now.trusted_from, std::memory_order_relaxed);
  run_.store(now.run, std::memory_order_release);
  return trust;
}

Status FileBlockStore::EndRun() {
  const uint64_t run = run_.load(std::memory_order_acquire);
  if (run == 0) return Status::Ok();  // never begun: nothing to vouch for
  Fd dir;
  dir.fd = ::open(root_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir.fd < 0) return ErrnoStatus("open", root_, errno);
  if (::syncfs(dir.fd) != 0) return ErrnoStatus("sync", root_, errno);
  RunRecord rec{boot_id_, true, run, trusted_from_.load(std::memory_order_relaxed)};
  return WriteRunFile(EncodeRun(rec));
}

bool FileBlockStore::Trusted(uint64_t file_run) const {
  return file_run != 0 && file_run >= trusted_from_.load(std::memory_order_relaxed);
}

}  // namespace perch::store

// Object files (object_map.h).
namespace perch::store {

namespace {

// Writes all of `data` at `off`.
bool PwriteAll(int fd, std::string_view data, uint64_t off) {
  while (!data.empty()) {
    ssize_t w = ::pwrite(fd, data.data(), data.size(), static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    data.remove_prefix(static_cast<size_t>(w));
    off += static_cast<uint64_t>(w);
  }
  return true;
}

}  // namespace

std::mutex& FileBlockStore::ObjectMutex(const std::string& object_id) {
  return object_mu_[std::hash<std::string>{}(object_id) % object_mu_.size()];
}

void FileBlockStore::RemoveObjectFiles(const std::string& object_id) {
  objects_.Erase(object_id);
  const std::string data = ObjectPathOf(object_id);
  ::unlink((data + ".map").c_str());
  ::unlink(data.c_str());
}

Result<FileBlockStore::ObjectFiles> FileBlockStore::OpenObject(const std::string& object_id,
                                                               bool create) {
  if (auto open = objects_.Find(object_id)) return *std::move(open);
  const std::string data_path = ObjectPathOf(object_id);
  const std::string map_path = data_path + ".map";
  Fd map, data;
  map.fd = ::open(map_path.c_str(), O_RDWR | O_CLOEXEC);
  if (map.fd < 0 && errno != ENOENT) return ErrnoStatus("open", map_path, errno);
  if (map.fd >= 0) {
    std::string header(kMapHeaderSize, '\0');
    if (!PreadAll(map.fd, header.data(), header.size(), 0)) {
      if (errno != 0) return ErrnoStatus("read", map_path, errno);
      header.clear();  // shorter than a header
    }
    if (std::string why = CheckMapHeader(header, block_size_, object_id); !why.empty()) {
      spdlog::warn("cache: object file {}: {}; removed", map_path, why);
      ::close(map.fd);
      map.fd = -1;
      RemoveObjectFiles(object_id);
    }
  }
  if (map.fd >= 0) {
    data.fd =
        ::open(data_path.c_str(), create ? O_RDWR | O_CREAT | O_CLOEXEC : O_RDWR | O_CLOEXEC, 0600);
    if (data.fd < 0 && errno != ENOENT) return ErrnoStatus("open", data_path, errno);
    if (data.fd < 0) {  // a map without its data: nothing it names is there
      ::close(map.fd);
      map.fd = -1;
      RemoveObjectFiles(object_id);
    }
  }
  if (map.fd < 0) {
    if (!create)
      return core::NotFoundError("no object file " + data_path, core::FailureSite::kLocal);
    // Directories are private to the daemon (0700), whatever the umask.
    const std::string dir = data_path.substr(0, data_path.rfind('/'));
    for (const std::string& d : {root_, root_ + "/objects", dir}) {
      if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) return ErrnoStatus("mkdir", d, errno);
    }
    // The data file first: a map (what a reader trusts) never names a file
    // that is not there.
    data.fd = ::open(data_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (data.fd < 0) return ErrnoStatus("create", data_path, errno);
    map.fd = ::open(map_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (map.fd < 0 || !PwriteAll(map.fd, EncodeMapHeader(block_size_, object_id), 0)) {
      int err = errno;
      RemoveObjectFiles(object_id);
      return ErrnoStatus("create", map_path, err);
    }
  }
  struct stat st {};
  if (::fstat(data.fd, &st) != 0) return ErrnoStatus("stat", data_path, errno);
  ObjectFiles files{std::make_shared<const core::BlockFd>(data.fd),
                    std::make_shared<const core::BlockFd>(map.fd),
                    static_cast<uint64_t>(st.st_ino)};
  data.fd = map.fd = -1;
  objects_.Put(object_id, files);
  return files;
}

Result<std::optional<MapEntry>> FileBlockStore::ReadEntry(const ObjectFiles& files,
                                                          const std::string& object_id,
                                                          uint64_t index) {
  char buf[kMapEntrySize];
  ssize_t n;
  do {
    n = ::pread(files.map->fd(), buf, sizeof(buf), static_cast<off_t>(MapEntryOffset(index)));
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus("read", ObjectPathOf(object_id) + ".map", errno);
  return DecodeMapEntry(std::string_view(buf, static_cast<size_t>(n)));
}

Status FileBlockStore::CheckObjectBlock(const core::BlockKey& key, const ObjectFiles& files,
                                        const std::optional<MapEntry>& entry, uint64_t file_size) {
  const std::string path = ObjectPathOf(key.object_id);
  auto corrupt = [&](const std::string& why) {
    (void)DropObjectBlock(key, files);
    return core::CorruptError(
        "cache block " + std::to_string(key.index) + " of " + path + ": " + why + "; removed",
        core::FailureSite::kLocal);
  };
  if (!entry.has_value()) return corrupt("damaged map entry");
  const MapEntry& e = *entry;
  if (e.length == 0) {
    return core::NotFoundError("no block " + std::to_string(key.index) + " in " + path,
                               core::FailureSite::kLocal);
  }
  if (e.length > block_size_) return corrupt("map entry longer than a block");
  const uint64_t offset = key.index * block_size_;
  if (file_size < offset + e.length) return corrupt("truncated data");
  const CheckedKey checked{files.ino, key.index};
  const FileStamp stamp{e.length, static_cast<int64_t>(e.crc)};
  if (!Trusted(e.run) && !Verified(checked, stamp)) {
    uint32_t crc = 0;
    if (!FileCrc32c(files.data->fd(), offset, e.length, &crc)) {
      if (errno != 0) return ErrnoStatus("read", path, errno);
      return corrupt("truncated data");
    }
    if (crc != static_cast<uint32_t>(e.crc)) return corrupt("CRC32C mismatch");
    MarkVerified(checked, stamp);
  }
  return Status::Ok();
}

Result<OpenBlock> FileBlockStore::OpenObjectBlock(const core::BlockKey& key) {
  const std::string path = ObjectPathOf(key.object_id);
  if (key.index >= kMaxObjectBlocks) {
    return core::NotFoundError("no block " + std::to_string(key.index) + " in " + path,
                               core::FailureSite::kLocal);
  }
  std::lock_guard<std::mutex> l(ObjectMutex(key.object_id));
  Result<ObjectFiles> files = OpenObject(key.object_id, false);
  if (!files.ok()) return files.status();
  Result<std::optional<MapEntry>> entry = ReadEntry(*files, key.object_id, key.index);
  if (!entry.ok()) return entry.status();
  struct stat st {};
  if (::fstat(files->data->fd(), &st) != 0) return ErrnoStatus("stat", path, errno);
  if (Status s = CheckObjectBlock(key, *files, *entry, static_cast<uint64_t>(st.st_size)); !s.ok())
    return s;
  OpenBlock open{files->data, key.index * block_size_, (*entry)->length};
  open_.Put(key, open);
  return open;
}

Status FileBlockStore::WriteObjectBlock(const core::BlockKey& key, std::string_view data) {
  const std::string path = ObjectPathOf(key.object_id);
  if (key.index >= kMaxObjectBlocks || data.size() > block_size_ || data.empty()) {
    return core::InvalidArgumentError("block " + std::to_string(key.index) + " of " +
                                      std::to_string(data.size()) + " bytes cannot go to " + path);
  }
  std::lock_guard<std::mutex> l(ObjectMutex(key.object_id));
  Result<ObjectFiles> files = OpenObject(key.object_id, true);
  if (!files.ok()) return files.status();
  const uint64_t offset = key.index * block_size_;
  const MapEntry entry{data.size(), Crc32c(data), run_.load(std::memory_order_relaxed)};
  // No fsync (see the header): a block torn by a power cut fails its check.
  // The entry goes last: a reader sees the block once its bytes are there.
  if (!PwriteAll(files->data->fd(), data, offset) ||
      !PwriteAll(files->map->fd(), EncodeMapEntry(entry), MapEntryOffset(key.index))) {
    int err = errno;
    (void)DropObjectBlock(key, *files);
    return ErrnoStatus("write", path, err);
  }
  MarkVerified(CheckedKey{files->ino, key.index},
               FileStamp{entry.length, static_cast<int64_t>(entry.crc)});
  open_.Put(key, OpenBlock{files->data, offset, data.size()});
  return Status::Ok();
}

Status FileBlockStore::RemoveObjectBlock(const core::BlockKey& key) {
  if (key.index >= kMaxObjectBlocks) return Status::Ok();
  std::lock_guard<std::mutex> l(ObjectMutex(key.object_id));
  if (Held(key.object_id)) {
    return core::UnavailableError("block " + std::to_string(key.index) + " of " +
                                      ObjectPathOf(key.object_id) +
                                      " is in use: the kernel reads the object's file directly",
                                  core::FailureSite::kLocal);
  }
  Result<ObjectFiles> files = OpenObject(key.object_id, false);
  if (!files.ok()) {
    return files.status().code() == core::StatusCode::kNotFound ? Status::Ok() : files.status();
  }
  return DropObjectBlock(key, *files);
}

Status FileBlockStore::DropObjectBlock(const core::BlockKey& key, const ObjectFiles& files) {
  open_.Erase(key);
  Forget(CheckedKey{files.ino, key.index});
  const std::string path = ObjectPathOf(key.object_id);
  // A full disk may refuse even this write (the entry's page was never
  // written): then the entry was never there either, and the rest goes on.
  Status cleared = Status::Ok();
  if (!PwriteAll(files.map->fd(), EncodeMapEntry(MapEntry{}), MapEntryOffset(key.index)))
    cleared = ErrnoStatus("write", path + ".map", errno);
  // The bytes go too (the size stays: the file keeps its other blocks at
  // their offsets). A filesystem that cannot punch holes frees them when the
  // last block goes.
  // Not while the kernel may read the file directly (WholeFile): it would
  // read zeros there. The bytes then go with the file.
  const off_t offset = static_cast<off_t>(key.index * block_size_);
  if (!Held(key.object_id) &&
      ::fallocate(files.data->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, offset,
                  static_cast<off_t>(block_size_)) != 0 &&
      errno != EOPNOTSUPP) {
    spdlog::debug("cache: could not free block {} of {}: {}", key.index, path,
                  std::strerror(errno));
  }
  // The last block takes the files with it. Blocks tend to go in order, so
  // the entries beside this one are looked at first.
  bool any = false;
  const uint64_t near = key.index > 64 ? key.index - 64 : 0;
  Status s = ForEachEntry(files, key.object_id, near, near + 129, [&](uint64_t, const auto& e) {
    any = !e || e->length != 0;
    return !any;
  });
  if (s.ok() && !any) {
    s = ForEachEntry(files, key.object_id, 0, kMaxObjectBlocks, [&](uint64_t, const auto& e) {
      any = !e || e->length != 0;
      return !any;
    });
  }
  if (!s.ok()) return s;
  if (!any) RemoveObjectFiles(key.object_id);
  return any ? cleared : Status::Ok();
}

Status FileBlockStore::ForEachEntry(
    const ObjectFiles& files, const std::string& object_id, uint64_t from, uint64_t to,
    const std::function<bool(uint64_t, const std::optional<MapEntry>&)>& fn) {
  constexpr uint64_t kChunk = 2048;  // entries per read (64 KiB)
  std::string buf(kChunk * kMapEntrySize, '\0');
  to = std::min(to, kMaxObjectBlocks);
  for (uint64_t first = from; first < to; first += kChunk) {
    const uint64_t n = std::min(kChunk, to - first);
    ssize_t got;
    do {
      got = ::pread(files.map->fd(), buf.data(), n * kMapEntrySize,
                    static_cast<off_t>(MapEntryOffset(first)));
    } while (got < 0 && errno == EINTR);
    if (got < 0) return ErrnoStatus("read", ObjectPathOf(object_id) + ".map", errno);
    const uint64_t whole = static_cast<uint64_t>(got) / kMapEntrySize;
    for (uint64_t i = 0; i < whole; ++i) {
      if (!fn(first + i,
              DecodeMapEntry(std::string_view(buf).substr(i * kMapEntrySize, kMapEntrySize))))
        return Status::Ok();
    }
    if (whole < n) break;  // the end of the map
  }
  return Status::Ok();
}

Result<std::shared_ptr<const core::BlockFd>> FileBlockStore::WholeFile(const std::string& object_id,
                                                                       uint64_t size,
                                                                       core::BlockKey* failed) {
  const std::string path = ObjectPathOf(object_id);
  if (size < block_size_) {
    return core::NotFoundError("object of one block: no object file", core::FailureSite::kLocal);
  }
  const uint64_t blocks = core::BlockCount(size, block_size_);
  if (blocks > kMaxObjectBlocks) return core::NotFoundError("object too large for an object file");
  // Held from before the checks: a removal that starts after this refuses
  // (it takes the object's lock, then looks), and one already under way
  // finishes before the checks, which then find its block gone. Let go when
  // the file's last holder lets the file go, or on the way out of here.
  // (The holds outlive the store if a file does: a holder may let go last.)
  {
    std::lock_guard<std::mutex> l(held_->mu);
    held_->count[object_id]++;
  }
  std::shared_ptr<void> hold(nullptr, [holds = held_, object_id](void*) {
    std::lock_guard<std::mutex> l(holds->mu);
    auto it = holds->count.find(object_id);
    if (it != holds->count.end() && --it->second == 0) holds->count.erase(it);
  });
  // Every block present, of its length and checked (a first use after an
  // untrusted start checks each one now, as a read of it would): one pass
  // over the map, none of the blocks put among the open files.
  std::lock_guard<std::mutex> l(ObjectMutex(object_id));
  Result<ObjectFiles> files = OpenObject(object_id, false);
  if (!files.ok()) return files.status();
  struct stat st {};
  if (::fstat(files->data->fd(), &st) != 0) return ErrnoStatus("stat", path, errno);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size != size) {
    return core::NotFoundError(
        path + " holds " + std::to_string(file_size) + " bytes, not " + std::to_string(size),
        core::FailureSite::kLocal);
  }
  Status checked = Status::Ok();
  uint64_t next = 0;  // the first block not yet seen whole
  Status walked =
      ForEachEntry(*files, object_id, 0, blocks, [&](uint64_t i, const std::optional<MapEntry>& e) {
        const core::BlockKey key{object_id, i};
        const uint64_t want = std::min(block_size_, size - i * block_size_);
        checked = CheckObjectBlock(key, *files, e, file_size);
        if (checked.ok() && e->length != want) {
          checked = core::NotFoundError("block " + std::to_string(i) + " of " + path + " is " +
                                            std::to_string(e->length) + " bytes, not " +
                                            std::to_string(want),
                                        core::FailureSite::kLocal);
        }
        if (!checked.ok()) {
          if (failed != nullptr) *failed = key;
          return false;
        }
        next = i + 1;
        return true;
      });
  if (!walked.ok()) return walked;
  if (!checked.ok()) return checked;
  if (next < blocks) {  // the map ends before the object does
    if (failed != nullptr) *failed = core::BlockKey{object_id, next};
    return core::NotFoundError("no block " + std::to_string(next) + " in " + path,
                               core::FailureSite::kLocal);
  }
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f.fd < 0) return ErrnoStatus("open", path, errno);
  std::shared_ptr<const core::BlockFd> file(new core::BlockFd(f.fd),
                                            [hold = std::move(hold)](const core::BlockFd* p) {
                                              delete p;  // then `hold` goes with this deleter
                                            });
  f.fd = -1;
  return file;
}

bool FileBlockStore::Held(const std::string& object_id) {
  std::lock_guard<std::mutex> l(held_->mu);
  return held_->count.count(object_id) > 0;
}

Status FileBlockStore::ForEachObjectBlock(
    const std::function<void(const core::BlockKey&, uint64_t)>& fn,
    const std::function<bool(const core::BlockKey&)>& recorded, core::BlockScan* scan) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path objects = fs::path(root_) / "objects";
  if (!fs::exists(objects, ec)) return Status::Ok();
  for (fs::directory_iterator shard(objects, ec), end; !ec && shard != end; shard.increment(ec)) {
    if (!shard->is_directory(ec)) continue;
    std::error_code ec2;
    for (fs::directory_iterator it(shard->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
      std::string name = it->path().filename().string();
      const bool is_map = name.ends_with(".map");
      if (is_map) name.resize(name.size() - 4);
      std::error_code file_ec;  // about this file only: the walk goes on
      if (!it->is_regular_file(file_ec) ||
          ObjectPathOf(name) + (is_map ? ".map" : "") != it->path().native()) {
        continue;  // not a name this store gives
      }
      if (!is_map) {
        std::lock_guard<std::mutex> l(ObjectMutex(name));
        // A data file needs its map (written after it, removed before it):
        // without one it is the leftover of a process killed in between.
        if (!fs::exists(it->path().native() + ".map", file_ec) && !file_ec) {
          const uint64_t size = it->file_size(file_ec);
          if (::unlink(it->path().c_str()) == 0) {
            scan->leftovers_removed++;
            scan->leftover_bytes += file_ec ? 0 : size;
          }
        }
        continue;
      }
      std::vector<std::pair<uint64_t, uint64_t>> found;  // (index, length), told after the unlock
      {
        std::lock_guard<std::mutex> l(ObjectMutex(name));
        Result<ObjectFiles> files = OpenObject(name, false);
        if (!files.ok()) continue;  // removed (damaged header) or gone meanwhile
        std::vector<uint64_t> damaged;
        (void)ForEachEntry(*files, name, 0, kMaxObjectBlocks,
                           [&](uint64_t i, const std::optional<MapEntry>& e) {
                             if (e && e->length == 0) return true;
                             if (!e || e->length > block_size_) {
                               damaged.push_back(i);
                             } else {
                               found.emplace_back(i, e->length);
                             }
                             return true;
                           });
        for (uint64_t i : damaged) {  // dropped: a miss, fetched again
          (void)DropObjectBlock(core::BlockKey{name, i}, *files);
          scan->leftovers_removed++;
        }
      }
      for (const auto& [index, length] : found) {
        const core::BlockKey key{name, index};
        scan->blocks++;
        if (recorded && recorded(key)) continue;
        fn(key, length);
      }
    }
  }
  if (ec) return ErrnoStatus("list", objects.string(), ec.value());
  return Status::Ok();
}

}  // namespace perch::store
