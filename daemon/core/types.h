// Value types shared by every module: object paths, byte ranges, attributes,
// versions and deadlines. All are plain values, safe to copy across threads.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/object_digest.h"
#include "daemon/core/result.h"

namespace perch::core {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline DeadlineAfter(std::chrono::milliseconds ms) { return Clock::now() + ms; }

// An absolute, normalised path inside a federation's namespace: it starts
// with '/', has no empty, "." or ".." segments, no NUL and no trailing '/'
// (except the root "/"). Stored decoded (raw bytes of the names); adapters
// percent-encode it when they build URLs.
class ObjectPath {
 public:
  ObjectPath() : path_("/") {}

  // Validates and normalises `path` (duplicate slashes and a trailing slash
  // are folded). kInvalidArgument for relative paths, ".", "..", NUL bytes.
  static Result<ObjectPath> Parse(std::string_view path);

  const std::string& str() const { return path_; }
  bool IsRoot() const { return path_ == "/"; }
  // The last segment ("" for the root).
  std::string_view Name() const;
  // The parent directory; the root's parent is the root.
  ObjectPath Parent() const;
  // This path with one more segment. REQUIRES: `name` is a valid segment.
  Result<ObjectPath> Child(std::string_view name) const;
  // True if this path equals `prefix` or lies below it (segment-wise).
  bool HasPrefix(const ObjectPath& prefix) const;
  // This path below `prefix`, as a path of its own ("/ns/a/b" below "/ns" is
  // "/a/b", "/ns" below "/ns" is "/"); nullopt unless HasPrefix(prefix).
  std::optional<ObjectPath> RelativeTo(const ObjectPath& prefix) const;
  // Segments, without the empty root segment.
  std::vector<std::string_view> Segments() const;

  friend bool operator==(const ObjectPath& a, const ObjectPath& b) = default;
  friend auto operator<=>(const ObjectPath& a, const ObjectPath& b) = default;

 private:
  explicit ObjectPath(std::string p) : path_(std::move(p)) {}
  std::string path_;
};

struct ByteRange {
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t end() const { return offset + length; }  // one past the last byte
  friend bool operator==(const ByteRange&, const ByteRange&) = default;
};

// Identifies one immutable version of an object. Two reads are of the same
// bytes only if size and (when known) etag agree.
struct ObjectVersion {
  uint64_t size = 0;
  std::string etag;  // without quotes; "" when the server sent none
  friend bool operator==(const ObjectVersion&, const ObjectVersion&) = default;
};

struct FileAttr {
  bool is_dir = false;
  uint64_t size = 0;
  int64_t mtime = 0;  // seconds since the epoch; 0 when unknown
  std::string etag;   // "" when unknown (XRootD's PROPFIND sends none)
  // In a namespace that requires a token: not for every local user to read
  // (the mount shows it to root and the configured group only).
  bool restricted = false;
  // A directory whose listing may lack entries (the federation root, a
  // namespace without listings): a name absent from it may still exist.
  bool partial_listing = false;
  // A file's freshness lifetime: seconds its version may be served without
  // asking the origin again, from the answer's Cache-Control (no-cache 0,
  // s-maxage, max-age; http::ParseCacheControl); -1 when the answer gave
  // none (then file_ttl and version_check_interval alone apply).
  int64_t max_age = -1;
};

struct DirEntry {
  std::string name;  // one decoded path segment
  FileAttr attr;
};

using Bytes = std::string;

// A range's bytes as a server sent them, and whether it lets them be kept:
// HTTP `Cache-Control: no-store` (or `private`: a node's cache is shared by
// every user) makes may_store false, and the bytes are served, never cached.
struct FetchedBytes {
  Bytes bytes;
  bool may_store = true;
  // For the bytes of a whole object: the digest they matched, stated by a
  // server other than the one that sent them (or by the origin), under its
  // true algorithm; empty when they were not checked.
  std::vector<ObjectDigest> vouched;
  // The answer's freshness lifetime (FileAttr::max_age), -1 when none.
  int64_t max_age = -1;
  // A whole object no server but its sender states a digest of: delivered
  // unchecked by another source, and why ("no server of its namespace
  // states a digest"); empty otherwise.
  std::string unverified;
};

}  // namespace perch::core
