#include "daemon/http/propfind.h"

#include <curl/curl.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>
#include <set>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/http/url.h"

namespace perch::http {

const char kPropfindBody[] =
    "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n"
    "<d:propfind xmlns:d=\"DAV:\"><d:prop>"
    "<d:resourcetype/><d:getcontentlength/><d:getetag/><d:getlastmodified/>"
    "</d:prop></d:propfind>\n";

namespace {

using core::CorruptError;
using core::EscapeForLog;
using core::Result;

constexpr const char kDavNs[] = "DAV:";

bool IsDav(const xmlNode* n, const char* name) {
  return n->type == XML_ELEMENT_NODE && n->ns != nullptr &&
         std::strcmp(reinterpret_cast<const char*>(n->ns->href), kDavNs) == 0 &&
         std::strcmp(reinterpret_cast<const char*>(n->name), name) == 0;
}

const xmlNode* FirstDavChild(const xmlNode* parent, const char* name) {
  for (const xmlNode* c = parent->children; c != nullptr; c = c->next) {
    if (IsDav(c, name)) return c;
  }
  return nullptr;
}

std::string Text(const xmlNode* n) {
  xmlChar* content = xmlNodeGetContent(n);
  std::string out = content ? reinterpret_cast<const char*>(content) : "";
  xmlFree(content);
  size_t b = out.find_first_not_of(" \t\r\n");
  size_t e = out.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : out.substr(b, e - b + 1);
}

struct DocDeleter {
  void operator()(xmlDoc* d) const { xmlFreeDoc(d); }
};

// The path part of an href (absolute URL or path), still as written.
Result<std::string> HrefPath(std::string_view href) {
  if (href.size() > core::kMaxPathBytes + 1024) {
    return CorruptError("PROPFIND href is longer than " + std::to_string(core::kMaxPathBytes) +
                        " bytes");
  }
  if (href.find("://") == std::string_view::npos) return std::string(href);
  auto split = SplitHttpUrl(href);
  if (!split.ok())
    return CorruptError("PROPFIND href '" + EscapeForLog(href, 200) + "' is not http(s)");
  return split->path.empty() ? std::string("/") : split->path;
}

// True if `s` holds something a percent-encoded URL path cannot.
bool HasRawCharacters(std::string_view s) {
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  for (size_t i = 0; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c <= 0x20 || c >= 0x7f || c == '"' || c == '<' || c == '>' || c == '\\') return true;
    if (c == '%' && (i + 2 >= s.size() || !hex(s[i + 1]) || !hex(s[i + 2]))) return true;
  }
  return false;
}

// Turns an href path into a clean absolute path, decoding it unless `raw`.
Result<std::string> HrefToPath(const std::string& path, bool raw) {
  if (raw) {
    auto p = core::ObjectPath::Parse(path);
    if (!p.ok()) return CorruptError("PROPFIND href: " + EscapeForLog(p.status().message(), 300));
    return p->str();
  }
  auto decoded = PercentDecode(path);
  if (!decoded.ok())
    return CorruptError("PROPFIND href: " + EscapeForLog(decoded.status().message(), 300));
  auto p = core::ObjectPath::Parse(*decoded);
  if (!p.ok()) return CorruptError("PROPFIND href: " + EscapeForLog(p.status().message(), 300));
  return p->str();
}

}  // namespace

Result<std::vector<DavResponse>> ParseMultistatus(std::string_view xml, const HrefStyle& style) {
  if (xml.size() > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return CorruptError("PROPFIND answer too large");
  }
  // No network, no entity substitution, no DTD loading: the body is untrusted.
  std::unique_ptr<xmlDoc, DocDeleter> doc(
      xmlReadMemory(xml.data(), static_cast<int>(xml.size()), "propfind.xml", nullptr,
                    XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING));
  if (!doc) {
    const xmlError* err = xmlGetLastError();
    std::string why = err && err->message ? err->message : "not well-formed";
    while (!why.empty() && why.back() == '\n') why.pop_back();
    return CorruptError("PROPFIND answer is not valid XML: " + why);
  }
  const xmlNode* root = xmlDocGetRootElement(doc.get());
  if (root == nullptr || !IsDav(root, "multistatus")) {
    return CorruptError("PROPFIND answer has no DAV:multistatus root");
  }
  // First pass: the hrefs, to decide how they are written.
  std::vector<std::pair<const xmlNode*, std::string>> responses;
  bool raw = false;
  for (const xmlNode* r = root->children; r != nullptr; r = r->next) {
    if (!IsDav(r, "response")) continue;
    if (responses.size() > core::kMaxListingEntries) {
      return CorruptError("PROPFIND answer has more than " +
                          std::to_string(core::kMaxListingEntries) + " entries");
    }
    const xmlNode* href = FirstDavChild(r, "href");
    if (href == nullptr) return CorruptError("PROPFIND response without href");
    std::string href_text = Text(href);
    if (href_text.empty()) return CorruptError("PROPFIND response with an empty href");
    auto path = HrefPath(href_text);
    if (!path.ok()) return path.status();
    raw |= HasRawCharacters(*path);
    responses.emplace_back(r, *path);
  }
  if (!raw && style.prefer_raw) {
    raw = true;
    auto decoded_request = PercentDecode(style.request_path);
    if (!responses.empty() && decoded_request.ok() && *decoded_request != style.request_path) {
      std::string self = responses.front().second;
      while (self.size() > 1 && self.back() == '/') self.pop_back();
      std::string req = style.request_path;
      while (req.size() > 1 && req.back() == '/') req.pop_back();
      if (self == req) raw = false;  // the server echoed the encoded form: it encodes
    }
  }
  std::vector<DavResponse> out;
  size_t bad_sizes = 0;
  std::string bad_example;
  for (const auto& [r, href_path] : responses) {
    auto path = HrefToPath(href_path, raw);
    if (!path.ok()) return path.status();
    DavResponse resp;
    resp.href_path = *path;
    bool found_ok = false;
    bool size_ok = true;
    std::string size_text;
    // XRootD 5.5 describes a file with an execute bit as <iscollection>0 and
    // then again as <iscollection>1: resourcetype decides when present, else
    // the first iscollection.
    bool has_resourcetype = false, has_iscollection = false;
    for (const xmlNode* ps = r->children; ps != nullptr; ps = ps->next) {
      if (!IsDav(ps, "propstat")) continue;
      const xmlNode* status = FirstDavChild(ps, "status");
      if (status != nullptr && Text(status).find(" 200") == std::string::npos) continue;
      const xmlNode* prop = FirstDavChild(ps, "prop");
      if (prop == nullptr) continue;
      found_ok = true;
      for (const xmlNode* p = prop->children; p != nullptr; p = p->next) {
        if (IsDav(p, "resourcetype")) {
          has_resourcetype = true;
          resp.attr.is_dir = FirstDavChild(p, "collection") != nullptr;
        } else if (IsDav(p, "iscollection")) {
          if (!has_resourcetype && !has_iscollection) resp.attr.is_dir = Text(p) == "1";
          has_iscollection = true;
        } else if (IsDav(p, "getcontentlength")) {
          size_text = Text(p);
          const std::string& t = size_text;
          auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), resp.attr.size);
          size_ok = !t.empty() && ec == std::errc() && ptr == t.data() + t.size() &&
                    resp.attr.size <= core::kMaxObjectSize;
        } else if (IsDav(p, "getlastmodified")) {
          std::string t = Text(p);
          time_t when = curl_getdate(t.c_str(), nullptr);
          resp.attr.mtime = when < 0 ? 0 : static_cast<int64_t>(when);
        } else if (IsDav(p, "getetag")) {
          std::string t = Text(p);
          if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
          resp.attr.etag = t;
        }
      }
    }
    if (!found_ok) continue;  // a response without a 200 propstat carries no attributes
    if (resp.attr.is_dir) {
      resp.attr.size = 0;  // XRootD reports 4096 for directories; the value is not used
    } else if (!size_ok) {
      // A file whose size is not a number or is beyond kMaxObjectSize would
      // drive prefetch and warm loops: skip the entry, keep the rest.
      if (bad_sizes++ == 0) bad_example = resp.href_path + " (size '" + size_text + "')";
      continue;
    }
    out.push_back(std::move(resp));
  }
  if (bad_sizes > 0) {
    spdlog::warn(
        "PROPFIND: skipped {} entr{} with a size that is not a number or exceeds {} bytes, e.g. {}",
        bad_sizes, bad_sizes == 1 ? "y" : "ies", core::kMaxObjectSize, EscapeForLog(bad_example));
  }
  if (out.empty()) return CorruptError("PROPFIND answer holds no usable response");
  return out;
}

Result<Listing> InterpretListing(const std::vector<DavResponse>& responses,
                                 std::string_view request_path) {
  auto decoded = PercentDecode(request_path);
  if (!decoded.ok()) return decoded.status();
  auto self_path = core::ObjectPath::Parse(*decoded);
  if (!self_path.ok()) return self_path.status();
  Listing out;
  bool found_self = false;
  std::set<std::string> seen;
  for (const DavResponse& r : responses) {
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
    std::string name(p->Name());
    if (!seen.insert(name).second) {
      return CorruptError("PROPFIND listing names '" + EscapeForLog(name) + "' twice");
    }
    out.children.push_back(core::DirEntry{name, r.attr});
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
  return out;
}

}  // namespace perch::http
