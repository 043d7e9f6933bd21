#include "daemon/core/object_ids.h"

#include <array>
#include <cstring>

#include "daemon/core/codec.h"

namespace perch::core {

std::string ObjectIdFor(const std::string& federation_id, const ObjectPath& path,
                        const FileAttr& attr) {
  std::string key = federation_id;
  key += '\0';
  key += path.str();
  key += '\0';
  key += std::to_string(attr.size) + ":" + std::to_string(attr.mtime) + ":" + attr.etag;
  return codec::StableId(key);
}

namespace {

// The value of each lowercase hex digit, 0xff for every other byte (uppercase
// too: it would not print back the same).
constexpr std::array<uint8_t, 256> kHexValue = [] {
  std::array<uint8_t, 256> t{};
  t.fill(0xff);
  for (int c = 0; c < 10; ++c) t['0' + c] = static_cast<uint8_t>(c);
  for (int c = 0; c < 6; ++c) t['a' + c] = static_cast<uint8_t>(10 + c);
  return t;
}();

}  // namespace

// Runs for every record at start (issue 14): a table lookup per digit, one
// test for a bad digit per id.
bool ObjectIds::ParseHex(std::string_view id, Key* key) {
  if (id.size() != 32) return false;
  uint64_t half[2] = {0, 0};
  uint8_t bad = 0;
  for (size_t i = 0; i < 32; ++i) {
    const uint8_t v = kHexValue[static_cast<unsigned char>(id[i])];
    bad |= v;
    half[i / 16] = (half[i / 16] << 4) | (v & 0xf);
  }
  if (bad & 0xf0) return false;
  *key = Key{half[0], half[1], 0};
  return true;
}

ObjectIds::Key ObjectIds::Intern(std::string_view id) {
  Key key;
  if (ParseHex(id, &key)) return key;
  if (auto it = by_name_.find(id); it != by_name_.end()) {
    names_[it->second - 1].refs++;
    return Key{0, 0, it->second};
  }
  uint32_t n;
  if (!free_.empty()) {
    n = free_.back();
    free_.pop_back();
    names_[n - 1] = Entry{std::string(id), 1};
  } else {
    names_.push_back(Entry{std::string(id), 1});
    n = static_cast<uint32_t>(names_.size());
  }
  by_name_.emplace(std::string(id), n);
  return Key{0, 0, n};
}

std::optional<ObjectIds::Key> ObjectIds::Find(std::string_view id) const {
  Key key;
  if (ParseHex(id, &key)) return key;
  auto it = by_name_.find(id);
  if (it == by_name_.end()) return std::nullopt;
  return Key{0, 0, it->second};
}

void ObjectIds::Release(const Key& key) {
  if (key.interned == 0 || key.interned > names_.size()) return;
  Entry& e = names_[key.interned - 1];
  if (e.refs == 0 || --e.refs > 0) return;
  by_name_.erase(e.name);
  e.name = std::string();
  free_.push_back(key.interned);
}

std::string ObjectIds::Name(const Key& key) const {
  if (key.interned != 0) {
    return key.interned <= names_.size() ? names_[key.interned - 1].name : std::string();
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int half = 0; half < 2; ++half) {
    const uint64_t v = half == 0 ? key.hi : key.lo;
    for (int i = 0; i < 16; ++i) out[half * 16 + i] = kHex[(v >> (4 * (15 - i))) & 0xf];
  }
  return out;
}

PackedString::PackedString(std::string_view s) : PackedString(s, std::string_view(), false) {}

PackedString::PackedString(std::string_view a, std::string_view b, bool nul_between) {
  const size_t total = a.size() + b.size() + (nul_between ? 1 : 0);
  if (total == 0) return;
  const uint32_t n = static_cast<uint32_t>(total);
  p_ = std::make_unique_for_overwrite<char[]>(sizeof(n) + n);
  char* out = p_.get();
  std::memcpy(out, &n, sizeof(n));
  out += sizeof(n);
  std::memcpy(out, a.data(), a.size());
  out += a.size();
  if (nul_between) *out++ = '\0';
  if (!b.empty()) std::memcpy(out, b.data(), b.size());
}

std::string_view PackedString::view() const {
  if (!p_) return {};
  uint32_t n;
  std::memcpy(&n, p_.get(), sizeof(n));
  return {p_.get() + sizeof(n), n};
}

}  // namespace perch::core
