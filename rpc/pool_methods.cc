// health, pool.stats, pool.configure, pool.warm (docs/protocol.md): what
// the operator sees of the pools, and how it sizes and warms them.
#include <algorithm>

#include <boost/asio/steady_timer.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr const char* kVersion = "0.1.0";

// A histogram for pool.stats: count, mean and the cumulative buckets in ms.
json::object HistogramJson(const runtime::LatencyHistogram& h) {
  json::array buckets;
  for (size_t i = 0; i < runtime::LatencyHistogram::kBounds.size(); ++i) {
    buckets.push_back(json::array{runtime::LatencyHistogram::kBounds[i] * 1000, h.Cumulative(i)});
  }
  return json::object{{"count", h.count()},
                      {"mean_ms", h.count() > 0 ? h.sum_seconds() * 1000 / static_cast<double>(h.count()) : 0.0},
                      {"le_ms", std::move(buckets)}};
}

// How often pool.warm looks whether its pool is warm (and whether its
// client left or the daemon is ending): a refill takes tens of ms.
constexpr absl::Duration kWarmPoll = absl::Milliseconds(10);

}  // namespace

json::value Daemon::PoolStatsJson() {
  json::object pools;
  const std::shared_ptr<const ProfileSet> profiles = profiles_.Current();
  for (const auto& [name, served] : *profiles) {
    const std::shared_ptr<runtime::Pool>& pool = served->pool;
    runtime::PoolStats s = pool->Stats();
    runtime::PoolConfig c = pool->config();
    const uint64_t requests = s.hits + s.misses;
    pools[name] = json::object{{"idle", s.idle},
                               {"building", s.building},
                               {"in_use", s.in_use},
                               {"waiting", s.waiting},
                               {"tearing_down", s.tearing_down},
                               {"hits", s.hits},
                               {"misses", s.misses},
                               {"hit_ratio", requests > 0 ? static_cast<double>(s.hits) / static_cast<double>(requests)
                                                          : json::value(nullptr)},
                               {"busy", s.busy},
                               {"built", s.built},
                               {"build_failures", s.build_failures},
                               {"last_error", s.last_error},
                               {"expired", s.expired},
                               {"died", s.died},
                               {"maker_restarts", s.maker_restarts},
                               {"last_build_ms", absl::ToDoubleMilliseconds(s.last_build)},
                               {"refill_ms", HistogramJson(s.refill)},
                               {"refill_cpu_ms", HistogramJson(s.refill_cpu)},
                               {"queue_wait_ms", HistogramJson(s.queue_wait)},
                               {"handoff_ms", HistogramJson(s.handoff)},
                               {"cold_start_ms", HistogramJson(s.cold_start)},
                               {"warm_interpreter", c.zygote.interpreter.has_value()},
                               {"min_idle", c.min_idle},
                               {"max_idle", c.max_idle},
                               {"max_total", c.max_total},
                               // skills of this profile whose memory limit comes from their history
                               {"auto_limit_skills", AutoLimitSkills(name)}};
  }
  return pools;
}

json::value Daemon::Health() {
  return json::object{{"status", stopping_ ? "draining" : "ok"},
                      {"version", kVersion},
                      {"in_flight", in_flight_.load()},
                      {"executions", json::object{{"running", queue_->running()},
                                                  {"queued", queue_->waiting()},
                                                  {"max_concurrent", config_.max_concurrent},
                                                  {"max_queue", config_.max_queue}}},
                      {"pools", PoolStatsJson()},
                      {"reloads", ReloadsJson()},
                      {"skills", SkillsHealth()},
                      {"environments", EnvironmentsHealth()}};
}

json::object Daemon::Readiness() {
  bool ready = !stopping_;
  json::object pools;
  const std::shared_ptr<const ProfileSet> profiles = profiles_.Current();
  for (const auto& [name, served] : *profiles) {
    const uint64_t idle = served->pool->Stats().idle;
    const uint64_t min_idle = served->pool->config().min_idle;
    ready = ready && idle >= min_idle;
    pools[name] = json::object{{"idle", idle}, {"min_idle", min_idle}};
  }
  return json::object{{"ready", ready}, {"draining", stopping_.load()}, {"pools", std::move(pools)}};
}

absl::Status Daemon::CheckFdBudget(const std::string& name, const runtime::PoolConfig& changed) {
  std::map<std::string, runtime::PoolConfig> configs;
  const std::shared_ptr<const ProfileSet> profiles = profiles_.Current();
  for (const auto& [other, served] : *profiles) {
    configs[other] = other == name ? changed : served->pool->config();
  }
  return CheckFdBudget(std::move(configs));
}

absl::Status Daemon::CheckFdBudget(std::map<std::string, runtime::PoolConfig> serving) {
  // Draining pools hold what they hold until they are gone.
  size_t n = 0;
  for (const runtime::PoolConfig& c : profiles_.DrainingConfigs()) serving[absl::StrCat(" draining ", n++)] = c;
  absl::StatusOr<FdBudget> budget = PlanFds(fds_.limit, config_.max_concurrent, serving);
  if (!budget.ok()) return absl::InvalidArgumentError(budget.status().message());
  return absl::OkStatus();
}

Expected<std::shared_ptr<const ServedProfile>> Daemon::FindProfile(const json::object& params) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> name, GetString(params, "profile", false));
  std::string profile = name.value_or("shell");
  std::shared_ptr<const ServedProfile> served = profiles_.Find(profile);
  if (served == nullptr) return Error{kNotFound, absl::StrCat("no profile named '", profile, "'"), nullptr};
  return served;
}

Expected<json::value> Daemon::PoolConfigure(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "min_idle", "max_idle", "max_total", "max_age_s"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<const ServedProfile> served, FindProfile(*params));
  runtime::Pool* pool = served->pool.get();
  runtime::PoolConfig c = pool->config();
  for (auto [key, field] : {std::pair{"min_idle", &c.min_idle}, {"max_idle", &c.max_idle}, {"max_total", &c.max_total}}) {
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> v, GetInt64(*params, key, false, 0, 4096));
    if (v.has_value()) *field = static_cast<size_t>(*v);
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> age, GetInt64(*params, "max_age_s", false, 1, 86400));
  if (age.has_value()) c.max_age = absl::Seconds(*age);
  if (absl::Status st = runtime::ValidatePoolConfig(c); !st.ok()) return InvalidParams(st);
  if (absl::Status st = CheckFdBudget(pool->name(), c); !st.ok()) return InvalidParams(st);
  if (absl::Status st = pool->Configure(c); !st.ok()) return InvalidParams(st);
  return PoolStatsJson();
}

void Daemon::PoolWarm(Request request) {
  using Pool = std::shared_ptr<runtime::Pool>;
  auto resize = [&]() -> Expected<std::pair<Pool, absl::Duration>> {
    if (std::optional<Error> refused = Refusal()) return *refused;
    CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(request.call.params));
    if (auto bad = RejectUnknown(*params, {"profile", "count", "timeout_ms"})) return *bad;
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<const ServedProfile> served, FindProfile(*params));
    const Pool& pool = served->pool;
    runtime::PoolConfig c = pool->config();
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> count,
                                 GetInt64(*params, "count", false, 0, static_cast<int64_t>(c.max_total)));
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> timeout_ms,
                                 GetInt64(*params, "timeout_ms", false, 1, 600000));
    if (count.has_value()) {
      c.min_idle = static_cast<size_t>(*count);
      c.max_idle = std::max(c.max_idle, c.min_idle);
      if (absl::Status st = CheckFdBudget(pool->name(), c); !st.ok()) return InvalidParams(st);
      if (absl::Status st = pool->Configure(c); !st.ok()) return InvalidParams(st);
    }
    return std::pair{pool, absl::Milliseconds(timeout_ms.value_or(30000))};
  };
  Expected<std::pair<Pool, absl::Duration>> resized = Guarded(resize);
  if (!resized.ok()) return request.replies->Add(ReplyTo(request.call, std::move(resized).error()));
  auto [pool, limit] = *resized;
  Defer(request);
  PollWarm(std::make_shared<Request>(std::move(request)), pool, absl::Now() + limit);
}

void Daemon::PollWarm(std::shared_ptr<Request> request, std::shared_ptr<runtime::Pool> pool, absl::Time deadline) {
  const bool warm = pool->WaitWarm(absl::ZeroDuration());
  if (warm || absl::Now() >= deadline || cut_off_ || request->cancel->cancelled()) {
    runtime::PoolStats s = pool->Stats();
    Finish(*request, json::value(json::object{{"profile", pool->name()},
                                              {"warm", warm},
                                              {"idle", s.idle},
                                              {"min_idle", pool->config().min_idle}}));
    return;
  }
  // No thread waits: a look every kWarmPoll, on the control thread.
  auto timer = std::make_shared<boost::asio::steady_timer>(control_, absl::ToChronoMilliseconds(kWarmPoll));
  timer->async_wait([this, timer, request, pool, deadline](boost::system::error_code ec) {
    if (ec) return Finish(*request, Error{kShuttingDown, "the daemon is shutting down", nullptr});
    PollWarm(request, pool, deadline);
  });
}

}  // namespace cubicle::rpc
