#include "daemon/http/propfind.h"

#include <algorithm>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/uri/percent.h"

namespace perch::http {

const char kPropfindBody[] =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
    "<d:propfind xmlns:d=\"DAV:\"><d:prop>"
    "<d:resourcetype/><d:getcontentlength/><d:getetag/><d:getlastmodified/>"
    "</d:prop></d:propfind>\n";

using core::CorruptError;
using core::EscapeForLog;
using core::Result;

Result<Listing> InterpretListing(std::vector<DavResponse> responses,
                                 std::string_view request_path) {
  auto decoded = uri::PercentDecode(request_path);
  if (!decoded.ok()) return decoded.status();
  auto self_path = core::ObjectPath::Parse(*decoded);
  if (!self_path.ok()) return self_path.status();
  Listing out;
  bool found_self = false;
  out.children.reserve(responses.size());
  for (DavResponse& r : responses) {
    if (r.href_path == self_path->str()) {
      if (found_self) return CorruptError("PROPFIND listing names the collection twice");
      found_self = true;
      out.self = r.attr;
      continue;
    }
    auto p = core::ObjectPath::Parse(r.href_path);
    if (!p.ok() || p->Parent() != *self_path || p->IsRoot()) {
      return CorruptError("PROPFIND listing of '" + EscapeForLog(self_path->str()) +
                          "' names an entry outside it: '" + EscapeForLog(r.href_path) + "'");
    }
    out.children.push_back(core::DirEntry{std::string(p->Name()), std::move(r.attr)});
    r.href_path = std::string();  // a large listing is held once, not twice
  }
  if (!found_self) {
    return CorruptError("PROPFIND listing of '" + EscapeForLog(self_path->str()) +
                        "' lacks the collection itself");
  }
  if (!out.self.is_dir) {
    return core::InvalidArgumentError("'" + EscapeForLog(self_path->str()) +
                                      "' is not a directory");
  }
  std::sort(out.children.begin(), out.children.end(),
            [](const core::DirEntry& a, const core::DirEntry& b) { return a.name < b.name; });
  auto same = [](const core::DirEntry& a, const core::DirEntry& b) { return a.name == b.name; };
  auto twice = std::adjacent_find(out.children.begin(), out.children.end(), same);
  if (twice != out.children.end() && twice->name.size() != core::kMaxNameBytes - 1) {
    return CorruptError("PROPFIND listing names '" + EscapeForLog(twice->name) + "' twice");
  }
  // XRootD (5.5) lists a 255-byte name cut to 254 bytes, which may then
  // repeat a name of 254 bytes: one is kept (the Lister asks the origin
  // about every 254-byte name).
  out.children.erase(std::unique(out.children.begin(), out.children.end(), same),
                     out.children.end());
  return out;
}

}  // namespace perch::http
