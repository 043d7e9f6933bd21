// FileBlockStore's pack files (pack_files.h): small objects, each a record in
// a shared file, named by an index record "sp/<object id>".
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/codec.h"
#include "daemon/store/block_file_format.h"
#include "daemon/store/file_block_store.h"

namespace perch::store {

namespace {

using core::Result;
using core::Status;

constexpr uint64_t kLocationFormat = 1;

// docs/design.md "On-disk format": varints of the format, the pack, the offset in
// units of PackFiles::kAlign and the record's length (about 9 bytes).
std::string EncodeLocation(const FileBlockStore::PackLocation& loc) {
  std::string out;
  core::codec::PutVarint(&out, kLocationFormat);
  core::codec::PutVarint(&out, loc.pack);
  core::codec::PutVarint(&out, loc.offset / PackFiles::kAlign);
  core::codec::PutVarint(&out, loc.length);
  return out;
}

// nullopt unless well formed: a known format, nothing after it, a record no
// longer than a block and its header.
std::optional<FileBlockStore::PackLocation> DecodeLocation(std::string_view in,
                                                           uint64_t block_size) {
  core::codec::Reader r(in);
  uint64_t format = 0, units = 0;
  FileBlockStore::PackLocation loc;
  if (!r.GetVarint(&format) || format != kLocationFormat || !r.GetVarint(&loc.pack) ||
      !r.GetVarint(&units) || !r.GetVarint(&loc.length) || !r.done() || loc.pack == 0 ||
      units > (uint64_t{1} << 40) || loc.length == 0 || loc.length > block_size + 8192) {
    return std::nullopt;
  }
  loc.offset = units * PackFiles::kAlign;
  return loc;
}

// The header at `off` of a pack `size` bytes long; `why` is set unless it is
// a record: a well-formed header of a block 0 shorter than a block.
ParsedHeader ReadRecord(int fd, uint64_t off, uint64_t size, uint64_t block_size) {
  ParsedHeader h = ParseHeader(fd, off, size, /*exact=*/false);
  if (h.read_errno == 0 && h.why.empty() &&
      (h.index != 0 || h.id.empty() || h.data_len >= block_size)) {
    h.why = "not a record of a small object";
  }
  return h;
}

// As ReadRecord, and `why` is set unless it is the record `loc` names for
// object `id`.
ParsedHeader ReadNamedRecord(int fd, const FileBlockStore::PackLocation& loc, std::string_view id,
                             uint64_t block_size) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ParsedHeader h;
    h.read_errno = errno;
    return h;
  }
  ParsedHeader h = ReadRecord(fd, loc.offset, static_cast<uint64_t>(st.st_size), block_size);
  if (h.read_errno == 0 && h.why.empty() &&
      (h.id != id || h.header_len + h.data_len != loc.length)) {
    h.why = "the record is not the one named";
  }
  return h;
}

}  // namespace

void FileBlockStore::PackSmallObjects(core::Index& locations, uint64_t max_bytes,
                                      std::chrono::milliseconds grace, uint64_t reserve_bytes,
                                      const core::TimeSource& time) {
  locations_ = &locations;
  // A record's hole waits while a slice or read of its object's block lives
  // (held_, not `this`: the puncher thread stops before the store goes, but
  // the holds are the deleters' too).
  auto in_use = [holds = held_](const std::string& object_id) {
    core::MutexLock l(holds->mu);
    return holds->blocks.count(core::BlockKey{object_id, 0}) > 0;
  };
  packs_ = std::make_unique<PackFiles>(PackDir(), max_bytes, grace, PackFiles::kDefaultOpenFiles,
                                       reserve_bytes, std::move(in_use), time);
}

std::optional<FileBlockStore::PackLocation> FileBlockStore::LocationOf(
    const std::string& object_id) {
  if (locations_ == nullptr) return std::nullopt;
  auto got = locations_->Get(LocationKey(object_id));
  if (!got.ok() || !*got) return std::nullopt;
  return DecodeLocation(**got, block_size_);
}

Status FileBlockStore::WritePacked(const core::BlockKey& key, std::string_view data) {
  std::vector<Status> out(1);
  WritePackedMany({BlockWrite{key, data}}, {0}, &out);
  return out[0];
}

std::vector<Status> FileBlockStore::WriteMany(const std::vector<BlockWrite>& blocks) {
  if (packs_ == nullptr) return BlockStore::WriteMany(blocks);
  std::vector<Status> out(blocks.size());
  std::vector<size_t> packed;
  for (size_t i = 0; i < blocks.size(); ++i) {
    if (InObjectFile(blocks[i].key, blocks[i].data.size())) {
      out[i] = WriteObjectBlock(blocks[i].key, blocks[i].data);
    } else {
      packed.push_back(i);
    }
  }
  if (!packed.empty()) WritePackedMany(blocks, packed, &out);
  return out;
}

void FileBlockStore::WritePackedMany(const std::vector<BlockWrite>& blocks,
                                     const std::vector<size_t>& which, std::vector<Status>* out) {
  // The objects' locks, each once, in one order (no other holder takes two).
  std::vector<std::mutex*> mus;
  for (size_t i : which) mus.push_back(&ObjectMutex(blocks[i].key.object_id));
  std::sort(mus.begin(), mus.end());
  mus.erase(std::unique(mus.begin(), mus.end()), mus.end());
  std::vector<std::unique_lock<std::mutex>> held;
  held.reserve(mus.size());
  for (std::mutex* m : mus) held.emplace_back(*m);

  struct Placed {
    size_t i;
    PackLocation loc;
    PackFiles::File file;
    std::optional<PackLocation> before;
    uint32_t crc;
    uint64_t header_len;
  };
  std::vector<Placed> placed;
  std::vector<core::Index::Write> names;
  for (size_t i : which) {
    const core::BlockKey& key = blocks[i].key;
    const std::string_view data = blocks[i].data;
    const uint32_t crc = Crc32c(data);
    const std::string header = BlockHeader(key, data.size(), crc);
    // A block written again (after a failed check, or fetched twice)
    // replaces the record that was there.
    std::optional<PackLocation> before = LocationOf(key.object_id);
    auto at = packs_->Append(header, data);
    if (!at.ok()) {
      (*out)[i] = at.status();
      continue;
    }
    const PackLocation loc{at->pack, at->offset, header.size() + data.size()};
    names.push_back({LocationKey(key.object_id), EncodeLocation(loc)});
    placed.push_back(Placed{i, loc, at->file, std::move(before), crc, header.size()});
  }
  // Named only once their bytes are written, all in one index batch: a crash
  // in between leaves bytes that nothing names (freed with their pack, or
  // named again by the next start's walk), never a name without its bytes.
  const Status named = names.empty() ? Status::Ok() : locations_->Apply(names);
  for (const Placed& p : placed) {
    const core::BlockKey& key = blocks[p.i].key;
    if (!named.ok()) {
      packs_->Drop(p.loc.pack, p.loc.offset, p.loc.length);
      (*out)[p.i] = named;
      continue;
    }
    const uint64_t len = p.loc.length - p.header_len;
    MarkVerified(CheckedKey{p.file.ino, p.loc.offset}, FileStamp{len, p.crc});
    open_.Put(key, OpenBlock{p.file.fd, p.loc.offset + p.header_len, len, p.crc});
    // The earlier copy goes once open_ no longer names it: a slice taken
    // after its hole's look at the uses cannot be of it.
    if (p.before) packs_->Drop(p.before->pack, p.before->offset, p.before->length, key.object_id);
    (*out)[p.i] = Status::Ok();
  }
}

void FileBlockStore::DropPacked(const std::string& object_id, const PackLocation& loc) {
  open_.Erase(core::BlockKey{object_id, 0});  // never served from it after its grace
  locations_->Apply({{LocationKey(object_id), std::nullopt}}).IgnoreError();
  packs_->Drop(loc.pack, loc.offset, loc.length, object_id);
}

Result<OpenBlock> FileBlockStore::OpenPacked(const core::BlockKey& key) {
  if (packs_ == nullptr || key.index != 0)
    return core::NotFoundError("not packed", core::FailureSite::kLocal);
  // Under the object's lock, as RemovePacked: a record dropped meanwhile is
  // never put among the open blocks (its bytes go after the grace).
  std::lock_guard<std::mutex> l(ObjectMutex(key.object_id));
  auto got = locations_->Get(LocationKey(key.object_id));
  if (!got.ok()) return got.status();
  if (!*got) return core::NotFoundError("not packed", core::FailureSite::kLocal);
  const std::optional<PackLocation> loc = DecodeLocation(**got, block_size_);
  const std::string where = "cache record " + key.object_id;
  if (!loc) {
    locations_->Apply({{LocationKey(key.object_id), std::nullopt}}).IgnoreError();
    return core::CorruptError(where + ": damaged location; removed", core::FailureSite::kLocal);
  }
  auto file = packs_->Open(loc->pack);
  if (!file.ok() && file.status().code() == core::StatusCode::kNotFound) {
    locations_->Apply({{LocationKey(key.object_id), std::nullopt}}).IgnoreError();
    return core::CorruptError(where + ": its pack is gone; removed", core::FailureSite::kLocal);
  }
  if (!file.ok()) return file.status();
  const std::string path = packs_->PathOf(loc->pack);
  const CheckedKey checked{file->ino, loc->offset};
  auto corrupt = [&](const std::string& why) {
    Forget(checked);
    DropPacked(key.object_id, *loc);
    return core::CorruptError(where + " in " + path + ": " + why + "; removed",
                              core::FailureSite::kLocal);
  };
  ParsedHeader h = ReadNamedRecord(file->fd->fd(), *loc, key.object_id, block_size_);
  if (h.read_errno != 0) return ErrnoStatus("read", path, h.read_errno);
  if (!h.why.empty()) return corrupt(h.why);
  const FileStamp stamp{h.data_len, static_cast<int64_t>(h.crc)};
  const bool check = !Verified(checked, stamp);
  if (check) {
    uint32_t crc = 0;
    if (!FileCrc32c(file->fd->fd(), loc->offset + h.header_len, h.data_len, &crc)) {
      if (errno != 0) return ErrnoStatus("read", path, errno);
      return corrupt("truncated data");
    }
    if (crc != static_cast<uint32_t>(h.crc)) return corrupt("CRC32C mismatch");
    MarkVerified(checked, stamp);
  }
  OpenBlock open{file->fd, loc->offset + h.header_len, h.data_len, static_cast<uint32_t>(h.crc)};
  open_.Put(key, open);
  open.checked_now = check;
  return open;
}

Result<FileBlockStore::Located> FileBlockStore::LocatePackedLocked(const core::BlockKey& key) {
  if (packs_ == nullptr || key.index != 0)
    return core::NotFoundError("not packed", core::FailureSite::kLocal);
  auto got = locations_->Get(LocationKey(key.object_id));
  if (!got.ok()) return got.status();
  if (!*got) return core::NotFoundError("not packed", core::FailureSite::kLocal);
  const std::optional<PackLocation> loc = DecodeLocation(**got, block_size_);
  const std::string where = "cache record " + key.object_id;
  if (!loc) {
    locations_->Apply({{LocationKey(key.object_id), std::nullopt}}).IgnoreError();
    return core::CorruptError(where + ": damaged location; removed", core::FailureSite::kLocal);
  }
  auto file = packs_->Open(loc->pack);
  if (!file.ok() && file.status().code() == core::StatusCode::kNotFound) {
    locations_->Apply({{LocationKey(key.object_id), std::nullopt}}).IgnoreError();
    return core::CorruptError(where + ": its pack is gone; removed", core::FailureSite::kLocal);
  }
  if (!file.ok()) return file.status();
  const CheckedKey checked{file->ino, loc->offset};
  ParsedHeader h = ReadNamedRecord(file->fd->fd(), *loc, key.object_id, block_size_);
  if (h.read_errno != 0) return ErrnoStatus("read", packs_->PathOf(loc->pack), h.read_errno);
  if (!h.why.empty()) {
    Forget(checked);
    DropPacked(key.object_id, *loc);
    return core::CorruptError(
        where + " in " + packs_->PathOf(loc->pack) + ": " + h.why + "; removed",
        core::FailureSite::kLocal);
  }
  Located at;
  at.file = file->fd;
  at.offset = loc->offset + h.header_len;
  at.length = h.data_len;
  at.crc = static_cast<uint32_t>(h.crc);
  at.checked = checked;
  at.pack = loc;
  return at;
}

Result<bool> FileBlockStore::RemovePacked(const core::BlockKey& key) {
  if (packs_ == nullptr || key.index != 0) return false;
  std::lock_guard<std::mutex> l(ObjectMutex(key.object_id));
  open_.Erase(key);
  auto got = locations_->Get(LocationKey(key.object_id));
  if (!got.ok()) return got.status();
  if (!*got) return false;
  if (Status s = locations_->Apply({{LocationKey(key.object_id), std::nullopt}}); !s.ok()) return s;
  if (auto loc = DecodeLocation(**got, block_size_))
    packs_->Drop(loc->pack, loc->offset, loc->length, key.object_id);
  return true;
}

Status FileBlockStore::ForEachPackedBlock(
    const std::function<void(const core::BlockKey&, uint64_t)>& fn,
    const std::function<bool(const core::BlockKey&)>& recorded, core::BlockScan* scan) {
  std::map<uint64_t, uint64_t> named;  // records named, by pack
  std::vector<std::string> unsure;     // not recorded by the catalog, or damaged
  Status s =
      locations_->Scan(core::index_keys::kPackRecord, [&](std::string_view k, std::string_view v) {
        std::string id(k.substr(core::index_keys::kPackRecord.size()));
        auto loc = DecodeLocation(v, block_size_);
        if (loc && recorded && recorded(core::BlockKey{id, 0})) {
          scan->blocks++;
          named[loc->pack]++;
        } else {
          unsure.push_back(std::move(id));
        }
        return true;
      });
  if (!s.ok()) return s;
  // A record the catalog does not know (a crash between the two records) is
  // adopted if its header checks out, as a block file would be.
  std::vector<std::pair<core::BlockKey, uint64_t>> adopt;
  for (const std::string& id : unsure) {
    std::lock_guard<std::mutex> l(ObjectMutex(id));
    auto got = locations_->Get(LocationKey(id));
    if (!got.ok() || !*got) continue;  // removed meanwhile
    const std::optional<PackLocation> loc = DecodeLocation(**got, block_size_);
    auto drop = [&](uint64_t bytes) {
      if (loc) {
        DropPacked(id, *loc);
      } else {
        locations_->Apply({{LocationKey(id), std::nullopt}}).IgnoreError();
      }
      scan->leftovers_removed++;
      scan->leftover_bytes += bytes;
    };
    if (!loc) {
      drop(0);
      continue;
    }
    auto file = packs_->Open(loc->pack);
    if (!file.ok()) {
      if (file.status().code() == core::StatusCode::kNotFound) drop(0);
      continue;
    }
    ParsedHeader h = ReadNamedRecord(file->fd->fd(), *loc, id, block_size_);
    if (h.read_errno != 0) continue;
    if (!h.why.empty()) {
      drop(loc->length);
      continue;
    }
    named[loc->pack]++;
    scan->blocks++;
    adopt.emplace_back(core::BlockKey{id, 0}, h.data_len);
  }
  for (const auto& [key, length] : adopt) fn(key, length);  // outside the object locks
  // Packs of earlier processes that nothing names: their records are named
  // again (the index was lost, or a crash came between a record and its
  // name); a pack with none is removed. One pack at a time, so that what a
  // lost index leaves to adopt is never all in memory at once.
  const std::vector<uint64_t> unnamed = packs_->Unnamed(named);
  const std::set<uint64_t> adopting(unnamed.begin(), unnamed.end());
  for (uint64_t pack : unnamed) {
    adopt.clear();
    if (AdoptPack(pack, adopting, recorded, scan, &adopt) == 0) {
      packs_->RemoveEarlier(pack, &scan->leftovers_removed, &scan->leftover_bytes);
    }
    for (const auto& [key, length] : adopt) fn(key, length);
  }
  return Status::Ok();
}

uint64_t FileBlockStore::AdoptPack(uint64_t pack, const std::set<uint64_t>& adopting,
                                   const std::function<bool(const core::BlockKey&)>& recorded,
                                   core::BlockScan* scan,
                                   std::vector<std::pair<core::BlockKey, uint64_t>>* adopt) {
  auto file = packs_->Open(pack);
  if (!file.ok()) return 0;
  const int fd = file->fd->fd();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return 0;
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  uint64_t named = 0;
  // Records are read where one must start: at the start of the pack, right
  // after a record, or where data follows a hole (a dropped record's bytes
  // are punched out). After bytes that are no record (torn, damaged) the rest
  // of that stretch of data is skipped, not searched: the data of a record
  // whose header was damaged could hold what looks like another header.
  for (uint64_t off = 0; off < size;) {
    const off_t data = ::lseek(fd, static_cast<off_t>(off), SEEK_DATA);
    if (data < 0) break;  // only holes from here
    off = (static_cast<uint64_t>(data) + PackFiles::kAlign - 1) / PackFiles::kAlign *
          PackFiles::kAlign;
    ParsedHeader h = ReadRecord(fd, off, size, block_size_);
    if (h.read_errno != 0) break;
    if (!h.why.empty()) {
      const off_t hole = ::lseek(fd, static_cast<off_t>(off), SEEK_HOLE);
      if (hole < 0 || static_cast<uint64_t>(hole) <= off) break;
      off = static_cast<uint64_t>(hole);
      continue;
    }
    const PackLocation loc{pack, off, h.header_len + h.data_len};
    off += PackFiles::Extent(loc.length);
    std::lock_guard<std::mutex> l(ObjectMutex(h.id));
    auto got = locations_->Get(LocationKey(h.id));
    if (!got.ok()) continue;
    std::optional<PackLocation> before;
    if (*got) {
      before = DecodeLocation(**got, block_size_);
      // Named in a pack this walk does not adopt: this is an older copy. In
      // one it adopts: this walk named it, and this copy is the later one.
      if (before && !adopting.count(before->pack)) continue;
    }
    if (!locations_->Apply({{LocationKey(h.id), EncodeLocation(loc)}}).ok()) continue;
    ++named;  // named here now: this pack stays
    if (before) {
      // A reader may have opened the earlier copy meanwhile: it is let go
      // (its bytes are punched after the grace).
      open_.Erase(core::BlockKey{h.id, 0});
      packs_->Drop(before->pack, before->offset, before->length, h.id);
      continue;  // counted and adopted with its first copy
    }
    scan->blocks++;
    const core::BlockKey key{h.id, 0};
    if (!recorded || !recorded(key)) adopt->emplace_back(key, h.data_len);
  }
  return named;
}

}  // namespace perch::store
