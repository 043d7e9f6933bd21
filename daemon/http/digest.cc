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

std::vector<core::ObjectDigest> Readings(const InstanceDigest& digest) {
  std::vector<core::ObjectDigest> out;
  for (auto decoded : {FromHex(digest.value), FromBase64(digest.value)}) {
    if (!decoded || AlgorithmsOfLength(decoded->size()).empty()) continue;
    core::ObjectDigest claim{digest.algorithm == "sha1" ? "sha" : digest.algorithm, *decoded};
    if (std::find(out.begin(), out.end(), claim) == out.end()) out.push_back(std::move(claim));
  }
  return out;
}

core::DigestMatch VerifyAgainst(const std::vector<core::ObjectDigest>& claims,
                                std::string_view bytes, core::ObjectDigest* matched) {
  // Each algorithm computed at most once, the claims' own names first.
  std::vector<core::ObjectDigest> computed;
  auto digest_of = [&](const std::string& algorithm) -> const std::string& {
    for (const core::ObjectDigest& c : computed) {
      if (c.algorithm == algorithm) return c.raw;
    }
    computed.push_back({algorithm, Compute(algorithm, bytes)});
    return computed.back().raw;
  };
  bool checkable = false;
  for (int pass = 0; pass < 2; ++pass) {
    for (const core::ObjectDigest& claim : claims) {
      for (const std::string& algorithm : AlgorithmsOfLength(claim.raw.size())) {
        if ((pass == 0) != (algorithm == claim.algorithm)) continue;
        checkable = true;
        if (digest_of(algorithm) == claim.raw) {
          if (matched != nullptr) *matched = {algorithm, claim.raw};
          return core::DigestMatch::kMatch;
        }
      }
    }
  }
  return checkable ? core::DigestMatch::kMismatch : core::DigestMatch::kNone;
}

namespace {

// One running digest per algorithm: ISA-L's checksums carry their state in
// a 32-bit value, OpenSSL's in an EVP_MD_CTX.
class MultiHasher : public core::DigestHasher {
 public:
  explicit MultiHasher(const std::vector<std::string>& algorithms) {
    for (const std::string& a : algorithms) {
      State s{a};
      if (a == "adler32") {
        s.sum = 1;
      } else if (a == "crc32c") {
        s.sum = 0xFFFFFFFFu;
      } else if (a == "crc32") {
        s.sum = 0;
      } else if (const EVP_MD* md = MdOf(a)) {
        s.ctx = EVP_MD_CTX_new();
        if (s.ctx == nullptr || EVP_DigestInit_ex(s.ctx, md, nullptr) != 1) {
          EVP_MD_CTX_free(s.ctx);
          continue;
        }
      } else {
        continue;
      }
      states_.push_back(std::move(s));
    }
  }
  ~MultiHasher() override {
    for (State& s : states_) EVP_MD_CTX_free(s.ctx);
  }
  MultiHasher(const MultiHasher&) = delete;
  MultiHasher& operator=(const MultiHasher&) = delete;

  void Update(std::string_view bytes) override {
    // ISA-L takes an int length: feed it at most 1 GiB at a time.
    while (!bytes.empty()) {
      std::string_view part = bytes.substr(0, 1u << 30);
      bytes.remove_prefix(part.size());
      auto* p = const_cast<unsigned char*>(Data(part));
      for (State& s : states_) {
        if (s.algorithm == "adler32") {
          s.sum = isal_adler32(s.sum, p, part.size());
        } else if (s.algorithm == "crc32c") {
          s.sum = crc32_iscsi(p, static_cast<int>(part.size()), s.sum);
        } else if (s.algorithm == "crc32") {
          s.sum = crc32_gzip_refl(s.sum, p, part.size());
        } else if (EVP_DigestUpdate(s.ctx, part.data(), part.size()) != 1) {
          s.failed = true;
        }
      }
    }
  }

  std::vector<core::ObjectDigest> Finish() override {
    std::vector<core::ObjectDigest> out;
    for (State& s : states_) {
      if (s.algorithm == "adler32" || s.algorithm == "crc32") {
        out.push_back({s.algorithm, BigEndian(s.sum)});
      } else if (s.algorithm == "crc32c") {
        out.push_back({s.algorithm, BigEndian(s.sum ^ 0xFFFFFFFFu)});
      } else {
        std::array<unsigned char, EVP_MAX_MD_SIZE> md{};
        unsigned int n = 0;
        if (s.failed || EVP_DigestFinal_ex(s.ctx, md.data(), &n) != 1) continue;
        out.push_back({s.algorithm, std::string(reinterpret_cast<const char*>(md.data()), n)});
      }
    }
    return out;
  }

 private:
  static const EVP_MD* MdOf(const std::string& algorithm) {
    if (algorithm == "md5") return EVP_md5();
    if (algorithm == "sha") return EVP_sha1();
    if (algorithm == "sha-256") return EVP_sha256();
    return nullptr;
  }
  struct State {
    std::string algorithm;
    uint32_t sum = 0;
    EVP_MD_CTX* ctx = nullptr;
    bool failed = false;
  };
  std::vector<State> states_;
};

}  // namespace

std::unique_ptr<core::DigestHasher> NewDigestHasher(const std::vector<std::string>& algorithms) {
  return std::make_unique<MultiHasher>(algorithms);
}

std::string ToString(const InstanceDigest& digest) {
  return core::EscapeForLog(digest.algorithm) + "=" + core::EscapeForLog(digest.value);
}

}  // namespace perch::http
