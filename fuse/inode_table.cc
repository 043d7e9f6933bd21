#include "fuse/inode_table.h"

#include <algorithm>
#include <string>
#include <utility>

namespace perch::fuse {

using core::ObjectPath;

InodeTable::InodeTable() {
  core::MutexLock l(mu_);
  auto root = inodes_.emplace(kRootId, Inode{ObjectPath(), 1}).first;
  by_path_.emplace(root->second.path.str(), kRootId);
}

uint64_t InodeTable::Remember(const ObjectPath& path) {
  core::MutexLock l(mu_);
  if (auto it = by_path_.find(path.str()); it != by_path_.end()) {
    inodes_[it->second].lookups++;
    return it->second;
  }
  const uint64_t ino = next_ino_++;
  auto node = inodes_.emplace(ino, Inode{path, 1}).first;
  by_path_.emplace(node->second.path.str(), ino);  // a view of the node's path
  return ino;
}

void InodeTable::Forget(uint64_t ino, uint64_t n) {
  if (ino == kRootId) return;
  core::MutexLock l(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return;
  it->second.lookups = n >= it->second.lookups ? 0 : it->second.lookups - n;
  if (it->second.lookups == 0) {
    by_path_.erase(it->second.path.str());
    inodes_.erase(it);
  }
}

bool InodeTable::PathOf(uint64_t ino, ObjectPath* out) const {
  core::MutexLock l(mu_);
  auto it = inodes_.find(ino);
  if (it == inodes_.end()) return false;
  *out = it->second.path;
  return true;
}

void InodeTable::Save(SessionState* s) const {
  core::MutexLock l(mu_);
  s->next_ino = next_ino_;
  s->nodes.reserve(inodes_.size());
  for (const auto& [ino, node] : inodes_) s->nodes.push_back({ino, node.path.str(), node.lookups});
}

core::Status InodeTable::Restore(const SessionState& s) {
  std::unordered_map<uint64_t, Inode> inodes;
  for (const auto& n : s.nodes) {
    auto path = ObjectPath::Parse(n.path);
    if (!path.ok()) return core::InvalidArgumentError("handoff: bad path " + n.path);
    inodes.emplace(n.ino, Inode{*std::move(path), n.lookups});
  }
  inodes.emplace(kRootId, Inode{ObjectPath(), 1});  // unless handed over
  core::MutexLock l(mu_);
  inodes_ = std::move(inodes);
  by_path_.clear();
  for (const auto& n : s.nodes) by_path_.emplace(inodes_.at(n.ino).path.str(), n.ino);
  by_path_.emplace(inodes_.at(kRootId).path.str(), kRootId);
  next_ino_ = std::max<uint64_t>(s.next_ino, kRootId + 1);
  return core::Status::Ok();
}

}  // namespace perch::fuse
