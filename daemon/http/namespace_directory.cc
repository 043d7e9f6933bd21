#include "daemon/http/namespace_directory.h"

#include <nlohmann/json.hpp>

#include "daemon/core/limits.h"

namespace perch::http {

using core::ObjectPath;

void NamespaceDirectory::SetAdvertised(const std::vector<Prefix>& prefixes) {
  advertised_.clear();
  for (const auto& p : prefixes) {
    if (advertised_.size() >= kMaxPrefixes) break;
    if (!p.path.IsRoot()) advertised_[p.path] = p.require_token;
  }
}

void NamespaceDirectory::AddSeen(const ObjectPath& prefix, bool require_token) {
  if (prefix.IsRoot()) return;
  if (auto it = advertised_.find(prefix); it != advertised_.end()) {
    it->second = require_token;  // the director's answer about objects is the newer word
    return;
  }
  if (seen_.size() >= kMaxPrefixes) seen_.clear();
  seen_[prefix] = require_token;
}

std::optional<ObjectPath> NamespaceDirectory::Holder(const ObjectPath& path) const {
  // Up the path's ancestors, longest first: a lookup per segment, not a scan
  // of every prefix (this runs for every block a read fetches).
  for (ObjectPath p = path; !p.IsRoot(); p = p.Parent()) {
    if (IsPrefix(p)) return p;
  }
  return std::nullopt;
}

bool NamespaceDirectory::IsPrefix(const ObjectPath& path) const {
  return advertised_.count(path) > 0 || seen_.count(path) > 0;
}

bool NamespaceDirectory::IsAboveNamespaces(const ObjectPath& path) const {
  if (Holder(path)) return false;
  bool below = false;
  ForEach([&](const ObjectPath& p, bool) { below = below || (p != path && p.HasPrefix(path)); });
  return below;
}

std::vector<core::DirEntry> NamespaceDirectory::ChildrenToward(const ObjectPath& path) const {
  std::map<std::string, bool> names;  // name -> restricted
  size_t depth = path.Segments().size();
  ForEach([&](const ObjectPath& p, bool require_token) {
    if (p == path || !p.HasPrefix(path)) return;
    auto segments = p.Segments();
    bool is_namespace = segments.size() == depth + 1;
    names[std::string(segments[depth])] |= is_namespace && require_token;
  });
  std::vector<core::DirEntry> out;
  for (const auto& [name, restricted] : names) {
    core::DirEntry e{name, {}};
    e.attr.is_dir = true;
    e.attr.partial_listing = true;
    e.attr.restricted = restricted;
    out.push_back(std::move(e));
  }
  return out;
}

core::Result<std::vector<NamespaceDirectory::Prefix>> ParseNamespaceList(std::string_view json) {
  auto doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_array()) {
    return core::CorruptError("the director's namespace list is not a JSON array",
                              core::FailureSite::kDirector);
  }
  std::vector<NamespaceDirectory::Prefix> out;
  for (const auto& item : doc) {
    if (out.size() >= NamespaceDirectory::kMaxPrefixes) break;
    if (!item.is_object()) continue;
    auto it = item.find("path");
    if (it == item.end() || !it->is_string()) continue;
    const std::string& text = it->get_ref<const std::string&>();
    if (text.empty() || text.front() != '/' || text.size() > core::kMaxPathBytes) continue;
    auto p = ObjectPath::Parse(text);
    if (!p.ok() || p->IsRoot()) continue;
    bool require_token = false;
    if (auto rt = item.find("requireToken"); rt != item.end() && rt->is_boolean()) {
      require_token = rt->get<bool>();
    } else if (auto caps = item.find("capabilities"); caps != item.end() && caps->is_object()) {
      auto pub = caps->find("PublicRead");
      require_token = pub != caps->end() && pub->is_boolean() && !pub->get<bool>();
    }
    out.push_back({*p, require_token});
  }
  return out;
}

}  // namespace perch::http
