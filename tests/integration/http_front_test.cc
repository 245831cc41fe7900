// `cubicle serve --listen`, end to end over loopback: the endpoints, keep-
// alive, the bounds on heads, bodies and slow clients, bearer keys and
// their scopes. Waits are bounds for failures;
// nothing asserts how long anything took.
#include <sys/stat.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/support/daemon_client.h"
#include "tests/support/http_client.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

constexpr char kShellOnly[] = R"({"profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}}}})";

const std::string kAdminKey = "admin-0123456789abcdef0123456789abcdef";
const std::string kHealthKey = "health-0123456789abcdef0123456789abcdef";
const std::string kPythonKey = "python-0123456789abcdef0123456789abcdef";

// An admin key for everything, one for `health` only, one for the python
// profile only; mode 0600 unless told.
std::string WriteKeys(const TempDir& dir, mode_t mode = 0600) {
  const std::string path = dir.Join("keys.json");
  WriteFile(path, absl::StrCat(R"({"keys": [{"name": "admin", "key": ")", kAdminKey, R"("},
    {"name": "health-only", "key": ")", kHealthKey, R"(", "methods": ["health"]},
    {"name": "python-only", "key": ")", kPythonKey, R"(", "profiles": ["python"]}]})"));
  ::chmod(path.c_str(), mode);
  return path;
}

std::vector<std::pair<std::string, std::string>> Bearer(const std::string& key) {
  return {{"Authorization", absl::StrCat("Bearer ", key)}};
}

json::value Json(const std::optional<HttpReply>& reply) {
  if (!reply.has_value()) return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(reply->body, ec);
  return ec ? json::value(nullptr) : v;
}

// hits + misses of every pool: how many sandboxes were asked for.
int64_t PoolRequests(HttpClient& client, const std::string& key) {
  json::value stats = Json(client.Request("POST", "/rpc", RpcBody(99, "pool.stats"), Bearer(key)));
  int64_t total = 0;
  for (const auto& [name, pool] : stats.at("result").at("pools").as_object()) {
    total += pool.at("hits").to_number<int64_t>() + pool.at("misses").to_number<int64_t>();
  }
  return total;
}

class HttpFrontTest : public ::testing::Test {
 protected:
  std::string Config(const std::string& text = kShellOnly) { return WriteConfig(config_dir_, text); }
  TempDir config_dir_;
};

TEST_F(HttpFrontTest, HealthzAndRpcRoundTrip) {
  HttpDaemon daemon({"--config", Config()});
  ASSERT_TRUE(daemon.up());
  HttpClient client(daemon.port());
  ASSERT_TRUE(client.connected());
  std::optional<HttpReply> health = client.Request("GET", "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json(health), json::parse(R"({"status":"ok"})"));

  std::optional<HttpReply> run =
      client.Request("POST", "/rpc", RpcBody(1, "sandbox.run", R"({"argv":["/bin/true"]})"));
  ASSERT_TRUE(run.has_value());
  EXPECT_EQ(run->status, 200);
  EXPECT_EQ(run->headers["content-type"], "application/json");
  json::value reply = Json(run);
  EXPECT_EQ(reply.at("id"), 1);
  EXPECT_EQ(reply.at("result").at("exit_code"), 0) << run->body;
  EXPECT_EQ(daemon.Stop().exit_code, 0);
}

TEST_F(HttpFrontTest, KeepAliveNotificationsParseErrorsAndWrongPaths) {
  HttpDaemon daemon({"--config", Config()});
  ASSERT_TRUE(daemon.up());
  HttpClient client(daemon.port());
  // All on one connection: each is answered and the connection stays.
  for (int i = 0; i < 3; ++i) {
    std::optional<HttpReply> reply = client.Request("POST", "/rpc", RpcBody(i, "health"));
    ASSERT_TRUE(reply.has_value()) << i;
    EXPECT_EQ(Json(reply).at("id"), i);
  }
  std::optional<HttpReply> notification = client.Request("POST", "/rpc", R"({"jsonrpc":"2.0","method":"health"})");
  ASSERT_TRUE(notification.has_value());
  EXPECT_EQ(notification->status, 204);
  std::optional<HttpReply> garbage = client.Request("POST", "/rpc", "{not json");
  ASSERT_TRUE(garbage.has_value());
  EXPECT_EQ(garbage->status, 200);
  EXPECT_EQ(Json(garbage).at("error").at("code"), -32700);
  std::optional<HttpReply> missing = client.Request("GET", "/nowhere");
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 404);
  std::optional<HttpReply> wrong = client.Request("GET", "/rpc");
  ASSERT_TRUE(wrong.has_value());
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->headers["allow"], "POST");
  std::optional<HttpReply> metrics = client.Request("GET", "/metrics");
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metrics->status, 200);
  EXPECT_TRUE(absl::StartsWith(metrics->headers["content-type"], "text/plain"));
  EXPECT_TRUE(absl::StrContains(metrics->body, "cubicle_requests_in_flight")) << metrics->body;
  // Three calls and one notification of health, counted by method and outcome.
  EXPECT_TRUE(absl::StrContains(metrics->body, "cubicle_requests_total{method=\"health\",outcome=\"ok\"} 4\n"))
      << metrics->body;
}

TEST_F(HttpFrontTest, OversizedHeadAndBodyAreRefusedAndTheDaemonServesOn) {
  HttpDaemon daemon({"--config", Config()});
  ASSERT_TRUE(daemon.up());
  {
    HttpClient client(daemon.port());
    ASSERT_TRUE(client.SendRaw(absl::StrCat("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(32 << 10, 'a'),
                                            "\r\n\r\n")));
    std::optional<HttpReply> reply = client.ReadReply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, 431);
    EXPECT_TRUE(client.ClosedByPeer());
  }
  {
    // Refused on its Content-Length, before any of the body is read.
    HttpClient client(daemon.port());
    ASSERT_TRUE(client.SendRaw("POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000000\r\n\r\n{"));
    std::optional<HttpReply> reply = client.ReadReply();
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, 413);
    EXPECT_TRUE(client.ClosedByPeer());
  }
  HttpClient after(daemon.port());
  std::optional<HttpReply> health = after.Request("GET", "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
}

TEST_F(HttpFrontTest, ASlowClientIsCutOff) {
  HttpDaemon daemon({"--config", Config(R"({"connections": {"line_timeout_ms": 200},
      "profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}}}})")});
  ASSERT_TRUE(daemon.up());
  HttpClient slow(daemon.port());
  ASSERT_TRUE(slow.SendRaw("GET /healthz HTTP/1.1\r\nHost: x\r\n"));  // and never the blank line
  EXPECT_TRUE(slow.ClosedByPeer());
  HttpClient after(daemon.port());
  std::optional<HttpReply> health = after.Request("GET", "/healthz");
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
}

// The idle bound runs from the last request, not the first: a connection
// used for longer than the bound in all, never silent that long, stays
// open; once silent past it, it is closed.
TEST_F(HttpFrontTest, AKeptAliveConnectionLivesWhileUsedAndClosesWhenIdle) {
  HttpDaemon daemon({"--config", Config(R"({"connections": {"line_timeout_ms": 300},
      "profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}}}})")});
  ASSERT_TRUE(daemon.up());
  HttpClient client(daemon.port());
  const absl::Time start = absl::Now();
  for (int i = 0; i < 8; ++i) {
    std::optional<HttpReply> health = client.Request("GET", "/healthz");
    ASSERT_TRUE(health.has_value()) << "request " << i;
    EXPECT_EQ(health->status, 200);
    absl::SleepFor(absl::Milliseconds(100));
  }
  EXPECT_GT(absl::Now() - start, absl::Milliseconds(600));
  EXPECT_TRUE(client.ClosedByPeer(absl::Seconds(10)));
}

TEST_F(HttpFrontTest, WithoutTheRightKeyNothingRuns) {
  TempDir dir;
  HttpDaemon daemon({"--config", Config(), "--keys-file", WriteKeys(dir)});
  ASSERT_TRUE(daemon.up());
  HttpClient client(daemon.port());
  const int64_t before = PoolRequests(client, kAdminKey);
  const std::string run = RpcBody(1, "sandbox.run", R"({"argv":["/bin/true"]})");
  for (const auto& headers : {std::vector<std::pair<std::string, std::string>>{}, Bearer(kAdminKey + "x"),
                              Bearer(kAdminKey.substr(1)), Bearer("short"),
                              std::vector<std::pair<std::string, std::string>>{{"Authorization", kAdminKey}}}) {
    std::optional<HttpReply> reply = client.Request("POST", "/rpc", run, headers);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, 401) << reply->body;
    EXPECT_EQ(reply->headers["www-authenticate"], "Bearer");
  }
  for (const char* path : {"/metrics", "/readyz"}) {
    std::optional<HttpReply> reply = client.Request("GET", path);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, 401) << path;
    reply = client.Request("GET", path, "", Bearer(kAdminKey));
    ASSERT_TRUE(reply.has_value());
    EXPECT_NE(reply->status, 401) << path;
  }
  std::optional<HttpReply> health = client.Request("GET", "/healthz");  // needs no key
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(PoolRequests(client, kAdminKey), before);

  std::optional<HttpReply> ran = client.Request("POST", "/rpc", run, Bearer(kAdminKey));
  ASSERT_TRUE(ran.has_value());
  EXPECT_EQ(Json(ran).at("result").at("exit_code"), 0) << ran->body;
  EXPECT_EQ(PoolRequests(client, kAdminKey), before + 1);
}

TEST_F(HttpFrontTest, AScopedKeyReachesOnlyItsMethodsAndProfiles) {
  TempDir dir;
  HttpDaemon daemon({"--config", Config(), "--keys-file", WriteKeys(dir)});
  ASSERT_TRUE(daemon.up());
  HttpClient client(daemon.port());
  const int64_t before = PoolRequests(client, kAdminKey);
  std::optional<HttpReply> health = client.Request("POST", "/rpc", RpcBody(1, "health"), Bearer(kHealthKey));
  ASSERT_TRUE(health.has_value());
  EXPECT_EQ(health->status, 200);
  const std::string run = RpcBody(2, "sandbox.run", R"({"argv":["/bin/true"]})");
  const std::string batch = absl::StrCat("[", RpcBody(3, "health"), ",", run, "]");
  for (const auto& [key, body] : std::vector<std::pair<std::string, std::string>>{
           {kHealthKey, run},          // another method
           {kHealthKey, batch},        // one element of a batch is enough
           {kPythonKey, run},          // the default profile, shell
           {kPythonKey, RpcBody(4, "sandbox.run", R"({"profile":"shell","argv":["/bin/true"]})")}}) {
    std::optional<HttpReply> reply = client.Request("POST", "/rpc", body, Bearer(key));
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->status, 403) << body << ": " << reply->body;
  }
  EXPECT_EQ(PoolRequests(client, kAdminKey), before);
}

TEST_F(HttpFrontTest, KeysAndAddressesAreCheckedBeforeServing) {
  TempDir dir;
  ProcessRun open_keys = RunCubicle({"serve", "--listen", "127.0.0.1:0", "--keys-file", WriteKeys(dir, 0644)});
  EXPECT_NE(open_keys.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(open_keys.err, "0644")) << open_keys.err;

  ProcessRun exposed = RunCubicle({"serve", "--listen", "0.0.0.0:0"});
  EXPECT_NE(exposed.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(exposed.err, "--allow-no-auth")) << exposed.err;

  ProcessRun env_keys = RunCubicle({"serve", "--listen", "127.0.0.1:0"}, "",
                                   {absl::StrCat("CUBICLE_API_KEYS_FILE=", dir.Join("missing.json"))});
  EXPECT_NE(env_keys.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(env_keys.err, "missing.json")) << env_keys.err;
}

TEST_F(HttpFrontTest, ReadyzFollowsThePools) {
  // "broken"'s interpreter runs (the start's preload check passes: it
  // imports nothing) but never says it is ready: no zygote of it is ever
  // built, so the pool is never ready while it wants one.
  const std::string fake = config_dir_.Join("python3");
  ASSERT_TRUE(WriteFile(fake, "#!/bin/sh\nexit 0\n"));
  ASSERT_EQ(::chmod(fake.c_str(), 0755), 0);
  HttpDaemon daemon({"--config", Config(absl::StrCat(R"({"profiles": {"shell": {"pool": {"min_idle": 0, "max_idle": 2, "max_total": 8}},
      "broken": {"interpreter": {"argv": ["/opt/broken/python3"]}, "binds": [{"source": ")", fake, R"(", "dest": "/opt/broken/python3"}],
                 "pool": {"min_idle": 1, "max_idle": 1, "max_total": 2}}}})"))});
  ASSERT_TRUE(daemon.up());
  HttpClient client(daemon.port());
  std::optional<HttpReply> before = client.Request("GET", "/readyz");
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->status, 503) << before->body;
  EXPECT_EQ(Json(before).at("ready"), false);
  json::value configured = Json(client.Request(
      "POST", "/rpc", RpcBody(1, "pool.configure", R"({"profile":"broken","min_idle":0,"max_idle":0})")));
  ASSERT_TRUE(configured.as_object().contains("result")) << json::serialize(configured);
  json::value warmed =
      Json(client.Request("POST", "/rpc", RpcBody(2, "pool.warm", R"({"profile":"shell","count":1})")));
  ASSERT_EQ(warmed.at("result").at("warm"), true) << json::serialize(warmed);
  std::optional<HttpReply> after = client.Request("GET", "/readyz");
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->status, 200) << after->body;
}

}  // namespace
}  // namespace cubicle::test_support
