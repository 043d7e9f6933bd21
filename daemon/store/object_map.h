// ObjectMap: the format of a large object's map file (docs/design.md "On-disk
// format"). A FileBlockStore keeps an object of more than one block in two
// files:
//
//   <root>/objects/<first two hex chars of id>/<id>      the object's bytes, block i at
//                                                        i * block_size (a hole where absent)
//   <root>/objects/<first two hex chars of id>/<id>.map  which blocks the first holds
//
// The map is a 4 KiB header (magic "PERCHMAP", format, block size, object id)
// and one 32-byte entry per block from offset 4096: data length, CRC32C of
// the data, 8 bytes written as zero (before issue 41: the run that wrote it,
// when blocks of earlier runs were trusted; unread) and a check of those
// three. An all-zero entry is an absent block; an entry whose
// check fails is damage (a torn write, a flipped bit) and counts as absent.
// The data file of a complete object is exactly the object's bytes, so the
// kernel can read it directly (FUSE passthrough).
//
// Everything here is pure encoding: no I/O, no allocation beyond the result.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace perch::store {

struct MapEntry {
  uint64_t length = 0;  // 0: the block is absent
  uint64_t crc = 0;     // CRC32C of its bytes
};

inline constexpr uint64_t kMapHeaderSize = 4096;
inline constexpr uint64_t kMapEntrySize = 32;
// Blocks an object file may hold (its map is at most 512 MiB, sparse): an
// index beyond this is refused, not turned into a file offset.
inline constexpr uint64_t kMaxObjectBlocks = uint64_t{1} << 24;

inline constexpr uint64_t MapEntryOffset(uint64_t index) {
  return kMapHeaderSize + index * kMapEntrySize;
}

std::string EncodeMapHeader(uint64_t block_size, std::string_view object_id);
// "" if `header` (the first kMapHeaderSize bytes, or fewer if the file is
// shorter) is a map header for (`block_size`, `object_id`); else what is wrong.
std::string CheckMapHeader(std::string_view header, uint64_t block_size,
                           std::string_view object_id);

// kMapEntrySize bytes.
std::string EncodeMapEntry(const MapEntry& entry);
// The entry in `in` (kMapEntrySize bytes; fewer reads as zeros: a map file
// ends after its last written entry); nullopt if its check fails.
std::optional<MapEntry> DecodeMapEntry(std::string_view in);

}  // namespace perch::store
