#include "daemon/http/namespace_directory.h"

#include <nlohmann/json.hpp>

namespace perch::http {

using core::ObjectPath;

void NamespaceDirectory::SetAdvertised(const std::vector<ObjectPath>& prefixes) {
  advertised_.clear();
  for (const auto& p : prefixes) {
    if (advertised_.size() >= kMaxPrefixes) break;
    if (!p.IsRoot()) advertised_.insert(p);
  }
}

void NamespaceDirectory::AddSeen(const ObjectPath& prefix) {
  if (prefix.IsRoot() || advertised_.count(prefix)) return;
  if (seen_.size() >= kMaxPrefixes) seen_.clear();
  seen_.insert(prefix);
}

std::optional<ObjectPath> NamespaceDirectory::Holder(const ObjectPath& path) const {
  std::optional<ObjectPath> best;
  ForEach([&](const ObjectPath& p) {
    if (path.HasPrefix(p) && (!best || p.str().size() > best->str().size())) best = p;
  });
  return best;
}

bool NamespaceDirectory::IsPrefix(const ObjectPath& path) const {
  return advertised_.count(path) > 0 || seen_.count(path) > 0;
}

bool NamespaceDirectory::IsAboveNamespaces(const ObjectPath& path) const {
  if (Holder(path)) return false;
  bool below = false;
  ForEach([&](const ObjectPath& p) { below = below || (p != path && p.HasPrefix(path)); });
  return below;
}

std::vector<std::string> NamespaceDirectory::ChildrenToward(const ObjectPath& path) const {
  std::set<std::string> names;
  size_t depth = path.Segments().size();
  ForEach([&](const ObjectPath& p) {
    if (p == path || !p.HasPrefix(path)) return;
    auto segments = p.Segments();
    names.insert(std::string(segments[depth]));
  });
  return {names.begin(), names.end()};
}

core::Result<std::vector<ObjectPath>> ParseNamespaceList(std::string_view json) {
  auto doc = nlohmann::json::parse(json, nullptr, false);
  if (doc.is_discarded() || !doc.is_array()) {
    return core::CorruptError("the director's namespace list is not a JSON array",
                              core::FailureSite::kDirector);
  }
  std::vector<ObjectPath> out;
  for (const auto& item : doc) {
    if (out.size() >= NamespaceDirectory::kMaxPrefixes) break;
    if (!item.is_object()) continue;
    auto it = item.find("path");
    if (it == item.end() || !it->is_string()) continue;
    const std::string& text = it->get_ref<const std::string&>();
    if (text.empty() || text.front() != '/' || text.size() > 4096) continue;
    auto p = ObjectPath::Parse(text);
    if (p.ok() && !p->IsRoot()) out.push_back(*p);
  }
  return out;
}

}  // namespace perch::http
