// Limits sized from a skill's history (docs/skills.md, "Limits from
// history"): per skill id, a window of its last calls — peak memory, CPU
// time and wall time of each run that ended, and each breach of an
// estimated memory limit or timeout — and the rules that turn the window
// into the memory limit and the timeout of its next call (`limits:
// {memory: auto}`, `timeout_ms: auto` in a manifest).
//
// The window is fed from the audit trail's lines (rpc/skill_audit.cc): the
// daemon builds each skill.call's line (and each skill session's end),
// feeds it here, then appends it, so that a daemon with a state directory
// rebuilds the same windows at start by reading its trail again
// (RebuildSkillStats), and one without keeps them in memory only.
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

// What a run in the window stands for. A skill session's process serves
// many calls, so it has no peak of its own per call: each of its calls is
// kept with its wall time alone, and its end with the process's peak
// memory and CPU time over the session's whole life — a wall time that is
// no call's and never sizes a timeout.
enum class SkillRunKind {
  kCall,         // a call of its own process (skill.call by name, or by another skill)
  kSessionCall,  // a call in a skill session: its wall time only
  kSession,      // a skill session's end: its process's peak and CPU time
};

// One call of a skill as its window keeps it: a run that ended (whatever
// the skill answered), or a breach of its memory limit or timeout.
struct SkillRun {
  SkillRunKind kind = SkillRunKind::kCall;
  std::optional<uint64_t> memory_peak;  // bytes
  std::optional<uint64_t> cpu_ns;
  absl::Duration wall;
  std::optional<uint64_t> breached_memory;         // the memory limit it ran past (oom, breaker_memory)
  std::optional<absl::Duration> breached_timeout;  // the timeout it ran past
  std::string breach_reason;                       // "oom", "breaker_memory" or "timeout"
  absl::Time at;
};

// Whether `run`'s wall time is one call's, from its start to its answer:
// a call that answered, one-shot or in a session — not a breach, and not
// a session's whole life.
bool IsCallWall(const SkillRun& run);

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

// The timeout a call of an auto skill gets, and why: the same bases as
// memory's, from the window's call wall times (IsCallWall).
struct TimeEstimate {
  absl::Duration timeout;  // whole milliseconds
  std::string basis;
  size_t samples = 0;  // call wall times in the window
};

// The same rule as memory's on the window's call wall times: with fewer
// than min_samples, the ceiling (the profile's max_timeout_ms); else P99
// of them times the headroom, at least time_floor, at least twice each
// timeout breached within the window — all at most the ceiling; rounded
// up to a whole millisecond.
TimeEstimate EstimateTimeout(const std::deque<SkillRun>& window, absl::Duration ceiling,
                             const AutoLimitsConfig& config);

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
  // The next call's timeout for skill `id` under `ceiling`.
  TimeEstimate Timeout(const std::string& id, absl::Duration ceiling) const;
  // skill.describe's "history": samples, p50/p99 of memory_peak_bytes,
  // cpu_ms (of calls) and wall_ms (of call wall times), session calls and
  // sessions, breaches and the last one.
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
// a call by name that answered with a usage, a call in a skill session
// that answered (its wall time), a skill session's end with a usage, or a
// call whose auto memory limit or auto timeout was breached. nullopt for
// any other line.
std::optional<std::pair<std::string, SkillRun>> SkillRunOfAuditLine(const boost::json::object& line);

// The windows again from the trail, newest first, reading at most
// `max_lines` lines: kSkillStatsRebuildLines at start, which bounds what a
// start reads and still covers a full window for all but rarely called
// skills.
inline constexpr size_t kSkillStatsRebuildLines = 200000;
absl::Status RebuildSkillStats(const AuditLog& log, size_t max_lines, SkillStats* stats);

}  // namespace cubicle::rpc
