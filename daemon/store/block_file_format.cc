#include "daemon/store/block_file_format.h"

#include <fcntl.h>
#include <isa-l/crc.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>

#include "daemon/core/codec.h"

namespace perch::store {

namespace {

using core::Status;

constexpr char kMagic[8] = {'P', 'E', 'R', 'C', 'H', 'B', 'L', 'K'};
constexpr size_t kFixedHeader =
    8 + 6 * 8;  // magic + format, header_len, index, length, crc, id_len

}  // namespace

Status ErrnoStatus(const std::string& what, const std::string& path, int err) {
  std::string msg = what + " " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT)
    return Status(core::StatusCode::kNoSpace, msg, core::FailureSite::kLocal);
  return core::InternalError(msg);
}

bool PwriteAll(int fd, std::string_view a, std::string_view b, uint64_t off) {
  while (!a.empty() || !b.empty()) {
    struct iovec iov[2] = {{const_cast<char*>(a.data()), a.size()},
                           {const_cast<char*>(b.data()), b.size()}};
    const int first = a.empty() ? 1 : 0;
    ssize_t w = ::pwritev(fd, iov + first, 2 - first, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    const size_t n = static_cast<size_t>(w);
    const size_t from_a = std::min(n, a.size());
    a.remove_prefix(from_a);
    b.remove_prefix(n - from_a);
    off += n;
  }
  return true;
}

bool PreadAll(int fd, char* p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, off);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      if (r == 0) errno = 0;
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    off += r;
  }
  return true;
}

bool FileCrc32c(int fd, uint64_t off, uint64_t len, uint32_t* crc_out) {
  constexpr size_t kPiece = 128 << 10;
  thread_local std::unique_ptr<unsigned char[]> buf(new unsigned char[kPiece]);
  uint32_t crc = 0xFFFFFFFFu;
  while (len > 0) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(len, kPiece));
    if (!PreadAll(fd, reinterpret_cast<char*>(buf.get()), n, static_cast<off_t>(off))) return false;
    crc = crc32_iscsi(buf.get(), static_cast<int>(n), crc);
    off += n;
    len -= n;
  }
  *crc_out = crc ^ 0xFFFFFFFFu;
  return true;
}

uint32_t Crc32c(std::string_view data) {
  return crc32_iscsi(reinterpret_cast<unsigned char*>(const_cast<char*>(data.data())),
                     static_cast<int>(data.size()), 0xFFFFFFFFu) ^
         0xFFFFFFFFu;
}

std::string BlockHeader(const core::BlockKey& key, uint64_t length, uint32_t crc) {
  std::string h(kMagic, sizeof(kMagic));
  size_t header_len = kFixedHeader + key.object_id.size();
  header_len = (header_len + 63) / 64 * 64;
  core::codec::PutU64(&h, kBlockFormat);
  core::codec::PutU64(&h, header_len);
  core::codec::PutU64(&h, key.index);
  core::codec::PutU64(&h, length);
  core::codec::PutU64(&h, crc);
  core::codec::PutString(&h, key.object_id);
  h.resize(header_len, '\0');
  return h;
}

Fd::~Fd() {
  if (fd >= 0) ::close(fd);
}

ParsedHeader ParseHeader(int fd, uint64_t base, uint64_t file_size, bool exact) {
  ParsedHeader h;
  std::string head(kFixedHeader, '\0');
  if (!PreadAll(fd, head.data(), head.size(), static_cast<off_t>(base))) {
    h.read_errno = errno;
    h.why = "shorter than its header";
    return h;
  }
  if (std::memcmp(head.data(), kMagic, sizeof(kMagic)) != 0) {
    h.why = "bad magic";
    return h;
  }
  core::codec::Reader r(std::string_view(head).substr(sizeof(kMagic)));
  uint64_t format = 0, id_len = 0;
  r.GetU64(&format);
  r.GetU64(&h.header_len);
  r.GetU64(&h.index);
  r.GetU64(&h.data_len);
  r.GetU64(&h.crc);
  r.GetU64(&id_len);
  // Format 2's run number follows the id: in the header, unread.
  const uint64_t run_len = format == kBlockFormatWithRun ? 8 : 0;
  if (format != kBlockFormat && format != kBlockFormatWithRun) {
    h.why = "unknown format " + std::to_string(format);
  } else if (id_len > 4096 || h.header_len < kFixedHeader + id_len + run_len ||
             h.header_len > 4096) {
    h.why = "bad header length";
  } else if (h.data_len > file_size || base > file_size ||
             (exact ? file_size - base != h.header_len + h.data_len
                    : file_size - base < h.header_len + h.data_len)) {
    h.why = "size " + std::to_string(file_size) + " does not match its header";
  } else {
    std::string rest(id_len, '\0');
    if (!PreadAll(fd, rest.data(), rest.size(), static_cast<off_t>(base + kFixedHeader))) {
      h.read_errno = errno;
      h.why = "truncated header";
      return h;
    }
    h.id = std::move(rest);
  }
  return h;
}

}  // namespace perch::store
