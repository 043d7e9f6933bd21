#include "daemon/core/object_ids.h"

#include <cstring>

namespace perch::core {

bool ObjectIds::ParseHex(std::string_view id, Key* key) {
  if (id.size() != 32) return false;
  uint64_t half[2] = {0, 0};
  for (size_t i = 0; i < 32; ++i) {
    const char c = id[i];
    uint64_t v;
    if (c >= '0' && c <= '9') {
      v = static_cast<uint64_t>(c - '0');
    } else if (c >= 'a' && c <= 'f') {
      v = static_cast<uint64_t>(c - 'a' + 10);
    } else {
      return false;  // uppercase too: it would not print back the same
    }
    half[i / 16] = (half[i / 16] << 4) | v;
  }
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

PackedString::PackedString(std::string_view s) {
  if (s.empty()) return;
  const uint32_t n = static_cast<uint32_t>(s.size());
  p_ = std::make_unique_for_overwrite<char[]>(sizeof(n) + n);
  std::memcpy(p_.get(), &n, sizeof(n));
  std::memcpy(p_.get() + sizeof(n), s.data(), n);
}

std::string_view PackedString::view() const {
  if (!p_) return {};
  uint32_t n;
  std::memcpy(&n, p_.get(), sizeof(n));
  return {p_.get() + sizeof(n), n};
}

}  // namespace perch::core
