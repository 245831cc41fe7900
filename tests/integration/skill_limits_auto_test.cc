// Limits from history through the real daemon (docs/skills.md, "Limits
// from history"): a skill with `limits: {memory: auto}` runs at its
// profile's ceiling until it has a history, then at P99 of its peaks times
// the headroom; a call that outgrows that limit is OOM-killed, reported so
// with the breach flagged, and the next call gets a higher one, never above
// the ceiling. Needs cgroup memory limits: each test skips, saying why,
// where the host has none.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace cubicle::test_support
