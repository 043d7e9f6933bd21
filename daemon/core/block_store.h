// BlockStore: where cached bytes live. A block is one fixed-size piece of one
// version of one object (the last block of an object may be shorter; a small
// object is one block). Writes are all-or-nothing: a reader sees a whole,
// checksummed block or none (the file implementation puts a small object's
// block in a pack record named by the index only once written, and a larger
// object's block in the object's file, visible once its map entry is written:
// daemon/store/file_block_store.h).
//
// Thread-safety: all methods are safe from any thread. They do disk I/O and
// may block: never call them on the net loop.
//
// What a store knows: bytes, block keys and where it put them; not paths,
// namespaces or LRU order, which live in the catalog's records in the Index.
// A store may keep where it put them in the Index too, under a prefix of its
// own that nothing else reads or writes (index_keys.h: the file store's
// pack records, "sp/<object id>", FileBlockStore::PackSmallObjects). Such a
// record is part of the block: the store writes it after the bytes and
// before Write returns, and deletes it in Remove, so that "a block is in the
// store" still means exactly what the methods below say. (The catalog does
// not write them: it would have to know the store's layout, and a block
// written but not yet recorded by the catalog must still be found by the
// start-up walk, ForEachBlock.)
#pragma once

#include <unistd.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::core {

struct BlockKey {
  std::string object_id;  // stable id of (federation, path, version); hex, filesystem-safe
  uint64_t index = 0;     // block number within the object
  friend bool operator==(const BlockKey&, const BlockKey&) = default;
  friend auto operator<=>(const BlockKey&, const BlockKey&) = default;
};

// An open file descriptor, closed when the last holder lets it go: a store's
// cache of open block files and the slices being served from them share it.
class BlockFd {
 public:
  explicit BlockFd(int fd) : fd_(fd) {}
  ~BlockFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  BlockFd(const BlockFd&) = delete;
  BlockFd& operator=(const BlockFd&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

// An open block file and where in it a byte range lies, for replies that
// move bytes from the file to the kernel without copying them through
// perch (splice). Readers use positional I/O only (pread, splice with an
// offset): the descriptor is shared.
//
// A slice is a use of its block: while any copy of it lives, the store
// frees none of the bytes it names (BlockStore::InUse; eviction skips the
// block, a removal refuses it or frees its bytes only after the last copy
// is let go). A reply keeps its slices until the bytes have left the file:
// a hole punched under a splice or sendfile in progress reads as zeros.
class BlockSlice {
 public:
  // `hold` (may be null) is what keeps the bytes in place: released with the
  // last copy of the slice.
  BlockSlice(std::shared_ptr<const BlockFd> file, uint64_t file_offset, uint64_t length,
             std::shared_ptr<const void> hold = nullptr)
      : file_(std::move(file)),
        hold_(std::move(hold)),
        file_offset_(file_offset),
        length_(length) {}

  int fd() const { return file_->fd(); }
  uint64_t file_offset() const { return file_offset_; }
  uint64_t length() const { return length_; }

 private:
  std::shared_ptr<const BlockFd> file_;
  std::shared_ptr<const void> hold_;
  uint64_t file_offset_;
  uint64_t length_;
};

// What ForEachBlock found.
struct BlockScan {
  uint64_t blocks = 0;             // complete blocks listed
  uint64_t leftovers_removed = 0;  // partial writes and non-blocks removed
  uint64_t leftover_bytes = 0;
};

class BlockStore {
 public:
  virtual ~BlockStore() = default;

  // Reads `length` bytes at `offset` within block `key`. kNotFound if the
  // block is absent; kCorrupt if its header or checksum does not match (the
  // block is removed before returning, so the next read refetches it).
  virtual Result<Bytes> Read(const BlockKey& key, uint64_t offset, uint64_t length) = 0;

  // Stores the whole block `data` under `key`, replacing any older copy.
  // kNoSpace when the volume is full (nothing is left behind).
  virtual Status Write(const BlockKey& key, std::string_view data) = 0;

  // Stores several blocks (a write batch), as Write each; one status per
  // block, in order. Stores that record where blocks are write those records
  // together.
  struct BlockWrite {
    BlockKey key;
    std::string_view data;
  };
  virtual std::vector<Status> WriteMany(const std::vector<BlockWrite>& blocks) {
    std::vector<Status> out;
    out.reserve(blocks.size());
    for (const BlockWrite& b : blocks) out.push_back(Write(b.key, b.data));
    return out;
  }

  // Removes block `key`; OK if it was absent.
  virtual Status Remove(const BlockKey& key) = 0;

  // Reads block `key` whole and checks it against its CRC32C, whatever a
  // read would skip (a block checked before in this run): what a scrub
  // does. Yields the block's length when it matches; kNotFound if the block
  // is absent (evicted or replaced meanwhile: not a corruption); kCorrupt
  // when its header, map entry or bytes do not match (the block is removed
  // before returning, as Read does). A mismatch is confirmed under the lock
  // that orders writes and removals of the block before it is reported, so
  // a write or removal racing the check is never taken for a corruption;
  // the bytes themselves are read without holding it, so readers of the
  // block are not held up. Memory: a small buffer, whatever the block's size.
  virtual Result<uint64_t> Verify(const BlockKey& key) = 0;

  // Like Read, but yields the open file and the position of the bytes in it
  // instead of the bytes (same checks, same errors). Stores that do not keep
  // blocks in files answer kInvalidArgument; callers then use Read.
  virtual Result<BlockSlice> Slice(const BlockKey& key, uint64_t offset, uint64_t length) {
    (void)key, (void)offset, (void)length;
    return InvalidArgumentError("this block store has no files to splice from");
  }

  // The file that holds exactly the `size` bytes of object `object_id`, each
  // at its offset in the object, opened read-only: what a kernel can read
  // directly (FUSE passthrough). kNotFound unless every block is present and
  // has passed its check (a block not yet checked is checked now, which reads
  // it); stores that keep no such file answer kInvalidArgument. (FileBlockStore
  // keeps an object shorter than a block as a block file.) While the
  // file is held its blocks stay (InUse), so what the kernel reads is there.
  // `*failed` (if not null) is set to the block that was absent or failed.
  virtual Result<std::shared_ptr<const BlockFd>> WholeFile(const std::string& object_id,
                                                           uint64_t size,
                                                           BlockKey* failed = nullptr) {
    (void)object_id, (void)size, (void)failed;
    return InvalidArgumentError("this block store keeps no object in one file");
  }

  // True while block `key` is in use by someone the store handed it to: a
  // slice of it (Slice) or a read of it (Read) not yet done, or a file of its
  // object that WholeFile gave and that is still held. Remove then keeps the
  // bytes where a reader may still read them (it refuses the block, or frees
  // its bytes once the last use ends). Stores that hand out no files say no.
  virtual bool InUse(const BlockKey& key) {
    (void)key;
    return false;
  }

  // Calls `fn(key, length)` for every complete block in the store, checking
  // each one's header (not its checksum), and removes what is not a block:
  // temp files of writes that a previous process never finished and files
  // whose header is unreadable. Slow (it walks the whole store): meant for
  // one background pass at start. Stores with nothing to walk list nothing.
  // A block for which `recorded(key)` (if not null) is true, asked with the
  // key its file's name gives, is counted but neither opened nor passed to
  // `fn`: the caller's index already records it, and a read checks its
  // header anyway (so a walk of a store the index knows reads directories
  // only, not one header per block).
  virtual Result<BlockScan> ForEachBlock(
      const std::function<void(const BlockKey&, uint64_t length)>& fn,
      const std::function<bool(const BlockKey&)>& recorded) {
    (void)fn, (void)recorded;
    return BlockScan{};
  }
};

}  // namespace perch::core
