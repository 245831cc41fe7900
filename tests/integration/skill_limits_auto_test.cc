// Limits from history through the real daemon (docs/skills.md, "Limits
// from history"): a skill with `limits: {memory: auto}` runs at its
// profile's ceiling until it has a history, then at P99 of its peaks times
// the headroom; a call that outgrows that limit is OOM-killed, reported so
// with the breach flagged, and the next call gets a higher one, never above
// the ceiling. The same for `timeout_ms: auto` and wall times, a call past
// its auto timeout ended `timeout`; a skill session's calls feed the
// history too. Needs cgroup memory limits: each test skips, saying why,
// where the host has none. Times are compared only with what the rule
// computes from the history the daemon reports.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "runtime/cgroup_host.h"
#include "tests/integration/skills_fixture.h"

namespace cubicle::test_support {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kCeiling = 256 * kMiB;  // the fixture's python profile

// Holds params.mib MiB, written (so that it is resident), then answers.
constexpr char kAllocSkill[] =
    "import json, sys\n"
    "request = json.loads(sys.stdin.readline())\n"
    "data = b'\\x01' * (request['params']['mib'] << 20)\n"
    "print(json.dumps({'jsonrpc': '2.0', 'id': request['id'], 'result': {'held': len(data)}}), flush=True)\n";

// Sleeps params.ms milliseconds, then answers; a line loop, so that a
// skill session can call it again.
constexpr char kNapSkill[] =
    "import json, sys, time\n"
    "for line in sys.stdin:\n"
    "    request = json.loads(line)\n"
    "    time.sleep(request['params']['ms'] / 1000)\n"
    "    print(json.dumps({'jsonrpc': '2.0', 'id': request['id'], 'result': {'slept': request['params']['ms']}}),\n"
    "          flush=True)\n";

uint64_t U(const json::value& v) { return v.to_number<uint64_t>(); }
// "32.5 MiB", for the figures the tests print.
std::string MiB(uint64_t bytes) { return absl::StrFormat("%.1f MiB", static_cast<double>(bytes) / kMiB); }

class SkillLimitsAuto : public Skills {
 protected:
  void SetUp() override {
    Skills::SetUp();
    if (!IsRoot()) GTEST_SKIP() << "needs root: cgroups are not delegated to this user";
    absl::Status usable = runtime::CgroupsUsable();
    if (!usable.ok()) GTEST_SKIP() << "no usable cgroup memory limits here: " << usable;
    Put("alloc/skill.yaml", "name: alloc\nversion: 1.0.0\nentry: main.py\nlimits: {memory: auto}\n");
    Put("alloc/main.py", kAllocSkill);
  }

  // skill.call alloc holding `mib` MiB: the whole reply.
  json::value Alloc(uint64_t mib) {
    return Call("skill.call", absl::StrCat(R"({"skill": "alloc", "method": "hold", "params": {"mib": )", mib, "}}"));
  }
  json::value Describe() { return Result("skill.describe", R"({"name": "alloc"})"); }
};

TEST_F(SkillLimitsAuto, AStableFootprintConvergesOnAnEstimateBelowTheCeiling) {
  // A floor below 1.5 times its footprint: the estimate is the history's.
  skills_more_ = R"(, "auto_limits": {"floor": "16M"})";
  ASSERT_TRUE(Start().up()) << Log();
  ASSERT_TRUE(Quiet("python", 1));
  EXPECT_EQ(PoolStats("python").at("auto_limit_skills"), 1) << "pool.stats counts the profile's auto skills";
  json::value before = Describe();
  EXPECT_EQ(U(before.at("auto_limits").at("memory")), kCeiling) << "no history yet: the ceiling";
  EXPECT_EQ(before.at("auto_limits").at("basis"), "ceiling");

  uint64_t peak_max = 0;
  for (int i = 0; i < 8; ++i) {
    json::value reply = Alloc(20);
    ASSERT_TRUE(HasResult(reply)) << i << ": " << reply;
    const json::value& r = reply.at("result");
    EXPECT_EQ(U(r.at("result").at("held")), 20 * kMiB);
    ASSERT_TRUE(r.at("limits").at("auto").as_bool()) << r;
    const uint64_t limit = U(r.at("limits").at("memory"));
    const uint64_t peak = U(r.at("usage").at("memory_peak_bytes"));
    std::cout << "[auto-limits] call " << i << ": limit " << MiB(limit) << " ("
              << r.at("limits").at("basis").as_string() << "), peak " << MiB(peak) << "\n";
    EXPECT_LE(peak, limit);
    if (i < 5) {
      EXPECT_EQ(limit, kCeiling) << "fewer than min_samples (5) peaks: the ceiling";
    } else {
      EXPECT_EQ(r.at("limits").at("basis"), "history") << r;
      EXPECT_GE(limit, peak_max) << "at least the largest peak seen";
      EXPECT_LT(limit, kCeiling);
    }
    peak_max = std::max(peak_max, peak);
  }
  json::value d = Describe();
  const json::object& a = d.at("auto_limits").as_object();
  const json::object& h = d.at("history").as_object();
  EXPECT_EQ(U(h.at("samples")), 8u) << d;
  EXPECT_EQ(U(h.at("memory_peak_bytes").at("max")), peak_max);
  const uint64_t estimate = U(a.at("memory"));
  EXPECT_GE(estimate, peak_max);
  EXPECT_LE(estimate, static_cast<uint64_t>(static_cast<double>(peak_max) * 1.5) + 4096);
  EXPECT_LT(estimate, kCeiling);
  EXPECT_EQ(U(d.at("limits").at("memory")), estimate) << "describe shows the limit a call gets now";
  std::cout << "[auto-limits] estimate " << MiB(estimate) << " from " << U(h.at("samples"))
            << " samples, p99 peak " << MiB(U(h.at("memory_peak_bytes").at("p99"))) << "\n";
  // A request that sizes memory itself is not auto.
  json::value own =
      Call("skill.call", R"({"skill": "alloc", "method": "hold", "params": {"mib": 1}, "limits": {"memory": "200M"}})");
  ASSERT_TRUE(HasResult(own)) << own;
  EXPECT_FALSE(own.at("result").as_object().contains("limits")) << own;
}

TEST_F(SkillLimitsAuto, AGrowingFootprintIsOomKilledOnceThenGetsMoreUpToTheCeiling) {
  ASSERT_TRUE(Start().up()) << Log();
  ASSERT_TRUE(Quiet("python", 1));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(HasResult(Alloc(20))) << i;
  // Doubling what it holds outgrows 1.5 times its last peak within a step
  // or two: at most 5 steps (640 MiB would pass the ceiling anyway).
  uint64_t mib = 20;
  json::value failed;
  for (int step = 0; step < 5 && failed.is_null(); ++step) {
    mib *= 2;
    json::value reply = Alloc(mib);
    if (!HasResult(reply)) failed = reply;
  }
  ASSERT_FALSE(failed.is_null()) << "no call outgrew its auto limit";
  EXPECT_EQ(ErrorCode(failed), -32007) << failed;
  const json::value& data = failed.at("error").at("data");
  EXPECT_EQ(data.at("reason"), "oom") << failed;
  EXPECT_EQ(data.at("auto_limit_breached"), "memory") << failed;
  const uint64_t breached = U(data.at("limits").at("memory"));
  ASSERT_LT(breached, kCeiling) << failed;
  json::value d = Describe();
  EXPECT_EQ(U(d.at("history").at("breaches")), 1u) << d;
  EXPECT_EQ(U(d.at("history").at("last_breach").at("memory")), breached) << d;
  EXPECT_EQ(d.at("history").at("last_breach").at("reason"), "oom") << d;

  // The same call again: a higher limit, and it succeeds.
  json::value again = Alloc(mib);
  ASSERT_TRUE(HasResult(again)) << again;
  const uint64_t raised = U(again.at("result").at("limits").at("memory"));
  std::cout << "[auto-limits] " << mib << " MiB: OOM at " << MiB(breached) << ", then ran at " << MiB(raised) << " ("
            << again.at("result").at("limits").at("basis").as_string() << ")\n";
  EXPECT_GE(raised, std::min(2 * breached, kCeiling));
  EXPECT_LE(raised, kCeiling);

  // Past the ceiling: every call is killed, the estimate climbs to the
  // ceiling and stays there (at most 4 calls from any limit above 32 MiB).
  uint64_t limit = 0;
  for (int i = 0; i < 4 && limit < kCeiling; ++i) {
    json::value big = Alloc(300);
    ASSERT_FALSE(HasResult(big)) << big;
    EXPECT_EQ(big.at("error").at("data").at("reason"), "oom") << big;
    limit = U(big.at("error").at("data").at("limits").at("memory"));
    std::cout << "[auto-limits] 300 MiB: OOM at " << MiB(limit) << "\n";
    EXPECT_LE(limit, kCeiling);
  }
  EXPECT_EQ(limit, kCeiling);
  EXPECT_EQ(U(Describe().at("auto_limits").at("memory")), kCeiling) << "bounded by the ceiling";
}

TEST_F(SkillLimitsAuto, TheHistoryOutlivesARestartThroughTheAuditTrail) {
  TempDir state;
  ASSERT_TRUE(Start({"--state-dir", state.Join("state")}).up()) << Log();
  ASSERT_TRUE(Quiet("python", 1));
  for (int i = 0; i < 6; ++i) ASSERT_TRUE(HasResult(Alloc(20))) << i;
  json::value before = Describe();
  daemon_->Stop();
  ASSERT_TRUE(Start({"--state-dir", state.Join("state")}).up()) << Log();
  json::value after = Describe();
  EXPECT_EQ(after.at("history").at("samples"), before.at("history").at("samples")) << after;
  EXPECT_EQ(after.at("history").at("memory_peak_bytes"), before.at("history").at("memory_peak_bytes"));
  EXPECT_EQ(after.at("auto_limits").at("memory"), before.at("auto_limits").at("memory"));
  EXPECT_EQ(after.at("auto_limits").at("basis"), "history");
}

TEST_F(SkillLimitsAuto, AutoNeedsACeiling) {
  Put("unbounded/skill.yaml", "name: unbounded\nversion: 1.0.0\nentry: main.py\nprofile: free\nlimits: auto\n");
  Put("unbounded/main.py", kAllocSkill);
  ASSERT_TRUE(Start({}, R"("ceilings": {"memory": "unlimited"},)",
                    R"(, "free": {"limits": {"memory": "unlimited"}, "pool": {"min_idle": 0}})")
                  .up())
      << Log();
  json::value list = Result("skill.list", "");
  const std::string errors = json::serialize(list.at("errors"));
  EXPECT_NE(errors.find("memory: auto needs a memory limit in profile 'free'"), std::string::npos) << list;
}

constexpr int64_t kTimeCeilingMs = 60000;  // the fixture's python profile's max_timeout_ms

class SkillTimeoutAuto : public SkillLimitsAuto {
 protected:
  void SetUp() override {
    SkillLimitsAuto::SetUp();
    if (IsSkipped()) return;
    Put("nap/skill.yaml", "name: nap\nversion: 1.0.0\nentry: main.py\ntimeout_ms: auto\n");
    Put("nap/main.py", kNapSkill);
  }

  json::value Nap(int64_t ms) {
    return Call("skill.call", absl::StrCat(R"({"skill": "nap", "method": "nap", "params": {"ms": )", ms, "}}"));
  }
  json::value DescribeNap() { return Result("skill.describe", R"({"name": "nap"})"); }
  static int64_t I(const json::value& v) { return v.to_number<int64_t>(); }
  // What the rule makes of a history: ceil(P99 of its wall times x
  // headroom), within the floor and the ceiling.
  static int64_t Rule(const json::value& history, double headroom, int64_t floor_ms) {
    const double p99 = history.at("wall_ms").at("p99").to_number<double>();
    return std::clamp<int64_t>(static_cast<int64_t>(std::ceil(p99 * headroom)), floor_ms, kTimeCeilingMs);
  }
};

TEST_F(SkillTimeoutAuto, AStableRunTimeConvergesOnATimeoutFromItsHistory) {
  // A floor below its run time, and room for a loaded host: the estimate
  // is the history's.
  skills_more_ = R"(, "auto_limits": {"time_floor_ms": 10, "headroom": 4})";
  ASSERT_TRUE(Start().up()) << Log();
  ASSERT_TRUE(Quiet("python", 1));
  json::value before = DescribeNap();
  EXPECT_TRUE(before.at("auto_limits").as_object().contains("timeout")) << before;
  EXPECT_FALSE(before.at("auto_limits").as_object().contains("memory")) << "memory is fixed: " << before;
  EXPECT_EQ(I(before.at("auto_limits").at("timeout").at("timeout_ms")), kTimeCeilingMs) << "no history: the ceiling";
  EXPECT_EQ(before.at("auto_limits").at("timeout").at("basis"), "ceiling");
  EXPECT_EQ(I(before.at("timeout_ms")), kTimeCeilingMs) << "describe shows the timeout a call gets now";

  for (int i = 0; i < 8; ++i) {
    const json::value d = DescribeNap();
    const int64_t expected = I(d.at("auto_limits").at("timeout").at("timeout_ms"));
    json::value reply = Nap(50);
    ASSERT_TRUE(HasResult(reply)) << i << ": " << reply;
    const json::value& limits = reply.at("result").at("limits");
    ASSERT_TRUE(limits.at("auto").as_bool()) << reply;
    std::cout << "[auto-time] call " << i << ": timeout " << I(limits.at("timeout_ms")) << " ms ("
              << limits.at("timeout_basis").as_string() << ")\n";
    EXPECT_EQ(I(limits.at("timeout_ms")), expected) << i << ": the call ran with what describe said";
    if (i < 5) {
      EXPECT_EQ(limits.at("timeout_basis"), "ceiling") << "fewer than min_samples (5): the ceiling";
    } else {
      EXPECT_EQ(limits.at("timeout_basis"), "history") << reply;
      EXPECT_EQ(expected, Rule(d.at("history"), 4, 10)) << d;
      EXPECT_LT(expected, kTimeCeilingMs);
    }
  }
  json::value d = DescribeNap();
  const json::object& t = d.at("auto_limits").at("timeout").as_object();
  EXPECT_EQ(U(d.at("history").at("wall_samples")), 8u) << d;
  EXPECT_EQ(U(t.at("samples")), 8u);
  EXPECT_GE(d.at("history").at("wall_ms").at("p50").to_number<double>(), 50.0) << "each call slept 50 ms";
  EXPECT_EQ(I(t.at("timeout_ms")), Rule(d.at("history"), 4, 10)) << d;
  EXPECT_EQ(t.at("basis"), "history");
  EXPECT_EQ(I(t.at("ceiling_ms")), kTimeCeilingMs);
  EXPECT_EQ(I(t.at("floor_ms")), 10);
  // A request that times itself is not auto.
  json::value own = Call("skill.call", R"({"skill": "nap", "method": "nap", "params": {"ms": 1}, "timeout_ms": 5000})");
  ASSERT_TRUE(HasResult(own)) << own;
  EXPECT_FALSE(own.at("result").as_object().contains("limits")) << own;
}

TEST_F(SkillTimeoutAuto, ARunTimePastItsAutoTimeoutEndsTimeoutThenGetsMoreUpToTheCeiling) {
  skills_more_ = R"(, "auto_limits": {"time_floor_ms": 10, "headroom": 2})";
  ASSERT_TRUE(Start().up()) << Log();
  ASSERT_TRUE(Quiet("python", 1));
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(HasResult(Nap(50))) << i;
  const int64_t first = I(DescribeNap().at("auto_limits").at("timeout").at("timeout_ms"));
  ASSERT_LT(first, kTimeCeilingMs);
  // Sleeping 2.5 times the estimate outruns it and then its double; the
  // next doubling leaves room. At most 4 calls.
  const int64_t sleep_ms = first * 5 / 2;
  int64_t breached = 0;
  int breaches = 0;
  json::value answered;
  for (int i = 0; i < 4 && answered.is_null(); ++i) {
    json::value reply = Nap(sleep_ms);
    if (HasResult(reply)) {
      answered = reply;
      break;
    }
    EXPECT_EQ(ErrorCode(reply), -32007) << reply;
    const json::value& data = reply.at("error").at("data");
    EXPECT_EQ(data.at("reason"), "timeout") << reply;
    EXPECT_EQ(data.at("auto_limit_breached"), "timeout") << reply;
    const int64_t timeout = I(data.at("limits").at("timeout_ms"));
    std::cout << "[auto-time] " << sleep_ms << " ms: ended at its timeout of " << timeout << " ms ("
              << data.at("limits").at("timeout_basis").as_string() << ")\n";
    EXPECT_EQ(timeout, breaches == 0 ? first : std::min(2 * breached, kTimeCeilingMs)) << reply;
    breached = timeout;
    ++breaches;
    json::value d = DescribeNap();
    EXPECT_EQ(U(d.at("history").at("breaches")), static_cast<uint64_t>(breaches)) << d;
    EXPECT_EQ(I(d.at("history").at("last_breach").at("timeout_ms")), breached) << d;
    EXPECT_EQ(d.at("history").at("last_breach").at("reason"), "timeout") << d;
    EXPECT_EQ(I(d.at("auto_limits").at("timeout").at("timeout_ms")), std::min(2 * breached, kTimeCeilingMs)) << d;
  }
  ASSERT_GE(breaches, 1) << "no call outran its auto timeout";
  ASSERT_FALSE(answered.is_null()) << "four doublings never gave it room";
  const json::value& limits = answered.at("result").at("limits");
  EXPECT_GE(I(limits.at("timeout_ms")), std::min(2 * breached, kTimeCeilingMs)) << answered;
  EXPECT_LE(I(limits.at("timeout_ms")), kTimeCeilingMs);
  EXPECT_EQ(limits.at("timeout_basis"), "breach") << answered;
}

TEST_F(SkillTimeoutAuto, ASessionsCallsFeedTheHistoryButNotItsLife) {
  skills_more_ = R"(, "auto_limits": {"time_floor_ms": 10, "headroom": 4, "min_samples": 3})";
  TempDir state;
  ASSERT_TRUE(Start({"--state-dir", state.Join("state")}).up()) << Log();
  ASSERT_TRUE(Quiet("python", 1));
  json::value opened = Result("skill.session.open", R"({"skill": "nap"})");
  ASSERT_TRUE(opened.is_object());
  const std::string key(opened.at("skill_session").as_string());
  for (int i = 0; i < 3; ++i) {
    json::value reply = Call("skill.call", absl::StrCat(R"({"skill_session": ")", key,
                                                        R"(", "method": "nap", "params": {"ms": 20}})"));
    ASSERT_TRUE(HasResult(reply)) << i << ": " << reply;
    EXPECT_EQ(reply.at("result").at("limits").at("timeout_basis"), "ceiling") << "fewer than min_samples";
  }
  json::value closed = Result("skill.session.close", absl::StrCat(R"({"skill_session": ")", key, R"("})"));
  ASSERT_TRUE(closed.is_object());
  json::value d = DescribeNap();
  const json::value& h = d.at("history");
  EXPECT_EQ(U(h.at("session_calls")), 3u) << d;
  EXPECT_EQ(U(h.at("sessions")), 1u) << "its end, with its process's peak";
  EXPECT_EQ(U(h.at("samples")), 1u) << d;
  // Its calls' wall times size the timeout; the session's life does not.
  EXPECT_EQ(U(h.at("wall_samples")), 3u) << d;
  EXPECT_EQ(U(d.at("auto_limits").at("timeout").at("samples")), 3u) << d;
  EXPECT_LT(h.at("wall_ms").at("max").to_number<double>(), closed.at("ended").at("wall_ms").to_number<double>());
  EXPECT_EQ(d.at("auto_limits").at("timeout").at("basis"), "history") << d;
  EXPECT_EQ(I(d.at("auto_limits").at("timeout").at("timeout_ms")), Rule(h, 4, 10)) << d;
  // The trail rebuilds the same window after a restart.
  daemon_->Stop();
  ASSERT_TRUE(Start({"--state-dir", state.Join("state")}).up()) << Log();
  json::value after = DescribeNap();
  EXPECT_EQ(after.at("history"), d.at("history")) << after;
  EXPECT_EQ(after.at("auto_limits"), d.at("auto_limits")) << after;
}

}  // namespace
}  // namespace cubicle::test_support
