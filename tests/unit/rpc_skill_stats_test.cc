// Limits from history (rpc/skill_stats.h): the estimator's rule on
// windows the test makes, the stats' window, the audit lines they read
// and a rebuild from a trail.
#include "rpc/skill_stats.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>

#include "tests/support/temp_dir.h"

namespace cubicle::rpc {
namespace {

namespace json = boost::json;

constexpr uint64_t kMiB = 1 << 20;
constexpr uint64_t kCeiling = 256 * kMiB;

SkillRun Peak(uint64_t bytes) {
  SkillRun run;
  run.memory_peak = bytes;
  run.cpu_ns = 5'000'000;
  run.wall = absl::Milliseconds(8);
  return run;
}

SkillRun Breach(uint64_t limit) {
  SkillRun run;
  run.breached_memory = limit;
  run.breach_reason = "oom";
  return run;
}

TEST(SkillStatsEstimate, FewerSamplesThanTheMinimumGetTheCeiling) {
  AutoLimitsConfig c;
  std::deque<SkillRun> window;
  EXPECT_EQ(EstimateMemory(window, kCeiling, c).bytes, kCeiling);
  for (size_t i = 0; i + 1 < c.min_samples; ++i) window.push_back(Peak(40 * kMiB));
  MemoryEstimate e = EstimateMemory(window, kCeiling, c);
  EXPECT_EQ(e.bytes, kCeiling);
  EXPECT_EQ(e.basis, "ceiling");
  EXPECT_EQ(e.samples, c.min_samples - 1);
}

TEST(SkillStatsEstimate, AStableFootprintConvergesOnHeadroomTimesItsP99) {
  AutoLimitsConfig c;
  SkillStats stats(c);
  std::vector<uint64_t> estimates;
  for (int i = 0; i < 40; ++i) {
    stats.Record("s", Peak((40 + i % 3) * kMiB));  // 40, 41, 42 MiB
    estimates.push_back(stats.Memory("s", kCeiling).bytes);
  }
  const uint64_t p99 = 42 * kMiB;
  for (size_t i = c.min_samples - 1; i < estimates.size(); ++i) {
    EXPECT_GE(estimates[i], p99) << i;
    EXPECT_LE(estimates[i], static_cast<uint64_t>(p99 * c.headroom) + 4096) << i;
  }
  // Stable once every value of the series is in the window.
  for (size_t i = c.min_samples + 2; i < estimates.size(); ++i) EXPECT_EQ(estimates[i], estimates.back()) << i;
  EXPECT_EQ(stats.Memory("s", kCeiling).basis, "history");
}

TEST(SkillStatsEstimate, NeverBelowTheFloorNorAboveTheCeiling) {
  AutoLimitsConfig c;
  std::deque<SkillRun> small(c.min_samples, Peak(2 * kMiB));
  MemoryEstimate e = EstimateMemory(small, kCeiling, c);
  EXPECT_EQ(e.bytes, c.floor);
  EXPECT_EQ(e.basis, "floor");
  std::deque<SkillRun> large(c.min_samples, Peak(200 * kMiB));
  e = EstimateMemory(large, kCeiling, c);
  EXPECT_EQ(e.bytes, kCeiling);
  EXPECT_EQ(e.basis, "ceiling");
}

TEST(SkillStatsEstimate, ABreachRaisesTheNextEstimateBoundedByTheCeiling) {
  AutoLimitsConfig c;
  SkillStats stats(c);
  for (size_t i = 0; i < c.min_samples; ++i) stats.Record("grows", Peak(30 * kMiB));
  uint64_t limit = stats.Memory("grows", kCeiling).bytes;
  ASSERT_LT(limit, kCeiling);
  // Each call needs more than the limit it gets, until the ceiling: each
  // breach at least doubles the next limit, so it climbs in a few calls.
  std::vector<uint64_t> limits = {limit};
  for (int i = 0; i < 10 && limit < kCeiling; ++i) {
    stats.Record("grows", Breach(limit));
    const MemoryEstimate next = stats.Memory("grows", kCeiling);
    EXPECT_GE(next.bytes, std::min(2 * limit, kCeiling)) << i;
    EXPECT_LE(next.bytes, kCeiling);
    limit = next.bytes;
    limits.push_back(limit);
  }
  EXPECT_EQ(limit, kCeiling);
  EXPECT_LE(limits.size(), 5u) << "from 45 MiB to 256 MiB in at most 4 breaches";
  EXPECT_EQ(stats.Memory("grows", kCeiling).basis, "ceiling");
  // A run at the raised limit that succeeds keeps the estimate up while
  // the breach is in the window, and feeds the estimate after.
  stats.Record("grows", Peak(120 * kMiB));
  EXPECT_EQ(stats.Memory("grows", kCeiling).bytes, kCeiling);
}

TEST(SkillStatsEstimate, ABreachAgesOutWithTheWindow) {
  AutoLimitsConfig c;
  c.window = 10;
  c.min_samples = 3;
  SkillStats stats(c);
  for (int i = 0; i < 3; ++i) stats.Record("s", Peak(40 * kMiB));
  stats.Record("s", Breach(60 * kMiB));
  EXPECT_EQ(stats.Memory("s", kCeiling).bytes, 120 * kMiB);
  EXPECT_EQ(stats.Memory("s", kCeiling).basis, "breach");
  for (int i = 0; i < 10; ++i) stats.Record("s", Peak(40 * kMiB));
  EXPECT_EQ(stats.Memory("s", kCeiling).bytes, 60 * kMiB);
  EXPECT_EQ(stats.Memory("s", kCeiling).basis, "history");
}

TEST(SkillStatsEstimate, PercentileIsTheNearestRank) {
  std::vector<uint64_t> v;
  for (uint64_t i = 1; i <= 200; ++i) v.push_back(i);
  EXPECT_EQ(Percentile(v, 99), 198u);
  EXPECT_EQ(Percentile(v, 50), 100u);
  EXPECT_EQ(Percentile({7}, 99), 7u);
  EXPECT_EQ(Percentile({}, 99), 0u);
  // Fewer than 100 values: P99 is the largest.
  EXPECT_EQ(Percentile({1, 2, 3, 90}, 99), 90u);
}

TEST(SkillStatsWindow, KeepsTheLastWindowCallsAndSeedsOlderOnes) {
  AutoLimitsConfig c;
  c.window = 4;
  c.min_samples = 1;
  SkillStats stats(c);
  for (uint64_t i = 1; i <= 6; ++i) stats.Record("s", Peak(i * 100 * kMiB));
  json::object h = stats.HistoryJson("s");
  EXPECT_EQ(h.at("calls").as_uint64(), 4u);
  EXPECT_EQ(h.at("memory_peak_bytes").at("max").to_number<double>(), 600.0 * kMiB);
  EXPECT_EQ(h.at("memory_peak_bytes").at("p50").to_number<double>(), 400.0 * kMiB);
  // Seeds go behind what is held, and only while there is room.
  SkillStats seeded(c);
  seeded.Seed("s", Peak(9 * kMiB));
  seeded.Seed("s", Peak(8 * kMiB));
  EXPECT_EQ(seeded.HistoryJson("s").at("calls").as_uint64(), 2u);
  for (int i = 0; i < 5; ++i) seeded.Seed("s", Peak(1 * kMiB));
  EXPECT_EQ(seeded.HistoryJson("s").at("calls").as_uint64(), 4u);
  EXPECT_EQ(seeded.HistoryJson("s").at("memory_peak_bytes").at("max").to_number<double>(), 9.0 * kMiB);
  EXPECT_EQ(stats.HistoryJson("unknown").at("samples").as_uint64(), 0u);
}

TEST(SkillStatsAudit, ReadsUsageAndBreachesFromAuditLines) {
  auto line = [](const char* text) { return json::parse(text).as_object(); };
  auto ok = SkillRunOfAuditLine(line(
      R"({"skill": {"id": "abc"}, "outcome": "ok", "duration_ms": 12.5,
          "usage": {"memory_peak_bytes": 41943040, "cpu_usage_ns": 7000000}, "ts": "2026-12-07T10:00:00Z"})"));
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->first, "abc");
  EXPECT_EQ(*ok->second.memory_peak, 41943040u);
  EXPECT_EQ(*ok->second.cpu_ns, 7000000u);
  EXPECT_EQ(ok->second.wall, absl::Microseconds(12500));
  auto breach = SkillRunOfAuditLine(line(
      R"({"skill": {"id": "abc"}, "outcome": "failed", "reason": "oom", "auto_limit_breached": "memory",
          "limits": {"memory": 50331648, "auto": true}})"));
  ASSERT_TRUE(breach.has_value());
  EXPECT_EQ(*breach->second.breached_memory, 50331648u);
  EXPECT_EQ(breach->second.breach_reason, "oom");
  EXPECT_FALSE(breach->second.memory_peak.has_value());
  // Neither a call by argv, nor a failure that breached nothing, nor a
  // line without usage says anything.
  EXPECT_FALSE(SkillRunOfAuditLine(line(R"({"skill": null, "outcome": "ok", "usage": {"memory_peak_bytes": 1}})")));
  EXPECT_FALSE(SkillRunOfAuditLine(line(R"({"skill": {"id": "abc"}, "outcome": "failed", "reason": "timeout",
                                             "limits": {"memory": 1, "auto": true}})")));
  EXPECT_FALSE(SkillRunOfAuditLine(line(R"({"skill": {"id": "abc"}, "outcome": "ok"})")));
}

TEST(SkillStatsAudit, ATrailRebuildsTheWindows) {
  test_support::TempDir dir;
  absl::StatusOr<std::unique_ptr<AuditLog>> log = AuditLog::Open(dir.Join("audit"));
  ASSERT_TRUE(log.ok()) << log.status();
  for (int i = 0; i < 8; ++i) {
    json::object line{{"skill", json::object{{"id", "abc"}}},
                      {"outcome", "ok"},
                      {"duration_ms", 10},
                      {"usage", json::object{{"memory_peak_bytes", (40 + i) * kMiB}}}};
    ASSERT_TRUE((*log)->Append(std::move(line)).ok());
  }
  ASSERT_TRUE((*log)
                  ->Append(json::object{{"skill", json::object{{"id", "abc"}}},
                                        {"outcome", "failed"},
                                        {"reason", "oom"},
                                        {"auto_limit_breached", "memory"},
                                        {"limits", json::object{{"memory", 70 * kMiB}, {"auto", true}}}})
                  .ok());
  AutoLimitsConfig c;
  c.window = 6;
  SkillStats live(c), rebuilt(c);
  ASSERT_TRUE(RebuildSkillStats(**log, kSkillStatsRebuildLines, &rebuilt).ok());
  EXPECT_EQ(rebuilt.HistoryJson("abc").at("calls").as_uint64(), 6u) << "the newest window only";
  EXPECT_EQ(rebuilt.HistoryJson("abc").at("breaches").as_uint64(), 1u);
  EXPECT_EQ(rebuilt.Memory("abc", kCeiling).bytes, 140 * kMiB) << "twice the breached limit";
  // Read in the order written, the same window.
  for (int i = 3; i < 8; ++i) live.Record("abc", Peak((40 + i) * kMiB));
  live.Record("abc", Breach(70 * kMiB));
  EXPECT_EQ(live.Memory("abc", kCeiling).bytes, rebuilt.Memory("abc", kCeiling).bytes);
  EXPECT_EQ(live.HistoryJson("abc").at("memory_peak_bytes"), rebuilt.HistoryJson("abc").at("memory_peak_bytes"));
  // A bound on the lines read: the newest one only (the breach).
  SkillStats bounded(c);
  ASSERT_TRUE(RebuildSkillStats(**log, 1, &bounded).ok());
  EXPECT_EQ(bounded.HistoryJson("abc").at("calls").as_uint64(), 1u);
}

}  // namespace
}  // namespace cubicle::rpc
