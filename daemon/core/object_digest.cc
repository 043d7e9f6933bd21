#include "daemon/core/object_digest.h"

#include <algorithm>
#include <cctype>

namespace perch::core {
namespace {

constexpr size_t kMaxWanted = 16;

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

std::string Hex(std::string_view raw) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(raw.size() * 2);
  for (unsigned char c : raw) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

std::string Base64(std::string_view raw) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((raw.size() + 2) / 3 * 4);
  for (size_t i = 0; i < raw.size(); i += 3) {
    uint32_t n = static_cast<uint32_t>(static_cast<unsigned char>(raw[i])) << 16;
    if (i + 1 < raw.size()) n |= static_cast<uint32_t>(static_cast<unsigned char>(raw[i + 1])) << 8;
    if (i + 2 < raw.size()) n |= static_cast<unsigned char>(raw[i + 2]);
    out.push_back(kAlphabet[(n >> 18) & 63]);
    out.push_back(kAlphabet[(n >> 12) & 63]);
    out.push_back(i + 1 < raw.size() ? kAlphabet[(n >> 6) & 63] : '=');
    out.push_back(i + 2 < raw.size() ? kAlphabet[n & 63] : '=');
  }
  return out;
}

// Whether a Want-Digest entry's parameters ("q=0.5") exclude it (q=0).
bool Excluded(std::string_view params) {
  while (!params.empty()) {
    size_t semi = params.find(';');
    std::string_view p = Trim(params.substr(0, semi));
    params = semi == std::string_view::npos ? std::string_view() : params.substr(semi + 1);
    if (p.size() >= 2 && (p[0] == 'q' || p[0] == 'Q') && p[1] == '=') {
      std::string_view v = Trim(p.substr(2));
      // q=0, q=0.0, q=0.000: not wanted.
      if (!v.empty() && v[0] == '0' && v.find_first_not_of("0.") == std::string_view::npos) {
        return true;
      }
    }
  }
  return false;
}

}  // namespace

const std::vector<std::string>& DigestAlgorithms() {
  static const std::vector<std::string> kAll = {"crc32c", "adler32", "crc32",
                                                "md5",    "sha",     "sha-256"};
  return kAll;
}

std::vector<std::string> AlgorithmsFor(const std::vector<ObjectDigest>& claims) {
  std::vector<std::string> out;
  for (const std::string& a : DigestAlgorithms()) {
    for (const ObjectDigest& c : claims) {
      if (c.raw.size() == DigestLength(a)) {
        out.push_back(a);
        break;
      }
    }
  }
  return out;
}

bool IsDigestAlgorithm(std::string_view algorithm) { return DigestLength(algorithm) != 0; }

size_t DigestLength(std::string_view algorithm) {
  if (algorithm == "adler32" || algorithm == "crc32c" || algorithm == "crc32") return 4;
  if (algorithm == "md5") return 16;
  if (algorithm == "sha") return 20;
  if (algorithm == "sha-256") return 32;
  return 0;
}

std::string DigestValueText(const ObjectDigest& digest) {
  return DigestLength(digest.algorithm) == 4 ? Hex(digest.raw) : Base64(digest.raw);
}

std::string DigestText(const ObjectDigest& digest) {
  return digest.algorithm + "=" + DigestValueText(digest);
}

std::string DigestHeaderValue(const std::vector<ObjectDigest>& digests) {
  std::string out;
  for (const ObjectDigest& d : digests) {
    if (!out.empty()) out += ", ";
    out += DigestText(d);
  }
  return out;
}

std::vector<std::string> ParseWantDigest(std::string_view header) {
  std::vector<std::string> out;
  for (size_t entries = 0; !header.empty() && entries < kMaxWanted; entries++) {
    size_t comma = header.find(',');
    std::string_view item = Trim(header.substr(0, comma));
    header = comma == std::string_view::npos ? std::string_view() : header.substr(comma + 1);
    size_t semi = item.find(';');
    std::string name = Lower(Trim(item.substr(0, semi)));
    if (name == "sha1" || name == "sha-1") name = "sha";
    if (!IsDigestAlgorithm(name)) continue;
    if (semi != std::string_view::npos && Excluded(item.substr(semi + 1))) continue;
    if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
  }
  return out;
}

DigestMatch MatchDigests(const std::vector<ObjectDigest>& claims,
                         const std::vector<ObjectDigest>& computed, ObjectDigest* matched) {
  bool checkable = false;
  for (const ObjectDigest& claim : claims) {
    // Its own algorithm first, then the others of its length.
    for (int pass = 0; pass < 2; pass++) {
      for (const ObjectDigest& c : computed) {
        if (c.raw.size() != claim.raw.size()) continue;
        if ((pass == 0) != (c.algorithm == claim.algorithm)) continue;
        checkable = true;
        if (c.raw == claim.raw) {
          if (matched != nullptr) *matched = c;
          return DigestMatch::kMatch;
        }
      }
    }
  }
  return checkable ? DigestMatch::kMismatch : DigestMatch::kNone;
}

const char* ToString(DigestVerdict::Kind kind) {
  switch (kind) {
    case DigestVerdict::kVerified:
      return "verified";
    case DigestVerdict::kUnverified:
      return "unverified";
    case DigestVerdict::kMismatched:
      return "mismatched";
    case DigestVerdict::kUnknown:
      break;
  }
  return "unknown";
}

}  // namespace perch::core
