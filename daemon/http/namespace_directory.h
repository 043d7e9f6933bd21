// NamespaceDirectory: the federation's namespace prefixes, as the director
// advertises them (GET /api/v1.0/director/listNamespaces) and as its answers
// about objects reveal them. It answers the questions a mount of the
// federation root needs before any origin can: is "/a" a directory because
// namespaces live below it, which names does the root hold, which namespace
// holds a path.
//
// Thread-safety: none (the federation client's loop thread). Pure: no I/O.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::http {

class NamespaceDirectory {
 public:
  // At most this many prefixes are kept (a director's list is untrusted).
  static constexpr size_t kMaxPrefixes = 65536;

  struct Prefix {
    core::ObjectPath path;
    bool require_token = false;
  };

  // Replaces the advertised prefixes (those seen in answers are kept).
  void SetAdvertised(const std::vector<Prefix>& prefixes);
  // Remembers a prefix a director answer named.
  void AddSeen(const core::ObjectPath& prefix, bool require_token);

  // The longest known prefix that equals or contains `path`.
  std::optional<core::ObjectPath> Holder(const core::ObjectPath& path) const;
  // True if no known namespace holds `path` but some lies strictly below it:
  // `path` is a directory only because of the namespaces under it.
  bool IsAboveNamespaces(const core::ObjectPath& path) const;
  // The directories directly below `path` that lead to known namespaces
  // strictly below it, sorted by name, without duplicates. Their listings are
  // partial; one that is itself a namespace requiring a token is restricted.
  std::vector<core::DirEntry> ChildrenToward(const core::ObjectPath& path) const;
  // True if `path` is itself a known namespace prefix.
  bool IsPrefix(const core::ObjectPath& path) const;

  size_t size() const { return advertised_.size() + seen_.size(); }

 private:
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (const auto& [p, token] : advertised_) fn(p, token);
    for (const auto& [p, token] : seen_) fn(p, token);
  }
  std::map<core::ObjectPath, bool> advertised_;  // prefix -> requires a token
  std::map<core::ObjectPath, bool> seen_;
};

// Parses a director's listNamespaces answer (a JSON array of objects with a
// "path" and, in v1, "requireToken"; v2's "capabilities" {"PublicRead"} is
// read too). Entries without a valid absolute path are skipped; at most
// NamespaceDirectory::kMaxPrefixes are returned. kCorrupt if the document is
// not a JSON array.
core::Result<std::vector<NamespaceDirectory::Prefix>> ParseNamespaceList(std::string_view json);

}  // namespace perch::http
