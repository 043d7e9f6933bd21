// The block file format (docs/design.md "On-disk format") and the file helpers the
// store's parts share: a block's header (magic "PERCHBLK", format, header
// length, block index, data length, CRC32C, object id, run), as a block file
// starts with it and as each record of a pack file does (pack_files.h).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "daemon/core/block_store.h"
#include "daemon/core/status.h"

namespace perch::store {

// The format written. Format 2 (written by versions that trusted the blocks
// of earlier runs, before issue 41) adds the writing run's number after the
// object id; it is still read, its run ignored: every block is checked alike.
inline constexpr uint64_t kBlockFormat = 1;
inline constexpr uint64_t kBlockFormatWithRun = 2;
// Temp files of the store start with this.
inline constexpr char kTmpPrefix[] = ".tmp.";

// kNoSpace for ENOSPC/EDQUOT, else kInternal, with what failed on which path.
core::Status ErrnoStatus(const std::string& what, const std::string& path, int err);
// Writes `a` then `b` in full at `off`, one pwritev when it all goes at once.
bool PwriteAll(int fd, std::string_view a, std::string_view b, uint64_t off);
inline bool PwriteAll(int fd, std::string_view data, uint64_t off) {
  return PwriteAll(fd, data, {}, off);
}
// Reads exactly n bytes at off; false on error or EOF (errno 0 at EOF).
bool PreadAll(int fd, char* p, size_t n, off_t off);
// CRC32C of `len` bytes of `fd` at `off`, read in pieces through a buffer of
// this thread's that stays in the CPU's cache (a block-sized buffer per check
// cost page faults and a copy through memory). False on a read error or EOF.
bool FileCrc32c(int fd, uint64_t off, uint64_t len, uint32_t* crc_out);
uint32_t Crc32c(std::string_view data);
// The header of block `key` (64-byte aligned), written before its bytes.
std::string BlockHeader(const core::BlockKey& key, uint64_t length, uint32_t crc);

// What a block header says. Empty `why` when it is well formed.
struct ParsedHeader {
  uint64_t header_len = 0, index = 0, data_len = 0, crc = 0;
  std::string id;
  std::string why;     // "" when the header checks out
  int read_errno = 0;  // nonzero: the file could not be read (not a corruption)
};
// Reads the header at `base` of a file of `file_size` bytes. `exact`: the
// block ends the file (a block file); else it must only fit (a pack record).
ParsedHeader ParseHeader(int fd, uint64_t base, uint64_t file_size, bool exact);

// A descriptor closed when it goes out of scope (unless taken: fd = -1).
struct Fd {
  int fd = -1;
  ~Fd();
};

}  // namespace perch::store
