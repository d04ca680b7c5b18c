#include "lib/control/json.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace metaroce::control {
namespace {

Json MustParse(std::string_view text) {
  absl::StatusOr<Json> j = Json::Parse(text);
  EXPECT_TRUE(j.ok()) << text << ": " << j.status();
  return j.ok() ? *j : Json();
}

std::string ParseError(std::string_view text, size_t max_depth = 64) {
  absl::StatusOr<Json> j = Json::Parse(text, max_depth);
  if (j.ok()) return "accepted";
  EXPECT_EQ(j.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(j.status().message());
}

TEST(Json, ParsesScalars) {
  EXPECT_TRUE(MustParse("null").is_null());
  EXPECT_EQ(MustParse("true").AsBool(), true);
  EXPECT_EQ(MustParse(" false ").AsBool(), false);
  EXPECT_EQ(MustParse("\"hi\"").AsString(), "hi");
  EXPECT_EQ(MustParse("1.5").AsDouble(), 1.5);
  EXPECT_EQ(MustParse("-2.5e3").AsDouble(), -2500.0);
  EXPECT_EQ(MustParse("1E2").type(), Json::Type::kDouble);
  EXPECT_EQ(MustParse("0").AsUint(), 0u);
  EXPECT_EQ(MustParse("-0").AsInt(), 0);
}

TEST(Json, IntegersStayExactAtTheirBoundaries) {
  const Json max_int = MustParse("9223372036854775807");
  EXPECT_EQ(max_int.type(), Json::Type::kUint);
  EXPECT_EQ(max_int.AsInt(), std::numeric_limits<int64_t>::max());

  const Json min_int = MustParse("-9223372036854775808");
  EXPECT_EQ(min_int.type(), Json::Type::kInt);
  EXPECT_EQ(min_int.AsInt(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(min_int.AsUint(), std::nullopt);

  const Json max_uint = MustParse("18446744073709551615");
  EXPECT_EQ(max_uint.type(), Json::Type::kUint);
  EXPECT_EQ(max_uint.AsUint(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(max_uint.AsInt(), std::nullopt);
  EXPECT_EQ(max_uint.Dump(), "18446744073709551615");

  const Json above = MustParse("18446744073709551616");
  EXPECT_EQ(above.type(), Json::Type::kDouble);
  EXPECT_EQ(above.AsDouble(), 18446744073709551616.0);
  EXPECT_EQ(above.AsUint(), std::nullopt);

  const Json below = MustParse("-9223372036854775809");
  EXPECT_EQ(below.type(), Json::Type::kDouble);
  EXPECT_EQ(below.AsInt(), std::nullopt);

  EXPECT_EQ(Json(std::numeric_limits<int64_t>::min()).Dump(), "-9223372036854775808");
}

TEST(Json, ScalarReadsConvertOnlyWhatFits) {
  EXPECT_EQ(Json(-1).AsUint(), std::nullopt);
  EXPECT_EQ(Json(7).AsUint(), 7u);
  EXPECT_EQ(Json(7u).AsInt(), 7);
  EXPECT_EQ(Json(7).AsDouble(), 7.0);
  EXPECT_EQ(Json(1.5).AsInt(), std::nullopt);
  EXPECT_EQ(Json("7").AsUint(), std::nullopt);
  EXPECT_EQ(Json(true).AsString(), std::nullopt);
  EXPECT_EQ(Json(1).AsBool(), std::nullopt);
}

TEST(Json, DumpsCompactWithoutSpaces) {
  Json j;
  j["a"] = 1;
  j["b"].Push(true);
  j["b"].Push(nullptr);
  j["b"].Push("x");
  j["c"] = Json::MakeObject();
  j["d"] = -3;
  EXPECT_EQ(j.Dump(), R"({"a":1,"b":[true,null,"x"],"c":{},"d":-3})");
}

// The layout mrperf's --out_json files always had.
TEST(Json, PrettyPrintsLikeMrperf) {
  Json j;
  j["version"] = 1;
  j["sizes"].Push(2);
  j["sizes"].Push(4);
  j["config"]["zero_copy"] = false;
  j["empty"] = Json::MakeArray();
  j["none"] = Json::MakeObject();
  EXPECT_EQ(j.Dump(2),
            "{\n"
            "  \"version\": 1,\n"
            "  \"sizes\": [\n"
            "    2,\n"
            "    4\n"
            "  ],\n"
            "  \"config\": {\n"
            "    \"zero_copy\": false\n"
            "  },\n"
            "  \"empty\": [],\n"
            "  \"none\": {}\n"
            "}");
  EXPECT_EQ(Json(3).Dump(4), "3");
}

TEST(Json, DumpsDoublesWithSixSignificantDigits) {
  EXPECT_EQ(Json(0.1).Dump(), "0.1");
  EXPECT_EQ(Json(12.3456789).Dump(), "12.3457");
  EXPECT_EQ(Json(1e6).Dump(), "1e+06");
  EXPECT_EQ(Json(-0.5).Dump(), "-0.5");
  EXPECT_EQ(Json(2.0).Dump(), "2");
  EXPECT_EQ(Json(std::nan("")).Dump(), "null");
  EXPECT_EQ(Json(std::numeric_limits<double>::infinity()).Dump(), "null");
  EXPECT_EQ(Json(-std::numeric_limits<double>::infinity()).Dump(), "null");
}

TEST(Json, EscapesStringsAndPassesUtf8Through) {
  EXPECT_EQ(Json("a\"b\\c\n\t\r\b\f\x01\x1f").Dump(),
            R"("a\"b\\c\n\t\r\b\f\u0001\u001f")");
  EXPECT_EQ(Json("caf\xc3\xa9 /").Dump(), "\"caf\xc3\xa9 /\"");
  Json key;
  key["new\nline"] = 1;
  EXPECT_EQ(key.Dump(), R"({"new\nline":1})");
}

TEST(Json, DecodesEscapesAndSurrogatePairs) {
  EXPECT_EQ(MustParse(R"("\"\\\/\b\f\n\r\t")").AsString(), "\"\\/\b\f\n\r\t");
  EXPECT_EQ(MustParse(R"("\u0041\u00e9\u20AC")").AsString(), "A\xc3\xa9\xe2\x82\xac");
  EXPECT_EQ(MustParse(R"("\ud83d\ude00")").AsString(), "\xf0\x9f\x98\x80");
  EXPECT_EQ(MustParse(R"("\uDBFF\uDFFF")").AsString(), "\xf4\x8f\xbf\xbf");
  EXPECT_EQ(MustParse(R"("\u0000")").AsString(), std::string_view("\0", 1));
  EXPECT_EQ(MustParse("\"\xf0\x9f\x98\x80 raw\"").AsString(), "\xf0\x9f\x98\x80 raw");
}

TEST(Json, RoundTrips) {
  Json j;
  j["id"] = 7u;
  j["neg"] = -42;
  j["big"] = std::numeric_limits<uint64_t>::max();
  j["min"] = std::numeric_limits<int64_t>::min();
  j["d"] = 0.25;
  j["s"] = "tab\there \xe2\x82\xac \x02";
  j["list"].Push(Json::MakeObject());
  j["list"].Push(Json::MakeArray());
  j["list"].Push(false);
  j["nested"]["deeper"]["x"] = nullptr;
  for (int indent : {-1, 0, 2}) {
    absl::StatusOr<Json> back = Json::Parse(j.Dump(indent));
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(*back, j) << j.Dump(indent);
    EXPECT_EQ(back->Dump(), j.Dump());
  }
}

TEST(Json, NumbersCompareByValue) {
  EXPECT_EQ(Json(1), Json(1u));
  EXPECT_EQ(Json(1), Json(1.0));
  EXPECT_EQ(Json(1u), Json(1.0));
  EXPECT_NE(Json(1), Json(-1));
  EXPECT_NE(Json(-1), Json(std::numeric_limits<uint64_t>::max()));
  EXPECT_NE(Json(1), Json(1.5));
  EXPECT_NE(Json(1), Json("1"));
  EXPECT_NE(Json(true), Json(1));
  EXPECT_EQ(Json::Raw("{}"), Json::Raw("{}"));
  EXPECT_NE(Json::Raw("{}"), Json::MakeObject());
}

struct Rejection {
  std::string text;
  std::string message;
};

TEST(Json, RejectsWhatIsNotJsonAndSaysWhereAndWhy) {
  const Rejection cases[] = {
      {"", "JSON: expected a value, found end of text at byte 0"},
      {"   ", "JSON: expected a value, found end of text at byte 3"},
      {"// comment\n1", "JSON: expected a value, found '/' at byte 0"},
      {"/* c */ 1", "JSON: expected a value, found '/' at byte 0"},
      {"{\"a\":1,}", "JSON: trailing comma in object at byte 7"},
      {"[1,]", "JSON: trailing comma in array at byte 3"},
      {"[1 , ]", "JSON: trailing comma in array at byte 5"},
      {"{\"a\" 1}", "JSON: expected ':' after object key at byte 5"},
      {"{\"version\":1,\"id\" 7}", "JSON: expected ':' after object key at byte 18"},
      {"{a:1}", "JSON: expected a string key, found 'a' at byte 1"},
      {"{\"a\":1 \"b\":2}", "JSON: expected ',' or '}' after object member, found '\"' at byte 7"},
      {"{\"a\":1", "JSON: expected ',' or '}' after object member, found end of text at byte 6"},
      {"[1 2]", "JSON: expected ',' or ']' after array element, found '2' at byte 3"},
      {"[1", "JSON: expected ',' or ']' after array element, found end of text at byte 2"},
      {"{\"a\":1,\"a\":2}", "JSON: duplicate key \"a\" at byte 7"},
      {"01", "JSON: leading zero in number at byte 0"},
      {"-01", "JSON: leading zero in number at byte 1"},
      {"NaN", "JSON: expected a value, found 'N' at byte 0"},
      {"Infinity", "JSON: expected a value, found 'I' at byte 0"},
      {"-Infinity", "JSON: expected a digit after '-' at byte 1"},
      {"+1", "JSON: expected a value, found '+' at byte 0"},
      {".5", "JSON: expected a value, found '.' at byte 0"},
      {"1.", "JSON: expected a digit after '.' at byte 2"},
      {"1.e5", "JSON: expected a digit after '.' at byte 2"},
      {"1e", "JSON: expected a digit in exponent at byte 2"},
      {"1e+", "JSON: expected a digit in exponent at byte 3"},
      {"1e400", "JSON: number out of range of a double at byte 0"},
      {"tru", "JSON: expected 'true' at byte 0"},
      {"nul", "JSON: expected 'null' at byte 0"},
      {"True", "JSON: expected a value, found 'T' at byte 0"},
      {"1 2", "JSON: unexpected text after the JSON value at byte 2"},
      {"{} x", "JSON: unexpected text after the JSON value at byte 3"},
      {"\"abc", "JSON: unterminated string at byte 0"},
      {"\"abc\\", "JSON: unterminated string at byte 4"},
      {"\"a\nb\"", "JSON: control character 0x0a in string (escape it) at byte 2"},
      {"\"a\tb\"", "JSON: control character 0x09 in string (escape it) at byte 2"},
      {"\"\\x\"", "JSON: invalid escape \\x in string at byte 1"},
      {"\"\\'\"", "JSON: invalid escape \\' in string at byte 1"},
      {"\"\\u12\"", "JSON: invalid \\u escape (four hex digits expected) at byte 1"},
      {"\"\\uzzzz\"", "JSON: invalid \\u escape (four hex digits expected) at byte 1"},
      {"\"\\ud800\"", "JSON: unpaired surrogate \\uD800 in string at byte 1"},
      {"\"\\udc00\"", "JSON: unpaired surrogate \\uDC00 in string at byte 1"},
      {"\"\\ud800\\u0041\"", "JSON: unpaired surrogate \\uD800 in string at byte 1"},
      {"\"x\\ud800\\n\"", "JSON: unpaired surrogate \\uD800 in string at byte 2"},
      {"\"\xff\"", "JSON: invalid UTF-8 in string at byte 1"},
      {"\"\xc0\xaf\"", "JSON: invalid UTF-8 in string at byte 1"},          // overlong '/'
      {"\"\xed\xa0\x80\"", "JSON: invalid UTF-8 in string at byte 1"},      // a surrogate
      {"\"\xf4\x90\x80\x80\"", "JSON: invalid UTF-8 in string at byte 1"},  // above U+10FFFF
      {"\"\xe2\x82\"", "JSON: invalid UTF-8 in string at byte 1"},          // truncated
      {"\xef\xbb\xbf{}", "JSON: expected a value, found byte 0xef at byte 0"},  // BOM
  };
  for (const Rejection& c : cases) EXPECT_EQ(ParseError(c.text), c.message) << c.text;
}

TEST(Json, RefusesDuplicateKeysInLargeObjects) {
  std::string text = "{";
  for (int i = 0; i < 40; ++i) text += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  const std::string ok = text + "\"last\":0}";
  EXPECT_EQ(MustParse(ok).size(), 41u);
  EXPECT_EQ(ParseError(text + "\"k3\":0}"), "JSON: duplicate key \"k3\" at byte " +
                                                 std::to_string(text.size()));
}

TEST(Json, BoundsNestingDepth) {
  const std::string deep64 = std::string(64, '[') + std::string(64, ']');
  EXPECT_EQ(MustParse(deep64).size(), 1u);
  const std::string deep65 = std::string(65, '[') + std::string(65, ']');
  EXPECT_EQ(ParseError(deep65), "JSON: nesting deeper than 64 at byte 64");
  EXPECT_EQ(ParseError("{\"a\":{\"b\":[1]}}", 2), "JSON: nesting deeper than 2 at byte 10");
  EXPECT_EQ(ParseError("[[1]]", 2), "accepted");
  // Far deeper than the stack could take without the bound.
  EXPECT_EQ(ParseError(std::string(1'000'000, '[')), "JSON: nesting deeper than 64 at byte 64");
}

TEST(Json, BuildsObjectsAndArraysFromNull) {
  Json j;
  EXPECT_TRUE(j.is_null());
  j["a"]["b"] = 1;
  EXPECT_TRUE(j.is_object());
  EXPECT_EQ(j.Find("a")->Find("b")->AsInt(), 1);
  EXPECT_EQ(j.Find("missing"), nullptr);
  Json list;
  list.Push(1).Push(2);  // Push returns the new element; pushing onto it makes it an array
  EXPECT_TRUE(list.is_array());
  EXPECT_EQ(list.Dump(), "[[2]]");
  EXPECT_EQ(Json(5).size(), 0u);
  EXPECT_TRUE(Json(5).array().empty());
  EXPECT_TRUE(Json(5).object().empty());
  EXPECT_EQ(Json(5).Find("x"), nullptr);
  j["a"] = 2;  // assignment replaces
  EXPECT_EQ(j.Dump(), R"({"a":2})");
  EXPECT_EQ(j.object().size(), 1u);
}

TEST(Json, RawTextIsWrittenAsIs) {
  Json j;
  j["peer"] = Json::Raw(R"({"x": 1})");
  j["none"] = Json::Raw("");
  EXPECT_EQ(j["peer"].type(), Json::Type::kRaw);
  EXPECT_EQ(j.Dump(), R"({"peer":{"x": 1},"none":null})");
}

TEST(Json, TypedMemberReadsNameTheKeyAndWhatWasExpected) {
  const Json p = MustParse(R"({"id":3,"name":"pl0","neg":-2,"flag":true,"text":"3","nil":null,
                               "ratio":0.5})");
  EXPECT_EQ(*p.GetUint("id"), 3u);
  EXPECT_EQ(*p.GetInt("neg"), -2);
  EXPECT_EQ(*p.GetString("name"), "pl0");
  EXPECT_EQ(*p.GetBool("flag"), true);
  EXPECT_EQ(*p.GetDouble("ratio"), 0.5);
  EXPECT_EQ(*p.GetDouble("id"), 3.0);

  EXPECT_EQ(p.GetString("peer").status().message(), "missing \"peer\" (a string)");
  EXPECT_EQ(p.GetUint("nil").status().message(), "missing \"nil\" (an unsigned integer)");
  EXPECT_EQ(p.GetUint("text").status().message(), "\"text\" must be an unsigned integer, not \"3\"");
  EXPECT_EQ(p.GetUint("neg").status().message(), "\"neg\" must be an unsigned integer, not -2");
  EXPECT_EQ(p.GetInt("name").status().message(), "\"name\" must be an integer, not \"pl0\"");
  EXPECT_EQ(p.GetDouble("flag").status().message(), "\"flag\" must be a number, not true");
  EXPECT_EQ(p.GetBool("id").status().message(), "\"id\" must be true or false, not 3");
  EXPECT_EQ(p.GetString("id").status().code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(*p.GetStringOr("peer", "any"), "any");
  EXPECT_EQ(*p.GetStringOr("nil", "any"), "any");
  EXPECT_EQ(*p.GetStringOr("name", "any"), "pl0");
  EXPECT_EQ(*p.GetUintOr("paths", 8), 8u);
  EXPECT_EQ(*p.GetUintOr("id", 8), 3u);
  EXPECT_EQ(*p.GetBoolOr("verbose", true), true);
  EXPECT_EQ(p.GetUintOr("name", 8).status().message(),
            "\"name\" must be an unsigned integer, not \"pl0\"");
  EXPECT_EQ(p.GetBoolOr("id", false).status().code(), absl::StatusCode::kInvalidArgument);

  // Long values are shortened in messages.
  const Json long_value = MustParse("{\"id\":\"" + std::string(100, 'x') + "\"}");
  EXPECT_EQ(long_value.GetUint("id").status().message(),
            "\"id\" must be an unsigned integer, not \"" + std::string(39, 'x') + "...");
}

}  // namespace
}  // namespace metaroce::control
