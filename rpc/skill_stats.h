// Limits sized from a skill's history (docs/skills.md, "Limits from
// history"): per skill id, a window of its last calls — peak memory, CPU
// time and wall time of each run that ended, and each breach of an
// estimated memory limit — and the rule that turns the window into the
// memory limit of its next call (`limits: {memory: auto}` in a manifest).
//
// The window is fed from the audit trail's lines (rpc/skill_audit.cc): the
// daemon builds each skill.call's line, feeds it here, then appends it, so
// that a daemon with a state directory rebuilds the same windows at start
// by reading its trail again (RebuildSkillStats), and one without keeps
// them in memory only.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <boost/json/object.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "rpc/audit_log.h"
#include "rpc/config.h"

namespace cubicle::rpc {

// One call of a skill as its window keeps it: a run that ended with a
// peak (whatever the skill answered), or a breach of its memory limit.
struct SkillRun {
  std::optional<uint64_t> memory_peak;  // bytes
  std::optional<uint64_t> cpu_ns;
  absl::Duration wall;
  std::optional<uint64_t> breached_memory;  // the memory limit it ran past (oom, breaker_memory)
  std::string breach_reason;                // "oom" or "breaker_memory"
  absl::Time at;
};

// The memory limit a call of an auto skill gets, and why: "ceiling" (too
// few samples, or the estimate is above the ceiling), "history" (P99 of
// the window's peaks times the headroom), "floor", "breach" (twice the
// limit a recent call ran past).
struct MemoryEstimate {
  uint64_t bytes = 0;
  std::string basis;
  size_t samples = 0;  // peaks in the window
};

// The rule, on a window (oldest first): with fewer than min_samples peaks,
// the ceiling; else P99 (nearest rank) of the peaks times the headroom,
// at least the floor, at least twice each memory limit breached within
// the window — all at most the ceiling.
MemoryEstimate EstimateMemory(const std::deque<SkillRun>& window, uint64_t ceiling, const AutoLimitsConfig& config);

// The nearest-rank percentile `p` (0 < p <= 100) of `values`; 0 when empty.
uint64_t Percentile(std::vector<uint64_t> values, double p);

class SkillStats {
 public:
  explicit SkillStats(AutoLimitsConfig config) : config_(config) {}

  // The newest run of skill `id`; the oldest past the window is dropped.
  void Record(const std::string& id, SkillRun run);
  // A run older than those held (a rebuild reads the trail newest first);
  // nothing once the window is full.
  void Seed(const std::string& id, SkillRun run);

  // The next call's memory limit for skill `id` under `ceiling`.
  MemoryEstimate Memory(const std::string& id, uint64_t ceiling) const;
  // skill.describe's "history": samples, p50/p99 of memory_peak_bytes,
  // cpu_ms and wall_ms, breaches and the last one.
  boost::json::object HistoryJson(const std::string& id) const;

  const AutoLimitsConfig& config() const { return config_; }
  size_t skills() const;

 private:
  std::deque<SkillRun>* WindowLocked(const std::string& id);

  const AutoLimitsConfig config_;
  mutable std::mutex mu_;
  std::map<std::string, std::deque<SkillRun>> windows_;  // by skill id
  std::map<std::string, uint64_t> touched_;              // by skill id: its last Record's sequence
  uint64_t sequence_ = 0;
};

// What an audit line says about a skill's footprint, with the skill's id:
// a call by name that answered with a usage, or one whose auto memory
// limit was breached. nullopt for any other line.
std::optional<std::pair<std::string, SkillRun>> SkillRunOfAuditLine(const boost::json::object& line);

// The windows again from the trail, newest first, reading at most
// `max_lines` lines: kSkillStatsRebuildLines at start, which bounds what a
// start reads and still covers a full window for all but rarely called
// skills.
inline constexpr size_t kSkillStatsRebuildLines = 200000;
absl::Status RebuildSkillStats(const AuditLog& log, size_t max_lines, SkillStats* stats);

}  // namespace cubicle::rpc
