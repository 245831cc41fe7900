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
  if (e.bytes < config.floor) {
    e.bytes = config.floor;
    e.basis = "floor";
  }
  // A skill that outgrew its estimate gets at least twice the limit it ran
  // past, while that breach is in the window: the next call has room, and
  // a growing skill climbs to its ceiling in a few breaches at most.
  if (raised > e.bytes) {
    e.bytes = raised;
    e.basis = "breach";
  }
  if (e.bytes >= ceiling) {
    e.bytes = ceiling;
    e.basis = "ceiling";
  }
  // Kernel limits are in pages.
  constexpr uint64_t kPage = 4096;
  if (e.bytes % kPage != 0 && e.bytes < ceiling) e.bytes = std::min(ceiling, (e.bytes / kPage + 1) * kPage);
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

json::object SkillStats::HistoryJson(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = windows_.find(id);
  std::vector<uint64_t> memory, cpu, wall;
  uint64_t breaches = 0;
  json::value last_breach = nullptr;
  if (it != windows_.end()) {
    for (const SkillRun& run : it->second) {
      if (run.memory_peak.has_value()) {
        memory.push_back(*run.memory_peak);
        wall.push_back(static_cast<uint64_t>(absl::ToInt64Microseconds(run.wall)));
        if (run.cpu_ns.has_value()) cpu.push_back(*run.cpu_ns);
      }
      if (run.breached_memory.has_value()) {
        ++breaches;
        last_breach = json::object{{"memory", *run.breached_memory},
                                   {"reason", run.breach_reason},
                                   {"at", absl::FormatTime(absl::RFC3339_full, run.at, absl::UTCTimeZone())}};
      }
    }
  }
  return json::object{{"calls", it == windows_.end() ? 0 : it->second.size()},
                      {"samples", memory.size()},
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
  if (outcome == "ok" || outcome == "error") {
    const json::object* usage = ObjectAt(line, "usage");
    if (usage == nullptr) return std::nullopt;
    run.memory_peak = UintAt(*usage, "memory_peak_bytes");
    if (!run.memory_peak.has_value()) return std::nullopt;
    run.cpu_ns = UintAt(*usage, "cpu_usage_ns");
    return std::make_pair(std::move(id), std::move(run));
  }
  const json::object* limits = ObjectAt(line, "limits");
  const std::string reason = StringAt(line, "reason");
  if (outcome != "failed" || limits == nullptr || StringAt(line, "auto_limit_breached") != "memory") {
    return std::nullopt;
  }
  run.breached_memory = UintAt(*limits, "memory");
  if (!run.breached_memory.has_value()) return std::nullopt;
  run.breach_reason = reason;
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
