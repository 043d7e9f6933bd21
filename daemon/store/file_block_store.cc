#include "daemon/store/file_block_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <filesystem>
#include <memory>
#include <optional>
#include <random>
#include <vector>

#include "daemon/store/block_file_format.h"

namespace perch::store {

namespace {

using core::Result;
using core::Status;

}  // namespace

FileBlockStore::FileBlockStore(std::string root, uint64_t block_size, size_t open_files)
    : root_(std::move(root)),
      block_size_(block_size),
      tmp_prefix_(kTmpPrefix + std::to_string(std::random_device{}()) + "."),
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

Result<OpenBlock> FileBlockStore::OpenChecked(const core::BlockKey& key) {
  if (auto open = open_.Find(key)) return *std::move(open);
  if (key.index > 0) {
    // In the object's file; else perhaps a block file of an earlier version.
    Result<OpenBlock> in_object = OpenObjectBlock(key);
    if (in_object.ok() || in_object.status().code() != core::StatusCode::kNotFound)
      return in_object;
  }
  if (packs_ != nullptr && key.index == 0) {
    // Packed; else a block file written before packs, or an object's file.
    Result<OpenBlock> packed = OpenPacked(key);
    if (packed.ok() || packed.status().code() != core::StatusCode::kNotFound) return packed;
  }
  const std::string path = PathOf(key);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
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
  ParsedHeader h = ParseHeader(f.fd, 0, static_cast<uint64_t>(st.st_size), true);
  if (h.read_errno != 0) return ErrnoStatus("read", path, h.read_errno);
  if (!h.why.empty()) return corrupt(h.why);
  if (h.index != key.index || h.id != key.object_id) return corrupt("header names another block");
  const FileId fid = IdOf(st);
  const CheckedKey checked{fid.ino, 0};
  const FileStamp stamp{fid.size, fid.mtime_ns};
  const bool check = !Verified(checked, stamp);
  if (check) {
    // First use of this file by this process: check the whole block.
    uint32_t crc = 0;
    if (!FileCrc32c(f.fd, h.header_len, h.data_len, &crc)) {
      if (errno != 0) return ErrnoStatus("read", path, errno);
      return corrupt("truncated data");
    }
    if (crc != static_cast<uint32_t>(h.crc)) return corrupt("CRC32C mismatch");
    MarkVerified(checked, stamp);
  }
  OpenBlock open{std::make_shared<const core::BlockFd>(f.fd), h.header_len, h.data_len,
                 static_cast<uint32_t>(h.crc)};
  f.fd = -1;
  open_.Put(key, open);
  open.checked_now = check;
  return open;
}

std::shared_ptr<const void> FileBlockStore::Use(const core::BlockKey& key) {
  {
    core::MutexLock l(held_->mu);
    held_->blocks[key]++;
  }
  return std::shared_ptr<const void>(nullptr, [holds = held_, key](const void*) {
    core::MutexLock l(holds->mu);
    auto it = holds->blocks.find(key);
    if (it != holds->blocks.end() && --it->second == 0) holds->blocks.erase(it);
  });
}

bool FileBlockStore::InUse(const core::BlockKey& key) {
  core::MutexLock l(held_->mu);
  return held_->count.count(key.object_id) > 0 || held_->blocks.count(key) > 0;
}

Result<core::Bytes> FileBlockStore::Read(const core::BlockKey& key, uint64_t offset,
                                         uint64_t length) {
  // In use from before the block is looked up until its bytes are read (see
  // Slice): a hole punched in between would read as zeros.
  const std::shared_ptr<const void> use = Use(key);
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
  // The whole block: its bytes are at hand, and checking them costs a pass
  // over what is in the CPU's cache.
  if (offset == 0 && n == open.data_len && !open.checked_now && Crc32c(part) != open.crc)
    return Mismatched(key);
  return part;
}

Status FileBlockStore::Mismatched(const core::BlockKey& key) {
  open_.Erase(key);
  Result<uint64_t> v = Verify(key);
  if (!v.ok() && v.status().code() == core::StatusCode::kCorrupt) return v.status();
  return core::NotFoundError(
      "cache block " + key.object_id + "#" + std::to_string(key.index) + " changed while read",
      core::FailureSite::kLocal);
}

Result<core::BlockSlice> FileBlockStore::Slice(const core::BlockKey& key, uint64_t offset,
                                               uint64_t length) {
  // In use before the block is looked up: a removal that looks after this
  // keeps the bytes (RemoveObjectBlock refuses, a pack's hole waits), and
  // one that looked before has taken the block out of open_ and out of its
  // map or the pack index under the object's lock, so the lookup below
  // finds it gone (OpenObjectBlock and OpenPacked take that lock).
  std::shared_ptr<const void> use = Use(key);
  Result<OpenBlock> opened = OpenChecked(key);
  if (!opened.ok()) return opened.status();
  OpenBlock& open = *opened;
  if (offset == 0 && length >= open.data_len && !open.checked_now) {
    // The whole block (every small file read at once): checked each time,
    // one read of it through a buffer that stays in the CPU's cache.
    uint32_t crc = 0;
    errno = 0;
    const bool read = FileCrc32c(open.file->fd(), open.data_offset, open.data_len, &crc);
    if (!read && errno != 0) return ErrnoStatus("read", PathOf(key), errno);
    if (!read || crc != open.crc) return Mismatched(key);  // shorter, or other bytes
  }
  return core::BlockSlice(std::move(open.file), open.data_offset + std::min(offset, open.data_len),
                          offset >= open.data_len ? 0 : std::min(length, open.data_len - offset),
                          std::move(use));
}

Status FileBlockStore::Write(const core::BlockKey& key, std::string_view data) {
  if (InObjectFile(key, data.size())) return WriteObjectBlock(key, data);
  if (packs_ != nullptr) return WritePacked(key, data);
  const std::string path = PathOf(key);
  const std::string dir = path.substr(0, path.rfind('/'));
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string tmp = dir + "/" + tmp_prefix_ + std::to_string(rng());
  Fd f;
  // Read-write: the descriptor stays open for the reads that follow (open_).
  f.fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
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
    f.fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  }
  if (f.fd < 0) return ErrnoStatus("create", tmp, errno);
  // No fsync: see the header (a block torn by a power cut fails its check).
  const uint32_t crc = Crc32c(data);
  std::string header = BlockHeader(key, data.size(), crc);
  if (!PwriteAll(f.fd, header, data, 0)) {  // a new file
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
  open_.Put(
      key, OpenBlock{std::make_shared<const core::BlockFd>(f.fd), header.size(), data.size(), crc});
  f.fd = -1;
  return Status::Ok();
}

Result<uint64_t> FileBlockStore::Verify(const core::BlockKey& key) {
  // Where a read looks (OpenChecked), in the same order.
  std::vector<int> order;
  if (key.index > 0) {
    order = {kInObjectFile, kInBlockFile};
  } else if (packs_ != nullptr) {
    order = {kInPack, kInBlockFile, kInObjectFile};
  } else {
    order = {kInBlockFile, kInObjectFile};
  }
  for (int where : order) {
    Result<uint64_t> r = VerifyIn(key, where);
    if (r.ok() || r.status().code() != core::StatusCode::kNotFound) return r;
  }
  return core::NotFoundError("no block " + key.object_id + "#" + std::to_string(key.index),
                             core::FailureSite::kLocal);
}

Result<FileBlockStore::Located> FileBlockStore::LocateBlockFile(const core::BlockKey& key) {
  const std::string path = PathOf(key);
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (f.fd < 0) {
    if (errno == ENOENT) return core::NotFoundError("no block " + path, core::FailureSite::kLocal);
    return ErrnoStatus("open", path, errno);
  }
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) return ErrnoStatus("stat", path, errno);
  auto corrupt = [&](const std::string& why) {
    Forget(CheckedKey{static_cast<uint64_t>(st.st_ino), 0});
    open_.Erase(key);
    ::unlink(path.c_str());
    return core::CorruptError("cache block " + path + ": " + why + "; removed",
                              core::FailureSite::kLocal);
  };
  ParsedHeader h = ParseHeader(f.fd, 0, static_cast<uint64_t>(st.st_size), true);
  if (h.read_errno != 0) return ErrnoStatus("read", path, h.read_errno);
  if (!h.why.empty()) return corrupt(h.why);
  if (h.index != key.index || h.id != key.object_id) return corrupt("header names another block");
  Located at;
  at.file = std::make_shared<const core::BlockFd>(f.fd);
  f.fd = -1;
  at.offset = h.header_len;
  at.length = h.data_len;
  at.crc = static_cast<uint32_t>(h.crc);
  at.ino = static_cast<uint64_t>(st.st_ino);
  return at;
}

Result<uint64_t> FileBlockStore::VerifyIn(const core::BlockKey& key, int where) {
  const std::string name = key.object_id + "#" + std::to_string(key.index);
  // In use from before it is looked up: an eviction meanwhile keeps its
  // bytes where they are (an object file's removal refuses, a pack's hole
  // waits, a block file's inode stays with the descriptor).
  std::shared_ptr<const void> use = Use(key);
  auto locate = [&]() -> Result<Located> {
    if (where == kInObjectFile) return LocateObjectBlockLocked(key);
    if (where == kInPack) return LocatePackedLocked(key);
    return LocateBlockFile(key);
  };
  Result<Located> at = [&] {
    std::lock_guard<std::mutex> l(ObjectMutex(key.object_id));
    return locate();
  }();
  if (!at.ok()) return at.status();
  // The bytes, without the lock: a reader opening the block meanwhile does
  // not wait for a pass over 4 MiB.
  uint32_t crc = 0;
  errno = 0;
  bool read = FileCrc32c(at->file->fd(), at->offset, at->length, &crc);
  if (!read && errno != 0) return ErrnoStatus("read", name, errno);
  if (read && crc == at->crc) {
    if (where != kInBlockFile) MarkVerified(at->checked, FileStamp{at->length, at->crc});
    return at->length;
  }
  // A mismatch, or the bytes end early. Writes and removals of the block
  // take its object's lock: under it, what is there now is looked up and
  // read again, and only a mismatch then is a corruption (a block rewritten
  // or dropped while it was read is not).
  std::unique_lock<std::mutex> l(ObjectMutex(key.object_id));
  at = locate();
  if (!at.ok()) return at.status();
  errno = 0;
  read = FileCrc32c(at->file->fd(), at->offset, at->length, &crc);
  if (!read && errno != 0) return ErrnoStatus("read", name, errno);
  if (read && crc == at->crc) {
    if (where != kInBlockFile) MarkVerified(at->checked, FileStamp{at->length, at->crc});
    return at->length;
  }
  const std::string why = read ? "CRC32C mismatch" : "truncated data";
  // No longer ours in use: the drop may free its bytes now (unless a
  // reader still holds them).
  use.reset();
  std::string where_name;
  if (where == kInObjectFile) {
    where_name = "cache block " + std::to_string(key.index) + " of " + ObjectPathOf(key.object_id);
    Result<ObjectFiles> files = OpenObject(key.object_id, false);
    if (files.ok()) (void)DropObjectBlock(key, *files);
  } else if (where == kInPack) {
    where_name = "cache record " + key.object_id + " in " + packs_->PathOf(at->pack->pack);
    Forget(at->checked);
    DropPacked(key.object_id, *at->pack);
  } else {
    where_name = "cache block " + PathOf(key);
    open_.Erase(key);
    struct stat st {};
    // The file that was checked, not one renamed over it meanwhile.
    if (::stat(PathOf(key).c_str(), &st) == 0 && static_cast<uint64_t>(st.st_ino) == at->ino)
      ::unlink(PathOf(key).c_str());
  }
  return core::CorruptError(where_name + ": " + why + "; removed", core::FailureSite::kLocal);
}

FileBlockStore::FileId FileBlockStore::IdOf(const struct stat& st) {
  return FileId{static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
}

bool FileBlockStore::Verified(const CheckedKey& key, const FileStamp& stamp) {
  core::MutexLock l(mu_);
  auto it = verified_.find(key);
  return it != verified_.end() && it->second == stamp;
}

void FileBlockStore::MarkVerified(const CheckedKey& key, const FileStamp& stamp) {
  core::MutexLock l(mu_);
  if (verified_.size() >= (1u << 18))
    verified_.clear();  // bound memory; re-verifying is only slower
  verified_[key] = stamp;
}

void FileBlockStore::Forget(const CheckedKey& key) {
  core::MutexLock l(mu_);
  verified_.erase(key);
}

Status FileBlockStore::Remove(const core::BlockKey& key) {
  // Block 0 is a block file unless its object has more blocks; any other
  // block is in the object's file, or a block file of an earlier version.
  const std::string path = PathOf(key);
  open_.Erase(key);
  if (auto packed = RemovePacked(key); !packed.ok() || *packed) return packed.status();
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
  // The run record of versions that trusted the blocks of earlier runs:
  // gone, so that such a version, started again on this cache, trusts none.
  ::unlink((root_ + "/run").c_str());
  if (packs_ != nullptr) {
    if (Status s = ForEachPackedBlock(fn, recorded, &scan); !s.ok()) return s;
  }
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
      f.fd = ::open(p.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
      if (f.fd < 0) continue;  // went meanwhile (evicted)
      ParsedHeader h = ParseHeader(f.fd, 0, size, true);
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
