// WebDAV PROPFIND: the request body perch sends and the parser for the 207
// multistatus answer, with XRootD's quirks (docs/protocol.md §4):
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

// How hrefs are written. WebDAV says percent-encoded; XRootD (5.5) writes raw
// names ("/ns/sp ace/100%.txt"). With kAuto a document is taken as raw if any
// href holds a character an encoded URL cannot (space, non-ASCII, a '%' not
// followed by two hex digits); otherwise as encoded, unless `prefer_raw`
// (the server is XRootD) and nothing shows that it encodes: the collection's
// own href equal to the encoded form of `request_path` where that differs
// from the decoded one.
struct HrefStyle {
  bool prefer_raw = false;
  std::string request_path;  // the path as sent (encoded); "" if unknown
};

// Parses a 207 body. kCorrupt for malformed XML, a missing multistatus root,
// more than core::kMaxListingEntries responses, a response without href, an
// href that does not decode to a clean absolute path (e.g. containing "..":
// a server naming paths outside the request is not trusted for the rest), or
// no usable response. A file whose getcontentlength is not a number or
// exceeds core::kMaxObjectSize is skipped (one warning per document, names
// escaped), so one bad entry does not hide its directory.
core::Result<std::vector<DavResponse>> ParseMultistatus(std::string_view xml,
                                                        const HrefStyle& style = {});

// A listing of one directory, from a Depth-1 answer.
struct Listing {
  core::FileAttr self;
  std::vector<core::DirEntry> children;  // sorted by name
};

// Interprets a Depth-1 answer for the collection `request_path` (encoded, as
// sent, e.g. "/ns/sub%20dir").
// `server_prefix` is the path of the server's base URL that precedes object
// paths (usually ""). The first response whose path equals the request is the
// collection itself; every other response must be a direct child. kCorrupt if
// the collection is missing, a child lies elsewhere (hostile href), or a name
// repeats; kInvalidArgument if the collection is a file.
core::Result<Listing> InterpretListing(const std::vector<DavResponse>& responses,
                                       std::string_view request_path);

}  // namespace perch::http
