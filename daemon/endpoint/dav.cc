#include "daemon/endpoint/dav.h"

#include <libxml/xmlsave.h>
#include <libxml/xmlwriter.h>

#include <memory>
#include <stdexcept>

#include "daemon/endpoint/request.h"
#include "daemon/uri/percent.h"

namespace perch::endpoint {

namespace {

// A libxml2 text writer into a memory buffer; throws std::runtime_error when
// libxml2 fails (out of memory), which the endpoint answers with 500.
class Writer {
 public:
  Writer() : buf_(xmlBufferCreate()), w_(buf_ ? xmlNewTextWriterMemory(buf_, 0) : nullptr) {
    if (w_ == nullptr) throw std::runtime_error("libxml2: cannot create a writer");
  }
  ~Writer() {
    if (w_ != nullptr) xmlFreeTextWriter(w_);
    if (buf_ != nullptr) xmlBufferFree(buf_);
  }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void Check(int rc) {
    if (rc < 0) throw std::runtime_error("libxml2: cannot write the document");
  }
  void Start(const char* name) { Check(xmlTextWriterStartElement(w_, X(name))); }
  void End() { Check(xmlTextWriterEndElement(w_)); }
  void Attr(const char* name, const std::string& value) {
    Check(xmlTextWriterWriteAttribute(w_, X(name), X(value.c_str())));
  }
  void Element(const char* name, const std::string& text) {
    Check(xmlTextWriterWriteElement(w_, X(name), X(text.c_str())));
  }
  void Text(const std::string& text) { Check(xmlTextWriterWriteString(w_, X(text.c_str()))); }
  void Raw(const char* text) { Check(xmlTextWriterWriteRaw(w_, X(text))); }
  xmlTextWriterPtr get() { return w_; }

  std::string Take() {
    Check(xmlTextWriterFlush(w_));
    return std::string(reinterpret_cast<const char*>(xmlBufferContent(buf_)),
                       static_cast<size_t>(xmlBufferLength(buf_)));
  }

 private:
  static const xmlChar* X(const char* s) { return reinterpret_cast<const xmlChar*>(s); }
  xmlBufferPtr buf_;
  xmlTextWriterPtr w_;
};

void Response(Writer& w, const DavEntry& e) {
  w.Start("D:response");
  std::string href = uri::PercentEncodePath(e.path);
  if (e.attr.is_dir && href != "/") href += '/';
  w.Element("D:href", href);
  w.Start("D:propstat");
  w.Start("D:prop");
  // XRootD reports 4096 for a directory's length; clients ignore it.
  w.Element("D:getcontentlength", std::to_string(e.attr.is_dir ? 4096 : e.attr.size));
  if (e.attr.mtime != 0) w.Element("D:getlastmodified", HttpDate(e.attr.mtime));
  w.Start("D:resourcetype");
  if (e.attr.is_dir) {
    w.Start("D:collection");
    w.End();
  }
  w.End();
  w.Element("D:iscollection", e.attr.is_dir ? "1" : "0");
  if (!e.attr.is_dir) w.Element("D:getetag", EntityTag(e.attr));
  w.End();  // prop
  w.Element("D:status", "HTTP/1.1 200 OK");
  w.End();  // propstat
  w.End();  // response
}

}  // namespace

std::string Multistatus(const DavEntry& self, const std::vector<DavEntry>& children) {
  Writer w;
  w.Check(xmlTextWriterStartDocument(w.get(), "1.0", "utf-8", nullptr));
  w.Start("D:multistatus");
  w.Attr("xmlns:D", "DAV:");
  Response(w, self);
  for (const DavEntry& c : children) Response(w, c);
  w.End();
  w.Check(xmlTextWriterEndDocument(w.get()));
  return w.Take();
}

std::string HtmlIndex(const core::ObjectPath& path, const std::vector<core::DirEntry>& children) {
  Writer w;
  w.Raw("<!DOCTYPE html>\n");
  w.Start("html");
  w.Start("head");
  w.Element("title", "Index of " + path.str());
  w.End();
  w.Start("body");
  w.Element("h1", "Index of " + path.str());
  w.Start("ul");
  for (const core::DirEntry& c : children) {
    w.Start("li");
    w.Start("a");
    std::string name = c.name + (c.attr.is_dir ? "/" : "");
    w.Attr("href", uri::PercentEncodeSegment(c.name) + (c.attr.is_dir ? "/" : ""));
    w.Text(name);
    w.End();
    w.End();
  }
  w.End();
  w.End();
  w.End();
  return w.Take() + "\n";
}

}  // namespace perch::endpoint
