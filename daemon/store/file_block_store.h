// FileBlockStore: a core::BlockStore of one regular file per block.
//
//   <root>/blocks/<first two hex chars of object_id>/<object_id>.<index>
//
// Each file is a 64-byte-aligned header followed by the block's bytes (README
// "On-disk format"): magic "PERCHBLK", format version, header length, block
// index, data length, CRC32C of the data, the object id. Blocks are regular
// files so that a hit can later be spliced or passed through to the kernel.
//
// Directories are created 0700 and files 0600: the cache is private to the
// daemon (paths of protected namespaces must not leak to other users).
//
// Write: temp file in the same directory -> one writev of header and data ->
// rename; the index record is written only after the rename (CacheCatalog),
// so a killed process leaves whole blocks or none. Nothing is fsynced: the
// cache holds copies of remote data, and the check below makes a block that
// a power cut or kernel crash left short, empty or zeroed (with or without
// its record) a miss that is fetched again, never served, since the first
// read of every file after a start checks its CRC32C. Dropping the fsync
// takes a journal commit per block off the cold path.
//
// Read checks the header every time, and, unless the block's run is trusted
// (below), the CRC32C of the whole block the first time a given file (inode,
// mtime, size) is read by this process; a
// verified file is remembered, so a 4 MiB block read in 128 KiB pieces is
// checksummed once, not 32 times. A file this process wrote counts as verified
// (its bytes are the ones just checksummed; a power cut empties the set), so a
// cold block is not read back whole to be checked again. Any mismatch removes
// the file and reports kCorrupt. (A file that rots on disk after verification
// is caught only after an unclean stop.) The set is keyed by inode, at most 2^18 files
// (about 40 bytes each); an entry outliving its file (evicted) names an inode
// that a new file matches only with the same size and nanosecond mtime.
//
// Trusted runs. Reading every block once after each start to check its CRC
// costs a read of the whole cache (and, for a block served by splice, more
// CPU than serving it). The check guards against one thing only: a block
// torn by an OS crash or power cut, since nothing is fsynced. So each run of
// the daemon has a number, written into the headers of the blocks it writes,
// and `<root>/run` records the current run (BeginRun, durably, before any
// write): its number, the boot it ran in, whether it ended cleanly (EndRun:
// syncfs, then the record) and the first run whose blocks are trusted. A run
// that follows a clean end, or an unclean end in the same boot (the daemon
// was killed: the kernel still holds every byte it wrote), keeps the trusted
// range; any other start (another boot after an unclean end, no readable
// record) trusts only its own blocks. A block of a trusted run is served
// after its header check without the CRC pass; all others are checked as
// above. Blocks written by a store that was never begun carry run 0 and are
// never trusted.
//
// Up to `open_files` block files stay open (OpenBlockCache): a block read
// again, or read right after it was written, is served through the open
// descriptor with no open, stat or header read; removing a block lets its
// descriptor go (a reply still splicing from it finishes first). The header
// is checked whenever a block file is opened.
//
// Thread-safety: all methods are safe from any thread; the verified set is
// under mu_ (a leaf lock, never held across I/O).
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>

struct stat;

#include "daemon/core/block_store.h"
#include "daemon/store/open_block_cache.h"

namespace perch::store {

class FileBlockStore : public core::BlockStore {
 public:
  explicit FileBlockStore(std::string root, size_t open_files = kDefaultOpenFiles,
                          std::string boot_id_file = "/proc/sys/kernel/random/boot_id");
  static constexpr size_t kDefaultOpenFiles = 128;

  // What BeginRun decided.
  struct RunTrust {
    uint64_t run = 0;           // this run's number
    uint64_t trusted_from = 0;  // blocks of runs >= this are served without a CRC pass
    bool inherited = false;     // false: only this run's own blocks are trusted
  };
  // Reads the previous run's record and durably records this run (see
  // "Trusted runs"). Call once, before the first Write; an error (the cache
  // directory cannot be written) leaves nothing trusted.
  core::Result<RunTrust> BeginRun();
  // Makes everything written so far durable (syncfs) and records a clean
  // end. Call after the last Write; a no-op if BeginRun was not called.
  core::Status EndRun();

  core::Result<core::Bytes> Read(const core::BlockKey& key, uint64_t offset,
                                 uint64_t length) override;
  core::Status Write(const core::BlockKey& key, std::string_view data) override;
  core::Status Remove(const core::BlockKey& key) override;
  core::Result<core::BlockSlice> Slice(const core::BlockKey& key, uint64_t offset,
                                       uint64_t length) override;
  // Temp files not named by this object are leftovers of a process that
  // died mid-write (removed); its own may be writes under way (kept).
  core::Result<core::BlockScan> ForEachBlock(
      const std::function<void(const core::BlockKey&, uint64_t)>& fn,
      const std::function<bool(const core::BlockKey&)>& recorded) override;

  // The file that holds block `key` (exposed for tests and tools).
  std::string PathOf(const core::BlockKey& key) const;
  // How this object's temp files start (exposed for tests).
  const std::string& TempPrefix() const { return tmp_prefix_; }

 private:
  struct FileId {
    uint64_t ino = 0, size = 0;
    int64_t mtime_ns = 0;
  };
  struct FileStamp {
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    friend bool operator==(const FileStamp&, const FileStamp&) = default;
  };
  static FileId IdOf(const struct stat& st);
  // Block `key`'s open file: from open_, else opened and checked (header,
  // and CRC32C once per file) and kept in open_.
  core::Result<OpenBlock> OpenChecked(const core::BlockKey& key);
  // True if `entry` (file `name`) is a block file by its type and name and
  // `recorded` says so of the key its name gives (ForEachBlock).
  bool IsRecorded(const std::filesystem::directory_entry& entry, const std::string& name,
                  const std::function<bool(const core::BlockKey&)>& recorded) const;
  bool Verified(const FileId& id);
  bool Trusted(uint64_t file_run) const;
  core::Status WriteRunFile(const std::string& contents);
  void MarkVerified(const FileId& id);
  void Forget(uint64_t ino);

  const std::string root_;
  const std::string tmp_prefix_;  // ".tmp.<random per object>.": whose temp files are whose
  const std::string boot_id_file_;
  std::string boot_id_;  // set by BeginRun, before any write
  std::atomic<uint64_t> run_{0};
  std::atomic<uint64_t> trusted_from_{~uint64_t{0}};
  OpenBlockCache open_;
  std::mutex mu_;
  std::unordered_map<uint64_t, FileStamp> verified_;  // by inode; Protected by mu_
};

}  // namespace perch::store
