// FileSystem: the read-only filesystem perch mounts, shaped like FUSE but
// free of it (the fuse/ adapter maps inodes to paths and errors to errno).
// Paths are relative to the mount root.
//
// Metadata comes from the NamespaceCache, bytes from the BlockReader. An open
// file is pinned to the version (size, mtime, etag) seen at open, so every
// read of one open file is of one immutable object; its blocks are not evicted
// while it is open.
//
// A file whose answers carry a freshness lifetime (FileAttr::max_age, from
// Cache-Control) is revalidated before each read is served, cache hits
// included: the namespace cache's answer, from memory while it is younger
// than the lifetime and from the origin once it is not (NamespaceCache), must
// still name the version the file was opened at, so no reader is served a
// version confirmed longer ago than the lifetime (at least
// NamespaceCache::kMinFreshness). Another version, or none: the read fails with kStale (the
// reader holds a version that is gone), and a file reads by path opened is
// opened again at the new version by the next read. A GetAttr or Lookup that
// answers with another version closes the handle of reads by path at once (the
// kernel, told the new attributes, drops its pages of the old), so the next
// read opens the new version without an error. Files without a lifetime are
// never revalidated here: their reads cost what they did.
//
// Every call takes its deadline from `op_timeout`: nothing waits longer.
//
// Reading: one entry point, Read, for a file named by an open handle or by
// its path, answered through one completion with the bytes as pieces of
// blocks: slices of the cache's files where the blocks are there (a reply
// moves them from the file without copying them through perch), bytes in
// memory where they were fetched.
//
// Thread-safety: all methods are safe from any thread and may block the
// caller (FUSE workers) until answered or the deadline passes, except Read,
// which blocks only to look its blocks up in the local store (and, for a
// file with a freshness lifetime, once per lifetime for the origin's answer:
// a PROPFIND).
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "daemon/core/block_reader.h"
#include "daemon/core/defaults.h"
#include "daemon/core/mutex.h"
#include "daemon/core/namespace_cache.h"
#include "daemon/core/object_ids.h"
#include "daemon/core/prefetcher.h"

namespace perch::core {

struct OpenFile {
  ObjectPath path;
  FileAttr attr;
  std::string object_id;
};

struct FileSystemOptions {
  std::chrono::milliseconds op_timeout = kDefaultOpTimeout;
  std::string federation_id;          // e.g. the federation URL; part of every object id
  size_t implicit_open_limit = 1024;  // files reads by path keep open
  // After a read of an object failed because the federation could not
  // deliver it (kUnavailable, kDeadlineExceeded), reads of that object fail
  // at once for this long: the kernel cuts one read(2) into several FUSE
  // requests, and the whole system call, not each request, must end within
  // op_timeout.
  std::chrono::milliseconds failure_memo{5000};
  // Checks an object held whole (Mount::VerifyComplete) after a read that
  // reaches its end has its bytes and before it is answered, and before the
  // object's whole file is handed out (WholeFile): a reader that reads a file
  // to its end never gets its last bytes, and the kernel never its file,
  // when the object's bytes are wrong. `done` gets the verdict exactly once,
  // on any thread; the check never blocks the caller (it may post itself to
  // another executor). An error fails that read or WholeFile. Empty: none.
  using VerifyFn = std::function<void(const OpenFile&, Deadline, std::function<void(Status)> done)>;
  VerifyFn verify_complete;
};

// The file a read is of: an open file (Open's handle), or a path the kernel
// never opened (FUSE no-open; see Read).
struct FileRef {
  static FileRef Handle(uint64_t handle) { return FileRef{handle, ObjectPath()}; }
  static FileRef Path(ObjectPath path) { return FileRef{0, std::move(path)}; }

  uint64_t handle = 0;  // 0: by path
  ObjectPath path;      // when handle is 0
};

class FileSystem {
 public:
  // `prefetcher` (may be null) hears of every open, read and release.
  FileSystem(NamespaceCache& names, BlockReader& reader, FileSystemOptions options,
             Prefetcher* prefetcher = nullptr);

  Result<FileAttr> GetAttr(const ObjectPath& path);
  Result<FileAttr> Lookup(const ObjectPath& parent, std::string_view name);
  Result<std::vector<DirEntry>> ReadDir(const ObjectPath& path);

  // Opens a file for reading. kInvalidArgument for a directory.
  Result<uint64_t> Open(const ObjectPath& path);
  void Release(uint64_t handle);
  // The freshness lifetime of open file `handle` (FileAttr::max_age); -1
  // when it has none or there is no such handle.
  int64_t MaxAge(uint64_t handle) const;
  // The cache's file of open file `handle`'s whole object, for the kernel to
  // read without us (BlockReader::WholeFile); kNotFound unless all of it is
  // cached, kInvalidArgument if it never is one file (shorter than a block),
  // kCorrupt if it failed its digest (FileSystemOptions::verify_complete).
  // The caller holds it as long as the kernel may read it.
  Result<std::shared_ptr<const BlockFd>> WholeFile(uint64_t handle);

  // Reads up to `size` bytes at `offset` of `file` (short at EOF, empty past
  // it) and gives them to `done`, exactly once, as pieces of blocks in order
  // (BlockReader::ReadPieces: a slice of the cache's file for each block the
  // store holds in one, to be sent from there and kept until the reply is
  // done with it; bytes in memory for the others). `done` runs on the caller's
  // thread for a read of hits and for errors found at once, otherwise on the
  // thread that completed the last fetch; it must not block.
  //
  // The read's deadline is op_timeout. A caller that must answer by a
  // deadline bounds its own wait as well (the FUSE adapter and the endpoint
  // do: a completion could come later if a fetch misbehaved).
  //
  // Errors: kInvalidArgument for a handle that is not open; GetAttr's for a
  // path; the federation's (kNotFound, kUnavailable, kDeadlineExceeded, ...)
  // for a block that had to be fetched; kStale when the object changed at the
  // origin since it was opened (VersionGuard); kCorrupt for a read that
  // reaches the end of an object whose bytes failed its digest
  // (FileSystemOptions::verify_complete), and for every later read of a file
  // that was open then (it read some of those bytes; open it again). After a read of an object
  // failed because the federation could not deliver it (kUnavailable,
  // kDeadlineExceeded), reads of it that need a fetch fail at once with that
  // error for `failure_memo`; what is cached is still served.
  //
  // By path (a kernel that opens files without asking us): the file is
  // opened on its first read and stays open until it is among the least
  // recently read of `implicit_open_limit` files, or a read of it fails with
  // kStale (the next read opens the new version).
  using ReadDone = std::function<void(Result<std::vector<ReadPiece>>)>;
  void Read(const FileRef& file, uint64_t offset, uint64_t size, ReadDone done);

  // The store id of `path` at version `attr`.
  std::string ObjectId(const ObjectPath& path, const FileAttr& attr) const;

  // For a handoff to the next perchd (fuse/ SessionState): the files opened
  // with Open and not yet released, by handle (the opens of reads by path are
  // left out: they open again on their next read).
  std::vector<std::pair<uint64_t, OpenFile>> OpenFiles() const;
  // Takes over open file `handle` of the previous perchd, pinned to the same
  // version; later Opens return larger handles.
  void AdoptOpenFile(uint64_t handle, const ObjectPath& path, const FileAttr& attr);

  Deadline NewDeadline() const { return DeadlineAfter(options_.op_timeout); }
  bool offline() const { return names_.offline(); }

 private:
  NamespaceCache& names_;
  BlockReader& reader_;
  const FileSystemOptions options_;
  Prefetcher* const prefetcher_;

  // The open file to read `size` bytes at `offset` of, by handle or by path,
  // having told the prefetcher and revalidated it (Revalidate); an error if
  // there is none, or kStale if it is of a version the origin no longer has.
  Result<OpenFile> StartRead(uint64_t handle, uint64_t offset, uint64_t size);
  Result<OpenFile> StartPathRead(const ObjectPath& path, uint64_t offset, uint64_t size);
  // For a file with a freshness lifetime: whether `f` is still the version
  // the namespace names now (asking the origin when the namespace's answer is
  // older than the lifetime); kStale if not. An origin that cannot be asked
  // leaves it served (as offline). Ok at once for a file without a lifetime.
  Status Revalidate(const OpenFile& f);
  // A GetAttr or Lookup answered `attr` for `path`: the handle reads by path
  // use, if of another version of a file with a freshness lifetime, is closed.
  void Answered(const ObjectPath& path, const Result<FileAttr>& attr);
  // The handle reads by path use for `path`, opening it if needed.
  Result<uint64_t> ImplicitHandle(const ObjectPath& path);
  // Closes the handle reads by path use for `path` if it is of `object_id`.
  void ForgetImplicit(const ObjectPath& path, const std::string& object_id);
  // Closes the handle reads by path use for `path` if it is `handle`.
  void ForgetImplicitHandle(const ObjectPath& path, uint64_t handle);
  // The remembered failure of `object_id`, if recent (see failure_memo).
  std::optional<Status> RecentFailure(const std::string& object_id);
  void NoteResult(const std::string& object_id, const Status& s);
  // True if a read of `size` bytes at `offset` of `f` ends at its end and
  // waits for verify_complete's verdict before it is answered.
  bool ChecksAtEnd(const OpenFile& f, uint64_t offset, uint64_t size) const;
  // Hands `r`, a read of `f` that ends at its end, to `done` once
  // verify_complete said the object is good; its error otherwise.
  void AfterCheck(const OpenFile& f, Deadline deadline, Result<std::vector<ReadPiece>> r,
                  ReadDone done);
  // A read of `object_id` found its bytes failed the object's digest: every
  // file open on it now has read some of them, and fails its later reads
  // (the kernel retries a failed read-ahead: a reader must not then be
  // handed the bytes fetched again after the wrong ones). New opens read.
  void NoteDigestFailure(const std::string& object_id);
  bool FailedItsDigest(uint64_t handle, const std::string& object_id);

  std::atomic<uint64_t> next_handle_{1};
  mutable Mutex mu_;
  std::map<uint64_t, OpenFile> open_ PERCH_GUARDED_BY(mu_);
  // Files opened by reads by path, least recently read first.
  std::list<std::pair<std::string, uint64_t>> implicit_lru_ PERCH_GUARDED_BY(mu_);
  std::unordered_map<std::string, std::list<std::pair<std::string, uint64_t>>::iterator> implicit_;
  // The largest handle open when the object's bytes failed its digest, by
  // object id (bounded; NoteDigestFailure).
  std::unordered_map<std::string, uint64_t> digest_failed_ PERCH_GUARDED_BY(mu_);
  // Recent delivery failures by object id (bounded).
  std::unordered_map<std::string, std::pair<Clock::time_point, Status>> failed_
      PERCH_GUARDED_BY(mu_);
};

}  // namespace perch::core
