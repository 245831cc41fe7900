// A configuration reload (SIGHUP; docs/config.md, "Reloading"): the new
// configuration — read and checked by the caller exactly as at start — is
// applied to the profiles and pools whole, or refused whole with everything
// kept as it was. Nothing a request holds is taken from it: a request
// keeps the profile and pool it found (rpc/served_profiles.h), and a pool
// a reload removes or replaces drains before it is destroyed.
#include <algorithm>
#include <chrono>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "rpc/daemon.h"
#include "runtime/fork_server.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// How often the draining pools are looked at while some drain: their
// last executions end at any time, and an idle pool costs little meanwhile.
constexpr auto kDrainSweep = std::chrono::milliseconds(100);

bool Contains(const std::vector<std::string>& names, const std::string& name) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

// A pool that takes no new request keeps no zygote idle: only those its
// requests already wait for are built.
void Drain(runtime::Pool& pool) {
  runtime::PoolConfig c = pool.config();
  c.min_idle = 0;
  c.max_idle = 0;
  (void)pool.Configure(c);  // valid whatever it was: 0 <= 0 <= max_total, parallelism unchanged
}

// `pool`'s live configuration with `sizes`' sizes (a reload's resize).
runtime::PoolConfig Resized(const runtime::Pool& pool, const runtime::PoolConfig& sizes) {
  runtime::PoolConfig c = pool.config();
  c.min_idle = sizes.min_idle;
  c.max_idle = sizes.max_idle;
  c.max_total = sizes.max_total;
  c.max_age = sizes.max_age;
  return c;
}

// How long the same build error is said once: a pool whose builds fail
// (a bind source gone) tries again every 100 ms.
constexpr absl::Duration kRepeatedErrorWindow = absl::Seconds(30);

// A pool's events as "pool" log lines. A build failure with an error
// already said within kRepeatedErrorWindow is only counted, and the next
// line for that error says how many were ("repeated"); a few distinct
// errors are remembered, since parallel refill threads can fail at
// different steps of one cause.
runtime::PoolEventSink PoolEventLogger(std::shared_ptr<DaemonEventLog> log) {
  struct Said {
    absl::Time at;
    uint64_t unsaid = 0;
  };
  struct Repeats {
    std::mutex mu;
    std::map<std::string, Said> errors;
  };
  constexpr size_t kRememberedErrors = 8;
  return [log = std::move(log), repeats = std::make_shared<Repeats>()](const runtime::PoolEvent& e) {
    if (!log->On()) return;
    json::object fields{{"pool", e.pool}, {"event", runtime::PoolEventName(e.kind)}};
    if (e.kind == runtime::PoolEvent::Kind::kBuildFailed) {
      std::lock_guard<std::mutex> lock(repeats->mu);
      const absl::Time now = absl::Now();
      auto it = repeats->errors.find(e.error);
      if (it != repeats->errors.end() && now - it->second.at < kRepeatedErrorWindow) {
        ++it->second.unsaid;
        return;
      }
      fields["error"] = e.error;
      if (it != repeats->errors.end() && it->second.unsaid > 0) fields["repeated"] = it->second.unsaid;
      if (it == repeats->errors.end() && repeats->errors.size() >= kRememberedErrors) {
        auto oldest = std::min_element(repeats->errors.begin(), repeats->errors.end(),
                                       [](const auto& a, const auto& b) { return a.second.at < b.second.at; });
        repeats->errors.erase(oldest);
      }
      repeats->errors[e.error] = Said{now, 0};
    }
    if (e.kind == runtime::PoolEvent::Kind::kExpired) fields["dropped"] = e.count;
    if (e.kind == runtime::PoolEvent::Kind::kMakerRestarted) fields["died"] = e.count;
    if (e.kind == runtime::PoolEvent::Kind::kResized) {
      fields["min_idle"] = e.sizes.min_idle;
      fields["max_idle"] = e.sizes.max_idle;
      fields["max_total"] = e.sizes.max_total;
    }
    std::lock_guard<std::mutex> lock(log->mu);
    log->write("pool", fields);
  };
}

}  // namespace

absl::StatusOr<std::shared_ptr<runtime::Pool>> Daemon::MakePool(const DaemonConfig& config, const Profile& profile) {
  runtime::PoolConfig pool_config = profile.pool;
  pool_config.zygote = ZygoteRecipeOf(config, profile).options;
  // Made by fork servers where the daemon has one to start: the daemon
  // itself never forks for a zygote then. A server parses the text of the
  // configuration that made the pool.
  runtime::ZygoteMakerFactory makers;
  if (!config_.fork_server.empty()) {
    makers = runtime::ForkServerMakers(config_.fork_server, config.source, profile.name);
  }
  CUBICLE_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Pool> pool,
                           runtime::Pool::Create(profile.name, profile.spec, pool_config, std::move(makers),
                                                 PoolEventLogger(events_)));
  return std::shared_ptr<runtime::Pool>(std::move(pool));
}

absl::StatusOr<ReloadPlan> Daemon::Reload(const DaemonConfig& next) {
  std::lock_guard<std::mutex> lock(reload_mu_);
  if (stopping_) return absl::FailedPreconditionError("the daemon is shutting down");
  CUBICLE_RETURN_IF_ERROR(RefuseRestartOnly(next));
  std::shared_ptr<const ProfileSet> running = profiles_.Current();
  std::map<std::string, Profile> before;
  for (const auto& [name, served] : *running) before.emplace(name, served->profile);
  ReloadPlan plan = PlanReload(before, next.profiles);
  CUBICLE_RETURN_IF_ERROR(CheckReloadFds(next, plan));
  CUBICLE_ASSIGN_OR_RETURN(auto made, MakePools(next, plan));
  // The environments and skills directories are read again, against the
  // profiles the reload serves: before they are, since the static
  // policy's checks take a moment, so that a call never meets new profiles
  // with old verdicts for longer than the two swaps below.
  std::vector<const Profile*> profiles;
  for (const auto& [name, profile] : next.profiles) profiles.push_back(&profile);
  Catalogs catalogs = ReadCatalogs(next.skills_dir, next.environments_dir, profiles);
  CommitReload(next, plan, *running, std::move(made));
  ServeCatalogs(std::move(catalogs), /*warn=*/true);
  return plan;
}

absl::Status Daemon::RefuseRestartOnly(const DaemonConfig& next) const {
  std::vector<std::string> changed = RestartOnlyChanges(config_, next);
  if (changed.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("only a restart can change ", absl::StrJoin(changed, ", "), " (the rest was not applied either)"));
}

absl::Status Daemon::CheckReloadFds(const DaemonConfig& next, const ReloadPlan& plan) {
  std::map<std::string, runtime::PoolConfig> serving;
  for (const auto& [name, profile] : next.profiles) serving[name] = profile.pool;
  // The pools this reload retires hold their descriptors until they have
  // drained, as those already draining do (CheckFdBudget counts those).
  std::shared_ptr<const ProfileSet> running = profiles_.Current();
  for (const std::vector<std::string>* retired : {&plan.removed, &plan.replaced}) {
    for (const std::string& name : *retired) {
      runtime::PoolConfig drained = running->at(name)->pool->config();
      drained.min_idle = drained.max_idle = 0;
      serving[absl::StrCat(name, " (retired)")] = drained;
    }
  }
  return CheckFdBudget(std::move(serving));
}

absl::StatusOr<std::map<std::string, std::shared_ptr<runtime::Pool>>> Daemon::MakePools(const DaemonConfig& next,
                                                                                       const ReloadPlan& plan) {
  // Made before anything changes: a pool that cannot be made refuses the
  // reload, and those made already go with the map.
  std::map<std::string, std::shared_ptr<runtime::Pool>> made;
  for (const std::vector<std::string>* names : {&plan.added, &plan.replaced}) {
    for (const std::string& name : *names) {
      absl::StatusOr<std::shared_ptr<runtime::Pool>> pool = MakePool(next, next.profiles.at(name));
      if (!pool.ok()) {
        return absl::Status(pool.status().code(), absl::StrCat("profile ", name, ": ", pool.status().message()));
      }
      made[name] = *std::move(pool);
    }
  }
  return made;
}

void Daemon::CommitReload(const DaemonConfig& next, const ReloadPlan& plan, const ProfileSet& running,
                          std::map<std::string, std::shared_ptr<runtime::Pool>> made) {
  auto set = std::make_shared<ProfileSet>();
  for (const auto& [name, profile] : next.profiles) {
    if (auto fresh = made.find(name); fresh != made.end()) {
      (*set)[name] = std::make_shared<const ServedProfile>(ServedProfile{profile, fresh->second});
      continue;
    }
    const std::shared_ptr<const ServedProfile>& kept = running.at(name);
    if (!Contains(plan.resized, name) && !Contains(plan.updated, name)) {
      (*set)[name] = kept;
      continue;
    }
    if (Contains(plan.resized, name)) {
      // Valid: the sizes were checked by the parser, and a resize keeps
      // refill_parallelism (a change of it replaces the pool).
      if (absl::Status st = kept->pool->Configure(Resized(*kept->pool, profile.pool)); !st.ok()) {
        Warn(absl::StrCat("reload: resizing pool ", name, ": ", st.message()));
      }
    }
    (*set)[name] = std::make_shared<const ServedProfile>(ServedProfile{profile, kept->pool});
  }
  std::vector<std::shared_ptr<runtime::Pool>> retired;
  for (const std::vector<std::string>* names : {&plan.removed, &plan.replaced}) {
    for (const std::string& name : *names) retired.push_back(running.at(name)->pool);
  }
  for (const std::shared_ptr<runtime::Pool>& pool : retired) Drain(*pool);
  profiles_.Replace(std::move(set), std::move(retired));
  asio::post(control_, [this] { SweepDrained(); });
}

void Daemon::SweepDrained() {
  for (std::shared_ptr<runtime::Pool>& pool : profiles_.TakeDrained()) {
    // ~Pool joins its refill threads and ends its fork servers: not on
    // the control thread, whose timers answer waits.
    asio::post(slow_, [pool = std::move(pool)]() mutable { pool.reset(); });
  }
  if (profiles_.Draining().empty()) return;
  drain_sweep_->expires_after(kDrainSweep);
  drain_sweep_->async_wait([this](boost::system::error_code ec) {
    if (!ec) SweepDrained();
  });
}

void Daemon::CountReload(const absl::Status& outcome) {
  std::lock_guard<std::mutex> lock(reloads_mu_);
  if (outcome.ok()) {
    ++reloads_.ok;
    return;
  }
  ++reloads_.refused;
  reloads_.last_error = std::string(outcome.message());
}

json::object Daemon::ReloadsJson() {
  json::array draining;
  for (const std::string& name : profiles_.Draining()) draining.push_back(json::value(name));
  std::lock_guard<std::mutex> lock(reloads_mu_);
  return json::object{{"ok", reloads_.ok},
                      {"refused", reloads_.refused},
                      {"last_error", reloads_.last_error.empty() ? json::value(nullptr) : json::value(reloads_.last_error)},
                      {"draining", std::move(draining)}};
}

}  // namespace cubicle::rpc
