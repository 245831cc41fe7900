// Limits from history (rpc/skill_stats.h): the estimator's rule on
// windows the test makes, the stats' window, the audit lines they read
// and a rebuild from a trail.
#include "rpc/skill_stats.h"

#include <gtest/gtest.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

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

constexpr absl::Duration kTimeCeiling = absl::Seconds(60);

// A call that answered after `wall`, with a footprint.
SkillRun Took(absl::Duration wall) {
  SkillRun run = Peak(40 * kMiB);
  run.wall = wall;
  return run;
}

SkillRun TimedOut(absl::Duration timeout) {
  SkillRun run;
  run.breached_timeout = timeout;
  run.breach_reason = "timeout";
  run.wall = timeout;
  return run;
}

// A call in a skill session, and a session's end after `life`.
SkillRun SessionCall(absl::Duration wall) {
  SkillRun run;
  run.kind = SkillRunKind::kSessionCall;
  run.wall = wall;
  return run;
}

SkillRun SessionEnd(absl::Duration life, uint64_t peak) {
  SkillRun run;
  run.kind = SkillRunKind::kSession;
  run.wall = life;
  run.memory_peak = peak;
  run.cpu_ns = 9'000'000'000;
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

TEST(SkillStatsTimeout, FewerSamplesThanTheMinimumGetTheCeiling) {
  AutoLimitsConfig c;
  std::deque<SkillRun> window;
  EXPECT_EQ(EstimateTimeout(window, kTimeCeiling, c).timeout, kTimeCeiling);
  for (size_t i = 0; i + 1 < c.min_samples; ++i) window.push_back(Took(absl::Seconds(2)));
  // Breaches are no samples either.
  window.push_back(TimedOut(absl::Seconds(3)));
  TimeEstimate e = EstimateTimeout(window, kTimeCeiling, c);
  EXPECT_EQ(e.timeout, kTimeCeiling);
  EXPECT_EQ(e.basis, "ceiling");
  EXPECT_EQ(e.samples, c.min_samples - 1);
}

TEST(SkillStatsTimeout, AStableRunTimeGetsHeadroomTimesItsP99InWholeMilliseconds) {
  AutoLimitsConfig c;
  SkillStats stats(c);
  // 2000.1, 2100.1, 2200.1 ms: P99 is the largest of fewer than 100.
  for (int i = 0; i < 12; ++i) stats.Record("s", Took(absl::Microseconds(2'000'100 + (i % 3) * 100'000)));
  const TimeEstimate e = stats.Timeout("s", kTimeCeiling);
  EXPECT_EQ(e.basis, "history");
  EXPECT_EQ(e.samples, 12u);
  EXPECT_EQ(e.timeout, absl::Milliseconds(3301)) << "ceil(2200.1 ms x 1.5)";
  EXPECT_EQ(stats.HistoryJson("s").at("wall_samples").as_uint64(), 12u);
}

TEST(SkillStatsTimeout, NeverBelowTheFloorNorAboveTheCeiling) {
  AutoLimitsConfig c;
  std::deque<SkillRun> quick(c.min_samples, Took(absl::Milliseconds(40)));
  TimeEstimate e = EstimateTimeout(quick, kTimeCeiling, c);
  EXPECT_EQ(e.timeout, c.time_floor);
  EXPECT_EQ(e.basis, "floor");
  c.time_floor = absl::Milliseconds(10);
  e = EstimateTimeout(quick, kTimeCeiling, c);
  EXPECT_EQ(e.timeout, absl::Milliseconds(60));
  EXPECT_EQ(e.basis, "history");
  std::deque<SkillRun> slow(c.min_samples, Took(absl::Seconds(50)));
  e = EstimateTimeout(slow, kTimeCeiling, c);
  EXPECT_EQ(e.timeout, kTimeCeiling);
  EXPECT_EQ(e.basis, "ceiling");
}

TEST(SkillStatsTimeout, ABreachDoublesTheNextTimeoutBoundedByTheCeiling) {
  AutoLimitsConfig c;
  SkillStats stats(c);
  for (size_t i = 0; i < c.min_samples; ++i) stats.Record("grows", Took(absl::Seconds(2)));
  absl::Duration timeout = stats.Timeout("grows", kTimeCeiling).timeout;
  ASSERT_EQ(timeout, absl::Seconds(3));
  std::vector<absl::Duration> timeouts = {timeout};
  for (int i = 0; i < 10 && timeout < kTimeCeiling; ++i) {
    stats.Record("grows", TimedOut(timeout));
    const TimeEstimate next = stats.Timeout("grows", kTimeCeiling);
    EXPECT_EQ(next.timeout, std::min(2 * timeout, kTimeCeiling)) << i;
    EXPECT_EQ(next.basis, 2 * timeout < kTimeCeiling ? "breach" : "ceiling") << i;
    timeout = next.timeout;
    timeouts.push_back(timeout);
  }
  EXPECT_EQ(timeout, kTimeCeiling);
  EXPECT_EQ(timeouts.size(), 6u) << "3 s, 6, 12, 24, 48, then the 60 s ceiling";
  json::object h = stats.HistoryJson("grows");
  EXPECT_EQ(h.at("breaches").as_uint64(), 5u);
  EXPECT_EQ(h.at("last_breach").at("timeout_ms").as_int64(), 48000);
  EXPECT_EQ(h.at("last_breach").at("reason"), "timeout");
  // A timeout breach says nothing of memory, and a memory breach nothing of time.
  EXPECT_EQ(stats.Memory("grows", kCeiling).basis, "history");
  stats.Record("grows", Breach(100 * kMiB));
  EXPECT_EQ(stats.Timeout("grows", kTimeCeiling).samples, c.min_samples);
  EXPECT_EQ(stats.HistoryJson("grows").at("last_breach").at("memory").as_uint64(), 100 * kMiB);
}

TEST(SkillStatsTimeout, ASessionsLifeNeverSizesATimeoutItsCallsDo) {
  AutoLimitsConfig c;
  c.time_floor = absl::Milliseconds(1);
  SkillStats stats(c);
  for (size_t i = 0; i < c.min_samples; ++i) stats.Record("s", SessionCall(absl::Milliseconds(100)));
  // An hour-long session whose process peaked higher than any call.
  stats.Record("s", SessionEnd(absl::Hours(1), 90 * kMiB));
  const TimeEstimate t = stats.Timeout("s", kTimeCeiling);
  EXPECT_EQ(t.samples, c.min_samples) << "the calls' wall times, not the session's";
  EXPECT_EQ(t.timeout, absl::Milliseconds(150));
  EXPECT_EQ(t.basis, "history");
  json::object h = stats.HistoryJson("s");
  EXPECT_EQ(h.at("session_calls").as_uint64(), c.min_samples);
  EXPECT_EQ(h.at("sessions").as_uint64(), 1u);
  EXPECT_EQ(h.at("wall_ms").at("max").to_number<double>(), 100.0) << h;
  EXPECT_TRUE(h.at("cpu_ms").is_null()) << "a session's CPU time is no call's";
  // Its peak is a true peak of the skill: one sample for memory.
  EXPECT_EQ(h.at("samples").as_uint64(), 1u);
  EXPECT_EQ(h.at("memory_peak_bytes").at("max").to_number<double>(), 90.0 * kMiB);
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

TEST(SkillStatsAudit, ReadsTimeoutBreachesAndSessionsFromAuditLines) {
  auto line = [](const char* text) { return json::parse(text).as_object(); };
  auto timed_out = SkillRunOfAuditLine(line(
      R"({"skill": {"id": "abc"}, "outcome": "failed", "reason": "timeout", "auto_limit_breached": "timeout",
          "duration_ms": 812.4, "limits": {"memory": 50331648, "auto": true, "timeout_ms": 800}})"));
  ASSERT_TRUE(timed_out.has_value());
  EXPECT_EQ(timed_out->second.breached_timeout, absl::Milliseconds(800));
  EXPECT_FALSE(timed_out->second.breached_memory.has_value()) << "the memory limit was not what it ran past";
  EXPECT_EQ(timed_out->second.breach_reason, "timeout");
  EXPECT_FALSE(IsCallWall(timed_out->second));
  EXPECT_FALSE(SkillRunOfAuditLine(line(R"({"skill": {"id": "abc"}, "outcome": "failed", "reason": "timeout",
                                             "auto_limit_breached": "timeout", "limits": {"auto": true}})")))
      << "a timeout breach without the timeout it ran past";
  // A session's call: its wall time, no usage of its own.
  auto call = SkillRunOfAuditLine(line(
      R"({"skill": {"id": "abc"}, "skill_session": "k01", "outcome": "ok", "duration_ms": 30})"));
  ASSERT_TRUE(call.has_value());
  EXPECT_EQ(call->second.kind, SkillRunKind::kSessionCall);
  EXPECT_EQ(call->second.wall, absl::Milliseconds(30));
  EXPECT_FALSE(call->second.memory_peak.has_value());
  EXPECT_TRUE(IsCallWall(call->second));
  auto in_session_breach = SkillRunOfAuditLine(line(
      R"({"skill": {"id": "abc"}, "skill_session": "k01", "outcome": "failed", "reason": "timeout",
          "auto_limit_breached": "timeout", "limits": {"timeout_ms": 45, "auto": true}})"));
  ASSERT_TRUE(in_session_breach.has_value());
  EXPECT_EQ(in_session_breach->second.kind, SkillRunKind::kSessionCall);
  EXPECT_EQ(in_session_breach->second.breached_timeout, absl::Milliseconds(45));
  // Its end: the process's usage over the session's life.
  auto end = SkillRunOfAuditLine(line(
      R"({"skill": {"id": "abc"}, "skill_session": "k01", "outcome": "session_end", "reason": "closed",
          "duration_ms": 3600000, "usage": {"memory_peak_bytes": 41943040, "cpu_usage_ns": 7000000}})"));
  ASSERT_TRUE(end.has_value());
  EXPECT_EQ(end->second.kind, SkillRunKind::kSession);
  EXPECT_EQ(*end->second.memory_peak, 41943040u);
  EXPECT_FALSE(IsCallWall(end->second));
  EXPECT_FALSE(SkillRunOfAuditLine(line(R"({"skill": {"id": "abc"}, "skill_session": "k01",
                                             "outcome": "session_end", "reason": "failed"})")))
      << "a session whose process never ran has no usage";
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
  // Timeout breaches and sessions rebuild the same too.
  std::vector<json::object> lines = {
      json::object{{"skill", json::object{{"id", "t"}}}, {"skill_session", "k1"}, {"outcome", "ok"}, {"duration_ms", 20}},
      json::object{{"skill", json::object{{"id", "t"}}}, {"skill_session", "k1"}, {"outcome", "ok"}, {"duration_ms", 30}},
      json::object{{"skill", json::object{{"id", "t"}}},
                   {"skill_session", "k1"},
                   {"outcome", "session_end"},
                   {"duration_ms", 90000},
                   {"usage", json::object{{"memory_peak_bytes", 50 * kMiB}}}},
      json::object{{"skill", json::object{{"id", "t"}}},
                   {"outcome", "ok"},
                   {"duration_ms", 40},
                   {"usage", json::object{{"memory_peak_bytes", 20 * kMiB}}}},
      json::object{{"skill", json::object{{"id", "t"}}},
                   {"outcome", "failed"},
                   {"reason", "timeout"},
                   {"auto_limit_breached", "timeout"},
                   {"limits", json::object{{"timeout_ms", 60}, {"auto", true}}}}};
  c.min_samples = 3;
  c.time_floor = absl::Milliseconds(1);
  SkillStats live_t(c), rebuilt_t(c);
  for (json::object& l : lines) {
    l["ts"] = "2026-12-07T10:00:00Z";  // as the daemon stamps each line before it feeds it
    live_t.Record(SkillRunOfAuditLine(l)->first, SkillRunOfAuditLine(l)->second);
    ASSERT_TRUE((*log)->Append(std::move(l)).ok());
  }
  ASSERT_TRUE(RebuildSkillStats(**log, kSkillStatsRebuildLines, &rebuilt_t).ok());
  EXPECT_EQ(json::serialize(rebuilt_t.HistoryJson("t")), json::serialize(live_t.HistoryJson("t")));
  const TimeEstimate live_e = live_t.Timeout("t", kTimeCeiling), rebuilt_e = rebuilt_t.Timeout("t", kTimeCeiling);
  EXPECT_EQ(rebuilt_e.timeout, live_e.timeout);
  EXPECT_EQ(rebuilt_e.timeout, absl::Milliseconds(120)) << "twice the 60 ms breached: above 40 ms x 1.5";
  EXPECT_EQ(rebuilt_e.basis, "breach");
  EXPECT_EQ(rebuilt_t.HistoryJson("t").at("sessions").as_uint64(), 1u);
  // A bound on the lines read: the newest one only (the breach).
  SkillStats bounded(c);
  ASSERT_TRUE(RebuildSkillStats(**log, 1, &bounded).ok());
  EXPECT_EQ(bounded.HistoryJson("t").at("calls").as_uint64(), 1u);
  EXPECT_EQ(bounded.HistoryJson("abc").at("calls").as_uint64(), 0u);
}

}  // namespace
}  // namespace cubicle::rpc
