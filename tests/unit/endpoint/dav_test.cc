// The endpoint's directory documents: a multistatus that perch's own
// PROPFIND parser (which reads XRootD's answers) takes back unchanged, and an
// HTML index whose names cannot break out of their markup.
#include "daemon/endpoint/dav.h"

#include <gtest/gtest.h>

#include "daemon/http/propfind.h"

namespace perch::endpoint {
namespace {

core::ObjectPath P(const char* s) { return *core::ObjectPath::Parse(s); }

TEST(MultistatusTest, RoundTripsThroughPerchsPropfindParser) {
  core::FileAttr dir;
  dir.is_dir = true;
  dir.mtime = 1700000000;
  core::FileAttr file;
  file.size = 12345;
  file.mtime = 1700000001;
  std::vector<DavEntry> children = {{P("/ns/d/a b&<c>.txt"), file}, {P("/ns/d/sub"), dir}};
  std::string xml = Multistatus({P("/ns/d"), dir}, children);
  auto responses = http::ParseMultistatus(xml);
  ASSERT_TRUE(responses.ok()) << responses.status().message() << "\n" << xml;
  auto listing = http::InterpretListing(*responses, "/ns/d");
  ASSERT_TRUE(listing.ok()) << listing.status().message() << "\n" << xml;
  EXPECT_TRUE(listing->self.is_dir);
  ASSERT_EQ(listing->children.size(), 2u) << xml;
  EXPECT_EQ(listing->children[0].name, "a b&<c>.txt");
  EXPECT_FALSE(listing->children[0].attr.is_dir);
  EXPECT_EQ(listing->children[0].attr.size, 12345u);
  EXPECT_EQ(listing->children[0].attr.mtime, 1700000001);
  EXPECT_EQ(listing->children[1].name, "sub");
  EXPECT_TRUE(listing->children[1].attr.is_dir);
}

TEST(MultistatusTest, DepthZeroOfAFile) {
  core::FileAttr file;
  file.size = 7;
  std::string xml = Multistatus({P("/ns/f"), file}, {});
  auto r = http::ParseMultistatus(xml);
  ASSERT_TRUE(r.ok()) << xml;
  ASSERT_EQ(r->size(), 1u);
  EXPECT_EQ((*r)[0].href_path, "/ns/f");
  EXPECT_EQ((*r)[0].attr.size, 7u);
  EXPECT_NE(xml.find("<D:getetag>"), std::string::npos);
}

TEST(HtmlIndexTest, LinksAreEncodedAndNamesEscaped) {
  core::FileAttr file, dir;
  dir.is_dir = true;
  std::string html =
      HtmlIndex(P("/ns/<d>"), {{"x\"><script>.txt", file}, {"sub dir", dir}, {"plain", file}});
  EXPECT_EQ(html.find("<script>"), std::string::npos) << html;
  EXPECT_NE(html.find("href=\"x%22%3E%3Cscript%3E.txt\""), std::string::npos) << html;
  EXPECT_NE(html.find("href=\"sub%20dir/\""), std::string::npos) << html;
  EXPECT_NE(html.find("href=\"plain\""), std::string::npos) << html;
  EXPECT_NE(html.find("Index of /ns/&lt;d&gt;"), std::string::npos) << html;
}

}  // namespace
}  // namespace perch::endpoint
