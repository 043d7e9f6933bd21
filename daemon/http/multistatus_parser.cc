// MultistatusParser (propfind.h): the streaming SAX parse of a 207 answer.
#include <curl/curl.h>
#include <libxml/parser.h>
#include <libxml/parserInternals.h>
#include <libxml/tree.h>
#include <spdlog/spdlog.h>

#include <cctype>
#include <charconv>
#include <cstring>
#include <limits>
#include <memory>

#include "daemon/core/limits.h"
#include "daemon/core/log_escape.h"
#include "daemon/core/utf8.h"
#include "daemon/http/propfind.h"
#include "daemon/http/url.h"
#include "daemon/uri/percent.h"

namespace perch::http {

namespace {

using core::CorruptError;
using core::EscapeForLog;
using core::Result;
using core::Status;

// --- Bytes XML cannot carry (MultistatusParser's comment) -------------------

// The escape of byte `b`: code point U+10FF00 + b in UTF-8.
void AppendEscaped(unsigned char b, std::string* out) {
  out->push_back(static_cast<char>(0xF4));
  out->push_back(static_cast<char>(0x8F));
  out->push_back(static_cast<char>(0xBC | (b >> 6)));
  out->push_back(static_cast<char>(0x80 | (b & 0x3F)));
}

// Turns escapes back into their bytes. F4 is a lead byte only, so a match is
// always a whole character.
std::string Unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    auto c = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
    if (c(i) == 0xF4 && i + 3 < s.size() && c(i + 1) == 0x8F && (c(i + 2) & 0xFC) == 0xBC &&
        (c(i + 3) & 0xC0) == 0x80) {
      out.push_back(static_cast<char>(((c(i + 2) & 0x03) << 6) | (c(i + 3) & 0x3F)));
      i += 3;
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// The length of the UTF-8 character at the start of `s` if it is well formed,
// complete and a character XML 1.0 allows (and not one of the escapes);
// 0 if it is not; -1 if `s` ends before it could tell.
int XmlCharLength(std::string_view s) {
  const auto b = static_cast<unsigned char>(s[0]);
  if (b < 0x80) return (b >= 0x20 || b == '\t' || b == '\n') ? 1 : 0;  // CR: escaped, kept
  uint32_t cp = 0;
  const int len = core::Utf8CharLength(s, &cp);
  if (len <= 0) return len;
  if (cp == 0xFFFE || cp == 0xFFFF) return 0;  // not XML chars
  if (cp >= 0x10FF00) return 0;  // an escape's own range: escaped byte by byte, so kept exact
  return len;
}

// --- The SAX state ------------------------------------------------------------

constexpr const char kDavNs[] = "DAV:";

// The elements perch reads, by where they may appear.
enum class Kind {
  kOther,
  kMultistatus,
  kResponse,
  kHref,
  kPropstat,
  kStatus,
  kProp,
  kResourcetype,
  kCollection,
  kIscollection,
  kLength,
  kModified,
  kEtag,
};

bool CollectsText(Kind k) {
  return k == Kind::kHref || k == Kind::kStatus || k == Kind::kIscollection || k == Kind::kLength ||
         k == Kind::kModified || k == Kind::kEtag;
}

// The most text perch keeps of one element (an href is at most
// kMaxPathBytes + 1024, checked after).
constexpr size_t kMaxTextBytes = 64 << 10;

std::string Trim(std::string_view s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  size_t e = s.find_last_not_of(" \t\r\n");
  return b == std::string::npos ? std::string() : std::string(s.substr(b, e - b + 1));
}

// An href's text as the parser gave it (CR still escaped): leading white
// space goes (a path or URL starts with '/' or a scheme); trailing white
// space only where a line break shows it is a pretty-printer's, so that a
// name ending in spaces, tabs or CR ("trail ") keeps them.
std::string TrimHref(std::string_view s) {
  static const std::string kCr = [] {
    std::string cr;
    AppendEscaped('\r', &cr);
    return cr;
  }();
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n'; };
  for (;;) {
    if (!s.empty() && space(s.front())) {
      s.remove_prefix(1);
    } else if (s.starts_with(kCr)) {
      s.remove_prefix(kCr.size());
    } else {
      break;
    }
  }
  size_t e = s.find_last_not_of(" \t");
  if (e != std::string_view::npos && s[e] == '\n') {
    for (;;) {
      if (!s.empty() && space(s.back())) {
        s.remove_suffix(1);
      } else if (s.ends_with(kCr)) {
        s.remove_suffix(kCr.size());
      } else {
        break;
      }
    }
  }
  return std::string(s);
}

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
  auto decoded = uri::PercentDecode(path);
  if (!decoded.ok())
    return CorruptError("PROPFIND href: " + EscapeForLog(decoded.status().message(), 300));
  auto p = core::ObjectPath::Parse(*decoded);
  if (!p.ok()) return CorruptError("PROPFIND href: " + EscapeForLog(p.status().message(), 300));
  return p->str();
}

// One property of a propstat, applied once its status is known.
struct Prop {
  Kind kind;
  std::string text;         // for iscollection, getcontentlength, ...
  bool collection = false;  // for resourcetype: <collection/> inside
};

}  // namespace

struct MultistatusParser::State {
  explicit State(HrefStyle s) : style(std::move(s)) {}
  ~State() {
    if (ctxt == nullptr) return;
    // A DOCTYPE with entity declarations makes libxml2 build a document to
    // hold them, even without SAX handlers for them; the context does not
    // free it.
    if (ctxt->myDoc != nullptr) xmlFreeDoc(ctxt->myDoc);
    ctxt->myDoc = nullptr;
    xmlFreeParserCtxt(ctxt);
  }

  // Stops the parse with `why` (the first reason wins).
  void Fail(Status why) {
    if (failure.ok()) failure = std::move(why);
    if (ctxt != nullptr) xmlStopParser(ctxt);
  }

  // Stops the parse with libxml2's own reason for rejecting the document.
  void FailFromLibxml() {
    const xmlError* err = xmlCtxtGetLastError(ctxt);
    std::string why = err && err->message ? err->message : "not well-formed";
    while (!why.empty() && why.back() == '\n') why.pop_back();
    Fail(CorruptError("PROPFIND answer is not valid XML: " + why));
  }

  void Start(const xmlChar* local, const xmlChar* uri);
  void End();
  void EndResponse();
  void EndPropstat();
  void Characters(const xmlChar* ch, int len) {
    if (stack.empty() || !CollectsText(stack.back())) return;
    if (text.size() + static_cast<size_t>(len) > kMaxTextBytes) {
      Fail(CorruptError("PROPFIND answer has an element of more than " +
                        std::to_string(kMaxTextBytes) + " bytes"));
      return;
    }
    text.append(reinterpret_cast<const char*>(ch), static_cast<size_t>(len));
  }

  HrefStyle style;
  xmlParserCtxtPtr ctxt = nullptr;
  Status failure;
  std::string pending;  // an incomplete UTF-8 character at the end of the last chunk
  std::string escaped;  // the chunk as given to libxml2
  uint64_t body_bytes = 0;
  bool saw_root = false;

  std::vector<Kind> stack;
  std::string text;
  // The response being read.
  bool has_href = false;
  std::string href;
  bool found_ok = false;
  bool has_resourcetype = false, has_iscollection = false;
  bool size_ok = true;
  std::string size_text;
  core::FileAttr attr;
  // The propstat being read.
  bool has_status = false;
  std::string status_text;
  bool has_prop = false;
  std::vector<Prop> props;

  // Done responses: the href as written (decoded at the end, once the
  // style is known), the attributes, whether the size was usable.
  struct Done {
    std::string href_path;
    core::FileAttr attr;
    bool size_ok;
    std::string size_text;
  };
  std::vector<Done> done;
  size_t responses = 0;
  bool raw = false;
};

namespace {

bool IsDavName(const xmlChar* local, const xmlChar* uri, const char* name) {
  return uri != nullptr && std::strcmp(reinterpret_cast<const char*>(uri), kDavNs) == 0 &&
         std::strcmp(reinterpret_cast<const char*>(local), name) == 0;
}

// What element `local` (in namespace `uri`) is, inside `parent`.
Kind KindOf(Kind parent, const xmlChar* local, const xmlChar* uri) {
  auto is = [&](const char* name) { return IsDavName(local, uri, name); };
  switch (parent) {
    case Kind::kMultistatus:
      return is("response") ? Kind::kResponse : Kind::kOther;
    case Kind::kResponse:
      return is("href") ? Kind::kHref : is("propstat") ? Kind::kPropstat : Kind::kOther;
    case Kind::kPropstat:
      return is("status") ? Kind::kStatus : is("prop") ? Kind::kProp : Kind::kOther;
    case Kind::kProp:
      if (is("resourcetype")) return Kind::kResourcetype;
      if (is("iscollection")) return Kind::kIscollection;
      if (is("getcontentlength")) return Kind::kLength;
      if (is("getlastmodified")) return Kind::kModified;
      if (is("getetag")) return Kind::kEtag;
      return Kind::kOther;
    case Kind::kResourcetype:
      return is("collection") ? Kind::kCollection : Kind::kOther;
    default:
      return Kind::kOther;
  }
}

void OnStart(void* ctx, const xmlChar* local, const xmlChar*, const xmlChar* uri, int,
             const xmlChar**, int, int, const xmlChar**) {
  static_cast<MultistatusParser::State*>(ctx)->Start(local, uri);
}
void OnEnd(void* ctx, const xmlChar*, const xmlChar*, const xmlChar*) {
  static_cast<MultistatusParser::State*>(ctx)->End();
}
void OnCharacters(void* ctx, const xmlChar* ch, int len) {
  static_cast<MultistatusParser::State*>(ctx)->Characters(ch, len);
}
// libxml2's own errors are read from the context after each chunk.
void OnStructuredError(void*, xmlErrorPtr) {}

}  // namespace

void MultistatusParser::State::Start(const xmlChar* local, const xmlChar* uri) {
  if (stack.empty()) {
    if (saw_root || !IsDavName(local, uri, "multistatus")) {
      Fail(CorruptError("PROPFIND answer has no DAV:multistatus root"));
      return;
    }
    saw_root = true;
    stack.push_back(Kind::kMultistatus);
    return;
  }
  Kind k = KindOf(stack.back(), local, uri);
  stack.push_back(k);
  if (CollectsText(k)) text.clear();
  switch (k) {
    case Kind::kResponse:
      if (responses++ >= core::kMaxListingEntries) {
        Fail(CorruptError("PROPFIND answer has more than " +
                          std::to_string(core::kMaxListingEntries) + " entries"));
        return;
      }
      has_href = found_ok = has_resourcetype = has_iscollection = false;
      size_ok = true;
      href.clear();
      size_text.clear();
      attr = core::FileAttr();
      break;
    case Kind::kPropstat:
      has_status = has_prop = false;
      status_text.clear();
      props.clear();
      break;
    case Kind::kProp:
      has_prop = true;
      break;
    case Kind::kResourcetype:
      props.push_back(Prop{Kind::kResourcetype, "", false});
      break;
    case Kind::kCollection:
      if (!props.empty() && props.back().kind == Kind::kResourcetype)
        props.back().collection = true;
      break;
    default:
      break;
  }
}

void MultistatusParser::State::End() {
  if (stack.empty()) return;
  Kind k = stack.back();
  stack.pop_back();
  switch (k) {
    case Kind::kHref:
      if (!has_href) {  // the first href names the response
        has_href = true;
        href = Unescape(TrimHref(text));
      }
      break;
    case Kind::kStatus:
      if (!has_status) {
        has_status = true;
        status_text = Trim(text);
      }
      break;
    case Kind::kIscollection:
    case Kind::kLength:
    case Kind::kModified:
    case Kind::kEtag:
      props.push_back(Prop{k, Trim(Unescape(text)), false});
      break;
    case Kind::kPropstat:
      EndPropstat();
      break;
    case Kind::kResponse:
      EndResponse();
      break;
    default:
      break;
  }
}

void MultistatusParser::State::EndPropstat() {
  // A propstat whose status is not 200 describes properties the server does
  // not have.
  if (has_status && status_text.find(" 200") == std::string::npos) return;
  if (!has_prop) return;
  found_ok = true;
  // XRootD 5.5 describes a file with an execute bit as <iscollection>0 and
  // then again as <iscollection>1: resourcetype decides when present, else
  // the first iscollection.
  for (const Prop& p : props) {
    switch (p.kind) {
      case Kind::kResourcetype:
        has_resourcetype = true;
        attr.is_dir = p.collection;
        break;
      case Kind::kIscollection:
        if (!has_resourcetype && !has_iscollection) attr.is_dir = p.text == "1";
        has_iscollection = true;
        break;
      case Kind::kLength: {
        size_text = p.text;
        const std::string& t = p.text;
        auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), attr.size);
        size_ok = !t.empty() && ec == std::errc() && ptr == t.data() + t.size() &&
                  attr.size <= core::kMaxObjectSize;
        break;
      }
      case Kind::kModified: {
        time_t when = curl_getdate(p.text.c_str(), nullptr);
        attr.mtime = when < 0 ? 0 : static_cast<int64_t>(when);
        break;
      }
      case Kind::kEtag: {
        std::string t = p.text;
        if (t.size() >= 2 && t.front() == '"' && t.back() == '"') t = t.substr(1, t.size() - 2);
        attr.etag = std::move(t);
        break;
      }
      default:
        break;
    }
  }
}

void MultistatusParser::State::EndResponse() {
  if (!has_href) {
    Fail(CorruptError("PROPFIND response without href"));
    return;
  }
  if (href.empty()) {
    Fail(CorruptError("PROPFIND response with an empty href"));
    return;
  }
  auto path = HrefPath(href);
  if (!path.ok()) {
    Fail(path.status());
    return;
  }
  if (!found_ok) return;  // a response without a 200 propstat carries no attributes
  raw |= HasRawCharacters(*path);
  done.push_back(Done{std::move(*path), attr, size_ok, size_text});
}

MultistatusParser::MultistatusParser(HrefStyle style)
    : state_(std::make_unique<State>(std::move(style))) {
  xmlSAXHandler sax;
  std::memset(&sax, 0, sizeof(sax));
  // SAX2 callbacks only: no entity, DTD or external-subset handlers, so
  // nothing declared in the document is expanded or fetched.
  sax.initialized = XML_SAX2_MAGIC;
  sax.startElementNs = OnStart;
  sax.endElementNs = OnEnd;
  sax.characters = OnCharacters;
  sax.cdataBlock = OnCharacters;
  sax.serror = OnStructuredError;
  state_->ctxt = xmlCreatePushParserCtxt(&sax, state_.get(), nullptr, 0, "propfind.xml");
  if (state_->ctxt == nullptr) {
    state_->Fail(core::InternalError("libxml2 could not create a parser"));
    return;
  }
  // The input is given as UTF-8 (with escapes) whatever the document declares.
  xmlCtxtUseOptions(state_->ctxt, XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING |
                                      XML_PARSE_IGNORE_ENC);
  xmlSwitchEncoding(state_->ctxt, XML_CHAR_ENCODING_UTF8);
}

MultistatusParser::~MultistatusParser() = default;

bool MultistatusParser::Feed(std::string_view chunk) {
  State& s = *state_;
  if (!s.failure.ok()) return false;
  s.body_bytes += chunk.size();
  if (s.body_bytes > kMaxBodyBytes) {
    s.Fail(
        CorruptError("PROPFIND answer is larger than " + std::to_string(kMaxBodyBytes) + " bytes"));
    return false;
  }
  // The bytes XML cannot carry become escapes; a character cut by the chunk's
  // end waits for the next chunk.
  std::string_view in = chunk;
  std::string joined;
  if (!s.pending.empty()) {
    joined = s.pending + std::string(chunk);
    in = joined;
    s.pending.clear();
  }
  s.escaped.clear();
  s.escaped.reserve(in.size() + in.size() / 8);
  size_t i = 0;
  while (i < in.size()) {
    int len = XmlCharLength(in.substr(i));
    if (len < 0) {
      s.pending.assign(in.substr(i));
      break;
    }
    if (len == 0) {
      AppendEscaped(static_cast<unsigned char>(in[i]), &s.escaped);
      ++i;
      continue;
    }
    s.escaped.append(in.substr(i, static_cast<size_t>(len)));
    i += static_cast<size_t>(len);
  }
  if (s.escaped.empty()) return true;
  if (xmlParseChunk(s.ctxt, s.escaped.data(), static_cast<int>(s.escaped.size()), 0) != 0 &&
      s.failure.ok()) {
    s.FailFromLibxml();
  }
  return s.failure.ok();
}

Result<std::vector<DavResponse>> MultistatusParser::Finish() {
  State& s = *state_;
  if (s.failure.ok()) {
    // A character still cut at the end is no character: its bytes are escaped.
    std::string rest;
    for (char c : s.pending) AppendEscaped(static_cast<unsigned char>(c), &rest);
    s.pending.clear();
    if (xmlParseChunk(s.ctxt, rest.data(), static_cast<int>(rest.size()), 1) != 0 &&
        s.failure.ok()) {
      s.FailFromLibxml();
    }
  }
  if (!s.failure.ok()) return s.failure;
  if (!s.saw_root) return CorruptError("PROPFIND answer has no DAV:multistatus root");
  bool raw = s.raw;
  if (!raw && s.style.prefer_raw) {
    raw = true;
    auto decoded_request = uri::PercentDecode(s.style.request_path);
    if (!s.done.empty() && decoded_request.ok() && *decoded_request != s.style.request_path) {
      std::string self = s.done.front().href_path;
      while (self.size() > 1 && self.back() == '/') self.pop_back();
      std::string req = s.style.request_path;
      while (req.size() > 1 && req.back() == '/') req.pop_back();
      if (self == req) raw = false;  // the server echoed the encoded form: it encodes
    }
  }
  std::vector<DavResponse> out;
  out.reserve(s.done.size());
  size_t bad_sizes = 0;
  std::string bad_example;
  for (State::Done& d : s.done) {
    auto path = HrefToPath(d.href_path, raw);
    if (!path.ok()) return path.status();
    if (d.attr.is_dir) {
      d.attr.size = 0;  // XRootD reports 4096 for directories; the value is not used
    } else if (!d.size_ok) {
      // A file whose size is not a number or is beyond kMaxObjectSize would
      // drive prefetch and warm loops: skip the entry, keep the rest.
      if (bad_sizes++ == 0) bad_example = *path + " (size '" + d.size_text + "')";
      continue;
    }
    out.push_back(DavResponse{std::move(*path), std::move(d.attr)});
  }
  s.done.clear();
  s.done.shrink_to_fit();
  if (bad_sizes > 0) {
    spdlog::warn(
        "PROPFIND: skipped {} entr{} with a size that is not a number or exceeds {} bytes, e.g. {}",
        bad_sizes, bad_sizes == 1 ? "y" : "ies", core::kMaxObjectSize, EscapeForLog(bad_example));
  }
  if (out.empty()) return CorruptError("PROPFIND answer holds no usable response");
  return out;
}

Result<std::vector<DavResponse>> ParseMultistatus(std::string_view xml, const HrefStyle& style) {
  MultistatusParser parser(style);
  parser.Feed(xml);
  return parser.Finish();
}

}  // namespace perch::http
