// An Origin is the data federation as the cache sees it: something that can
// describe a path, list a directory and return byte ranges of one version of
// an object.
//
// Thread-safety: safe to call from any thread. Callbacks run on the
// implementation's own thread; they must not block and must not call back
// into the Origin synchronously.
//
// Extending: add a method only when the cache needs a new kind of answer from
// the federation; keep protocol details (URLs, headers, tokens) out of it.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "daemon/core/object_digest.h"
#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::core {

class Origin {
 public:
  virtual ~Origin() = default;

  // Yields the attributes of `path`; kNotFound if the federation has no such
  // object, kPermissionDenied without an acceptable token, kUnavailable
  // (retryable) if no server answered in time.
  virtual void Stat(const ObjectPath& path, Deadline deadline,
                    std::function<void(Result<FileAttr>)> done) = 0;

  // Yields the entries of directory `path` (not including itself). kNotFound
  // if absent, kInvalidArgument if `path` is a file.
  virtual void List(const ObjectPath& path, Deadline deadline,
                    std::function<void(Result<std::vector<DirEntry>>)> done) = 0;

  // Yields exactly `range` of `path` at `version`, and whether the server
  // lets them be cached. A short body, a wrong Content-Range or a changed
  // version is kCorrupt, never a partial success. Ranges past the end of the
  // object are clipped to its size.
  virtual void ReadRange(const ObjectPath& path, const ObjectVersion& version, ByteRange range,
                         Deadline deadline, std::function<void(Result<FetchedBytes>)> done) = 0;

  // Yields the digests of the whole object `path` at `version` as one server
  // states them (RFC 3230 Want-Digest; one request, never one per block),
  // asked for `algorithms` (DigestAlgorithms() names; empty: perch's list).
  // They are claims: a value that reads both as hex and as base64 yields both
  // readings, and a server's name for a digest may be wrong (docs/quirks.md),
  // so check them against the bytes (MatchDigests). kNotFound when no server
  // offered one (this default: an origin that never does).
  virtual void Digests(const ObjectPath& path, const ObjectVersion& version,
                       const std::vector<std::string>& algorithms, Deadline deadline,
                       std::function<void(Result<std::vector<ObjectDigest>>)> done) {
    (void)version, (void)algorithms, (void)deadline;
    done(NotFoundError(path.str() + ": no digests from this origin"));
  }

  // The bytes served for `path` failed the object's digest: a server that
  // sent them holds a bad copy. Later reads of `path` go to its origins first
  // for a while, where the federation allows it (Pelican's `?directread`), so
  // that the copy fetched again is the origin's. This default: nothing.
  virtual void Distrust(const ObjectPath& path) { (void)path; }

  // The copy of `path` that servers sent is proven wrong (two sources agree
  // on a digest it does not have): those servers sort last for a while and
  // are counted against, so that an operator sees which cache is bad. This
  // default: nothing.
  virtual void Blame(const ObjectPath& path) { (void)path; }

  // The namespace that holds `path`, as the federation's director named it,
  // relative to this origin's root: the label its counters carry. The root
  // ("/") when it is not known yet or lies above the root (a mount inside
  // one namespace): never a directory inside a namespace, whose names may be
  // private. Thread-safe. This default: the root.
  virtual ObjectPath NamespaceOf(const ObjectPath& path) const {
    (void)path;
    return ObjectPath();
  }
};

}  // namespace perch::core
