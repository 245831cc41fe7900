// The REST routes' mapping (rpc/http_routes.h) and request signatures
// (rpc/http_auth.h), without a daemon.
#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "rpc/http_auth.h"
#include "rpc/http_routes.h"
#include "sessions/digest.h"

namespace cubicle::rpc {
namespace {

namespace json = boost::json;

RestCall Call(const char* verb, const char* target, const char* body = "", bool stream = false) {
  auto matched = MatchRest(verb, target, body, stream);
  EXPECT_TRUE(std::holds_alternative<RestCall>(matched)) << verb << " " << target;
  return std::holds_alternative<RestCall>(matched) ? std::get<RestCall>(matched) : RestCall{};
}

RestRefusal Refused(const char* verb, const char* target, const char* body = "") {
  auto matched = MatchRest(verb, target, body, false);
  EXPECT_TRUE(std::holds_alternative<RestRefusal>(matched)) << verb << " " << target;
  return std::holds_alternative<RestRefusal>(matched) ? std::get<RestRefusal>(matched) : RestRefusal{};
}

TEST(RestRoutes, EachRouteIsOneMethodWithItsParams) {
  RestCall create = Call("POST", "/sessions", R"({"profile":"python"})");
  EXPECT_EQ(create.method, "session.create");
  EXPECT_EQ(create.params, json::parse(R"({"profile":"python"})"));
  EXPECT_EQ(create.shape, RestShape::kCreated);
  EXPECT_EQ(Call("GET", "/sessions").method, "session.list");
  EXPECT_EQ(Call("GET", "/sessions/a%2Db").params, json::parse(R"({"session":"a-b"})"));
  EXPECT_EQ(Call("DELETE", "/sessions/s?archive=false").params, json::parse(R"({"session":"s","archive":false})"));
  RestCall exec = Call("POST", "/sessions/s/exec", R"({"argv":["true"]})");
  EXPECT_EQ(exec.method, "session.exec");
  EXPECT_EQ(exec.params, json::parse(R"({"argv":["true"],"session":"s"})"));
  RestCall streamed = Call("POST", "/sessions/s/exec", R"({"argv":["true"]})", /*stream=*/true);
  EXPECT_EQ(streamed.method, "exec.start");
  EXPECT_EQ(streamed.scope_method, "session.exec") << "a key is checked against what its caller asked for";
  EXPECT_EQ(streamed.shape, RestShape::kStream);
  RestCall put = Call("PUT", "/sessions/s/files/a/b%20c.txt?overwrite=false&mode=0600", "bytes\xff");
  EXPECT_EQ(put.method, "files.put");
  EXPECT_EQ(put.params, json::parse(absl::StrCat(R"({"session":"s","path":"a/b c.txt","data":")",
                                                  absl::Base64Escape("bytes\xff"), R"(","overwrite":false,"mode":384})")));
  EXPECT_EQ(Call("GET", "/sessions/s/files/a/b").shape, RestShape::kBytes);
  EXPECT_EQ(Call("GET", "/sessions/s/files/?path=out&recursive=true").params,
            json::parse(R"({"session":"s","path":"out","recursive":true})"));
  EXPECT_EQ(Call("GET", "/sessions/s/files").method, "files.list");
  EXPECT_EQ(Call("DELETE", "/sessions/s/files/d?recursive=1").params,
            json::parse(R"({"session":"s","path":"d","recursive":true})"));
}

TEST(RestRoutes, BadRequestsAreRefusedWithTheirStatus) {
  EXPECT_EQ(Refused("PUT", "/sessions").status, 405);
  EXPECT_EQ(Refused("PUT", "/sessions").allow, "GET, POST");
  EXPECT_EQ(Refused("GET", "/sessions/s/exec").status, 405);
  EXPECT_EQ(Refused("GET", "/sessions/s/other").status, 404);
  EXPECT_EQ(Refused("GET", "/sessions//files/x").status, 400);
  EXPECT_EQ(Refused("GET", "/sessions/s/files/..%2Fx").status, 400);
  EXPECT_EQ(Refused("GET", "/sessions/s/files/%4").status, 400);
  EXPECT_EQ(Refused("GET", "/sessions/s/files/a%00b").status, 400);
  EXPECT_EQ(Refused("POST", "/sessions", "[1]").status, 400);
  EXPECT_EQ(Refused("POST", "/sessions/s/exec", R"({"session":"t"})").status, 400);
  EXPECT_EQ(Refused("DELETE", "/sessions/s?archive=yes").status, 400);
  EXPECT_EQ(Refused("PUT", "/sessions/s/files/x?mode=0999").status, 400);
  EXPECT_EQ(Refused("PUT", "/sessions/s/files/x?mode=12345").status, 400);
}

TEST(RestRoutes, RepliesBecomeHttpAnswers) {
  RestAnswer ok = AnswerOf(RestShape::kJson, R"({"jsonrpc":"2.0","id":1,"result":{"a":1}})");
  EXPECT_EQ(ok.status, 200);
  EXPECT_EQ(json::parse(ok.body), json::parse(R"({"a":1})"));
  EXPECT_EQ(AnswerOf(RestShape::kCreated, R"({"id":1,"result":{"created":true}})").status, 201);
  EXPECT_EQ(AnswerOf(RestShape::kCreated, R"({"id":1,"result":{"created":false}})").status, 200);
  const std::string raw("x\0y", 3);
  RestAnswer bytes = AnswerOf(RestShape::kBytes, absl::StrCat(R"({"id":1,"result":{"data":")", absl::Base64Escape(raw), R"("}})"));
  EXPECT_EQ(bytes.content_type, "application/octet-stream");
  EXPECT_EQ(bytes.body, raw);
  RestAnswer missing = AnswerOf(RestShape::kJson, R"({"id":1,"error":{"code":-32004,"message":"no session 's'"}})");
  EXPECT_EQ(missing.status, 404);
  EXPECT_EQ(json::parse(missing.body), json::parse(R"({"error":{"code":-32004,"message":"no session 's'"}})"));
  EXPECT_EQ(HttpStatusOf(-32602), 400);
  EXPECT_EQ(HttpStatusOf(-32008), 403);
  EXPECT_EQ(HttpStatusOf(-32000), 409);
  EXPECT_EQ(HttpStatusOf(-32005), 503);
  EXPECT_EQ(HttpStatusOf(-32603), 500);
  EXPECT_EQ(AnswerOf(RestShape::kJson, "not json").status, 500);
}

TEST(RestRoutes, StreamLinesArePiecesThenTheEnd) {
  EXPECT_EQ(json::parse(*StreamLineOf(
                R"({"jsonrpc":"2.0","method":"exec.output","params":{"exec_id":"e1","stream":"stdout","offset":3,"data":"x"}})")),
            json::parse(R"({"stream":"stdout","offset":3,"data":"x"})"));
  EXPECT_EQ(json::parse(*StreamLineOf(R"({"id":1,"result":{"exec_id":"e1","state":"done","result":{"exit_code":0}}})")),
            json::parse(R"({"exec_id":"e1","state":"done","result":{"exit_code":0}})"));
  EXPECT_TRUE(absl::StrContains(*StreamLineOf(R"({"id":1,"result":{"exec_id":"e1","state":"cancelled"}})"), "\"error\""));
  EXPECT_TRUE(absl::StrContains(
      *StreamLineOf(R"({"id":1,"result":{"exec_id":"e1","state":"done","result":{"error":{"code":-32000,"message":"busy"}}}})"),
      "busy"));
  EXPECT_EQ(StreamLineOf(R"({"jsonrpc":"2.0","method":"other"})"), std::nullopt);
}

constexpr char kKeys[] = R"({"keys": [{"name": "k", "key": "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"}]})";

HttpCredentials SignedBy(const std::string& secret, const std::string& ts, const char* body, std::string* signature) {
  *signature = sessions::HmacSha256Hex(secret, SigningString(ts, "POST", "/rpc", body));
  HttpCredentials c;
  c.key_name = "k";
  c.timestamp = ts;
  c.signature = *signature;
  c.method = "POST";
  c.target = "/rpc";
  c.body = body;
  return c;
}

TEST(RequestVerifier, BearerOrAFreshUnusedSignature) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse(kKeys);
  ASSERT_TRUE(keys.ok());
  RequestVerifier v;
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  HttpCredentials bearer;
  bearer.authorization = "Bearer kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk";
  EXPECT_TRUE(v.Verify(*keys, bearer, now).ok());
  EXPECT_TRUE(absl::IsUnauthenticated(v.Verify(*keys, HttpCredentials{}, now).status()));

  std::string sig;
  HttpCredentials signed_ok = SignedBy("kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", "1700000010", "{}", &sig);
  absl::StatusOr<const ApiKey*> key = v.Verify(*keys, signed_ok, now);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ((*key)->name, "k");
  EXPECT_TRUE(absl::StrContains(v.Verify(*keys, signed_ok, now).status().message(), "replay"));
  std::string sig2;
  HttpCredentials stale = SignedBy("kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", "1699999969", "{}", &sig2);
  EXPECT_TRUE(absl::StrContains(v.Verify(*keys, stale, now).status().message(), "clock"));
  std::string sig3;
  HttpCredentials altered = SignedBy("kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk", "1700000001", "{}", &sig3);
  altered.body = "{ }";
  EXPECT_TRUE(absl::StrContains(v.Verify(*keys, altered, now).status().message(), "does not match"));
  HttpCredentials garbage = altered;
  garbage.timestamp = "soon";
  EXPECT_TRUE(absl::IsUnauthenticated(v.Verify(*keys, garbage, now).status()));
  // A replayed signature is forgotten only once it is stale anyway.
  EXPECT_FALSE(v.Verify(*keys, signed_ok, now + absl::Seconds(20)).ok());
}

TEST(RequestVerifier, TheSigningStringIsTheDocumentedOne) {
  EXPECT_EQ(SigningString("17", "POST", "/rpc?a=1", ""),
            "CUBICLE-HMAC-SHA256\n17\nPOST\n/rpc?a=1\ne3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

}  // namespace
}  // namespace cubicle::rpc
