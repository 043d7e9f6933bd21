#include "daemon/core/catalog_entry.h"

#include <utility>

namespace perch::core {

std::string_view CatalogEntry::path() const {
  const std::string_view v = names_.view();
  return v.substr(0, v.find('\0'));
}

std::string_view CatalogEntry::etag() const {
  const std::string_view v = names_.view();
  const size_t nul = v.find('\0');
  return nul == std::string_view::npos ? std::string_view() : v.substr(nul + 1);
}

void CatalogEntry::Describe(std::string_view path, std::string_view etag, uint64_t size) {
  names_ = PackedString(path, etag, true);
  size_ = size;
}

CatalogEntry::Block* CatalogEntry::Find(uint64_t index) {
  return const_cast<Block*>(std::as_const(*this).Find(index));
}

const CatalogEntry::Block* CatalogEntry::Find(uint64_t index) const {
  if (first_index_ != kNone && index == first_index_) return &first_;
  if (!more_) return nullptr;
  auto it = more_->find(index);
  return it == more_->end() ? nullptr : &it->second;
}

std::pair<CatalogEntry::Block*, bool> CatalogEntry::Add(uint64_t index) {
  if (Block* b = Find(index)) return {b, false};
  if (first_index_ == kNone && index != kNone) {
    first_index_ = index;
    first_ = Block{};
    return {&first_, true};
  }
  if (!more_) more_ = std::make_unique<std::map<uint64_t, Block>>();
  return {&more_->emplace(index, Block{}).first->second, true};
}

std::optional<CatalogEntry::Block> CatalogEntry::Remove(uint64_t index) {
  if (index == first_index_ && index != kNone) {
    first_index_ = kNone;
    return first_;
  }
  if (!more_) return std::nullopt;
  auto it = more_->find(index);
  if (it == more_->end()) return std::nullopt;
  const Block b = it->second;
  more_->erase(it);
  if (more_->empty()) more_.reset();
  return b;
}

uint64_t CatalogEntry::cached_bytes() const {
  uint64_t total = 0;
  ForEach([&](uint64_t, const Block& b) { total += b.length; });
  return total;
}

}  // namespace perch::core
