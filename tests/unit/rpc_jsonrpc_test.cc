#include "rpc/jsonrpc.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include <string>
#include <vector>

namespace cubicle::rpc {
namespace {

constexpr std::size_t kNoLimit = std::size_t{1} << 30;

boost::json::value Json(const char* text) { return boost::json::parse(text); }

Incoming Parse(absl::string_view line) { return ParseLine(line, kNoLimit); }

// The single entry of a non-batch line.
Entry One(absl::string_view line) {
  Incoming in = Parse(line);
  EXPECT_FALSE(in.batch) << line;
  EXPECT_EQ(in.entries.size(), 1u) << line;
  return in.entries.empty() ? Entry{} : in.entries.front();
}

// What a daemon would write back for `line`, dispatching every valid call to a
// handler that answers with the method's name: the spec's examples, end to end.
std::string Serve(absl::string_view line) {
  Incoming in = Parse(line);
  std::vector<std::string> replies;
  for (const Entry& e : in.entries) {
    if (!e.NeedsReply()) continue;
    replies.push_back(e.error ? ErrorReply(e.call.id, *e.error) : Result(e.call.id, boost::json::value(e.call.method)));
  }
  if (in.batch) return Batch(replies);
  return replies.empty() ? std::string() : replies.front();
}

void ExpectError(const Entry& e, int code, const boost::json::value& id) {
  ASSERT_TRUE(e.error.has_value()) << e.call.method;
  EXPECT_EQ(e.error->code, code) << e.error->message;
  EXPECT_EQ(e.call.id, id) << boost::json::serialize(e.call.id);
  EXPECT_TRUE(e.NeedsReply());
}

// --- The examples of the JSON-RPC 2.0 specification, §7 ---

TEST(JsonRpcSpecExamples, PositionalParams) {
  Entry e = One(R"({"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1})");
  ASSERT_FALSE(e.error.has_value()) << e.error->message;
  EXPECT_EQ(e.call.method, "subtract");
  EXPECT_EQ(e.call.params, Json("[42,23]"));
  EXPECT_EQ(e.call.id, boost::json::value(1));
  EXPECT_FALSE(e.call.notification);
  EXPECT_EQ(Result(e.call.id, 19), R"({"jsonrpc":"2.0","id":1,"result":19})");
}

TEST(JsonRpcSpecExamples, NamedParams) {
  Entry e = One(R"({"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3})");
  ASSERT_FALSE(e.error.has_value());
  EXPECT_EQ(e.call.params, Json(R"({"subtrahend":23,"minuend":42})"));
  EXPECT_EQ(e.call.id, boost::json::value(3));
}

TEST(JsonRpcSpecExamples, Notifications) {
  Entry e = One(R"({"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]})");
  ASSERT_FALSE(e.error.has_value());
  EXPECT_TRUE(e.call.notification);
  EXPECT_FALSE(e.NeedsReply());
  EXPECT_TRUE(e.call.id.is_null());
  EXPECT_EQ(e.call.method, "update");
  EXPECT_EQ(Serve(R"({"jsonrpc": "2.0", "method": "foobar"})"), "");
}

TEST(JsonRpcSpecExamples, NonExistentMethodIsTheHandlersJob) {
  Entry e = One(R"({"jsonrpc": "2.0", "method": "foobar", "id": "1"})");
  ASSERT_FALSE(e.error.has_value());
  EXPECT_EQ(e.call.method, "foobar");
  EXPECT_EQ(e.call.id, boost::json::value("1"));
  EXPECT_TRUE(e.call.params.is_null());
}

TEST(JsonRpcSpecExamples, InvalidJson) {
  EXPECT_EQ(Serve(R"({"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz])"),
            R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error at offset 39: syntax error"}})");
}

TEST(JsonRpcSpecExamples, InvalidRequestObject) {
  Entry e = One(R"({"jsonrpc": "2.0", "method": 1, "params": "bar"})");
  ExpectError(e, kInvalidRequest, nullptr);
  EXPECT_EQ(e.error->message, "method: expected a string");
}

TEST(JsonRpcSpecExamples, BatchWithInvalidJson) {
  Incoming in = Parse(R"([
    {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
    {"jsonrpc": "2.0", "method")");
  EXPECT_FALSE(in.batch);
  ASSERT_EQ(in.entries.size(), 1u);
  ExpectError(in.entries[0], kParseError, nullptr);
}

TEST(JsonRpcSpecExamples, EmptyArray) {
  Incoming in = Parse("[]");
  EXPECT_FALSE(in.batch);
  ASSERT_EQ(in.entries.size(), 1u);
  ExpectError(in.entries[0], kInvalidRequest, nullptr);
  EXPECT_EQ(Serve("[]"), R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"empty batch"}})");
}

TEST(JsonRpcSpecExamples, NonEmptyInvalidBatch) {
  Incoming in = Parse("[1]");
  EXPECT_TRUE(in.batch);
  ASSERT_EQ(in.entries.size(), 1u);
  ExpectError(in.entries[0], kInvalidRequest, nullptr);
  EXPECT_EQ(Serve("[1]"),
            R"([{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"request: expected an object"}}])");
}

TEST(JsonRpcSpecExamples, InvalidBatch) {
  Incoming in = Parse("[1,2,3]");
  EXPECT_TRUE(in.batch);
  ASSERT_EQ(in.entries.size(), 3u);
  for (const Entry& e : in.entries) ExpectError(e, kInvalidRequest, nullptr);
}

TEST(JsonRpcSpecExamples, MixedBatch) {
  const char* line = R"([
    {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
    {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
    {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
    {"foo": "boo"},
    {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
    {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
  ])";
  Incoming in = Parse(line);
  EXPECT_TRUE(in.batch);
  ASSERT_EQ(in.entries.size(), 6u);
  EXPECT_TRUE(in.entries[1].call.notification);
  ExpectError(in.entries[3], kInvalidRequest, nullptr);
  EXPECT_EQ(in.entries[4].call.params, Json(R"({"name":"myself"})"));
  EXPECT_EQ(Serve(line),
            R"([{"jsonrpc":"2.0","id":"1","result":"sum"},)"
            R"({"jsonrpc":"2.0","id":"2","result":"subtract"},)"
            R"({"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"jsonrpc: expected \"2.0\""}},)"
            R"({"jsonrpc":"2.0","id":"5","result":"foo.get"},)"
            R"({"jsonrpc":"2.0","id":"9","result":"get_data"}])");
}

TEST(JsonRpcSpecExamples, AllNotificationBatch) {
  const char* line = R"([
    {"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},
    {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}
  ])";
  Incoming in = Parse(line);
  EXPECT_TRUE(in.batch);
  ASSERT_EQ(in.entries.size(), 2u);
  EXPECT_FALSE(in.entries[0].NeedsReply());
  EXPECT_FALSE(in.entries[1].NeedsReply());
  EXPECT_EQ(Serve(line), "");
}

// --- Request validation ---

TEST(JsonRpcParse, ReservedMethodNames) {
  Entry e = One(R"({"jsonrpc":"2.0","method":"rpc.discover","id":7})");
  ExpectError(e, kMethodNotFound, 7);
  EXPECT_EQ(e.error->message, R"(method "rpc.discover" is reserved)");
  EXPECT_EQ(e.call.method, "rpc.discover");

  // A notification is never answered, not even with an error.
  e = One(R"({"jsonrpc":"2.0","method":"rpc.discover"})");
  ASSERT_TRUE(e.error.has_value());
  EXPECT_EQ(e.error->code, kMethodNotFound);
  EXPECT_TRUE(e.call.notification);
  EXPECT_FALSE(e.NeedsReply());
  EXPECT_EQ(Serve(R"({"jsonrpc":"2.0","method":"rpc.discover"})"), "");

  for (const char* method : {"rpc", "rpcx", "RPC.x", "x.rpc.y", ""}) {
    boost::json::object request{{"jsonrpc", "2.0"}, {"method", method}, {"id", 1}};
    EXPECT_FALSE(One(boost::json::serialize(request)).error.has_value()) << method;
  }
}

TEST(JsonRpcParse, ValidIdTypes) {
  struct Case {
    const char* id;
    boost::json::value want;
  };
  for (const Case& c : {Case{R"("abc")", "abc"}, Case{R"("")", ""}, Case{"0", 0}, Case{"-17", -17},
                        Case{"9223372036854775807", INT64_MAX}, Case{"18446744073709551615", UINT64_MAX},
                        Case{"null", nullptr}}) {
    Entry e = One(std::string(R"({"jsonrpc":"2.0","method":"m","id":)") + c.id + "}");
    EXPECT_FALSE(e.error.has_value()) << c.id;
    EXPECT_FALSE(e.call.notification) << c.id;
    EXPECT_EQ(e.call.id, c.want) << c.id;
    EXPECT_EQ(e.call.id.kind(), c.want.kind()) << c.id;
  }
  // A null id is a call, not a notification: it is answered, with id null.
  EXPECT_EQ(Serve(R"({"jsonrpc":"2.0","method":"m","id":null})"), R"({"jsonrpc":"2.0","id":null,"result":"m"})");
}

TEST(JsonRpcParse, InvalidIdTypes) {
  for (const char* id : {"{}", R"({"a":1})", "[]", "[1]", "1.5", "1.0", "1e2", "true", "18446744073709551616"}) {
    Entry e = One(std::string(R"({"jsonrpc":"2.0","method":"m","id":)") + id + "}");
    ExpectError(e, kInvalidRequest, nullptr);
    EXPECT_EQ(e.error->message, "id: expected a string, an integer or null") << id;
    EXPECT_FALSE(e.call.notification) << id;
  }
}

TEST(JsonRpcParse, JsonrpcMember) {
  for (const char* version : {"", R"(,"jsonrpc":"1.0")", R"(,"jsonrpc":2.0)", R"(,"jsonrpc":"2.0 ")",
                              R"(,"jsonrpc":null)"}) {
    Entry e = One(std::string(R"({"method":"m","id":4)") + version + "}");
    ExpectError(e, kInvalidRequest, 4);
    EXPECT_EQ(e.error->message, R"(jsonrpc: expected "2.0")") << version;
  }
}

TEST(JsonRpcParse, MethodMember) {
  for (const char* method : {"", R"(,"method":null)", R"(,"method":["m"])", R"(,"method":{})"}) {
    Entry e = One(std::string(R"({"jsonrpc":"2.0","id":"x")") + method + "}");
    ExpectError(e, kInvalidRequest, "x");
    EXPECT_EQ(e.error->message, "method: expected a string") << method;
  }
}

TEST(JsonRpcParse, ParamsMustBeStructured) {
  for (const char* params : {R"("bar")", "1", "true", "null"}) {
    Entry e = One(std::string(R"({"jsonrpc":"2.0","method":"m","id":2,"params":)") + params + "}");
    ExpectError(e, kInvalidRequest, 2);
    EXPECT_EQ(e.error->message, "params: expected an object or an array") << params;
  }
  // Invalid requests are answered even when they have no id.
  Entry e = One(R"({"jsonrpc":"2.0","method":"m","params":"bar"})");
  ExpectError(e, kInvalidRequest, nullptr);
  EXPECT_FALSE(e.call.notification);
  EXPECT_TRUE(One(R"({"jsonrpc":"2.0","method":"m","id":2,"params":[]})").call.params.is_array());
  EXPECT_TRUE(One(R"({"jsonrpc":"2.0","method":"m","id":2,"params":{}})").call.params.is_object());
}

TEST(JsonRpcParse, ExtraMemberIsInvalid) {
  Entry e = One(R"({"jsonrpc":"2.0","method":"m","id":9,"result":1})");
  ExpectError(e, kInvalidRequest, 9);
  EXPECT_EQ(e.error->message, R"(unexpected member "result")");
  const std::string long_key(100, 'k');
  e = One(R"({"jsonrpc":"2.0","method":"m","id":9,")" + long_key + R"(":1})");
  EXPECT_EQ(e.error->message, "unexpected member \"" + std::string(64, 'k') + "\"...");
}

TEST(JsonRpcParse, NonObjectRequest) {
  for (const char* line : {"1", R"("x")", "null", "true"}) {
    Entry e = One(line);
    ExpectError(e, kInvalidRequest, nullptr);
    EXPECT_EQ(e.error->message, "request: expected an object") << line;
  }
}

TEST(JsonRpcParse, BomCrlfAndWhitespace) {
  for (const char* line : {"\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}\r\n",
                           "{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}\r",
                           "  \t{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}  \n",
                           "\xEF\xBB\xBF [{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}] \r\n"}) {
    Incoming in = Parse(line);
    ASSERT_EQ(in.entries.size(), 1u) << line;
    EXPECT_FALSE(in.entries[0].error.has_value()) << in.entries[0].error->message;
    EXPECT_EQ(in.entries[0].call.id, boost::json::value(1));
  }
  // The BOM is only skipped where a BOM can be: first.
  ExpectError(One(" \xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}"), kParseError, nullptr);
  // The error offset counts from the start of the line, BOM included.
  EXPECT_EQ(One("\xEF\xBB\xBF  {x}").error->message, "parse error at offset 6: syntax error");
}

TEST(JsonRpcParse, BlankLinesAreIgnored) {
  for (const char* line : {"", "\n", "\r\n", "   \t", "\xEF\xBB\xBF", "\xEF\xBB\xBF\r\n"}) {
    Incoming in = Parse(line);
    EXPECT_FALSE(in.batch);
    EXPECT_TRUE(in.entries.empty()) << line;
    EXPECT_EQ(Serve(line), "");
  }
}

TEST(JsonRpcParse, LineTooLong) {
  const std::string line = R"({"jsonrpc":"2.0","method":"m","id":1})";  // 37 bytes
  ASSERT_EQ(line.size(), 37u);
  Incoming in = ParseLine(line, 36);
  EXPECT_FALSE(in.batch);
  ASSERT_EQ(in.entries.size(), 1u);
  ExpectError(in.entries[0], kLineTooLong, nullptr);
  EXPECT_EQ(in.entries[0].error->message, "line longer than 36 bytes");
  // The terminator does not count; the limit is inclusive.
  EXPECT_FALSE(ParseLine(line + "\r\n", 37).entries.at(0).error.has_value());
  // Not even parsed: garbage over the limit is "too long", not "parse error".
  ExpectError(ParseLine("{{{{", 3).entries.at(0), kLineTooLong, nullptr);
  EXPECT_EQ(LineTooLongError(1 << 20).code, kLineTooLong);
  EXPECT_EQ(LineTooLongError(1 << 20).message, "line longer than 1048576 bytes");
}

TEST(JsonRpcParse, InvalidUtf8IsAParseError) {
  for (const char* bad : {"\xC3\x28",           // bad continuation
                          "\xC0\xAF",           // overlong '/'
                          "\xE0\x80\xAF",       // overlong, 3 bytes
                          "\xED\xA0\x80",       // UTF-16 surrogate
                          "\xF4\x90\x80\x80",   // above U+10FFFF
                          "\x80",               // lone continuation
                          "\xFF", "\xE2\x82"})  // truncated
  {
    const std::string line = std::string(R"({"jsonrpc":"2.0","method":"m)") + bad + R"(","id":1})";
    Entry e = One(line);
    ExpectError(e, kParseError, nullptr);
    EXPECT_EQ(e.error->message, "invalid UTF-8 at offset 28") << line;
  }
  // Outside strings, too.
  ExpectError(One("{\"jsonrpc\":\"2.0\",\"method\":\"m\",\"id\":1}\xFF"), kParseError, nullptr);
  // Escaped lone surrogates are not text either.
  ExpectError(One(R"({"jsonrpc":"2.0","method":"m\ud800","id":1})"), kParseError, nullptr);
  // Valid multi-byte text, including the largest code point, is fine.
  Entry e = One("{\"jsonrpc\":\"2.0\",\"method\":\"\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF\",\"id\":1}");
  ASSERT_FALSE(e.error.has_value()) << e.error->message;
  EXPECT_EQ(e.call.method, "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80\xF4\x8F\xBF\xBF");
}

TEST(JsonRpcParse, DeepNestingIsBounded) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  Entry e = One(deep);
  ExpectError(e, kParseError, nullptr);
  EXPECT_EQ(e.error->message, "parse error at offset 64: nesting deeper than 64 levels");
  ExpectError(One(std::string(100000, '[')), kParseError, nullptr);
  ExpectError(One(std::string(100000, '{')), kParseError, nullptr);
  // kMaxDepth levels parse (this one is then a batch of one invalid request).
  Incoming in = Parse(std::string(kMaxDepth, '[') + std::string(kMaxDepth, ']'));
  EXPECT_TRUE(in.batch);
  ASSERT_EQ(in.entries.size(), 1u);
  ExpectError(in.entries[0], kInvalidRequest, nullptr);
  ExpectError(One(std::string(kMaxDepth + 1, '[') + std::string(kMaxDepth + 1, ']')), kParseError, nullptr);
}

TEST(JsonRpcParse, BatchSizeIsBounded) {
  std::string line = "[1";
  for (std::size_t i = 1; i < kMaxBatch; ++i) line += ",1";
  Incoming in = Parse(line + "]");
  EXPECT_TRUE(in.batch);
  EXPECT_EQ(in.entries.size(), kMaxBatch);
  in = Parse(line + ",1]");
  EXPECT_FALSE(in.batch);
  ASSERT_EQ(in.entries.size(), 1u);
  ExpectError(in.entries[0], kInvalidRequest, nullptr);
  EXPECT_EQ(in.entries[0].error->message, "batch of 1025 requests; at most 1024");
  // Nested arrays are not batches: each is one invalid request.
  in = Parse(R"([[{"jsonrpc":"2.0","method":"m","id":1}]])");
  EXPECT_TRUE(in.batch);
  ASSERT_EQ(in.entries.size(), 1u);
  ExpectError(in.entries[0], kInvalidRequest, nullptr);
}

TEST(JsonRpcParse, TrailingGarbage) {
  ExpectError(One(R"({"jsonrpc":"2.0","method":"m","id":1} {})"), kParseError, nullptr);
  ExpectError(One(R"({"jsonrpc":"2.0","method":"m","id":1},)"), kParseError, nullptr);
}

// --- Replies ---

TEST(JsonRpcReply, Result) {
  EXPECT_EQ(Result("abc", Json(R"({"a":[1,"x",null]})")), R"({"jsonrpc":"2.0","id":"abc","result":{"a":[1,"x",null]}})");
  EXPECT_EQ(Result(nullptr, nullptr), R"({"jsonrpc":"2.0","id":null,"result":null})");
  EXPECT_EQ(Result(UINT64_MAX, true), R"({"jsonrpc":"2.0","id":18446744073709551615,"result":true})");
}

TEST(JsonRpcReply, ErrorReply) {
  EXPECT_EQ(ErrorReply(5, Error{kBusy, "busy", nullptr}),
            R"({"jsonrpc":"2.0","id":5,"error":{"code":-32000,"message":"busy"}})");
  EXPECT_EQ(ErrorReply("k", Error{kDuplicateKey, "dup", Json(R"({"execution":"e1"})")}),
            R"({"jsonrpc":"2.0","id":"k","error":{"code":-32003,"message":"dup","data":{"execution":"e1"}}})");
  // Newlines and quotes are escaped: a reply is always one line.
  EXPECT_EQ(ErrorReply(1, Error{kSetupFailed, "a\n\"b\"\r", nullptr}),
            R"({"jsonrpc":"2.0","id":1,"error":{"code":-32001,"message":"a\n\"b\"\r"}})");
}

TEST(JsonRpcReply, RepairsInvalidUtf8AndNonFiniteNumbers) {
  // An errno message or a path may carry any bytes; the reply must stay UTF-8.
  const std::string reply = ErrorReply(1, Error{kSetupFailed, "open(/x\xFF\xC3): ENOENT", nullptr});
  EXPECT_EQ(reply, "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":-32001,"
                   "\"message\":\"open(/x\xEF\xBF\xBD\xEF\xBF\xBD): ENOENT\"}}");
  EXPECT_EQ(Result(1, "\xE2\x82"), "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"\xEF\xBF\xBD\xEF\xBF\xBD\"}");
  // Boost.JSON would write Infinity and NaN, which are not JSON.
  boost::json::object r{{"a", std::numeric_limits<double>::infinity()},
                        {"b", boost::json::array{-std::numeric_limits<double>::infinity(), 1.5}},
                        {"c", std::nan("")},
                        {"d", "NaN and Infinity as text stay"}};
  EXPECT_EQ(Result(1, r),
            R"({"jsonrpc":"2.0","id":1,"result":{"a":null,"b":[null,1.5E0],"c":null,"d":"NaN and Infinity as text stay"}})");
  // Every reply parses back.
  EXPECT_FALSE(Parse(Result(1, r)).entries.empty());
}

TEST(JsonRpcReply, Request) {
  EXPECT_EQ(Request(7, "tools/call", Json(R"({"name":"x"})")),
            R"({"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"x"}})");
  EXPECT_EQ(Request("a", "ping", nullptr), R"({"jsonrpc":"2.0","id":"a","method":"ping"})");
  // Round trip through the parser.
  Entry e = One(Request(7, "tools/call", Json("[1,2]")));
  ASSERT_FALSE(e.error.has_value());
  EXPECT_EQ(e.call.method, "tools/call");
  EXPECT_EQ(e.call.params, Json("[1,2]"));
}

TEST(JsonRpcReply, Batch) {
  EXPECT_EQ(Batch({}), "");
  EXPECT_EQ(Batch({"{\"a\":1}"}), "[{\"a\":1}]");
  EXPECT_EQ(Batch({"{\"a\":1}", "{\"b\":2}"}), "[{\"a\":1},{\"b\":2}]");
}

// --- Duplicate keys: refused as the config refuses them ---

TEST(JsonRpcDuplicateKeys, InParamsAreInvalidParamsNamingTheKey) {
  Entry e = One(R"({"jsonrpc":"2.0","id":5,"method":"sandbox.run","params":{"argv":["a"],"argv":["b"]}})");
  ExpectError(e, kInvalidParams, 5);
  EXPECT_EQ(e.error->message, "params: duplicate key 'argv'");
  e = One(R"({"jsonrpc":"2.0","id":"x","method":"m","params":{"limits":{"memory":"1G","pids":2,"memory":"8G"}}})");
  ExpectError(e, kInvalidParams, "x");
  EXPECT_EQ(e.error->message, "params.limits: duplicate key 'memory'");
  e = One(R"({"jsonrpc":"2.0","id":1,"method":"m","params":[{"a":1},{"b":1,"b":2}]})");
  ExpectError(e, kInvalidParams, 1);
  EXPECT_EQ(e.error->message, "params[1]: duplicate key 'b'");
  // The same key in sibling objects is no duplicate.
  e = One(R"({"jsonrpc":"2.0","id":1,"method":"m","params":{"a":{"k":1},"b":{"k":2}}})");
  EXPECT_FALSE(e.error.has_value()) << e.error->message;
}

TEST(JsonRpcDuplicateKeys, InTheRequestMakeItInvalid) {
  Entry e = One(R"({"jsonrpc":"2.0","id":1,"method":"a","method":"b"})");
  ExpectError(e, kInvalidRequest, 1);
  EXPECT_EQ(e.error->message, "duplicate member \"method\"");
  // Which id was meant is unknowable: the reply has id null.
  e = One(R"({"jsonrpc":"2.0","id":1,"id":2,"method":"a"})");
  ExpectError(e, kInvalidRequest, nullptr);
}

TEST(JsonRpcDuplicateKeys, InABatchOnlyTheirRequestIsRefused) {
  Incoming in = Parse(R"([{"jsonrpc":"2.0","id":1,"method":"a","params":{"k":1}},)"
                      R"({"jsonrpc":"2.0","id":2,"method":"b","params":{"k":1,"k":2}},)"
                      R"({"jsonrpc":"2.0","id":3,"method":"c","params":{"k":1}}])");
  ASSERT_TRUE(in.batch);
  ASSERT_EQ(in.entries.size(), 3u);
  EXPECT_FALSE(in.entries[0].error.has_value());
  ExpectError(in.entries[1], kInvalidParams, 2);
  EXPECT_EQ(in.entries[1].error->message, "params: duplicate key 'k'");
  EXPECT_FALSE(in.entries[2].error.has_value());
}

TEST(JsonRpcDuplicateKeys, ANotificationWithOneIsNeitherRunNorAnswered) {
  Entry e = One(R"({"jsonrpc":"2.0","method":"m","params":{"k":1,"k":2}})");
  EXPECT_TRUE(e.error.has_value());
  EXPECT_FALSE(e.NeedsReply());
  EXPECT_EQ(Serve(R"({"jsonrpc":"2.0","method":"m","params":{"k":1,"k":2}})"), "");
}

TEST(JsonRpcDuplicateKeys, ASkillsResponseIsTakenAsItComes) {
  // The skill protocol reads what a program wrote; its answer is not refused.
  std::optional<boost::json::object> r = MatchResponse(R"({"jsonrpc":"2.0","id":7,"result":{"a":1,"a":2}})", 7);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->at("result"), Json(R"({"a":2})"));
}

// --- Params helpers ---

boost::json::object Params(const char* text) { return boost::json::parse(text).as_object(); }

TEST(JsonRpcParams, ParamsObject) {
  Expected<const boost::json::object*> p = ParamsObject(nullptr);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE((*p)->empty());
  boost::json::value named = Json(R"({"a":1})");
  p = ParamsObject(named);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p, &named.get_object());
  p = ParamsObject(Json("[1]"));
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, kInvalidParams);
  EXPECT_EQ(p.error().message, "params: expected an object (named params)");
}

TEST(JsonRpcParams, GetString) {
  const boost::json::object p = Params(R"({"profile":"python","n":1,"z":null,"nul":"a\u0000b"})");
  EXPECT_EQ(GetString(p, "profile", true)->value(), "python");
  EXPECT_FALSE(GetString(p, "absent", false)->has_value());
  EXPECT_FALSE(GetString(p, "z", false)->has_value());  // null is "not given"
  auto missing = GetString(p, "absent", true);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.error().code, kInvalidParams);
  EXPECT_EQ(missing.error().message, "params.absent: required field is missing");
  EXPECT_EQ(GetString(p, "z", true).error().message, "params.z: required field is missing");
  EXPECT_EQ(GetString(p, "n", false).error().message, "params.n: expected a string, got 1");
  EXPECT_EQ(GetString(p, "nul", false).error().message, "params.nul: contains a NUL byte");
}

TEST(JsonRpcParams, GetInt64) {
  const boost::json::object p = Params(
      R"({"timeout_ms":250,"zero":0,"neg":-1,"str":"5","frac":1.5,"exp":1e3,"big":18446744073709551615,"huge":1e300})");
  EXPECT_EQ(GetInt64(p, "timeout_ms", true, 1)->value(), 250);
  EXPECT_EQ(GetInt64(p, "exp", true, 1)->value(), 1000);
  EXPECT_EQ(GetInt64(Params(R"({"n":1000.0})"), "n", true, 1)->value(), 1000);
  EXPECT_EQ(GetInt64(p, "neg", true)->value(), -1);
  EXPECT_FALSE(GetInt64(p, "absent", false, 1)->has_value());
  // The config's rule and words (base/json_reader.h): a whole number
  // however spelt, in range.
  const std::pair<const char*, const char*> refused[] = {
      {"zero", "params.zero: 0 is less than 1"},
      {"neg", "params.neg: -1 is negative"},
      {"str", "params.str: expected a whole number, got '5'"},
      {"frac", "params.frac: expected a whole number, got 1.5"},
      {"big", "params.big: 18446744073709551615 is outside [1, 9223372036854775807]"},
      {"huge", "params.huge: 1e+300 is outside [1, 9223372036854775807]"},
  };
  for (const auto& [key, message] : refused) {
    auto r = GetInt64(p, key, false, 1);
    ASSERT_FALSE(r.ok()) << key;
    EXPECT_EQ(r.error().code, kInvalidParams);
    EXPECT_EQ(r.error().message, message);
  }
  EXPECT_EQ(GetInt64(p, "neg", false, 0).error().message, "params.neg: -1 is negative");
  EXPECT_EQ(GetInt64(p, "timeout_ms", false, 1, 100).error().message, "params.timeout_ms: 250 is outside [1, 100]");
  EXPECT_EQ(GetInt64(p, "str", false).error().message, "params.str: expected a whole number, got '5'");
  EXPECT_EQ(GetInt64(p, "absent", true, 1).error().message, "params.absent: required field is missing");
  EXPECT_EQ(GetInt64(p, "timeout_ms", true, 1, 250)->value(), 250);  // bounds are inclusive
}

TEST(JsonRpcParams, GetDouble) {
  const boost::json::object p = Params(R"({"cpus":1.5,"int":2,"str":"1"})");
  EXPECT_EQ(GetDouble(p, "cpus", true)->value(), 1.5);
  EXPECT_EQ(GetDouble(p, "int", true, 0.0, 4.0)->value(), 2.0);
  EXPECT_EQ(GetDouble(p, "cpus", true, 0.0, 1.0).error().message, "params.cpus: 1.5 is outside [0, 1]");
  EXPECT_EQ(GetDouble(p, "str", true).error().message, "params.str: expected a number, got '1'");
  EXPECT_FALSE(GetDouble(p, "absent", false)->has_value());
}

TEST(JsonRpcParams, GetBool) {
  const boost::json::object p = Params(R"({"t":true,"f":false,"one":1})");
  EXPECT_TRUE(GetBool(p, "t", true)->value());
  EXPECT_FALSE(GetBool(p, "f", true)->value());
  EXPECT_EQ(GetBool(p, "one", true).error().message, "params.one: expected true or false, got 1");
  EXPECT_EQ(GetBool(p, "absent", true).error().message, "params.absent: required field is missing");
}

TEST(JsonRpcParams, GetStringArray) {
  const boost::json::object p = Params(R"({"argv":["/bin/echo","hi"],"mixed":["a",2],"str":"a","empty":[]})");
  EXPECT_EQ(GetStringArray(p, "argv", true)->value(), (std::vector<std::string>{"/bin/echo", "hi"}));
  EXPECT_TRUE(GetStringArray(p, "empty", true)->value().empty());
  EXPECT_EQ(GetStringArray(p, "mixed", true).error().message, "params.mixed[1]: expected a string, got 2");
  EXPECT_EQ(GetStringArray(p, "str", true).error().message, "params.str: expected an array of strings, got 'a'");
  EXPECT_EQ(GetStringArray(Params(R"({"argv":["a\u0000"]})"), "argv", true).error().message,
            "params.argv[0]: contains a NUL byte");
}

TEST(JsonRpcParams, GetStringMap) {
  const boost::json::object p = Params(R"({"env":{"B":"2","A":"1"},"bad":{"X":1},"arr":[]})");
  using Pairs = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(GetStringMap(p, "env", true)->value(), (Pairs{{"B", "2"}, {"A", "1"}}));
  EXPECT_EQ(GetStringMap(p, "bad", true).error().message, "params.bad.X: expected a string, got 1");
  EXPECT_EQ(GetStringMap(p, "arr", true).error().message, "params.arr: expected an object of strings, got an array");
}

TEST(JsonRpcParams, NestedObjectsAndUnknownKeys) {
  const boost::json::object p = Params(R"({"limits":{"memory_bytes":-5,"bogus":1},"n":1})");
  Expected<const boost::json::object*> limits = GetObject(p, "limits", true);
  ASSERT_TRUE(limits.ok());
  ASSERT_NE(*limits, nullptr);
  EXPECT_EQ(GetInt64(**limits, "memory_bytes", false, 1, INT64_MAX, "params.limits").error().message,
            "params.limits.memory_bytes: -5 is negative");
  std::optional<Error> unknown = RejectUnknown(**limits, {"memory_bytes", "pids"}, "params.limits");
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->code, kInvalidParams);
  EXPECT_EQ(unknown->message, "params.limits.bogus: unknown key (expected one of: memory_bytes, pids)");
  EXPECT_FALSE(RejectUnknown(p, {"limits", "n"}).has_value());
  EXPECT_EQ(RejectUnknown(p, {"limits"})->message, "params.n: unknown key (expected one of: limits)");
  EXPECT_EQ(GetObject(p, "absent", false).value(), nullptr);
  EXPECT_EQ(GetObject(p, "n", false).error().message, "params.n: expected an object, got 1");
  EXPECT_EQ(GetObject(p, "absent", true).error().message, "params.absent: required field is missing");
  EXPECT_EQ(InvalidParam("params", "workspace", "not a directory").message, "params.workspace: not a directory");
}

// How a method handler reads its params.
Expected<boost::json::value> RunHandler(const boost::json::value& params) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const boost::json::object* p, ParamsObject(params));
  if (std::optional<Error> e = RejectUnknown(*p, {"argv", "timeout_ms"})) return *std::move(e);
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::vector<std::string>> argv, GetStringArray(*p, "argv", true));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> timeout, GetInt64(*p, "timeout_ms", false, 1));
  return boost::json::value{{"argc", argv->size()}, {"timeout_ms", timeout.value_or(1000)}};
}

TEST(JsonRpcParams, HandlerPattern) {
  Expected<boost::json::value> ok = RunHandler(Json(R"({"argv":["a","b"]})"));
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_EQ(*ok, Json(R"({"argc":2,"timeout_ms":1000})"));
  EXPECT_EQ(RunHandler(Json(R"({"argv":["a"],"timeout_ms":0})")).error().message,
            "params.timeout_ms: 0 is less than 1");
  EXPECT_EQ(RunHandler(Json(R"({"argv":["a"],"x":0})")).error().message,
            "params.x: unknown key (expected one of: argv, timeout_ms)");
  EXPECT_EQ(RunHandler(nullptr).error().message, "params.argv: required field is missing");
  EXPECT_EQ(RunHandler(Json("[]")).error().code, kInvalidParams);
}

// --- The skill protocol ---

TEST(JsonRpcMatchResponse, IgnoresWhatIsNotOurResponse) {
  const boost::json::value id = 42;
  for (const char* line : {"", "hello world", "{not json", "{\"jsonrpc\":\"2.0\"", "[1,2]", "42",
                           R"({"jsonrpc":"2.0","id":41,"result":1})",            // another id
                           R"({"jsonrpc":"2.0","id":"42","result":1})",          // "42" is not 42
                           R"({"jsonrpc":"2.0","id":42,"method":"m"})",          // a request, same id
                           R"({"jsonrpc":"2.0","method":"log","params":[]})",    // a notification
                           R"({"jsonrpc":"2.0","id":42})",                       // neither result nor error
                           R"({"jsonrpc":"2.0","id":42,"result":1,"error":{}})",  // both
                           R"({"id":42,"result":1})",                            // not 2.0
                           R"({"jsonrpc":"2.0","result":1})",                    // no id
                           R"({"jsonrpc":"2.0","id":null,"result":1})"}) {       // null id with a result
    EXPECT_FALSE(MatchResponse(line, id).has_value()) << line;
  }
  // Deep nesting cannot hurt.
  EXPECT_FALSE(MatchResponse(std::string(100000, '{'), id).has_value());
}

TEST(JsonRpcMatchResponse, MatchesResultAndError) {
  std::optional<boost::json::object> r = MatchResponse(R"({"jsonrpc":"2.0","id":42,"result":{"sum":3}})", 42);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->at("result"), Json(R"({"sum":3})"));

  r = MatchResponse(R"({"jsonrpc":"2.0","id":"s-1","error":{"code":-32601,"message":"no"}})", "s-1");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->at("error").at("code"), boost::json::value(-32601));
  EXPECT_FALSE(r->contains("result"));

  // BOM, CRLF, whitespace.
  r = MatchResponse("\xEF\xBB\xBF  {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":null} \r\n", 7);
  ASSERT_TRUE(r.has_value());
  EXPECT_TRUE(r->at("result").is_null());

  // A skill that could not read our request answers with id null (§5).
  r = MatchResponse(R"({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}})", 7);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->at("error").at("code"), boost::json::value(-32700));

  // A skill's stray byte does not lose its answer; the reply repairs it.
  r = MatchResponse("{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":\"a\xFF\"}", 7);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(Result(1, r->at("result")), "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"a\xEF\xBF\xBD\"}");
}

}  // namespace
}  // namespace cubicle::rpc
