// A request's own breakers ("breakers" in sandbox.run, skill.call,
// exec.start): added where the profile sets none and tripped on a pooled
// zygote, and refused with the field named — nothing run — where they
// would loosen the profile's.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cgroups/layout.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// The breakers read the sandbox's cgroup: root, with CPU accounting.
bool CanWatchCpu(std::string* why) {
  if (::geteuid() != 0) {
    *why = "the breakers watch a cgroup the daemon makes: root only";
    return false;
  }
  absl::StatusOr<cgroups::Layout> layout = cgroups::DiscoverLayout();
  if (!layout.ok() || !layout->Has(cgroups::Controller::kCpuacct)) {
    *why = "no CPU accounting (cpuacct) for the breaker to read";
    return false;
  }
  return true;
}

int64_t PoolRuns(SocketDaemon& d) {
  json::value stats = d.Call(RequestLine(900, "pool.stats"));
  int64_t total = 0;
  for (const auto& [name, pool] : stats.at("result").at("pools").as_object()) {
    total += pool.at("hits").to_number<int64_t>() + pool.at("misses").to_number<int64_t>();
  }
  return total;
}

// A low share with short windows: a spinning loop is far above it even on
// a loaded machine; the grace lets the warning come first.
constexpr char kCpuBreaker[] = R"("breakers": {"cpu": 0.1, "cpu_window_ms": 500, "cpu_grace_ms": 300})";

TEST(RequestBreakers, ARequestAddsACpuBreakerOnEveryRoute) {
  std::string why;
  if (!CanWatchCpu(&why)) GTEST_SKIP() << why;
  TempDir dir;
  SocketDaemon d({"--config", WriteConfig(dir, R"({"profiles": {"shell": {"limits": {"memory": "256M", "pids": 64},
                                                     "pool": {"min_idle": 1, "max_idle": 2}}}})")});
  ASSERT_TRUE(d.up());

  json::value run = d.Call(RequestLine(
      1, "sandbox.run", absl::StrCat(R"({"argv": ["sh", "-c", "while :; do :; done"], "timeout_ms": 30000, )",
                                     kCpuBreaker, "}")));
  ASSERT_TRUE(run.is_object() && run.as_object().contains("result")) << run;
  EXPECT_EQ(run.at("result").at("reason"), "breaker_cpu") << run;

  json::value skill = d.Call(RequestLine(
      2, "skill.call", absl::StrCat(R"({"argv": ["sh", "-c", "while :; do :; done"], "timeout_ms": 30000, )",
                                    R"("method": "spin", )", kCpuBreaker, "}")));
  ASSERT_TRUE(skill.is_object() && skill.as_object().contains("error")) << skill;
  EXPECT_EQ(skill.at("error").at("code"), -32007);
  EXPECT_EQ(skill.at("error").at("data").at("reason"), "breaker_cpu") << skill;

  json::value started = d.Call(RequestLine(
      3, "exec.start", absl::StrCat(R"({"argv": ["sh", "-c", "while :; do :; done"], "timeout_ms": 30000, )",
                                    kCpuBreaker, "}")));
  ASSERT_TRUE(started.is_object() && started.as_object().contains("result")) << started;
  json::value waited = d.Call(RequestLine(
      4, "exec.wait", absl::StrCat(R"({"exec_id": ")", std::string(started.at("result").at("exec_id").as_string()),
                                   R"(", "timeout_ms": 30000})")));
  ASSERT_TRUE(waited.is_object() && waited.as_object().contains("result")) << waited;
  EXPECT_EQ(waited.at("result").at("result").at("reason"), "breaker_cpu") << waited;

  // Without the request's breakers the same pool runs unwatched.
  json::value plain = d.Call(RequestLine(5, "sandbox.run", R"({"argv": ["sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"]})"));
  EXPECT_EQ(plain.at("result").at("reason"), "exited") << plain;
  EXPECT_EQ(d.Stop().exit_code, 0);
}

TEST(RequestBreakers, LooserThanTheProfileIsRefusedAndNothingRuns) {
  TempDir dir;
  SocketDaemon d({"--config", WriteConfig(dir, R"({"profiles": {"shell": {
      "limits": {"memory": "256M", "pids": 64},
      "breakers": {"cpu": 0.5, "memory": "128M"},
      "pool": {"min_idle": 1, "max_idle": 1}}}})")});
  ASSERT_TRUE(d.up());
  const int64_t before = PoolRuns(d);
  struct Case {
    const char* breakers;
    int64_t code;
    const char* says;
  };
  for (const Case& c : {
           Case{R"({"cpu": 0.9})", -32002, "params.breakers.cpu: 0.9 exceeds the profile's 0.5"},
           Case{R"({"memory": "200M"})", -32002, "params.breakers.memory"},
           Case{R"({"io": "1M"})", -32602, "no io breaker"},
           Case{R"({"cpu": -1})", -32602, "params.breakers.cpu"},
           Case{R"({"cpuu": 0.1})", -32602, "cpuu"},
       }) {
    for (const char* method : {"sandbox.run", "skill.call"}) {
      std::string params = absl::StrCat(R"({"argv": ["true"], "breakers": )", c.breakers,
                                        absl::string_view(method) == "skill.call" ? R"(, "method": "m"})" : "}");
      json::value r = d.Call(RequestLine(7, method, params));
      ASSERT_TRUE(r.is_object() && r.as_object().contains("error")) << method << " " << c.breakers << " " << r;
      EXPECT_EQ(r.at("error").at("code"), c.code) << method << " " << c.breakers << " " << r;
      EXPECT_TRUE(absl::StrContains(std::string(r.at("error").at("message").as_string()), c.says))
          << method << " " << r;
    }
  }
  EXPECT_EQ(PoolRuns(d), before) << "a refused request ran";
  // Tighter is fine.
  json::value ok = d.Call(RequestLine(8, "sandbox.run", R"({"argv": ["true"], "breakers": {"cpu": 0.4, "memory": "64M"}})"));
  EXPECT_EQ(ok.at("result").at("reason"), "exited") << ok;
  EXPECT_EQ(d.Stop().exit_code, 0);
}

}  // namespace
}  // namespace cubicle::test_support
