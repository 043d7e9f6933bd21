// WebDAV PROPFIND: the request body perch sends and the parser for the 207
// multistatus answer, with XRootD's quirks (pelican-protocol.md §4.1, §10.2):
// a namespace-aware parse (XRootD binds DAV: to "lp1:" and "D:"), directories
// marked by <resourcetype><collection/> or <iscollection>1, directories with
// getcontentlength 4096, child hrefs without a trailing slash, hrefs that are
// absolute URLs or paths, percent-encoded names.
//
// Pure functions, safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "daemon/core/result.h"
#include "daemon/core/types.h"

namespace perch::http {

// The body perch sends with every PROPFIND (Depth 0 and 1).
extern const char kPropfindBody[];

// One <response> of a multistatus whose 200 propstat was found.
struct DavResponse {
  std::string href_path;  // decoded path part of the href, no trailing '/' (except "/")
  core::FileAttr attr;
};

// Parses a 207 body. kCorrupt for malformed XML, a missing multistatus root,
// a response without href, a non-numeric length, or an href that does not
// decode to a clean absolute path (e.g. containing "..").
core::Result<std::vector<DavResponse>> ParseMultistatus(std::string_view xml);

// A listing of one directory, from a Depth-1 answer.
struct Listing {
  core::FileAttr self;
  std::vector<core::DirEntry> children;  // sorted by name
};

// Interprets a Depth-1 answer for the request URL path `request_path`
// (encoded or decoded path of the collection as sent, e.g. "/ns/dir").
// `server_prefix` is the path of the server's base URL that precedes object
// paths (usually ""). The first response whose path equals the request is the
// collection itself; every other response must be a direct child. kCorrupt if
// the collection is missing, a child lies elsewhere (hostile href), or a name
// repeats; kInvalidArgument if the collection is a file.
core::Result<Listing> InterpretListing(const std::vector<DavResponse>& responses,
                                       std::string_view request_path);

}  // namespace perch::http
