// The documents the endpoint writes about directories: a WebDAV multistatus
// (PROPFIND Depth 0/1) in the shape XRootD answers (DAV: properties
// getcontentlength, getlastmodified, resourcetype, iscollection; getetag for
// files), and an HTML index for GET of a directory (what fsspec's
// HTTPFileSystem and browsers list). Written with libxml2, so every name is
// escaped by the library; hrefs are percent-encoded per segment.
//
// Pure functions, safe from any thread.
#pragma once

#include <string>
#include <vector>

#include "daemon/core/types.h"

namespace perch::endpoint {

struct DavEntry {
  core::ObjectPath path;  // federation path
  core::FileAttr attr;
};

// A 207 body: `self` first, then `children` (Depth 1; empty for Depth 0).
std::string Multistatus(const DavEntry& self, const std::vector<DavEntry>& children);

// An HTML page listing `children` of directory `path`, each a link relative
// to the directory ("name", "sub/").
std::string HtmlIndex(const core::ObjectPath& path, const std::vector<core::DirEntry>& children);

}  // namespace perch::endpoint
