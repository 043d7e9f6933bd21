#include "transfer/classad.h"

#include <gtest/gtest.h>

#include <string>

namespace perch::transfer {
namespace {

using Kind = ClassAdValue::Kind;

std::string Url(const ClassAd& ad) { return **ad.GetString("Url"); }

TEST(ClassAdTest, OneAdPerLineAsHTCondorWritesThem) {
  auto ads = ParseClassAds(
      "[ LocalFileName = \"/execute/dir_1/a.bin\"; Url = \"osdf:///ns/a.bin\" ]\n"
      "[ LocalFileName = \"/execute/dir_1/b.bin\"; Url = \"pelican://fed:8443/ns/b.bin\" ]\n");
  ASSERT_TRUE(ads.ok()) << ads.status().ToString();
  ASSERT_EQ(ads->size(), 2u);
  EXPECT_EQ(Url((*ads)[0]), "osdf:///ns/a.bin");
  EXPECT_EQ(**(*ads)[1].GetString("LocalFileName"), "/execute/dir_1/b.bin");
}

TEST(ClassAdTest, MultiLineAdsCommentsAndATrailingSemicolon) {
  auto ads = ParseClassAds(
      "// written by hand\n"
      "[\n  Url = \"stash:///x\";   /* the source */\n  LocalFileName = \"x\";\n]\n\n"
      "[ ]\n");
  ASSERT_TRUE(ads.ok()) << ads.status().ToString();
  ASSERT_EQ(ads->size(), 2u);
  EXPECT_EQ(Url((*ads)[0]), "stash:///x");
  EXPECT_TRUE((*ads)[1].attributes().empty());
  EXPECT_TRUE(ParseClassAds("").ok());
  EXPECT_TRUE(ParseClassAds("  \n\t").value().empty());
}

TEST(ClassAdTest, AttributeNamesAreCaseInsensitive) {
  auto ads = ParseClassAds("[ URL = \"osdf:///a\"; localfilename = \"a\" ]");
  ASSERT_TRUE(ads.ok());
  EXPECT_EQ(**(*ads)[0].GetString("Url"), "osdf:///a");
  EXPECT_EQ(**(*ads)[0].GetString("LocalFileName"), "a");
  EXPECT_FALSE((*ads)[0].GetString("Missing")->has_value());
  auto quoted = ParseClassAds("[ 'Url' = \"osdf:///q\" ]");
  ASSERT_TRUE(quoted.ok()) << quoted.status().ToString();
  EXPECT_EQ(Url((*quoted)[0]), "osdf:///q");
}

TEST(ClassAdTest, StringEscapes) {
  auto ads =
      ParseClassAds(R"([ A = "q\"uote\\back"; B = "tab\tnl\n"; C = "oct\101\7x"; D = "it\'s" ])");
  ASSERT_TRUE(ads.ok()) << ads.status().ToString();
  const ClassAd& ad = (*ads)[0];
  EXPECT_EQ(**ad.GetString("A"), "q\"uote\\back");
  EXPECT_EQ(**ad.GetString("B"), "tab\tnl\n");
  EXPECT_EQ(**ad.GetString("C"), "octA\7x");
  EXPECT_EQ(**ad.GetString("D"), "it's");
}

TEST(ClassAdTest, LiteralsOfEveryKind) {
  auto ads = ParseClassAds(
      "[ S = \"s\"; T = TRUE; F = false; I = -42; H = 0x1f; R = 2.5e3; U = undefined; "
      "E = error; N = [ a = 1; b = \"]\" ]; L = { 1, [ c = 2 ], \"}\" } ]");
  ASSERT_TRUE(ads.ok()) << ads.status().ToString();
  const ClassAd& ad = (*ads)[0];
  EXPECT_EQ(ad.Find("S")->kind, Kind::kString);
  EXPECT_TRUE(ad.Find("T")->boolean);
  EXPECT_EQ(ad.Find("F")->kind, Kind::kBool);
  EXPECT_FALSE(ad.Find("F")->boolean);
  EXPECT_EQ(ad.Find("I")->integer, -42);
  EXPECT_EQ(ad.Find("H")->integer, 31);
  EXPECT_EQ(ad.Find("R")->kind, Kind::kReal);
  EXPECT_DOUBLE_EQ(ad.Find("R")->real, 2500.0);
  EXPECT_EQ(ad.Find("U")->kind, Kind::kUndefined);
  EXPECT_EQ(ad.Find("E")->kind, Kind::kError);
  EXPECT_EQ(ad.Find("N")->kind, Kind::kAd);
  EXPECT_EQ(ad.Find("N")->text, "[ a = 1; b = \"]\" ]");
  EXPECT_EQ(ad.Find("L")->kind, Kind::kList);
}

TEST(ClassAdTest, ExpressionsOfUnknownAttributesAreKeptNotRefused) {
  // Newer HTCondors may add attributes; a plugin ignores what it does not know.
  auto ads = ParseClassAds(
      "[ Url = \"osdf:///a\"; LocalFileName = \"a\"; X = strcat(\"a;\", \"]\") + 1; "
      "Y = [a] + [b]; Z = MY.Foo =?= undefined ]");
  ASSERT_TRUE(ads.ok()) << ads.status().ToString();
  const ClassAd& ad = (*ads)[0];
  EXPECT_EQ(ad.Find("X")->kind, Kind::kExpression);
  EXPECT_EQ(ad.Find("X")->text, "strcat(\"a;\", \"]\") + 1");
  EXPECT_EQ(ad.Find("Y")->kind, Kind::kExpression);
  EXPECT_EQ(ad.Find("Z")->kind, Kind::kExpression);
  EXPECT_EQ(Url(ad), "osdf:///a");
}

TEST(ClassAdTest, AUrlThatIsNotAStringLiteralIsAnError) {
  auto ads = ParseClassAds("[ Url = strcat(\"osdf://\", \"/a\"); LocalFileName = 3 ]");
  ASSERT_TRUE(ads.ok());
  auto url = (*ads)[0].GetString("Url");
  ASSERT_FALSE(url.ok());
  EXPECT_NE(url.status().message().find("not a string literal"), std::string::npos);
  EXPECT_FALSE((*ads)[0].GetString("LocalFileName").ok());
}

// Each malformed input is refused with a message naming where and what.
TEST(ClassAdTest, MalformedInputIsRefusedWithLineAndColumn) {
  using namespace std::string_literals;
  struct Case {
    std::string text;
    const char* message;
  };
  const Case cases[] = {
      {"Url = \"x\"", "line 1, column 1: expected '['"},
      {"[ Url = \"x\" ] junk", "line 1, column 15: expected '['"},
      {"[ Url = \"x\"", "expected ';' or ']'"},
      {"[ Url \"x\" ]", "expected '=' after attribute name 'Url'"},
      {"[ Url = \"x\" LocalFileName = \"y\" ]", "expected ';' or ']' after the value of 'Url'"},
      {"[ Url = \"x ]\n", "line 1, column 9: unterminated string"},
      {"[ Url = ]", "attribute 'Url' has no value"},
      {"[ 1Url = \"x\" ]", "expected an attribute name"},
      {"[ Url = \"a\\qb\" ]", "unknown escape '\\q'"},
      {"[ Url = \"a\\000b\" ]", "encoded NUL"},
      {"[ Url = \"a\0b\" ]"s, "line 1, column 11: NUL byte in a string"},
      {"[ Url = \"x\"; url = \"y\" ]", "attribute 'url' given twice"},
      {"[ A = (1 ]", "unbalanced ']'"},
      {"[ A = (1; B = 2", "expected ')'"},
      {"[ A = 99999999999999999999 ]", "out of range"},
      {"/* never closed [ A = 1 ]", "unterminated /* comment"},
      {"[\n  A = 1;\n  B = \"x\\\n", "line 3, column 10: unknown escape '\\\\n'"},
      {"[\n  A = 1;\n  B = \"x\\", "line 3, column 7: unterminated string"},
  };
  for (const Case& c : cases) {
    auto ads = ParseClassAds(c.text);
    ASSERT_FALSE(ads.ok()) << c.text;
    EXPECT_EQ(ads.status().code(), core::StatusCode::kInvalidArgument);
    EXPECT_NE(ads.status().message().find(c.message), std::string::npos)
        << c.text << " -> " << ads.status().message();
    EXPECT_EQ(ads.status().message().rfind("line ", 0), 0u) << ads.status().message();
  }
}

TEST(ClassAdTest, BoundsOnNestingAndSize) {
  std::string deep = "[ A = " + std::string(40, '(') + "1" + std::string(40, ')') + " ]";
  auto ads = ParseClassAds(deep);
  ASSERT_FALSE(ads.ok());
  EXPECT_NE(ads.status().message().find("nested deeper than 32"), std::string::npos);
  std::string big(kMaxClassAdInput + 1, ' ');
  EXPECT_FALSE(ParseClassAds(big).ok());
  std::string many = "[ ";
  for (size_t i = 0; i <= kMaxAttributes; ++i) many += "A" + std::to_string(i) + " = 1; ";
  many += "]";
  auto too_many = ParseClassAds(many);
  ASSERT_FALSE(too_many.ok());
  EXPECT_NE(too_many.status().message().find("more than 4096 attributes"), std::string::npos);
}

TEST(ClassAdTest, WhatItWritesItReadsBack) {
  ClassAd inner;
  inner.Set("Retryable", ClassAdValue::Integer(-1));
  ClassAd ad;
  ad.Set("TransferUrl", ClassAdValue::String("osdf:///a \"b\"\\c\n\x01"));
  ad.Set("TransferSuccess", ClassAdValue::Bool(false));
  ad.Set("TransferFileBytes", ClassAdValue::Integer(1234567890123));
  ad.Set("DeveloperData", ClassAdValue::Nested(inner));
  ad.Set("TransferErrorData", ClassAdValue::ListOf({inner, inner}));
  ad.Set("transferurl", ClassAdValue::String("osdf:///a \"b\"\\c\n\x01"));  // replaces
  EXPECT_EQ(ad.attributes().size(), 5u);
  std::string text = ad.Unparse();
  EXPECT_EQ(text.find('\n'), std::string::npos) << text;
  auto back = ParseClassAds(text + "\n" + text);
  ASSERT_TRUE(back.ok()) << back.status().ToString() << "\n" << text;
  ASSERT_EQ(back->size(), 2u);
  const ClassAd& b = (*back)[0];
  EXPECT_EQ(**b.GetString("TransferUrl"), "osdf:///a \"b\"\\c\n\x01");
  EXPECT_FALSE(b.Find("TransferSuccess")->boolean);
  EXPECT_EQ(b.Find("TransferFileBytes")->integer, 1234567890123);
  EXPECT_EQ(b.Find("DeveloperData")->kind, Kind::kAd);
  EXPECT_EQ(b.Find("TransferErrorData")->kind, Kind::kList);
  EXPECT_EQ(b.Find("TransferErrorData")->text, "{ [ Retryable = -1 ], [ Retryable = -1 ] }");
}

}  // namespace
}  // namespace perch::transfer
