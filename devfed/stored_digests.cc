#include "devfed/stored_digests.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <ctime>
#include <system_error>
#include <vector>

#include "daemon/http/digest.h"

namespace perch::devfed {
namespace {

void PutBigEndian(uint64_t v, int bytes, char* out) {
  for (int i = bytes - 1; i >= 0; --i, v >>= 8) out[i] = static_cast<char>(v & 0xFF);
}

// XrdCksData: Name[16], fmTime (int64), csTime (int32, seconds after
// fmTime), Rsvd1 (int16), Rsvd2 (char), Length (char), Value[64]; integers
// big-endian. 96 bytes.
bool Store(const std::filesystem::path& file) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return false;
  }
  auto hasher = http::NewDigestHasher({"adler32"});
  std::vector<char> buf(1 << 20);
  for (ssize_t n; (n = ::read(fd, buf.data(), buf.size())) != 0;) {
    if (n < 0) {
      ::close(fd);
      return false;
    }
    hasher->Update(std::string_view(buf.data(), static_cast<size_t>(n)));
  }
  const std::string raw = hasher->Finish().front().raw;
  std::array<char, 96> rec{};
  std::copy_n("adler32", 7, rec.begin());
  PutBigEndian(static_cast<uint64_t>(st.st_mtime), 8, rec.data() + 16);
  const int64_t later = static_cast<int64_t>(std::time(nullptr)) - st.st_mtime;
  PutBigEndian(static_cast<uint64_t>(later > 0 ? later : 0), 4, rec.data() + 24);
  rec[31] = static_cast<char>(raw.size());
  std::copy(raw.begin(), raw.end(), rec.begin() + 32);
  const bool ok = ::fsetxattr(fd, "user.XrdCks.adler32", rec.data(), rec.size(), 0) == 0;
  ::close(fd);
  return ok;
}

}  // namespace

size_t StoreAdler32(const std::filesystem::path& dir) {
  size_t stored = 0;
  std::error_code ec;
  std::filesystem::recursive_directory_iterator it(
      dir, std::filesystem::directory_options::skip_permission_denied, ec);
  for (; !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_symlink(ec) || !it->is_regular_file(ec)) continue;
    if (Store(it->path())) ++stored;
  }
  return stored;
}

}  // namespace perch::devfed
