// Bearer keys (rpc/api_keys.h) and --listen addresses (rpc/http_front.h),
// without a daemon.
#include <boost/json/parse.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "rpc/api_keys.h"
#include "rpc/http_front.h"

namespace cubicle::rpc {
namespace {

constexpr char kKeys[] = R"({"keys": [
  {"name": "a", "key": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
  {"name": "b", "key": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "methods": ["sandbox.run", "health"], "profiles": ["python"]}]})";

TEST(ApiKeysTest, FindsExactlyTheKeyPresented) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse(kKeys);
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_NE(keys->Find("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"), nullptr);
  EXPECT_EQ(keys->Find("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")->name, "b");
  EXPECT_EQ(keys->Find("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"), nullptr);    // a prefix
  EXPECT_EQ(keys->Find("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"), nullptr);  // one more
  // A key repeated twice over compares equal byte for byte modulo its
  // length: the length must still tell it apart.
  EXPECT_EQ(keys->Find(std::string(72, 'a')), nullptr);
  EXPECT_EQ(keys->Find(""), nullptr);
}

TEST(ApiKeysTest, RefusesWeakOrMalformedFiles) {
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "key": "short"}]})").ok());
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": []})").ok());
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "key": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "methods": []}]})").ok());
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "key": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "role": "x"}]})").ok());
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "key": "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"},
                                           {"name": "a", "key": "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"}]})").ok());
  EXPECT_FALSE(ApiKeys::Parse("not json").ok());
}

// The daemon's resolution, as a test states it: a named profile, "shell"
// by default for what runs, session "s1" in python and "s2" in shell.
std::optional<std::string> TestProfileOf(const std::string& method, const boost::json::value& params) {
  const boost::json::object& o = params.is_object() ? params.as_object() : boost::json::object();
  if (o.contains("session")) {
    const std::string key(o.at("session").as_string());
    return key == "s1" ? std::optional<std::string>("python") : key == "s2" ? std::optional<std::string>("shell") : std::nullopt;
  }
  if (method == "health") return std::nullopt;
  if (o.contains("profile")) return std::string(o.at("profile").as_string());
  return "shell";
}

TEST(ApiKeysTest, ScopesCoverEveryElementOfABatch) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse(kKeys);
  ASSERT_TRUE(keys.ok());
  const ApiKey& b = *keys->Find("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
  auto refusal = [&](const std::string& body) { return ApiKeys::Refusal(b, body, TestProfileOf); };
  EXPECT_EQ(refusal(R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"profile":"python"}})"), std::nullopt);
  EXPECT_NE(refusal(R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{}})"), std::nullopt);  // shell
  EXPECT_NE(refusal(R"({"jsonrpc":"2.0","id":1,"method":"pool.configure","params":{"profile":"python"}})"),
            std::nullopt);
  EXPECT_NE(refusal(R"([{"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"profile":"python"}},
                        {"jsonrpc":"2.0","id":2,"method":"exec.start","params":{"profile":"python"}}])"),
            std::nullopt);
  // Read as the daemon reads it: a UTF-8 BOM or a trailing CR does not
  // hide a call from the check.
  EXPECT_NE(refusal("\xEF\xBB\xBF{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"pool.configure\"}\r"), std::nullopt);
  const ApiKey& a = *keys->Find("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa");
  EXPECT_EQ(ApiKeys::Refusal(a, R"({"jsonrpc":"2.0","id":1,"method":"pool.configure"})", TestProfileOf), std::nullopt);
}

TEST(ApiKeysTest, AProfileScopeFollowsTheSessionAndSkipsCallsThatUseNone) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse(R"({"keys": [
    {"name": "p", "key": "pppppppppppppppppppppppppppppppppppp", "profiles": ["python"]}]})");
  ASSERT_TRUE(keys.ok()) << keys.status();
  const ApiKey& p = *keys->Find("pppppppppppppppppppppppppppppppppppp");
  auto refusal = [&](const std::string& method, const std::string& params) {
    return ApiKeys::Refusal(p, method, boost::json::parse(params), TestProfileOf);
  };
  EXPECT_EQ(refusal("session.exec", R"({"session":"s1"})"), std::nullopt);  // a python session
  ASSERT_NE(refusal("session.exec", R"({"session":"s2"})"), std::nullopt);  // a shell one
  EXPECT_NE(refusal("session.exec", R"({"session":"s2"})")->find("profile shell"), std::string::npos);
  EXPECT_EQ(refusal("health", "{}"), std::nullopt);  // uses no profile
  EXPECT_NE(refusal("sandbox.run", "{}"), std::nullopt);  // the default, shell
  EXPECT_NE(refusal("sandbox.run", R"({"profile": 7})"), std::nullopt);
}

TEST(ApiKeysTest, UidEntriesScopeSocketClientsAndHaveNoSecret) {
  absl::StatusOr<ApiKeys> keys = ApiKeys::Parse(R"({"keys": [
    {"name": "k", "key": "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"},
    {"name": "agent", "uid": 1000, "methods": ["sandbox.run"]}]})");
  ASSERT_TRUE(keys.ok()) << keys.status();
  ASSERT_NE(keys->FindByUid(1000), nullptr);
  EXPECT_EQ(keys->FindByUid(1000)->name, "agent");
  EXPECT_EQ(keys->FindByUid(1001), nullptr);
  EXPECT_EQ(keys->Find(""), nullptr) << "a uid entry's empty secret is no key";
  EXPECT_EQ(keys->FindByName("agent"), nullptr) << "a uid entry signs nothing";
  ASSERT_NE(keys->FindByName("k"), nullptr);
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "uid": -1}]})").ok());
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "uid": "1000"}]})").ok());
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "uid": 5, "key": "kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk"}]})").ok());
  EXPECT_FALSE(ApiKeys::Parse(R"({"keys": [{"name": "a", "uid": 5}, {"name": "b", "uid": 5}]})").ok());
}

TEST(ApiKeysTest, BearerTokens) {
  EXPECT_EQ(BearerToken("Bearer abc"), "abc");
  EXPECT_EQ(BearerToken("bearer  abc "), "abc");
  EXPECT_EQ(BearerToken("Basic abc"), std::nullopt);
  EXPECT_EQ(BearerToken("Bearer "), std::nullopt);
  EXPECT_EQ(BearerToken(""), std::nullopt);
}

TEST(ListenAddressTest, LiteralsAndLocalhost) {
  absl::StatusOr<boost::asio::ip::tcp::endpoint> v4 = ParseListenAddress("127.0.0.1:8080");
  ASSERT_TRUE(v4.ok());
  EXPECT_EQ(v4->port(), 8080);
  EXPECT_TRUE(v4->address().is_loopback());
  absl::StatusOr<boost::asio::ip::tcp::endpoint> v6 = ParseListenAddress("[::1]:0");
  ASSERT_TRUE(v6.ok());
  EXPECT_TRUE(v6->address().is_v6());
  EXPECT_TRUE(v6->address().is_loopback());
  ASSERT_TRUE(ParseListenAddress("localhost:1").ok());
  EXPECT_TRUE(ParseListenAddress("localhost:1")->address().is_loopback());
  EXPECT_FALSE(ParseListenAddress("0.0.0.0:80")->address().is_loopback());
  EXPECT_FALSE(ParseListenAddress("example.com:80").ok());
  EXPECT_FALSE(ParseListenAddress("127.0.0.1").ok());
  EXPECT_FALSE(ParseListenAddress("127.0.0.1:70000").ok());
}

}  // namespace
}  // namespace cubicle::rpc
