#include "daemon/http/digest.h"

#include <isa-l/crc.h>
#include <isa-l/igzip_lib.h>
#include <openssl/evp.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <optional>

#include "daemon/core/log_escape.h"

namespace perch::http {
namespace {

constexpr size_t kMaxDigests = 8;

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<std::string> FromHex(std::string_view s) {
  if (s.empty() || s.size() % 2 != 0) return std::nullopt;
  std::string out;
  out.reserve(s.size() / 2);
  for (size_t i = 0; i < s.size(); i += 2) {
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      return -1;
    };
    int hi = nibble(s[i]), lo = nibble(s[i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out.push_back(static_cast<char>(hi << 4 | lo));
  }
  return out;
}

std::optional<std::string> FromBase64(std::string_view s) {
  if (s.empty() || s.size() % 4 != 0 || s.size() > 128) return std::nullopt;
  std::string out(s.size() / 4 * 3, '\0');
  int n =
      EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                      reinterpret_cast<const unsigned char*>(s.data()), static_cast<int>(s.size()));
  if (n < 0) return std::nullopt;
  size_t pad = s.size() - (s.find_last_not_of('=') + 1);
  if (pad > 2) return std::nullopt;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
          static_cast<char>(v)};
}

const unsigned char* Data(std::string_view b) {
  return reinterpret_cast<const unsigned char*>(b.data());
}

std::string Evp(const EVP_MD* md, std::string_view bytes) {
  std::array<unsigned char, EVP_MAX_MD_SIZE> out{};
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), out.data(), &n, md, nullptr) != 1) return "";
  return std::string(reinterpret_cast<const char*>(out.data()), n);
}

// The raw digest of `bytes` under `algorithm` (RFC 3230 / IANA names, and
// XRootD's); "" for one perch does not compute.
std::string Compute(const std::string& algorithm, std::string_view bytes) {
  if (algorithm == "adler32") return BigEndian(isal_adler32(1, Data(bytes), bytes.size()));
  if (algorithm == "crc32c") {
    return BigEndian(crc32_iscsi(const_cast<unsigned char*>(Data(bytes)),
                                 static_cast<int>(bytes.size()), 0xFFFFFFFFu) ^
                     0xFFFFFFFFu);
  }
  if (algorithm == "crc32") {
    return BigEndian(crc32_gzip_refl(0, Data(bytes), bytes.size()));  // zlib's crc32
  }
  if (algorithm == "md5") return Evp(EVP_md5(), bytes);
  if (algorithm == "sha" || algorithm == "sha1") return Evp(EVP_sha1(), bytes);
  if (algorithm == "sha-256") return Evp(EVP_sha256(), bytes);
  return "";
}

// The algorithms whose digests are `length` bytes long.
std::vector<std::string> AlgorithmsOfLength(size_t length) {
  switch (length) {
    case 4:
      return {"adler32", "crc32c", "crc32"};
    case 16:
      return {"md5"};
    case 20:
      return {"sha"};
    case 32:
      return {"sha-256"};
    default:
      return {};
  }
}

}  // namespace

std::vector<InstanceDigest> ParseDigestHeader(std::string_view header) {
  std::vector<InstanceDigest> out;
  while (!header.empty() && out.size() < kMaxDigests) {
    size_t comma = header.find(',');
    std::string_view item = Trim(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    size_t eq = item.find('=');
    if (eq == std::string_view::npos) continue;
    std::string_view name = Trim(item.substr(0, eq)), value = Trim(item.substr(eq + 1));
    if (name.empty() || value.empty()) continue;
    out.push_back(InstanceDigest{Lower(name), std::string(value)});
  }
  return out;
}

DigestCheck CheckDigest(const InstanceDigest& digest, std::string_view bytes) {
  // Both readings of the value: "1e720467" is hex, and base64 of 6 bytes too.
  std::vector<std::string> readings;
  for (auto decoded : {FromHex(digest.value), FromBase64(digest.value)}) {
    if (decoded && !AlgorithmsOfLength(decoded->size()).empty()) readings.push_back(*decoded);
  }
  if (readings.empty()) return DigestCheck::kUnchecked;
  // The named algorithm first; the others of the same length only if it fails.
  std::string named = Compute(digest.algorithm, bytes);
  for (const std::string& r : readings) {
    if (!named.empty() && r == named) return DigestCheck::kMatch;
  }
  for (const std::string& r : readings) {
    for (const std::string& algorithm : AlgorithmsOfLength(r.size())) {
      if (algorithm == digest.algorithm) continue;
      if (Compute(algorithm, bytes) == r) return DigestCheck::kMatch;
    }
  }
  return DigestCheck::kMismatch;
}

std::string ToString(const InstanceDigest& digest) {
  return core::EscapeForLog(digest.algorithm) + "=" + core::EscapeForLog(digest.value);
}

}  // namespace perch::http
