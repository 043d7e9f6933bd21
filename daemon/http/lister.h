// Lister: describes and lists federation paths.
//
// - Above the namespaces (the federation root, "/a" when only "/a/b" is a
//   namespace) directories are made from the director's namespace list: the
//   root of an osdf:/// mount lists the top-level components of every
//   namespace advertised or seen.
// - Inside a namespace that offers listings: WebDAV PROPFIND on the
//   namespace's collections URL (the origin; caches do not list), with the
//   components leading to nested namespaces merged into the listing. A
//   transport or server error asks the director again once (the origin may
//   have moved).
// - Inside a namespace without listings (the director sent no
//   collections-url): the namespace root is a directory, any other path is
//   described by HEAD through the read servers, and a directory lists as
//   empty (plus nested namespaces), with one log line per namespace.
//
// Thread-safety: every method runs on the CurlLoop's thread; callbacks too.
#pragma once

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/types.h"
#include "daemon/http/client_context.h"
#include "daemon/http/director_client.h"
#include "daemon/http/propfind.h"
#include "daemon/http/range_reader.h"
#include "daemon/http/token.h"

namespace perch::http {

class Lister : public std::enable_shared_from_this<Lister> {
 public:
  Lister(std::shared_ptr<ClientContext> ctx, std::shared_ptr<DirectorClient> director,
         std::shared_ptr<NamespaceAuth> auth, std::shared_ptr<RangeReader> reader)
      : ctx_(std::move(ctx)),
        director_(std::move(director)),
        auth_(std::move(auth)),
        reader_(std::move(reader)) {}

  // The attributes of federation path `fed_path` (PROPFIND Depth 0).
  void Stat(const core::ObjectPath& fed_path, core::Deadline deadline,
            std::function<void(core::Result<core::FileAttr>)> done);

  // The children of directory `fed_path` (PROPFIND Depth 1); kInvalidArgument
  // for a file.
  void List(const core::ObjectPath& fed_path, core::Deadline deadline,
            std::function<void(core::Result<std::vector<core::DirEntry>>)> done);

 private:
  using PropfindCallback =
      std::function<void(core::Result<std::vector<DavResponse>>, std::string request_path)>;
  using EntryPtr = std::shared_ptr<const NamespaceEntry>;
  template <typename T>
  using Inside = void (Lister::*)(EntryPtr, const core::ObjectPath&, core::Deadline,
                                  std::function<void(core::Result<T>)>);
  template <typename T>
  void Route(const core::ObjectPath& fed_path, core::Deadline deadline,
             std::function<T(const NamespaceDirectory&)> above, Inside<T> inside,
             std::function<void(core::Result<T>)> done);
  // PROPFIND `fed_path` at `entry`'s origin; on a server's failure, asks the
  // director again once and retries if the answer changed.
  void Propfind(EntryPtr entry, const core::ObjectPath& fed_path, int depth,
                core::Deadline deadline, bool retried, PropfindCallback done);
  void StatIn(EntryPtr entry, const core::ObjectPath& fed_path, core::Deadline deadline,
              std::function<void(core::Result<core::FileAttr>)> done);
  void ListIn(EntryPtr entry, const core::ObjectPath& fed_path, core::Deadline deadline,
              std::function<void(core::Result<std::vector<core::DirEntry>>)> done);

  // XRootD (5.5) lists a 255-byte name cut to 254 bytes, a name it does not
  // have: each listed name of 254 bytes is checked (PROPFIND Depth 0), left
  // out if the origin says 404 (one warning), else given its own attributes.
  void DropCutNames(EntryPtr entry, const core::ObjectPath& dir, core::Deadline deadline,
                    std::vector<core::DirEntry> children,
                    std::function<void(std::vector<core::DirEntry>)> done);

  std::shared_ptr<ClientContext> ctx_;
  std::shared_ptr<DirectorClient> director_;
  std::shared_ptr<NamespaceAuth> auth_;
  std::shared_ptr<RangeReader> reader_;
  std::set<std::string> warned_unlisted_;  // namespaces whose missing listings were logged
};

}  // namespace perch::http
