// Who may drive the daemon from elsewhere, end to end: HMAC-signed HTTP
// requests (a good one runs; a stale, replayed, re-targeted or altered one
// is refused and nothing runs), Unix-socket clients of other users scoped
// by their uid entry (SO_PEERCRED), an HTTP client's hang-up stopping its
// run, and 200 HTTP clients at once. Signatures are made here with the
// openssl(1) command, not the daemon's code.
#include <grp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/http_client.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

constexpr char kShell[] = R"({"profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}}}})";
const std::string kSecret = "signer-0123456789abcdef0123456789abcdef";

json::value Json(const std::optional<HttpReply>& reply) {
  if (!reply.has_value()) return nullptr;
  boost::system::error_code ec;
  json::value v = json::parse(reply->body, ec);
  return ec ? json::value(nullptr) : v;
}

// HMAC-SHA256 by openssl(1); "" when it could not run.
std::string OpensslHmac(const std::string& key, const std::string& message) {
  ProcessRun run = RunProcess({"/usr/bin/env", "openssl", "dgst", "-sha256", "-hmac", key, "-r"}, message);
  if (run.exit_code != 0) return "";
  return run.out.substr(0, run.out.find(' '));
}

using Headers = std::vector<std::pair<std::string, std::string>>;

// The headers that sign `method target body` at unix time `t` with `key`.
Headers Signed(const std::string& name, const std::string& key, int64_t t, const std::string& method,
               const std::string& target, const std::string& body) {
  const std::string message = absl::StrCat("CUBICLE-HMAC-SHA256\n", t, "\n", method, "\n", target, "\n", Sha256Hex(body));
  return {{"X-Cubicle-Key-Name", name},
          {"X-Cubicle-Timestamp", absl::StrCat(t)},
          {"X-Cubicle-Signature", OpensslHmac(key, message)}};
}

class RemoteAuth : public ::testing::Test {
 protected:
  std::string Keys(const std::string& entries) {
    const std::string path = dir_.Join("keys.json");
    WriteFile(path, absl::StrCat(R"({"keys": [)", entries, "]}"));
    ::chmod(path.c_str(), 0600);
    return path;
  }
  TempDir dir_;
};

// hits + misses of every pool: how many sandboxes were asked for, by
// `body` (a pool.stats call) sent with `auth`.
int64_t PoolRequests(HttpClient& client, const std::string& body, const Headers& auth) {
  json::value stats = Json(client.Request("POST", "/rpc", body, auth));
  int64_t total = 0;
  for (const auto& [name, pool] : stats.at("result").at("pools").as_object()) {
    total += pool.at("hits").to_number<int64_t>() + pool.at("misses").to_number<int64_t>();
  }
  return total;
}

TEST_F(RemoteAuth, SignedRequestsRunOnceFreshAndUnalteredOnly) {
  if (OpensslHmac("k", "m").empty()) GTEST_SKIP() << "openssl(1) is not installed: the test signs with it";
  HttpDaemon daemon({"--config", WriteConfig(dir_, kShell), "--keys-file",
                     Keys(absl::StrCat(R"({"name": "signer", "key": ")", kSecret, R"("})"))});
  ASSERT_TRUE(daemon.up());
  HttpClient c(daemon.port());
  const int64_t now = absl::ToUnixSeconds(absl::Now());
  // Each of the test's own calls differs (its id), as a client's must: two
  // byte-identical requests signed in the same second are one request.
  int64_t next_id = 1000;
  auto stats_call = [&](int64_t* id) { *id = ++next_id; return RpcBody(*id, "pool.stats"); };
  auto pool_requests = [&] {
    int64_t id = 0;
    const std::string body = stats_call(&id);
    return PoolRequests(c, body, Signed("signer", kSecret, absl::ToUnixSeconds(absl::Now()), "POST", "/rpc", body));
  };
  const int64_t before = pool_requests();

  const std::string run = RpcBody(1, "sandbox.run", R"({"argv":["/bin/true"]})");
  const Headers good = Signed("signer", kSecret, now, "POST", "/rpc", run);
  std::optional<HttpReply> ran = c.Request("POST", "/rpc", run, good);
  ASSERT_TRUE(ran.has_value());
  EXPECT_EQ(ran->status, 200) << ran->body;
  EXPECT_EQ(Json(ran).at("result").at("exit_code"), 0) << ran->body;

  const std::string other = RpcBody(1, "sandbox.run", R"({"argv":["/bin/false"]})");
  struct Case {
    const char* why;
    std::string target, body;
    Headers headers;
    const char* says;
  } cases[] = {
      {"replayed", "/rpc", run, good, "used before"},
      {"body changed after signing", "/rpc", other, good, "does not match"},
      {"stale", "/rpc", run, Signed("signer", kSecret, now - 120, "POST", "/rpc", run), "from the server's clock"},
      {"from the future", "/rpc", run, Signed("signer", kSecret, now + 120, "POST", "/rpc", run), "from the server's clock"},
      {"another target", "/rpc", run, Signed("signer", kSecret, now + 1, "POST", "/rpc?x", run), "does not match"},
      {"another secret", "/rpc", run, Signed("signer", kSecret + "x", now + 2, "POST", "/rpc", run), "does not match"},
      {"an unknown name", "/rpc", run, Signed("nobody", kSecret, now + 3, "POST", "/rpc", run), "does not match"},
      {"half the headers", "/rpc", run, {{"X-Cubicle-Signature", "00"}}, "needs X-Cubicle-Key-Name"},
  };
  for (const Case& k : cases) {
    std::optional<HttpReply> reply = c.Request("POST", k.target, k.body, k.headers);
    ASSERT_TRUE(reply.has_value()) << k.why;
    EXPECT_EQ(reply->status, 401) << k.why << ": " << reply->body;
    EXPECT_TRUE(absl::StrContains(reply->body, k.says)) << k.why << ": " << reply->body;
  }
  // One sandbox for the one good request, none for the refused ones.
  EXPECT_EQ(pool_requests(), before + 1);
  // A signed GET works too (no body: the empty string's digest).
  std::optional<HttpReply> metrics = c.Request("GET", "/metrics", "", Signed("signer", kSecret, now + 4, "GET", "/metrics", ""));
  ASSERT_TRUE(metrics.has_value());
  EXPECT_EQ(metrics->status, 200) << metrics->body;
}

TEST_F(RemoteAuth, OtherUsersOnTheSocketNeedAUidEntryAndAreScopedByIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "the test switches to other users: root only";
  const std::string config = WriteConfig(
      dir_, R"({"socket": {"mode": "0666"}, "profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}}}})");
  SocketDaemon d({"--config", config, "--keys-file",
                  Keys(R"({"name": "nobody-agent", "uid": 65534, "methods": ["health", "sandbox.run"], "profiles": ["python"]})")});
  ASSERT_TRUE(d.up());
  // The socket's directory is the test's own: let the other users in.
  const std::string socket_dir = d.socket().substr(0, d.socket().rfind('/'));
  ASSERT_EQ(::chmod(socket_dir.c_str(), 0755), 0);

  const std::string scoped = AsUser(d.socket(), 65534,
                                    {RequestLine(1, "health"), RequestLine(2, "sandbox.run", R"({"argv":["/bin/true"]})"),
                                     RequestLine(3, "pool.configure", R"({"profile":"shell","min_idle":0})")});
  std::vector<std::string> replies = absl::StrSplit(scoped, '\n');
  ASSERT_GE(replies.size(), 3u) << scoped;
  EXPECT_TRUE(HasResult(ParseJson(replies[0]))) << replies[0];
  EXPECT_EQ(ErrorCode(ParseJson(replies[1])), -32008) << replies[1];  // the default profile, shell
  EXPECT_TRUE(absl::StrContains(replies[1], "profile shell")) << replies[1];
  EXPECT_EQ(ErrorCode(ParseJson(replies[2])), -32008) << replies[2];  // a method it is not given

  const std::string stranger = AsUser(d.socket(), 65533, {RequestLine(1, "health")});
  EXPECT_TRUE(absl::StrContains(stranger, "-32008")) << stranger;
  EXPECT_TRUE(absl::StrContains(stranger, "uid 65533 has no entry")) << stranger;
  EXPECT_TRUE(absl::EndsWith(stranger, "EOF")) << stranger;

  // The daemon's own user (root here) keeps every right.
  json::value configured = d.Call(RequestLine(4, "pool.configure", R"({"profile":"shell","min_idle":1})"));
  EXPECT_TRUE(HasResult(configured)) << json::serialize(configured);
}

TEST_F(RemoteAuth, AnHttpClientsHangUpStopsItsRun) {
  HttpDaemon daemon({"--config", WriteConfig(dir_, kShell)});
  ASSERT_TRUE(daemon.up());
  {
    HttpClient c(daemon.port());
    ASSERT_TRUE(c.SendRaw(absl::StrCat(
        "POST /rpc HTTP/1.1\r\nHost: x\r\nContent-Length: ",
        RpcBody(1, "sandbox.run", R"({"argv":["sleep","50"],"timeout_ms":60000})").size(), "\r\n\r\n",
        RpcBody(1, "sandbox.run", R"({"argv":["sleep","50"],"timeout_ms":60000})"))));
    HttpClient probe(daemon.port());
    json::value health;
    for (int i = 0; i < 2000; ++i) {  // at most 20 s: until it runs
      health = Json(probe.Request("POST", "/rpc", RpcBody(2, "health")));
      if (health.is_object() && health.at("result").at("executions").at("running") == 1) break;
      absl::SleepFor(absl::Milliseconds(10));
    }
    ASSERT_EQ(health.at("result").at("executions").at("running"), 1) << json::serialize(health);
  }  // the client hangs up
  HttpClient probe(daemon.port());
  json::value health;
  for (int i = 0; i < 2000; ++i) {  // at most 20 s, far below the run's 50
    health = Json(probe.Request("POST", "/rpc", RpcBody(3, "health")));
    if (health.is_object() && health.at("result").at("executions").at("running") == 0 &&
        health.at("result").at("in_flight") == 0) {
      break;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(health.at("result").at("executions").at("running"), 0) << json::serialize(health);
  EXPECT_EQ(health.at("result").at("in_flight"), 0) << json::serialize(health);
}

TEST_F(RemoteAuth, TwoHundredHttpClientsAtOnceEachGetTheirOwnAnswer) {
  HttpDaemon daemon({"--config", WriteConfig(dir_, R"({"concurrency": {"max_queue": 512},
      "profiles": {"shell": {"pool": {"min_idle": 2, "max_idle": 4, "max_total": 8}}}})")});
  ASSERT_TRUE(daemon.up());
  constexpr int kClients = 200;
  std::vector<std::string> outputs(kClients);
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      HttpClient client(daemon.port());
      std::optional<HttpReply> reply =
          client.Request("POST", "/rpc", RpcBody(i, "sandbox.run", absl::StrCat(R"({"argv":["echo",")", i, R"("]})")),
                         {}, absl::Seconds(240));
      json::value v = Json(reply);
      if (v.is_object() && v.as_object().contains("result")) {
        outputs[i] = absl::StrCat(v.at("id").to_number<int64_t>(), ":", std::string(v.at("result").at("stdout").as_string()));
      } else {
        outputs[i] = reply.has_value() ? reply->body : "no reply";
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(outputs[i], absl::StrCat(i, ":", i, "\n"));
}

}  // namespace
}  // namespace cubicle::test_support
