#include "daemon/http/propfind.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "daemon/core/limits.h"

namespace perch::http {
namespace {

using core::StatusCode;

// XRootD's Depth-1 answer (docs/protocol.md §4), plus a
// subdirectory (href without trailing slash) and awkward names, written raw
// (not percent-encoded) as XRootD 5.5 writes them.
constexpr char kXrootdListing[] = R"(<?xml version="1.0" encoding="utf-8"?>
<D:multistatus xmlns:D="DAV:" xmlns:ns1="http://apache.org/dav/props/" xmlns:ns0="DAV:">
<D:response xmlns:lp1="DAV:" xmlns:lp2="http://apache.org/dav/props/" xmlns:lp3="LCGDM:">
<D:href>/pelicanplatform/test/</D:href>
<D:propstat>
<D:prop>
<lp1:getcontentlength>4096</lp1:getcontentlength>
<lp1:getlastmodified>Mon, 03 Feb 2025 17:00:00 GMT</lp1:getlastmodified>
<lp1:resourcetype><D:collection/></lp1:resourcetype>
<lp1:iscollection>1</lp1:iscollection>
<lp1:executable>F</lp1:executable>
</D:prop>
<D:status>HTTP/1.1 200 OK</D:status>
</D:propstat>
</D:response>
<D:response xmlns:lp1="DAV:" xmlns:lp2="http://apache.org/dav/props/" xmlns:lp3="LCGDM:">
<D:href>/pelicanplatform/test/hello-world.txt</D:href>
<D:propstat><D:prop>
<lp1:getcontentlength>14</lp1:getcontentlength>
<lp1:getlastmodified>Mon, 03 Feb 2025 17:00:00 GMT</lp1:getlastmodified>
<lp1:iscollection>0</lp1:iscollection>
<lp1:executable>F</lp1:executable>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
</D:response>
<D:response xmlns:lp1="DAV:">
<D:href>/pelicanplatform/test/sub dir</D:href>
<D:propstat><D:prop>
<lp1:getcontentlength>4096</lp1:getcontentlength>
<lp1:iscollection>1</lp1:iscollection>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
</D:response>
<D:response xmlns:lp1="DAV:">
<D:href>/pelicanplatform/test/100% ünicode.bin</D:href>
<D:propstat><D:prop>
<lp1:getcontentlength>0</lp1:getcontentlength>
<lp1:iscollection>0</lp1:iscollection>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat>
</D:response>
</D:multistatus>
)";

TEST(PropfindTest, ParsesXrootdListing) {
  auto responses = ParseMultistatus(kXrootdListing);
  ASSERT_TRUE(responses.ok()) << responses.status().ToString();
  ASSERT_EQ(responses->size(), 4u);
  EXPECT_EQ((*responses)[0].href_path, "/pelicanplatform/test");
  EXPECT_TRUE((*responses)[0].attr.is_dir);
  EXPECT_EQ((*responses)[0].attr.size, 0u);  // XRootD's 4096 is not a file size
  EXPECT_EQ((*responses)[0].attr.mtime, 1738602000);
  EXPECT_EQ((*responses)[1].attr.size, 14u);
  EXPECT_FALSE((*responses)[1].attr.is_dir);

  auto listing = InterpretListing(*responses, "/pelicanplatform/test");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->children.size(), 3u);
  EXPECT_EQ(listing->children[0].name, "100% ünicode.bin");
  EXPECT_EQ(listing->children[1].name, "hello-world.txt");
  EXPECT_EQ(listing->children[2].name, "sub dir");
  EXPECT_TRUE(listing->children[2].attr.is_dir);
}

TEST(PropfindTest, XrootdExecutableFileIsNotACollection) {
  // What XRootD 5.5 answers for a file with an execute bit (seen on a real
  // origin): iscollection 0, then iscollection 1. A directory has resourcetype.
  constexpr char kAnswer[] = R"(<?xml version="1.0" encoding="utf-8"?>
<D:multistatus xmlns:D="DAV:" xmlns:lp1="DAV:">
<D:response><D:href>/ns/run.sh</D:href><D:propstat><D:prop>
<lp1:getcontentlength>7</lp1:getcontentlength>
<lp1:iscollection>0</lp1:iscollection>
<lp1:executable>T</lp1:executable>
<lp1:iscollection>1</lp1:iscollection>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
<D:response><D:href>/ns/dir</D:href><D:propstat><D:prop>
<lp1:getcontentlength>4096</lp1:getcontentlength>
<lp1:resourcetype><D:collection/></lp1:resourcetype>
<lp1:iscollection>1</lp1:iscollection>
<lp1:executable>T</lp1:executable>
<lp1:iscollection>1</lp1:iscollection>
</D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
</D:multistatus>)";
  auto r = ParseMultistatus(kAnswer);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_FALSE((*r)[0].attr.is_dir);
  EXPECT_EQ((*r)[0].attr.size, 7u);
  EXPECT_TRUE((*r)[1].attr.is_dir);
}

TEST(PropfindTest, GoStyleAnswerWithOtherPrefixesAndAbsoluteHrefs) {
  constexpr char kGo[] = R"(<?xml version="1.0" encoding="UTF-8"?>
<multistatus xmlns="DAV:"><response><href>https://o:8443/ns/d/</href><propstat><prop>
<resourcetype><collection xmlns="DAV:"/></resourcetype><getlastmodified>Tue, 01 Jul 2025 10:00:00 GMT</getlastmodified>
</prop><status>HTTP/1.1 200 OK</status></propstat></response>
<response><href>https://o:8443/ns/d/f%20%25x</href><propstat><prop><getcontentlength>5</getcontentlength>
<getetag>"abc"</getetag><resourcetype/></prop><status>HTTP/1.1 200 OK</status></propstat>
<propstat><prop><displayname/></prop><status>HTTP/1.1 404 Not Found</status></propstat></response>
</multistatus>)";
  auto responses = ParseMultistatus(kGo);
  ASSERT_TRUE(responses.ok()) << responses.status().ToString();
  auto listing = InterpretListing(*responses, "/ns/d");
  ASSERT_TRUE(listing.ok());
  ASSERT_EQ(listing->children.size(), 1u);
  EXPECT_EQ(listing->children[0].name, "f %x");  // an encoding server's hrefs are decoded
  EXPECT_EQ(listing->children[0].attr.etag, "abc");
  EXPECT_EQ(listing->children[0].attr.size, 5u);
}

TEST(PropfindTest, XrootdStyleIsDetectedFromTheServerOrTheRequestEcho) {
  // Only URL-safe names: raw or encoded cannot be told from the hrefs alone.
  constexpr char kAmbiguous[] = R"(<D:multistatus xmlns:D="DAV:">
<D:response><D:href>/ns/d%20x/</D:href><D:propstat><D:prop><D:iscollection>1</D:iscollection></D:prop>
<D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>
<D:response><D:href>/ns/d%20x/a%20b</D:href><D:propstat><D:prop><D:getcontentlength>1</D:getcontentlength></D:prop>
<D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response></D:multistatus>)";
  // An XRootD server that echoes the encoded request path encodes: decode.
  auto encoded = ParseMultistatus(kAmbiguous, HrefStyle{true, "/ns/d%20x"});
  ASSERT_TRUE(encoded.ok());
  EXPECT_EQ((*encoded)[1].href_path, "/ns/d x/a b");
  // Listing "/ns/d%2520x" (a directory literally named "d%20x") from an XRootD
  // server: the echo is the raw name, so names are raw.
  auto raw = ParseMultistatus(kAmbiguous, HrefStyle{true, "/ns/d%2520x"});
  ASSERT_TRUE(raw.ok());
  EXPECT_EQ((*raw)[1].href_path, "/ns/d%20x/a%20b");
}

TEST(PropfindTest, ElementsOutsideDavNamespaceAreIgnored) {
  constexpr char kOther[] = R"(<m:multistatus xmlns:m="urn:not-dav"><m:response/></m:multistatus>)";
  auto r = ParseMultistatus(kOther);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multistatus"), std::string::npos);
}

TEST(PropfindTest, MalformedAnswersGiveClearErrors) {
  struct Case {
    std::string xml;
    const char* needle;
  };
  const std::string head = R"(<D:multistatus xmlns:D="DAV:"><D:response>)";
  const std::string ok_prop =
      "<D:propstat><D:prop><D:getcontentlength>1</D:getcontentlength></D:prop>"
      "<D:status>HTTP/1.1 200 OK</D:status></D:propstat>";
  std::vector<Case> cases = {
      {"", "not valid XML"},
      {std::string(kXrootdListing).substr(0, 300), "not valid XML"},  // truncated
      {"<html><body>listing</body></html>", "multistatus"},
      {head + ok_prop + "</D:response></D:multistatus>", "without href"},
      {head + "<D:href></D:href>" + ok_prop + "</D:response></D:multistatus>", "empty href"},
      {head + "<D:href>/a/../../etc</D:href>" + ok_prop + "</D:response></D:multistatus>", "'..'"},
      // The only entry has a bad size: skipped, so nothing is left.
      {head + "<D:href>/a</D:href><D:propstat><D:prop><D:getcontentlength>-4</D:getcontentlength>"
              "</D:prop></D:propstat></D:response></D:multistatus>",
       "no usable response"},
      {R"(<D:multistatus xmlns:D="DAV:"></D:multistatus>)", "no usable response"},
      {R"(<!DOCTYPE x [<!ENTITY e SYSTEM "file:///etc/passwd">]><D:multistatus xmlns:D="DAV:"><D:response><D:href>&e;</D:href></D:response></D:multistatus>)",
       "PROPFIND"},
  };
  for (const Case& c : cases) {
    auto r = ParseMultistatus(c.xml);
    ASSERT_FALSE(r.ok()) << c.xml;
    EXPECT_EQ(r.status().code(), StatusCode::kCorrupt) << c.xml;
    EXPECT_NE(r.status().message().find(c.needle), std::string::npos)
        << c.xml << " -> " << r.status().message();
  }
}

// Hardening #11: a size that is not a number or beyond 1 PiB skips that
// entry (with one warning), keeping its siblings.
TEST(PropfindTest, HostileSizesSkipTheEntryOnly) {
  auto entry = [](const std::string& name, const std::string& size) {
    return "<D:response><D:href>/ns/d/" + name +
           "</D:href><D:propstat><D:prop><D:getcontentlength>" + size +
           "</D:getcontentlength></D:prop><D:status>HTTP/1.1 200 "
           "OK</D:status></D:propstat></D:response>";
  };
  const std::string xml =
      R"(<D:multistatus xmlns:D="DAV:"><D:response><D:href>/ns/d/</D:href><D:propstat><D:prop>)"
      R"(<D:resourcetype><D:collection/></D:resourcetype><D:getcontentlength>18446744073709551615)"
      R"(</D:getcontentlength></D:prop><D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>)" +
      entry("huge", "18446744073709551615") + entry("wraps", "18446744073709551616") +
      entry("over", std::to_string(core::kMaxObjectSize + 1)) +
      entry("limit", std::to_string(core::kMaxObjectSize)) + entry("neg", "-4") +
      entry("text", "12abc") + entry("small", "5") + "</D:multistatus>";
  auto r = ParseMultistatus(xml);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto listing = InterpretListing(*r, "/ns/d");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->children.size(), 2u);
  EXPECT_EQ(listing->children[0].name, "limit");
  EXPECT_EQ(listing->children[0].attr.size, core::kMaxObjectSize);
  EXPECT_EQ(listing->children[1].name, "small");
  EXPECT_EQ(listing->children[1].attr.size, 5u);
  EXPECT_TRUE(listing->self.is_dir);  // a directory's size is not used, whatever it says
}

TEST(PropfindTest, HostileListingEntriesAreRejected) {
  auto make = [](std::vector<std::pair<std::string, bool>> entries) {
    std::vector<DavResponse> out;
    for (auto& [path, dir] : entries) {
      DavResponse r;
      r.href_path = path;
      r.attr.is_dir = dir;
      out.push_back(r);
    }
    return out;
  };
  // An entry outside the listed directory.
  auto outside = InterpretListing(make({{"/ns/d", true}, {"/etc/passwd", false}}), "/ns/d");
  ASSERT_FALSE(outside.ok());
  EXPECT_NE(outside.status().message().find("outside"), std::string::npos);
  // A grandchild.
  EXPECT_FALSE(InterpretListing(make({{"/ns/d", true}, {"/ns/d/a/b", false}}), "/ns/d").ok());
  // The collection itself missing.
  auto missing = InterpretListing(make({{"/ns/d/a", false}}), "/ns/d");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("lacks the collection"), std::string::npos);
  // Duplicate names.
  EXPECT_FALSE(
      InterpretListing(make({{"/ns/d", true}, {"/ns/d/a", false}, {"/ns/d/a", false}}), "/ns/d")
          .ok());
  // Listing a file.
  auto file = InterpretListing(make({{"/ns/f", false}}), "/ns/f");
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), StatusCode::kInvalidArgument);
}

// XRootD 5.5 writes names raw: a name that is not UTF-8 or holds a control
// character used to make libxml2 reject the whole answer (issue 28, item 3).
// Every name keeps its exact bytes; the control character's entry is kept for
// NamespaceCache to skip with a warning, as before.
std::string XrootdEntry(const std::string& href, const std::string& size) {
  return "<D:response xmlns:lp1=\"DAV:\">\n<D:href>" + href +
         "</D:href>\n<D:propstat>\n<D:prop>\n<lp1:getcontentlength>" + size +
         "</lp1:getcontentlength>\n<lp1:iscollection>0</lp1:iscollection>\n</D:prop>\n"
         "<D:status>HTTP/1.1 200 OK</D:status>\n</D:propstat>\n</D:response>\n";
}
std::string XrootdDir(const std::string& dir, const std::vector<std::string>& hrefs) {
  std::string xml =
      "<?xml version=\"1.0\" encoding=\"utf-8\"?>\n<D:multistatus xmlns:D=\"DAV:\">\n"
      "<D:response xmlns:lp1=\"DAV:\">\n<D:href>" +
      dir +
      "/</D:href>\n<D:propstat>\n<D:prop>\n<lp1:getcontentlength>4096</lp1:getcontentlength>\n"
      "<lp1:iscollection>1</lp1:iscollection>\n</D:prop>\n<D:status>HTTP/1.1 200 "
      "OK</D:status>\n</D:propstat>\n</D:response>\n";
  for (const std::string& h : hrefs) xml += XrootdEntry(h, "7");
  return xml + "</D:multistatus>\n";
}

TEST(PropfindTest, NamesKeepTheirBytesWhateverXmlThinksOfThem) {
  const std::vector<std::string> names = {
      std::string("a\xff\xfe"
                  "b"),          // not UTF-8
      std::string("x\x01y", 3),  // a control character
      "trail1 ",                 // a trailing space (Text() trimmed it)
      " lead",                   // a leading space
      "cr\rx",                   // CR, which XML parsers rewrite as LF
      "caf\xc3\xa9",             // UTF-8
      "\xed\xa0\x80z",           // an encoded surrogate: not UTF-8 either
      "\xf4\x8f\xbe\x80pua",     // U+10FF80 itself: the escapes' range, kept exact
      "cut\xe2\x82",             // a truncated UTF-8 sequence
      "?lead",
      "a?b",
      "100%",
      "#hash",
      std::string(255, 'L'),
  };
  std::vector<std::string> hrefs;
  for (const std::string& n : names) {
    std::string escaped;  // XRootD escapes XML's own characters and nothing else
    for (char c : n) escaped += c == '&' ? "&amp;" : c == '<' ? "&lt;" : std::string(1, c);
    hrefs.push_back("/ns/d/" + escaped);
  }
  hrefs.push_back("/ns/d/a&amp;b&lt;c&gt;&quot;&apos;");
  const std::string xml = XrootdDir("/ns/d", hrefs);
  std::vector<std::string> expected = names;
  expected.push_back("a&b<c>\"'");
  std::sort(expected.begin(), expected.end());
  // Whole, and fed in chunks of every size from 1 byte (cutting every
  // character and escape somewhere).
  for (size_t chunk : {xml.size(), size_t{1}, size_t{2}, size_t{3}, size_t{7}, size_t{64}}) {
    MultistatusParser parser(HrefStyle{true, "/ns/d"});
    for (size_t i = 0; i < xml.size(); i += chunk) {
      ASSERT_TRUE(parser.Feed(std::string_view(xml).substr(i, chunk))) << "chunk " << chunk;
    }
    auto r = parser.Finish();
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto listing = InterpretListing(std::move(*r), "/ns/d");
    ASSERT_TRUE(listing.ok()) << listing.status().ToString();
    std::vector<std::string> got;
    for (const core::DirEntry& e : listing->children) {
      got.push_back(e.name);
      EXPECT_EQ(e.attr.size, 7u);
    }
    EXPECT_EQ(got, expected) << "chunk " << chunk;
  }
}

// A pretty-printed href (line breaks and indentation around it) is trimmed;
// spaces that end a name on the same line are the name's.
TEST(PropfindTest, HrefWhiteSpaceIsTrimmedOnlyWherePrettyPrinted) {
  const std::string xml = XrootdDir(
      "/ns/d", {"\n    /ns/d/indented\n  ", "/ns/d/two  ", "/ns/d/cr\r\t", "\r\n /ns/d/crlf\r\n "});
  auto r = ParseMultistatus(xml, HrefStyle{true, "/ns/d"});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto listing = InterpretListing(std::move(*r), "/ns/d");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->children.size(), 4u);
  EXPECT_EQ(listing->children[0].name, "cr\r\t");
  EXPECT_EQ(listing->children[1].name, "crlf");
  EXPECT_EQ(listing->children[2].name, "indented");
  EXPECT_EQ(listing->children[3].name, "two  ");
}

// Issue 28, item 1: a directory of 100,000 entries (ImageNet's flat
// validation directory is 50,000) parses whole, fed as the network gives it.
TEST(PropfindTest, LargeListingsParseWholeFromAStream) {
  constexpr int kEntries = 100000;
  std::vector<std::string> hrefs;
  hrefs.reserve(kEntries);
  for (int i = 0; i < kEntries; ++i) {
    hrefs.push_back("/ns/val/ILSVRC2012_val_" + std::to_string(100000000 + i) + ".JPEG");
  }
  const std::string xml = XrootdDir("/ns/val", hrefs);
  MultistatusParser parser(HrefStyle{true, "/ns/val"});
  for (size_t i = 0; i < xml.size(); i += 16384) {
    ASSERT_TRUE(parser.Feed(std::string_view(xml).substr(i, 16384)));
  }
  auto r = parser.Finish();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto listing = InterpretListing(std::move(*r), "/ns/val");
  ASSERT_TRUE(listing.ok()) << listing.status().ToString();
  ASSERT_EQ(listing->children.size(), static_cast<size_t>(kEntries));
  EXPECT_EQ(listing->children.front().name, "ILSVRC2012_val_100000000.JPEG");
  EXPECT_EQ(listing->children.back().name, "ILSVRC2012_val_100099999.JPEG");
}

// A parser stops at the first sign that the answer is unusable, and later
// chunks are ignored (the transfer is cut).
TEST(PropfindTest, AStreamStopsAtTheFirstBadChunk) {
  MultistatusParser parser;
  EXPECT_FALSE(parser.Feed("<html><body>"));
  EXPECT_FALSE(parser.Feed("</body></html>"));
  auto r = parser.Finish();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("multistatus"), std::string::npos);
}

}  // namespace
}  // namespace perch::http
