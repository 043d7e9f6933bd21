// WebDAV PROPFIND: the request body perch sends and the parser for the 207
// multistatus answer, with XRootD's quirks (docs/protocol.md §4):
// a namespace-aware parse (XRootD binds DAV: to "lp1:" and "D:"), directories
// marked by <resourcetype><collection/> or <iscollection>1, directories with
// getcontentlength 4096, child hrefs without a trailing slash, hrefs that are
// absolute URLs or paths, percent-encoded names.
//
// Functions are pure and safe from any thread; a MultistatusParser is one
// answer's, used by one thread.
#pragma once

#include <cstdint>
#include <memory>
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

// Parses a 207 body as it arrives, chunk by chunk (libxml2's push parser with
// SAX callbacks): memory grows with the responses kept, not with the document,
// so a 1,000,000-entry listing costs its entries and no DOM.
//
// Names are bytes. XRootD writes names raw into its answer, also names that
// are not UTF-8 or hold a control character, which no XML parser accepts; so
// every byte XML 1.0 cannot carry (invalid UTF-8, C0 controls but tab and
// LF, CR which parsers rewrite) crosses the parser as code point U+10FF00 +
// byte and is turned back into that byte in the text perch keeps (hrefs,
// ETags): one odd name neither breaks its directory nor changes its bytes.
// The document's declared encoding is ignored (bytes are bytes). A character
// reference to U+10FF00..U+10FFFF (private use) reads as that one byte.
//
// Not thread-safe; one parser per answer.
class MultistatusParser {
 public:
  explicit MultistatusParser(HrefStyle style = {});
  ~MultistatusParser();
  MultistatusParser(const MultistatusParser&) = delete;
  MultistatusParser& operator=(const MultistatusParser&) = delete;

  // Feeds the next chunk of the body. False once the answer is known to be
  // unusable (Finish says why); later chunks are ignored.
  bool Feed(std::string_view chunk);

  // Ends the document. kCorrupt for malformed XML, a missing multistatus
  // root, more than core::kMaxListingEntries responses or kMaxBodyBytes, a
  // response without href, an href that does not decode to a clean absolute
  // path (e.g. containing "..": a server naming paths outside the request is
  // not trusted for the rest), or no usable response. A file whose
  // getcontentlength is not a number or exceeds core::kMaxObjectSize is
  // skipped (one warning per document, names escaped), so one bad entry does
  // not hide its directory.
  core::Result<std::vector<DavResponse>> Finish();

  // The largest answer accepted (far above XRootD's ~450 bytes per entry at
  // kMaxListingEntries).
  static constexpr uint64_t kMaxBodyBytes = uint64_t{1} << 30;

  struct State;  // the SAX callbacks' state (propfind.cc)

 private:
  std::unique_ptr<State> state_;
};

// A whole 207 body at once (MultistatusParser: Feed, then Finish).
core::Result<std::vector<DavResponse>> ParseMultistatus(std::string_view xml,
                                                        const HrefStyle& style = {});

// A listing of one directory, from a Depth-1 answer.
struct Listing {
  core::FileAttr self;
  std::vector<core::DirEntry> children;  // sorted by name
};

// Interprets a Depth-1 answer for the collection `request_path` (encoded, as
// sent, e.g. "/ns/sub%20dir"); takes the responses (a large listing is moved,
// not copied).
// `server_prefix` is the path of the server's base URL that precedes object
// paths (usually ""). The first response whose path equals the request is the
// collection itself; every other response must be a direct child. kCorrupt if
// the collection is missing, a child lies elsewhere (hostile href), or a name
// repeats; kInvalidArgument if the collection is a file.
core::Result<Listing> InterpretListing(std::vector<DavResponse> responses,
                                       std::string_view request_path);

}  // namespace perch::http
