#include "rpc/skill_stats.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// At most this many skill ids are kept: past it, the one recorded least
// recently goes (its id is most likely a version no longer served).
constexpr size_t kMaxSkills = 4096;

std::optional<uint64_t> UintAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return std::nullopt;
  if (v->is_uint64()) return v->as_uint64();
  if (v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  if (v->is_double() && v->as_double() >= 0) return static_cast<uint64_t>(v->as_double());
  return std::nullopt;
}

std::optional<double> NumberAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->to_number<double>();
}

const json::object* ObjectAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v == nullptr ? nullptr : v->if_object();
}

std::string StringAt(const json::object& o, const char* key) {
  const json::value* v = o.if_contains(key);
  return v != nullptr && v->is_string() ? std::string(v->as_string()) : std::string();
}

// {"p50", "p99"} of `values` scaled by `scale`; null when there are none.
json::value Summary(const std::vector<uint64_t>& values, double scale) {
  if (values.empty()) return nullptr;
  return json::object{{"p50", static_cast<double>(Percentile(values, 50)) * scale},
                      {"p99", static_cast<double>(Percentile(values, 99)) * scale},
                      {"max", static_cast<double>(*std::max_element(values.begin(), values.end())) * scale}};
}

uint64_t Micros(absl::Duration d) { return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(d))); }

// The rule's last steps, for memory as for time: at least the floor, at
// least what a breach in the window asks, at most the ceiling; `basis`
// names the step that set the value last.
template <typename T>
void Bound(T floor, T raised, T ceiling, T* value, std::string* basis) {
  if (*value < floor) {
    *value = floor;
    *basis = "floor";
  }
  if (raised > *value) {
    *value = raised;
    *basis = "breach";
  }
  if (*value >= ceiling) {
    *value = ceiling;
    *basis = "ceiling";
  }
}

}  // namespace

uint64_t Percentile(std::vector<uint64_t> values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least p% of them at or below.
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  return values[rank - 1];
}

MemoryEstimate EstimateMemory(const std::deque<SkillRun>& window, uint64_t ceiling, const AutoLimitsConfig& config) {
  std::vector<uint64_t> peaks;
  uint64_t raised = 0;  // twice the highest limit breached within the window
  for (const SkillRun& run : window) {
    if (run.memory_peak.has_value()) peaks.push_back(*run.memory_peak);
    if (run.breached_memory.has_value()) raised = std::max(raised, *run.breached_memory * 2);
  }
  MemoryEstimate e;
  e.samples = peaks.size();
  // A new skill is never starved: until it has a history, its ceiling.
  if (peaks.size() < config.min_samples) {
    e.bytes = ceiling;
    e.basis = "ceiling";
    return e;
  }
  const double sized = std::ceil(static_cast<double>(Percentile(peaks, 99)) * config.headroom);
  e.bytes = sized >= static_cast<double>(ceiling) ? ceiling : static_cast<uint64_t>(sized);
  e.basis = "history";
  // A skill that outgrew its estimate gets at least twice the limit it ran
  // past, while that breach is in the window: the next call has room, and
  // a growing skill climbs to its ceiling in a few breaches at most.
  Bound(config.floor, raised, ceiling, &e.bytes, &e.basis);
  // Kernel limits are in pages.
  constexpr uint64_t kPage = 4096;
  if (e.bytes % kPage != 0 && e.bytes < ceiling) e.bytes = std::min(ceiling, (e.bytes / kPage + 1) * kPage);
  return e;
}

bool IsCallWall(const SkillRun& run) {
  return run.kind != SkillRunKind::kSession && !run.breached_memory.has_value() && !run.breached_timeout.has_value();
}

TimeEstimate EstimateTimeout(const std::deque<SkillRun>& window, absl::Duration ceiling,
                             const AutoLimitsConfig& config) {
  std::vector<uint64_t> walls;  // microseconds
  absl::Duration raised = absl::ZeroDuration();  // twice the longest timeout breached within the window
  for (const SkillRun& run : window) {
    if (IsCallWall(run)) walls.push_back(Micros(run.wall));
    if (run.breached_timeout.has_value()) raised = std::max(raised, *run.breached_timeout * 2);
  }
  TimeEstimate e;
  e.samples = walls.size();
  // A new skill is never cut short: until it has a history, its ceiling.
  if (walls.size() < config.min_samples) {
    e.timeout = ceiling;
    e.basis = "ceiling";
    return e;
  }
  // In milliseconds as history's wall_ms shows them, so that a reader can
  // redo the sum from skill.describe.
  const double sized_ms = std::ceil(static_cast<double>(Percentile(walls, 99)) * 1e-3 * config.headroom);
  e.timeout = sized_ms >= absl::ToDoubleMilliseconds(ceiling) ? ceiling : absl::Milliseconds(sized_ms);
  e.basis = "history";
  // As for memory: a skill that outran its estimate gets at least twice
  // that timeout while the breach is in the window.
  Bound(config.time_floor, raised, ceiling, &e.timeout, &e.basis);
  return e;
}

std::deque<SkillRun>* SkillStats::WindowLocked(const std::string& id) {
  auto it = windows_.find(id);
  if (it == windows_.end()) {
    if (windows_.size() >= kMaxSkills) {
      auto oldest = std::min_element(touched_.begin(), touched_.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
      windows_.erase(oldest->first);
      touched_.erase(oldest);
    }
    it = windows_.emplace(id, std::deque<SkillRun>()).first;
  }
  touched_[id] = ++sequence_;
  return &it->second;
}

void SkillStats::Record(const std::string& id, SkillRun run) {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<SkillRun>* window = WindowLocked(id);
  window->push_back(std::move(run));
  while (window->size() > config_.window) window->pop_front();
}

void SkillStats::Seed(const std::string& id, SkillRun run) {
  std::lock_guard<std::mutex> lock(mu_);
  std::deque<SkillRun>* window = WindowLocked(id);
  if (window->size() < config_.window) window->push_front(std::move(run));
}

MemoryEstimate SkillStats::Memory(const std::string& id, uint64_t ceiling) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(id);
  return EstimateMemory(it == windows_.end() ? std::deque<SkillRun>() : it->second, ceiling, config_);
}

TimeEstimate SkillStats::Timeout(const std::string& id, absl::Duration ceiling) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(id);
  return EstimateTimeout(it == windows_.end() ? std::deque<SkillRun>() : it->second, ceiling, config_);
}

json::object SkillStats::HistoryJson(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(id);
  std::vector<uint64_t> memory, cpu, wall;
  uint64_t breaches = 0, session_calls = 0, sessions = 0;
  json::value last_breach = nullptr;
  if (it != windows_.end()) {
    for (const SkillRun& run : it->second) {
      if (run.memory_peak.has_value()) memory.push_back(*run.memory_peak);
      // A session's CPU time is its whole life's: not one call's.
      if (run.kind == SkillRunKind::kCall && run.cpu_ns.has_value()) cpu.push_back(*run.cpu_ns);
      if (IsCallWall(run)) wall.push_back(Micros(run.wall));
      session_calls += run.kind == SkillRunKind::kSessionCall ? 1 : 0;
      sessions += run.kind == SkillRunKind::kSession ? 1 : 0;
      const std::string at = absl::FormatTime(absl::RFC3339_full, run.at, absl::UTCTimeZone());
      if (run.breached_memory.has_value()) {
        ++breaches;
        last_breach = json::object{{"memory", *run.breached_memory}, {"reason", run.breach_reason}, {"at", at}};
      }
      if (run.breached_timeout.has_value()) {
        ++breaches;
        last_breach = json::object{{"timeout_ms", absl::ToInt64Milliseconds(*run.breached_timeout)},
                                   {"reason", run.breach_reason},
                                   {"at", at}};
      }
    }
  }
  return json::object{{"calls", it == windows_.end() ? 0 : it->second.size()},
                      {"samples", memory.size()},
                      {"wall_samples", wall.size()},
                      {"session_calls", session_calls},
                      {"sessions", sessions},
                      {"window", config_.window},
                      {"memory_peak_bytes", Summary(memory, 1.0)},
                      {"cpu_ms", Summary(cpu, 1e-6)},
                      {"wall_ms", Summary(wall, 1e-3)},
                      {"breaches", breaches},
                      {"last_breach", std::move(last_breach)}};
}

size_t SkillStats::skills() const {
  std::lock_guard<std::mutex> lock(mu_);
  return windows_.size();
}

std::optional<std::pair<std::string, SkillRun>> SkillRunOfAuditLine(const json::object& line) {
  const json::object* skill = ObjectAt(line, "skill");
  if (skill == nullptr) return std::nullopt;
  std::string id = StringAt(*skill, "id");
  if (id.empty()) return std::nullopt;
  SkillRun run;
  std::string err;
  absl::Time at;
  if (absl::ParseTime(absl::RFC3339_full, StringAt(line, "ts"), &at, &err)) run.at = at;
  run.wall = absl::Milliseconds(NumberAt(line, "duration_ms").value_or(0));
  const std::string outcome = StringAt(line, "outcome");
  const bool in_session = !StringAt(line, "skill_session").empty();
  const json::object* usage = ObjectAt(line, "usage");
  if (outcome == "session_end") {
    // The process's peak over the session's life; its wall time is the
    // life's, which IsCallWall keeps out of any timeout.
    if (usage == nullptr) return std::nullopt;
    run.kind = SkillRunKind::kSession;
    run.memory_peak = UintAt(*usage, "memory_peak_bytes");
    if (!run.memory_peak.has_value()) return std::nullopt;
    run.cpu_ns = UintAt(*usage, "cpu_usage_ns");
    return std::make_pair(std::move(id), std::move(run));
  }
  run.kind = in_session ? SkillRunKind::kSessionCall : SkillRunKind::kCall;
  if (outcome == "ok" || outcome == "error") {
    // A session's call has no usage of its own: its wall time alone.
    if (in_session) return std::make_pair(std::move(id), std::move(run));
    if (usage == nullptr) return std::nullopt;
    run.memory_peak = UintAt(*usage, "memory_peak_bytes");
    if (!run.memory_peak.has_value()) return std::nullopt;
    run.cpu_ns = UintAt(*usage, "cpu_usage_ns");
    return std::make_pair(std::move(id), std::move(run));
  }
  const json::object* limits = ObjectAt(line, "limits");
  const std::string breached = StringAt(line, "auto_limit_breached");
  if (outcome != "failed" || limits == nullptr) return std::nullopt;
  run.breach_reason = StringAt(line, "reason");
  if (breached == "memory") {
    run.breached_memory = UintAt(*limits, "memory");
    if (!run.breached_memory.has_value()) return std::nullopt;
  } else if (breached == "timeout") {
    std::optional<uint64_t> ms = UintAt(*limits, "timeout_ms");
    if (!ms.has_value()) return std::nullopt;
    run.breached_timeout = absl::Milliseconds(static_cast<int64_t>(*ms));
  } else {
    return std::nullopt;
  }
  return std::make_pair(std::move(id), std::move(run));
}

absl::Status RebuildSkillStats(const AuditLog& log, size_t max_lines, SkillStats* stats) {
  return log.ForEachNewestFirst(
      [&](const json::object& line) {
        if (std::optional<std::pair<std::string, SkillRun>> run = SkillRunOfAuditLine(line)) {
          stats->Seed(run->first, std::move(run->second));
        }
        return true;
      },
      max_lines);
}

}  // namespace cubicle::rpc
