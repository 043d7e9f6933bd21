// NamespaceDirectory: the federation's namespace prefixes, as the director
// advertises them (GET /api/v1.0/director/listNamespaces) and as its answers
// about objects reveal them. It answers the questions a mount of the
// federation root needs before any origin can: is "/a" a directory because
// namespaces live below it, which names does the root hold, which namespace
// holds a path.
//
// Thread-safety: none (the federation client's loop thread). Pure: no I/O.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::http {

class NamespaceDirectory {
 public:
  // At most this many prefixes are kept (a director's list is untrusted).
  static constexpr size_t kMaxPrefixes = 65536;

  // Replaces the advertised prefixes (those seen in answers are kept).
  void SetAdvertised(const std::vector<core::ObjectPath>& prefixes);
  // Remembers a prefix a director answer named.
  void AddSeen(const core::ObjectPath& prefix);

  // The longest known prefix that equals or contains `path`.
  std::optional<core::ObjectPath> Holder(const core::ObjectPath& path) const;
  // True if no known namespace holds `path` but some lies strictly below it:
  // `path` is a directory only because of the namespaces under it.
  bool IsAboveNamespaces(const core::ObjectPath& path) const;
  // The names directly below `path` that lead to known namespaces strictly
  // below it, sorted, without duplicates.
  std::vector<std::string> ChildrenToward(const core::ObjectPath& path) const;
  // True if `path` is itself a known namespace prefix.
  bool IsPrefix(const core::ObjectPath& path) const;

  size_t size() const { return advertised_.size() + seen_.size(); }

 private:
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& p : advertised_) fn(p);
    for (const auto& p : seen_) fn(p);
  }
  std::set<core::ObjectPath> advertised_;
  std::set<core::ObjectPath> seen_;
};

// Parses a director's listNamespaces answer (a JSON array of objects with a
// "path"; v1 and v2 shapes). Entries without a valid absolute path are
// skipped; at most NamespaceDirectory::kMaxPrefixes are returned.
// kCorrupt if the document is not a JSON array.
core::Result<std::vector<core::ObjectPath>> ParseNamespaceList(std::string_view json);

}  // namespace perch::http
