// The one reader of JSON that people write (base/json_reader.h): its rules,
// and that each bad input is refused with a message naming the JSON path.
#include "base/json_reader.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cubicle::json_read {
namespace {

namespace json = boost::json;

json::value Json(const char* text) { return json::parse(text); }

// The message of a refusal (InvalidArgument), or "(accepted)".
template <typename T>
std::string ErrorOf(const absl::StatusOr<T>& r) {
  if (r.ok()) return "(accepted)";
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  return std::string(r.status().message());
}
std::string ErrorOf(const absl::Status& st) { return st.ok() ? "(accepted)" : std::string(st.message()); }

// --- Parsing ---

TEST(JsonReaderParse, DuplicateKeysStopTheParseNamingThePath) {
  Parsed p = Parse(R"({"a": {"b": [{"c": 1}, {"c": 2, "c": 3}]}})");
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.error, "a.b[1]: duplicate key 'c'");
  p = Parse(R"({"x": 1, "x": 2})");
  EXPECT_EQ(p.error, "(top level): duplicate key 'x'");
  EXPECT_EQ(p.offset, 11u);  // at the second "x"'s closing quote
  // The same key in sibling objects, or at another depth, is fine.
  p = Parse(R"({"k": {"k": 1}, "j": {"k": 2}})");
  ASSERT_TRUE(p.ok()) << p.error;
  EXPECT_EQ(p.value, Json(R"({"k": {"k": 1}, "j": {"k": 2}})"));
}

TEST(JsonReaderParse, DuplicateKeysCanBeRecordedForTheCallerToRefuse) {
  // The first of each element of a top-level array (a batch's requests).
  Parsed p = Parse(R"([{"a": 1, "a": 2, "a": 3}, {"b": {"c": 1, "c": 2}, "b": 0}, {}])",
                   {.duplicates = DuplicateKeys::kRecord});
  ASSERT_TRUE(p.ok()) << p.error;
  ASSERT_EQ(p.duplicates.size(), 2u);
  EXPECT_EQ(FormatPath(p.duplicates[0].object), "[0]");
  EXPECT_EQ(p.duplicates[0].key, "a");
  EXPECT_EQ(FormatPath(p.duplicates[1].object), "[1].b");
  EXPECT_EQ(FormatPath(p.duplicates[1].object, 1), "b");
  EXPECT_EQ(p.duplicates[1].key, "c");
  EXPECT_EQ(p.value, Json(R"([{"a": 3}, {"b": 0}, {}])"));  // the last, as boost::json::parse keeps
  p = Parse(R"({"a": {"x": 1, "x": 2}, "b": {"y": 1, "y": 2}})", {.duplicates = DuplicateKeys::kRecord});
  ASSERT_EQ(p.duplicates.size(), 1u);  // one document, one item
  EXPECT_EQ(FormatPath(p.duplicates[0].object), "a");
}

TEST(JsonReaderParse, ManyKeysInOneObjectAreAllChecked) {
  std::string text = "{";
  for (int i = 0; i < 1000; ++i) absl::StrAppend(&text, "\"k", i, "\": ", i, ",");
  absl::StrAppend(&text, "\"k500\": 0}");
  EXPECT_EQ(Parse(text).error, "(top level): duplicate key 'k500'");
}

TEST(JsonReaderParse, SyntaxDepthCommentsAndExtraData) {
  Parsed p = Parse("{\"a\": [1, 2,]}");
  EXPECT_FALSE(p.ok());
  EXPECT_EQ(p.offset, 12u);
  EXPECT_FALSE(Parse("{} // note").ok());
  EXPECT_TRUE(Parse("{} // note", {.comments = true}).ok());
  EXPECT_EQ(Parse("{} {}").error, "extra data");
  EXPECT_EQ(Parse(std::string(65, '[') + std::string(65, ']')).error, "nesting deeper than 64 levels");
  EXPECT_TRUE(Parse(std::string(64, '[') + std::string(64, ']')).ok());
  EXPECT_FALSE(Parse("\"\xFF\"").ok());
  EXPECT_TRUE(Parse("\"\xFF\"", {.invalid_utf8 = true}).ok());
}

TEST(JsonReaderParse, DocumentErrorsGiveLineAndColumn) {
  EXPECT_EQ(ErrorOf(ParseDocument("{\n  \"a\": 1,\n  \"a\": 2\n}", false)),
            "(top level): duplicate key 'a' (line 3, column 5)");
  EXPECT_EQ(ErrorOf(ParseDocument("{\n  \"a\": x\n}", false)), "invalid JSON at line 2, column 8: syntax error");
  EXPECT_EQ(ErrorOf(ParseDocument("/* c */ {}", true)), "(accepted)");
}

// --- Whole numbers: one rule, whatever the spelling ---

TEST(JsonReaderNumbers, AWholeNumberMayBeSpeltAnyWayJsonAllows) {
  for (const char* text : {"1000", "1e3", "1000.0", "1.0e3", "10000e-1"}) {
    EXPECT_EQ(*Count(Json(text), "n"), 1000u) << text;
    EXPECT_EQ(*Integer(Json(text), "n"), 1000) << text;
  }
  EXPECT_EQ(*Integer(Json("-2e1"), "n"), -20);
  EXPECT_EQ(*Count(Json("18446744073709551615"), "n"), UINT64_MAX);
  EXPECT_EQ(*Count(Json("9007199254740992.0"), "n"), uint64_t{1} << 53);  // 2^53: still exact
}

TEST(JsonReaderNumbers, AnythingElseIsRefusedNamingThePath) {
  const std::pair<const char*, const char*> cases[] = {
      {"1.5", "a.n: expected a whole number, got 1.5"},
      {"\"5\"", "a.n: expected a whole number, got '5'"},
      {"true", "a.n: expected a whole number, got true"},
      {"null", "a.n: expected a whole number, got null"},
      {"[]", "a.n: expected a whole number, got an array"},
      {"-1", "a.n: -1 is negative"},
      {"-1.0", "a.n: -1 is negative"},
      {"101", "a.n: 101 is outside [1, 100]"},
      {"0", "a.n: 0 is outside [1, 100]"},
      {"1e20", "a.n: 1e+20 is outside [1, 100]"},
      {"1e300", "a.n: 1e+300 is outside [1, 100]"},
  };
  for (const auto& [text, message] : cases) EXPECT_EQ(ErrorOf(Count(Json(text), "a.n", 1, 100)), message) << text;
  // Beyond 2^53 a double no longer holds every whole number: only digits.
  EXPECT_EQ(ErrorOf(Count(Json("1e19"), "n")),
            "n: 1e+19 is not exact: write a whole number above 2^53 without a fraction or an exponent");
  EXPECT_EQ(*Count(Json("10000000000000000000"), "n"), 10000000000000000000u);
  // A bound that is only the type's is left out of the message.
  EXPECT_EQ(ErrorOf(Count(Json("0"), "n", 1)), "n: 0 is less than 1");
  EXPECT_EQ(ErrorOf(Integer(Json("5"), "n", std::numeric_limits<int64_t>::min(), 4)), "n: 5 is more than 4");
  EXPECT_EQ(ErrorOf(Integer(Json("-3"), "n", -2, 2)), "n: -3 is outside [-2, 2]");
  EXPECT_EQ(ErrorOf(Integer(Json("9223372036854775808"), "n")),
            "n: 9223372036854775808 is more than 9223372036854775807");
}

TEST(JsonReaderNumbers, MillisAndNumbers) {
  EXPECT_EQ(*Millis(Json("1.5e3"), "t_ms"), absl::Milliseconds(1500));
  EXPECT_EQ(ErrorOf(Millis(Json("0"), "t_ms")), "t_ms: 0 is outside [1, 31536000000]");
  EXPECT_EQ(ErrorOf(Millis(Json("1.5"), "t_ms")), "t_ms: expected a whole number, got 1.5");
  EXPECT_EQ(ErrorOf(Millis(Json("11"), "t_ms", 1, 10)), "t_ms: 11 is outside [1, 10]");
  EXPECT_EQ(*Number(Json("1.5"), "cpus"), 1.5);
  EXPECT_EQ(*Number(Json("2"), "cpus", 0, 4), 2.0);
  EXPECT_EQ(ErrorOf(Number(Json("\"2\""), "cpus")), "cpus: expected a number, got '2'");
  EXPECT_EQ(ErrorOf(Number(Json("5"), "cpus", 0, 4)), "cpus: 5 is outside [0, 4]");
  EXPECT_EQ(ErrorOf(PositiveNumber(Json("0"), "cpus")), "cpus: 0 must be positive");
  EXPECT_EQ(ErrorOf(PositiveNumber(Json("-0.5"), "cpus")), "cpus: -0.5 must be positive");
}

TEST(JsonReaderNumbers, SizesAreSuffixedStringsOrWholeNumbersOfBytes) {
  EXPECT_EQ(*Size(Json("\"512M\""), "m"), 512u << 20);
  EXPECT_EQ(*Size(Json("\"64k\""), "m"), 64u << 10);
  EXPECT_EQ(*Size(Json("1048576"), "m"), 1048576u);
  EXPECT_EQ(*Size(Json("1e6"), "m"), 1000000u);
  EXPECT_EQ(*Size(Json("0"), "m"), 0u);
  for (const char* bad : {"\"12Q\"", "\"1.5M\"", "-1", "1.5", "true", "null", "{}"}) {
    EXPECT_EQ(ErrorOf(Size(Json(bad), "m")),
              absl::StrCat("m: ", Describe(Json(bad)), " is not a size (expected 256M or bytes)"))
        << bad;
  }
  EXPECT_EQ(ErrorOf(PositiveSize(Json("\"0K\""), "m")), "m: must be positive");
}

// --- Strings, booleans, modes, arrays, maps ---

TEST(JsonReaderValues, StringsHoldNoNulAndEchoesAreCut) {
  EXPECT_EQ(*String(Json("\"abc\""), "s"), "abc");
  EXPECT_EQ(ErrorOf(String(Json("\"a\\u0000b\""), "s")), "s: contains a NUL byte");
  EXPECT_EQ(ErrorOf(String(Json("5"), "s")), "s: expected a string, got 5");
  const std::string long_text = absl::StrCat("\"", std::string(100, 'x'), "\"");
  EXPECT_EQ(ErrorOf(Count(json::parse(long_text), "n")),
            absl::StrCat("n: expected a whole number, got '", std::string(64, 'x'), "'..."));
  EXPECT_EQ(Member("p", std::string(100, 'k')), absl::StrCat("p.", std::string(64, 'k'), "..."));
}

TEST(JsonReaderValues, BoolModeArraysAndMaps) {
  EXPECT_TRUE(*Bool(Json("true"), "b"));
  EXPECT_EQ(ErrorOf(Bool(Json("1"), "b")), "b: expected true or false, got 1");
  EXPECT_EQ(ErrorOf(Bool(Json("\"yes\""), "b")), "b: expected true or false, got 'yes'");
  EXPECT_EQ(*Mode(Json("\"0600\""), "mode", 0777), 0600u);
  EXPECT_EQ(ErrorOf(Mode(Json("600"), "mode", 0777)), "mode: expected an octal mode string like \"0600\", got 600");
  EXPECT_EQ(ErrorOf(Mode(Json("\"01777\""), "mode", 0777)),
            "mode: '01777' is not an octal mode (expected e.g. \"0600\", at most 0777)");
  EXPECT_EQ(*StringArray(Json(R"(["a", "b"])"), "argv"), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(ErrorOf(StringArray(Json(R"(["a", 2])"), "argv")), "argv[1]: expected a string, got 2");
  EXPECT_EQ(ErrorOf(StringArray(Json(R"("a")"), "argv")), "argv: expected an array of strings, got 'a'");
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(*StringMap(Json(R"({"B": "2", "A": "1"})"), "env"), (Pairs{{"B", "2"}, {"A", "1"}}));
  EXPECT_EQ(ErrorOf(StringMap(Json(R"({"X": 1})"), "env")), "env.X: expected a string, got 1");
  EXPECT_EQ(ErrorOf(StringMap(Json(R"({"X\u0000": "1"})"), "env")), "env: a key contains a NUL byte");
  EXPECT_EQ(ErrorOf(ForEachElement(Json("{}"), "binds", [](const json::value&, std::string) {
              return absl::OkStatus();
            })),
            "binds: expected an array, got an object");
}

// --- Objects: unknown keys, null ---

TEST(JsonReaderObject, UnknownKeysAreRefusedListingTheKnownOnes) {
  json::value v = Json(R"({"memory": "1G", "memroy": "2G"})");
  EXPECT_EQ(ErrorOf(Object::Open(v, "limits", {"memory", "pids"})),
            "limits.memroy: unknown key (expected one of: memory, pids)");
  EXPECT_EQ(ErrorOf(Object::Open(Json("[]"), "", {"a"})), "(top level): expected an object, got an array");
  EXPECT_EQ(ErrorOf(CheckKeys(v.get_object(), "", {"memory"})),
            "memroy: unknown key (expected one of: memory)");
}

TEST(JsonReaderObject, NullIsAValueUnlessTheDocumentSaysOtherwise) {
  json::value v = Json(R"({"cwd": null, "n": 7})");
  absl::StatusOr<Object> strict = Object::Open(v, "p", {"cwd", "n"});
  ASSERT_TRUE(strict.ok());
  std::string cwd = "/";
  EXPECT_EQ(ErrorOf(strict->Read("cwd", &cwd, String)), "p.cwd: expected a string, got null");
  absl::StatusOr<Object> params = Object::Open(v, "params", {"cwd", "n"}, Null::kMeansAbsent);
  ASSERT_TRUE(params.ok());
  EXPECT_TRUE(params->Read("cwd", &cwd, String).ok());
  EXPECT_EQ(cwd, "/");  // not given: unchanged
  uint32_t n = 0;
  EXPECT_TRUE(params->ReadCount("n", &n, 1, 10).ok());
  EXPECT_EQ(n, 7u);
  std::optional<uint16_t> port;
  EXPECT_TRUE(params->ReadCount("absent", &port, 1, 10).ok());
  EXPECT_FALSE(port.has_value());
  EXPECT_EQ(ErrorOf(params->ReadCount("n", &n, 1, 5)), "params.n: 7 is outside [1, 5]");
}

}  // namespace
}  // namespace cubicle::json_read
