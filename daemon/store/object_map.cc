#include "daemon/store/object_map.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <cstring>

#include "daemon/core/codec.h"

namespace perch::store {

namespace {

constexpr char kMapMagic[8] = {'P', 'E', 'R', 'C', 'H', 'M', 'A', 'P'};
constexpr uint64_t kMapFormat = 1;
constexpr uint64_t kMaxIdLen = kMapHeaderSize - 40;

// The check of an entry: CRC32C of its first 24 bytes with the top bit set,
// so that no present entry's check is zero.
uint64_t EntryCheck(std::string_view first24) {
  const uint32_t crc =
      crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(first24.data())),
                  static_cast<int>(first24.size()), 0xFFFFFFFFu);
  return (uint64_t{1} << 63) | crc;
}

}  // namespace

std::string EncodeMapHeader(uint64_t block_size, std::string_view object_id) {
  std::string h(kMapMagic, sizeof(kMapMagic));
  core::codec::PutU64(&h, kMapFormat);
  core::codec::PutU64(&h, block_size);
  core::codec::PutString(&h, object_id.substr(0, kMaxIdLen));
  h.resize(kMapHeaderSize, '\0');
  return h;
}

std::string CheckMapHeader(std::string_view header, uint64_t block_size,
                           std::string_view object_id) {
  if (header.size() < kMapHeaderSize) return "shorter than its header";
  if (std::memcmp(header.data(), kMapMagic, sizeof(kMapMagic)) != 0) return "bad magic";
  core::codec::Reader r(header.substr(sizeof(kMapMagic), kMapHeaderSize - sizeof(kMapMagic)));
  uint64_t format = 0, bs = 0;
  std::string_view id;
  if (!r.GetU64(&format) || format != kMapFormat) return "unknown format";
  if (!r.GetU64(&bs) || !r.GetView(&id)) return "bad header";
  if (bs != block_size) {
    return "block size " + std::to_string(bs) + " (now " + std::to_string(block_size) + ")";
  }
  if (id != object_id) return "header names another object";
  return "";
}

std::string EncodeMapEntry(const MapEntry& entry) {
  std::string out;
  if (entry.length == 0) return std::string(kMapEntrySize, '\0');
  core::codec::PutU64(&out, entry.length);
  core::codec::PutU64(&out, entry.crc);
  core::codec::PutU64(&out, 0);  // once the writing run
  core::codec::PutU64(&out, EntryCheck(out));
  return out;
}

std::optional<MapEntry> DecodeMapEntry(std::string_view in) {
  char buf[kMapEntrySize] = {};
  std::memcpy(buf, in.data(), std::min<size_t>(in.size(), kMapEntrySize));
  const std::string_view e(buf, kMapEntrySize);
  if (e.find_first_not_of('\0') == std::string_view::npos) return MapEntry{};
  core::codec::Reader r(e);
  MapEntry out;
  uint64_t check = 0, run = 0;
  r.GetU64(&out.length);
  r.GetU64(&out.crc);
  r.GetU64(&run);  // covered by the check, not used
  r.GetU64(&check);
  if (out.length == 0 || check != EntryCheck(e.substr(0, 24))) return std::nullopt;
  return out;
}

}  // namespace perch::store
