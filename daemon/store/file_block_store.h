// FileBlockStore: a core::BlockStore of regular files.
//
// An object of one block (a block 0 shorter than `block_size`: every small
// file) is a record in a pack file shared with other small objects, once
// PackSmallObjects gave the store an index to name records in (perchd
// does; pack_files.h):
//
//   <root>/packs/<16 hex digits>.pack        index: "sp/<object_id>"
//
// a 64-byte-aligned header followed by the block's bytes (docs/design.md "On-disk
// format"; block_file_format.h): magic "PERCHBLK", format version, header
// length, block index, data length, CRC32C of the data, the object id, the
// run. Without packs (and as perch wrote it before them) such an object is a
// block file of its own, the same header and bytes:
//
//   <root>/blocks/<first two hex chars of object_id>/<object_id>.0
//
// Any other block (of an object of more than one block) lives in the
// object's file, at its offset in the object, with an entry in the object's
// map (object_map.h):
//
//   <root>/objects/<first two hex chars of object_id>/<object_id>{,.map}
//
// so that a complete object is one file the kernel can read directly (FUSE
// passthrough, WholeFile). Blocks of more than one block written by earlier
// versions as `<object_id>.<index>` under blocks/ are still read and removed.
// A block is written to its object file, then its map entry (pwrite each; a
// reader sees the block once its entry is there); removing it clears the
// entry, then punches the block's bytes out of the file; removing the last
// one removes both files. One mutex per object (striped) orders writes and
// removals of an object's blocks; reads take it only to open the files.
//
// Directories are created 0700 and files 0600: the cache is private to the
// daemon (paths of protected namespaces must not leak to other users).
//
// Write: a pack record, then its name in the index (several records, one
// index batch: WriteMany); without packs, a temp file in the same directory
// -> one writev of header and data -> rename. The catalog's record is
// written only after that (CacheCatalog), so a killed process leaves whole
// blocks or none. Nothing is fsynced: the
// cache holds copies of remote data, and the check below makes a block that
// a power cut or kernel crash left short, empty or zeroed (with or without
// its record) a miss that is fetched again, never served, since the first
// read of every block after a start checks its CRC32C. Dropping the fsync
// takes a journal commit per block off the cold path.
//
// Read checks the header (or map entry) every time a file is opened, and the
// CRC32C of the whole block the first time a given block (file inode, mtime
// and size; in an object file: inode, index, length and CRC; in a pack: the
// pack's inode, the record's offset, length and CRC) is read by this
// process, however the last run ended: rot of the cache's disk while the
// daemon was stopped, and a block torn by a power cut, fail there and are
// never served (issue 41). A verified block is remembered, so a 4 MiB block
// read in 128 KiB pieces is checksummed once, not 32 times. A block this
// process wrote counts as verified (its bytes are the ones just checksummed;
// a power cut empties the set), so a cold block is not read back whole to be
// checked again. A Read or Slice of a whole block (every small file read at
// once) checks its CRC32C every time, in the bytes just read or in one pass
// through a buffer that stays in the CPU's cache: the cost of reading the
// bytes once more from the page cache. Any mismatch removes the block and
// reports kCorrupt. (Rot after its check in this run of a block read only in
// parts, or of an object file the kernel reads in passthrough, is caught by
// the scrub, Verify, or by the first read after the next start.) The set
// holds at most 2^18 blocks (about 40 bytes each; past that it starts again
// empty); an entry outliving its block (evicted) names an inode that a new
// one matches only with the same stamp. WholeFile checks every block of the
// object the same way before it hands out the file, so the kernel never
// reads a block in passthrough that was not checked in this run; it reads
// the bytes as Verify does, without the object's lock (the first open of a
// large object in a run reads all of it).
//
// Earlier versions trusted the blocks of runs that had ended cleanly
// (served them after the header check alone): their headers (format 2) and
// map entries carry the writing run's number, which is no longer read, and
// their record of runs, `<root>/run`, is removed by ForEachBlock (the
// start-up walk) so that such a version, started again, trusts none.
//
// Up to `open_files` block files stay open (OpenBlockCache): a block read
// again, or read right after it was written, is served through the open
// descriptor with no open, stat or header read; removing a block lets its
// descriptor go (a reply still splicing from it finishes first). The header
// is checked whenever a block file is opened.
//
// Blocks in use. A slice (Slice) and a read (Read) mark their block in use
// from before they look it up until they are let go (InUse); so does a file
// WholeFile gave, for every block of its object. Removing a block in use
// from an object file is refused (kUnavailable: the catalog keeps it and
// evicts it later); a pack record in use loses its name at once, but its
// hole is punched only after the last use ends (PackFiles). A block file is
// unlinked (an open descriptor keeps reading it). Without this a reply
// splicing or sending a slice read zeros where the hole was punched (issue
// 28).
//
// Code: block files in file_block_store.cc, object files
// in file_block_store_objects.cc, the header format in block_file_format.h.
//
// Thread-safety: all methods are safe from any thread; the verified set is
// under mu_ and the holds under their own mutex (leaf locks, never held
// across I/O); an object's mutex (ObjectMutex) is taken before either.
// A file WholeFile gave may outlive the store.
#pragma once

#include <array>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

struct stat;

#include "daemon/core/block_store.h"
#include "daemon/core/defaults.h"
#include "daemon/core/index.h"
#include "daemon/core/index_keys.h"
#include "daemon/core/mutex.h"
#include "daemon/store/object_map.h"
#include "daemon/store/open_block_cache.h"
#include "daemon/store/pack_files.h"

namespace perch::store {

class FileBlockStore : public core::BlockStore {
 public:
  // `block_size`: the readers' (core::BlockReaderOptions); an object file
  // written with another is a miss (removed on first use).
  explicit FileBlockStore(std::string root, uint64_t block_size = kDefaultBlockSize,
                          size_t open_files = kDefaultOpenFiles);
  static constexpr uint64_t kDefaultBlockSize = core::kDefaultBlockSize;
  static constexpr size_t kDefaultOpenFiles = 128;

  core::Result<core::Bytes> Read(const core::BlockKey& key, uint64_t offset,
                                 uint64_t length) override;
  core::Status Write(const core::BlockKey& key, std::string_view data) override;
  // Small objects' records are appended one after the other and named in one
  // index batch; the others are written as by Write.
  std::vector<core::Status> WriteMany(const std::vector<BlockWrite>& blocks) override;
  core::Status Remove(const core::BlockKey& key) override;
  // See core::BlockStore. Under the block's object lock only to find it
  // (map entry, pack name, header) and, after a mismatch, to check it again
  // before dropping it; the bytes are read while the block is in use
  // (InUse), so an eviction keeps them in place meanwhile.
  core::Result<uint64_t> Verify(const core::BlockKey& key) override;
  core::Result<core::BlockSlice> Slice(const core::BlockKey& key, uint64_t offset,
                                       uint64_t length) override;
  core::Result<std::shared_ptr<const core::BlockFd>> WholeFile(
      const std::string& object_id, uint64_t size, core::BlockKey* failed = nullptr) override;
  // True while a file WholeFile gave for `object_id` is held.
  bool Held(const std::string& object_id);
  // Held, or a slice or read of block `key` not yet done.
  bool InUse(const core::BlockKey& key) override;
  // Temp files not named by this object are leftovers of a process that
  // died mid-write (removed); its own may be writes under way (kept). An
  // earlier version's `<root>/run` goes too.
  core::Result<core::BlockScan> ForEachBlock(
      const std::function<void(const core::BlockKey&, uint64_t)>& fn,
      const std::function<bool(const core::BlockKey&)>& recorded) override;

  // The file that holds block `key` of a one-block object, or of a larger
  // one written by an earlier version (exposed for tests and tools).
  std::string PathOf(const core::BlockKey& key) const;
  // The data file of object `object_id` (its map: + ".map").
  std::string ObjectPathOf(const std::string& object_id) const;
  // True if block `key` of `length` bytes goes to its object's file.
  bool InObjectFile(const core::BlockKey& key, uint64_t length) const {
    return key.index > 0 || length >= block_size_;
  }
  // How this object's temp files start (exposed for tests).
  const std::string& TempPrefix() const { return tmp_prefix_; }

  // Small objects (one block shorter than block_size) go into pack files
  // (pack_files.h) from now on, each named by a record "sp/<object id>" in
  // `locations` (pack, offset, length; docs/design.md "On-disk format"). Without
  // this, each is a block file. Block files written before are still read,
  // evicted and walked. REQUIRES: before the first Write; `locations`
  // outlives the store.
  // `max_bytes`, `grace`, `reserve_bytes`, `time`: PackFiles' (tests make
  // them small, and move time themselves).
  void PackSmallObjects(core::Index& locations, uint64_t max_bytes = PackFiles::kDefaultMaxBytes,
                        std::chrono::milliseconds grace = PackFiles::kDefaultGrace,
                        uint64_t reserve_bytes = 0,
                        const core::TimeSource& time = core::TimeSource::Steady());
  // PackFiles' passes over due holes (pack_files.h). REQUIRES: PackSmallObjects.
  uint64_t PunchPassesForTest() { return packs_->PunchPassesForTest(); }
  bool AwaitPunchPassForTest(uint64_t passes) { return packs_->AwaitPunchPassForTest(passes); }
  // The directory of the pack files.
  std::string PackDir() const { return root_ + "/packs"; }
  // Where small object `object_id` is packed: nullopt if it is not.
  struct PackLocation {
    uint64_t pack = 0, offset = 0, length = 0;  // length: header and data
  };
  std::optional<PackLocation> LocationOf(const std::string& object_id);

 private:
  struct FileId {
    uint64_t ino = 0, size = 0;
    int64_t mtime_ns = 0;
  };
  struct FileStamp {
    uint64_t size = 0;
    int64_t mtime_ns = 0;  // of a block file; an object file's block: its CRC32C
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
  };
  // What was checked: a block file (index 0) or one block of an object file.
  struct CheckedKey {
    uint64_t ino = 0, index = 0;
    friend bool operator==(const CheckedKey&, const CheckedKey&) = default;
  };
  struct CheckedHash {
    size_t operator()(const CheckedKey& k) const { return k.ino * 0x9E3779B97F4A7C15ULL ^ k.index; }
  };
  // The two open files of an object (objects_).
  struct ObjectFiles {
    std::shared_ptr<const core::BlockFd> data, map;  // both read-write
    uint64_t ino = 0;                                // the data file's
  };
  static FileId IdOf(const struct stat& st);
  // Marks block `key` in use (InUse) until the returned guard is let go.
  std::shared_ptr<const void> Use(const core::BlockKey& key);
  // Block `key`'s open file: from open_, else opened and checked (header,
  // and CRC32C once per file) and kept in open_.
  core::Result<OpenBlock> OpenChecked(const core::BlockKey& key);
  // True if `entry` (file `name`) is a block file by its type and name and
  // `recorded` says so of the key its name gives (ForEachBlock).
  bool IsRecorded(const std::filesystem::directory_entry& entry, const std::string& name,
                  const std::function<bool(const core::BlockKey&)>& recorded) const;
  // A read of all of block `key` found bytes that do not match its CRC32C:
  // Verify confirms it under the object's lock and drops the block
  // (kCorrupt); a block rewritten or dropped meanwhile is a miss (kNotFound).
  core::Status Mismatched(const core::BlockKey& key);
  bool Verified(const CheckedKey& key, const FileStamp& stamp);
  void MarkVerified(const CheckedKey& key, const FileStamp& stamp);
  void Forget(const CheckedKey& key);

  // Object files. The caller holds ObjectMutex(object_id) for all but the
  // lookup in objects_.
  std::mutex& ObjectMutex(const std::string& object_id);
  // The object's open files; kNotFound if it has none (and !create). Files
  // whose map header is wrong (damage, another block size) are removed: a
  // miss, or new files when `create`.
  core::Result<ObjectFiles> OpenObject(const std::string& object_id, bool create);
  // Block `key` from its object file: entry read, data checked as in OpenChecked.
  core::Result<OpenBlock> OpenObjectBlock(const core::BlockKey& key);
  // Checks block `key` of an object file `file_size` bytes long by its map
  // `entry` (nullopt: damaged): kNotFound if absent; a damaged entry, a
  // short file or a CRC32C mismatch drops the block and is kCorrupt. The CRC
  // pass is skipped for a block verified in this run; true if it ran.
  core::Result<bool> CheckObjectBlock(const core::BlockKey& key, const ObjectFiles& files,
                                      const std::optional<MapEntry>& entry, uint64_t file_size);
  core::Status WriteObjectBlock(const core::BlockKey& key, std::string_view data);
  core::Status RemoveObjectBlock(const core::BlockKey& key);
  // Clears block `key`'s entry and punches out its bytes; removes both files
  // if it was the last block. Holds ObjectMutex.
  core::Status DropObjectBlock(const core::BlockKey& key, const ObjectFiles& files);
  void RemoveObjectFiles(const std::string& object_id);
  // Reads block `index`'s map entry; nullopt if damaged.
  core::Result<std::optional<MapEntry>> ReadEntry(const ObjectFiles& files,
                                                  const std::string& object_id, uint64_t index);
  // Calls `fn(index, entry)` for the map entries [from, to) that the map
  // holds (nullopt: damaged), in order, until `fn` returns false.
  core::Status ForEachEntry(
      const ObjectFiles& files, const std::string& object_id, uint64_t from, uint64_t to,
      const std::function<bool(uint64_t, const std::optional<MapEntry>&)>& fn);
  // Verify's parts. Where block `key`'s bytes are, found under the object's
  // lock (kNotFound if absent; a damaged entry, name or header drops the
  // block and is kCorrupt, as a read finds it).
  struct Located {
    std::shared_ptr<const core::BlockFd> file;
    uint64_t offset = 0, length = 0;
    uint32_t crc = 0;
    CheckedKey checked;
    std::optional<PackLocation> pack;  // a pack record's
    uint64_t ino = 0;                  // a block file's
  };
  core::Result<Located> LocateObjectBlockLocked(const core::BlockKey& key);
  core::Result<Located> LocatePackedLocked(const core::BlockKey& key);
  core::Result<Located> LocateBlockFile(const core::BlockKey& key);
  // As Verify, for a block in an object file, a pack or a block file.
  static constexpr int kInObjectFile = 0, kInPack = 1, kInBlockFile = 2;
  core::Result<uint64_t> VerifyIn(const core::BlockKey& key, int where);
  // Pack files (file_block_store_packs.cc). Each takes the ObjectMutex of
  // the objects it touches, but DropPacked (its caller holds it).
  static std::string LocationKey(const std::string& object_id) {
    return core::index_keys::PackRecord(object_id);
  }
  core::Status WritePacked(const core::BlockKey& key, std::string_view data);
  // Writes blocks[i] for each i of `which` (small objects) into packs, naming
  // them in one batch; (*out)[i] says how each went. Takes their ObjectMutexes.
  void WritePackedMany(const std::vector<BlockWrite>& blocks, const std::vector<size_t>& which,
                       std::vector<core::Status>* out);
  // kNotFound if `key` is not packed; a record that fails its check is
  // dropped (kCorrupt).
  core::Result<OpenBlock> OpenPacked(const core::BlockKey& key);
  // True if `key` was packed (and is not any more).
  core::Result<bool> RemovePacked(const core::BlockKey& key);
  // Drops the record `loc` names and the name (a damaged or stale record).
  void DropPacked(const std::string& object_id, const PackLocation& loc);
  // ForEachBlock over the pack records the index names; then the packs that
  // nothing names are named again (AdoptPack) or removed.
  core::Status ForEachPackedBlock(const std::function<void(const core::BlockKey&, uint64_t)>& fn,
                                  const std::function<bool(const core::BlockKey&)>& recorded,
                                  core::BlockScan* scan);
  // Names again the well-formed records of pack `pack` (which nothing
  // names) whose objects are not named in a pack outside `adopting` (the
  // packs this walk adopts from, in order: a later copy replaces an earlier
  // one). Blocks the catalog does not record go to `adopt`. Returns how many
  // names point into `pack` now (0: it may go).
  uint64_t AdoptPack(uint64_t pack, const std::set<uint64_t>& adopting,
                     const std::function<bool(const core::BlockKey&)>& recorded,
                     core::BlockScan* scan,
                     std::vector<std::pair<core::BlockKey, uint64_t>>* adopt);
  // ForEachBlock over objects/.
  core::Status ForEachObjectBlock(const std::function<void(const core::BlockKey&, uint64_t)>& fn,
                                  const std::function<bool(const core::BlockKey&)>& recorded,
                                  core::BlockScan* scan);

  const std::string root_;
  const uint64_t block_size_;
  const std::string tmp_prefix_;  // ".tmp.<random per object>.": whose temp files are whose
  OpenBlockCache open_;
  OpenFileCache<std::string, ObjectFiles> objects_;
  // ObjectMutex's stripes. std::mutex, not core::Mutex: they guard files on
  // disk, not members the analysis could check, and WritePackedMany takes
  // several at once (a set the analysis cannot follow).
  std::array<std::mutex, 64> object_mu_;
  core::Mutex mu_;
  std::unordered_map<CheckedKey, FileStamp, CheckedHash> verified_ PERCH_GUARDED_BY(mu_);
  // WholeFile's holders by object, and the slices and reads of each block
  // under way (Use); shared with the files' and slices' deleters, which may
  // run after the store is gone. A leaf lock.
  struct Holds {
    core::Mutex mu;
    std::unordered_map<std::string, int> count PERCH_GUARDED_BY(mu);
    std::map<core::BlockKey, int> blocks PERCH_GUARDED_BY(mu);
  };
  const std::shared_ptr<Holds> held_ = std::make_shared<Holds>();
  core::Index* locations_ = nullptr;  // set once, before use (PackSmallObjects)
  std::unique_ptr<PackFiles> packs_;  // with locations_
};

}  // namespace perch::store
