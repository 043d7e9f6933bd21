// FileBlockStore's object files (object_map.h): every block of an object of
// a block or more, at its offset in one file, with a map of the blocks there.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "daemon/core/limits.h"
#include "daemon/store/block_file_format.h"
#include "daemon/store/file_block_store.h"

namespace perch::store {

namespace {

using core::Result;
using core::Status;

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
  map.fd = ::open(map_path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
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
    data.fd = ::open(
        data_path.c_str(),
        create ? O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC : O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0600);
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
    data.fd = ::open(data_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (data.fd < 0) return ErrnoStatus("create", data_path, errno);
    map.fd = ::open(map_path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
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

Result<bool> FileBlockStore::CheckObjectBlock(const core::BlockKey& key, const ObjectFiles& files,
                                              const std::optional<MapEntry>& entry,
                                              uint64_t file_size) {
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
  if (Verified(checked, stamp)) return false;
  uint32_t crc = 0;
  if (!FileCrc32c(files.data->fd(), offset, e.length, &crc)) {
    if (errno != 0) return ErrnoStatus("read", path, errno);
    return corrupt("truncated data");
  }
  if (crc != static_cast<uint32_t>(e.crc)) return corrupt("CRC32C mismatch");
  MarkVerified(checked, stamp);
  return true;
}

Result<FileBlockStore::Located> FileBlockStore::LocateObjectBlockLocked(const core::BlockKey& key) {
  const std::string path = ObjectPathOf(key.object_id);
  if (key.index >= kMaxObjectBlocks) {
    return core::NotFoundError("no block " + std::to_string(key.index) + " in " + path,
                               core::FailureSite::kLocal);
  }
  Result<ObjectFiles> files = OpenObject(key.object_id, false);
  if (!files.ok()) return files.status();
  Result<std::optional<MapEntry>> entry = ReadEntry(*files, key.object_id, key.index);
  if (!entry.ok()) return entry.status();
  struct stat st {};
  if (::fstat(files->data->fd(), &st) != 0) return ErrnoStatus("stat", path, errno);
  auto corrupt = [&](const std::string& why) {
    (void)DropObjectBlock(key, *files);
    return core::CorruptError(
        "cache block " + std::to_string(key.index) + " of " + path + ": " + why + "; removed",
        core::FailureSite::kLocal);
  };
  if (!entry->has_value()) return corrupt("damaged map entry");
  const MapEntry& e = **entry;
  if (e.length == 0) {
    return core::NotFoundError("no block " + std::to_string(key.index) + " in " + path,
                               core::FailureSite::kLocal);
  }
  if (e.length > block_size_) return corrupt("map entry longer than a block");
  const uint64_t offset = key.index * block_size_;
  if (static_cast<uint64_t>(st.st_size) < offset + e.length) return corrupt("truncated data");
  Located at;
  at.file = files->data;
  at.offset = offset;
  at.length = e.length;
  at.crc = static_cast<uint32_t>(e.crc);
  at.checked = CheckedKey{files->ino, key.index};
  return at;
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
  Result<bool> checked = CheckObjectBlock(key, *files, *entry, static_cast<uint64_t>(st.st_size));
  if (!checked.ok()) return checked.status();
  OpenBlock open{files->data, key.index * block_size_, (*entry)->length,
                 static_cast<uint32_t>((*entry)->crc)};
  open_.Put(key, open);
  open.checked_now = *checked;
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
  const MapEntry entry{data.size(), Crc32c(data)};
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
  open_.Put(key, OpenBlock{files->data, offset, data.size(), static_cast<uint32_t>(entry.crc)});
  return Status::Ok();
}

Status FileBlockStore::RemoveObjectBlock(const core::BlockKey& key) {
  if (key.index >= kMaxObjectBlocks) return Status::Ok();
  std::lock_guard<std::mutex> l(ObjectMutex(key.object_id));
  // Out of open_ before the look at the uses: a Slice or Read that starts
  // after the look finds the block only through OpenObjectBlock, which waits
  // for this lock and then finds the entry cleared.
  open_.Erase(key);
  if (InUse(key)) {
    return core::UnavailableError("block " + std::to_string(key.index) + " of " +
                                      ObjectPathOf(key.object_id) +
                                      " is in use: a reply is sending it, or the kernel reads "
                                      "the object's file directly",
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
  // Not while the block is in use (a slice being sent, a read, the kernel
  // reading the file directly after WholeFile): that reader would get zeros.
  // The bytes then go with the file.
  const off_t offset = static_cast<off_t>(key.index * block_size_);
  if (!InUse(key) &&
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
    core::MutexLock l(held_->mu);
    held_->count[object_id]++;
  }
  std::shared_ptr<void> hold(nullptr, [holds = held_, object_id](void*) {
    core::MutexLock l(holds->mu);
    auto it = holds->count.find(object_id);
    if (it != holds->count.end() && --it->second == 0) holds->count.erase(it);
  });
  // The CRC passes first (a first use in this run checks each block, as a
  // read of it would), each without the object's lock, as the scrub reads
  // (VerifyIn): a first open of a large object reads all of it, and the lock
  // is shared by a 64th of all objects. A bad block is dropped here. An
  // object not all there is left to the walk below, which says what is
  // missing, with no bytes read.
  std::vector<uint64_t> unchecked;
  {
    std::lock_guard<std::mutex> l(ObjectMutex(object_id));
    Result<ObjectFiles> files = OpenObject(object_id, false);
    if (!files.ok()) return files.status();
    uint64_t present = 0;
    Status walked = ForEachEntry(
        *files, object_id, 0, blocks, [&](uint64_t i, const std::optional<MapEntry>& e) {
          if (!e || e->length == 0) return false;
          present++;
          if (!Verified(CheckedKey{files->ino, i},
                        FileStamp{e->length, static_cast<int64_t>(e->crc)}))
            unchecked.push_back(i);
          return true;
        });
    if (!walked.ok()) return walked;
    if (present < blocks) unchecked.clear();
  }
  for (uint64_t i : unchecked) {
    Result<uint64_t> v = VerifyIn(core::BlockKey{object_id, i}, kInObjectFile);
    if (!v.ok() && v.status().code() == core::StatusCode::kCorrupt) {
      if (failed != nullptr) *failed = core::BlockKey{object_id, i};
      return v.status();
    }
  }
  // Then every block present, of its length and checked (verified above, or
  // now if its entry changed meanwhile): one pass over the map, none of the
  // blocks put among the open files.
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
        checked = CheckObjectBlock(key, *files, e, file_size).status();
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
  f.fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (f.fd < 0) return ErrnoStatus("open", path, errno);
  std::shared_ptr<const core::BlockFd> file(new core::BlockFd(f.fd),
                                            [hold = std::move(hold)](const core::BlockFd* p) {
                                              delete p;  // then `hold` goes with this deleter
                                            });
  f.fd = -1;
  return file;
}

bool FileBlockStore::Held(const std::string& object_id) {
  core::MutexLock l(held_->mu);
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
