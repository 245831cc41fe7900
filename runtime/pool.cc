// A pool's request side: admission (a hit, a wait for the next zygote, or
// a build of the request's own), the run, and handing the used zygote to
// the teardown. The refill side is pool_refill.cc.
#include "runtime/pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/warm.h"
#include "seccomp/policy.h"

namespace cubicle::runtime {

absl::Status ValidatePoolConfig(const PoolConfig& c) {
  if (c.max_total == 0) return absl::InvalidArgumentError("pool max_total must be at least 1");
  if (c.max_idle > c.max_total) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool max_idle ", c.max_idle, " exceeds max_total ", c.max_total));
  }
  if (c.min_idle > c.max_idle) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool min_idle ", c.min_idle, " exceeds max_idle ", c.max_idle));
  }
  if (c.refill_parallelism == 0 || c.refill_parallelism > 64) {
    return absl::InvalidArgumentError("pool refill_parallelism must be between 1 and 64");
  }
  if (c.max_age <= absl::ZeroDuration()) return absl::InvalidArgumentError("pool max_age must be positive");
  return absl::OkStatus();
}

const char* PoolEventName(PoolEvent::Kind kind) {
  switch (kind) {
    case PoolEvent::Kind::kBuildFailed: return "build_failed";
    case PoolEvent::Kind::kExpired: return "expired";
    case PoolEvent::Kind::kMakerRestarted: return "maker_restarted";
    case PoolEvent::Kind::kResized: return "resized";
  }
  return "unknown";
}

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(std::string name, SandboxSpec profile, PoolConfig config,
                                                   ZygoteMakerFactory makers, PoolEventSink events) {
  CUBICLE_RETURN_IF_ERROR(ValidatePoolConfig(config));
  SandboxSpec check = profile;
  if (check.argv.empty()) check.argv = {"/bin/true"};
  CUBICLE_RETURN_IF_ERROR(ValidateSpec(check));
  config.zygote.wait_until_ready = true;
  std::unique_ptr<Pool> pool(
      new Pool(std::move(name), std::move(profile), std::move(config), std::move(makers), std::move(events)));
  std::lock_guard<std::mutex> lock(pool->mu_);
  for (size_t i = 0; i < pool->config_.refill_parallelism; ++i) {
    pool->threads_.emplace_back([p = pool.get()] { p->RefillLoop(); });
  }
  pool->reaper_ = std::thread([p = pool.get()] { p->ReapLoop(); });
  return pool;
}

Pool::Pool(std::string name, SandboxSpec profile, PoolConfig config, ZygoteMakerFactory makers, PoolEventSink events)
    : name_(std::move(name)),
      profile_(std::move(profile)),
      makers_(std::move(makers)),
      events_(std::move(events)),
      config_(std::move(config)) {}

void Pool::Emit(PoolEvent::Kind kind, std::string error, size_t count) const {
  if (!events_) return;
  PoolEvent event{kind, name_, std::move(error), count, {}};
  if (kind == PoolEvent::Kind::kResized) event.sizes = config_;
  events_(event);
}

Pool::~Pool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  changed_.notify_all();
  finished_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  reaper_.join();
  finished_.clear();
  idle_.clear();  // each ~Zygote kills its sandbox and removes its cgroup
}

// A strict profile's warm zygote cannot run a request that is not an
// invocation of its interpreter (MatchWarmInvocation): its bootstrap would
// exec the program, and the strict policy refuses every exec but the
// sandbox's first, the interpreter's own (seccomp/policy.h, kStrict). Such
// a request gets a sandbox built for it without an interpreter, whose one
// exec is its program's, so that it runs as it would cold.
bool Pool::ColdOnlyLocked(const ExecRequest& request) const {
  return profile_.seccomp == seccomp::Policy::kStrict && config_.zygote.interpreter.has_value() &&
         !MatchWarmInvocation(*config_.zygote.interpreter, request.argv).has_value();
}

// Under the lock: an idle zygote that can take the request (a hit), or a
// miss, or busy when nothing is idle and nothing on its way is left for
// this request. Zygotes that died waiting (their maker died) go to the
// teardown.
absl::StatusOr<Pool::Admission> Pool::Admit(const ExecRequest& request) {
  std::lock_guard<std::mutex> lock(mu_);
  while (!idle_.empty() && !idle_.front().zygote->alive()) {
    finished_.push_back(std::move(idle_.front().zygote));
    idle_.pop_front();
    ++stats_.died;
    ++stats_.tearing_down;
  }
  Admission a;
  a.cold_only = ColdOnlyLocked(request);
  // A warm zygote serves the request unless its cgroup cannot take the
  // request's limits (they need a controller the profile does not).
  a.own_limits = !idle_.empty() && request.limits.has_value() && !idle_.front().zygote->CanApplyLimits(*request.limits);
  if (!idle_.empty() && !a.own_limits && !a.cold_only) {
    a.zygote = std::move(idle_.front().zygote);
    idle_.pop_front();
    ++stats_.hits;
  } else if (TotalLocked() >= config_.max_total && (a.cold_only || stats_.building <= waiters_.size())) {
    ++stats_.busy;
    return absl::ResourceExhaustedError(
        absl::StrCat("pool ", name_, " is busy: ", config_.max_total, " sandboxes exist already"));
  } else {
    ++stats_.misses;
  }
  ++stats_.in_use;
  a.wake_refill = RefillUrgentLocked();
  return a;
}

// The cold path proper: no waiting for "ready", and no warm interpreter to
// start first (exec'ing argv directly is faster than that).
absl::StatusOr<std::unique_ptr<Zygote>> Pool::BuildForRequest(const ExecRequest& request) {
  ZygoteOptions options = config().zygote;
  options.wait_until_ready = false;
  options.cold = true;
  options.interpreter.reset();
  SandboxSpec spec = profile_;
  if (request.limits.has_value()) spec.limits = *request.limits;
  return Zygote::Create(spec, options);
}

// A miss's zygote: the next one refill finishes, or one built here (a
// pool that makes zygotes in this process, nothing on its way; or a
// request no pooled zygote can serve, Admission::cold_only, which is
// built here even where a fork server makes the pool's). A failure is the
// request's result, as the cold path reports it.
std::unique_ptr<Zygote> Pool::ZygoteForMiss(const ExecRequest& request, const Admission& admission, bool* cold,
                                            absl::StatusOr<ExecResult>* result) {
  *cold = admission.cold_only;
  absl::StatusOr<std::unique_ptr<Zygote>> zygote = std::unique_ptr<Zygote>();
  if (!admission.cold_only) zygote = AwaitZygote(request, admission.own_limits, cold);
  if (zygote.ok() && *cold) zygote = BuildForRequest(request);
  if (zygote.ok()) return *std::move(zygote);
  if (*cold && absl::IsInvalidArgument(zygote.status())) {
    *result = zygote.status();
  } else {
    ExecResult failed;
    failed.reason = ExitReason::kSetupFailed;
    failed.setup_error = zygote.status();
    *result = std::move(failed);
  }
  return nullptr;
}

// The execution is over: its zygote goes to the teardown, and the
// background work resumes unless the caller still holds the pool.
void Pool::Done(std::unique_ptr<Zygote> zygote, const absl::StatusOr<ExecResult>& result, bool cold) {
  bool background;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --stats_.in_use;
    // Latency to the payload running, for executions that got that far.
    if (result.ok() && result->reason != ExitReason::kSetupFailed && result->setup > absl::ZeroDuration()) {
      (cold ? stats_.cold_start : stats_.handoff).Record(result->setup);
    }
    if (zygote != nullptr) {
      finished_.push_back(std::move(zygote));
      ++stats_.tearing_down;
    }
    background = !ForegroundLocked() || RefillUrgentLocked() || TeardownDueLocked();
  }
  // Held (the caller's reply still to go): Release() wakes them instead.
  if (background) {
    finished_cv_.notify_one();
    changed_.notify_all();
  }
}

absl::StatusOr<ExecResult> Pool::Run(const ExecRequest& request) {
  CUBICLE_RETURN_IF_ERROR(ValidateRequest(request));
  CUBICLE_ASSIGN_OR_RETURN(Admission admission, Admit(request));
  // Else refill waits for the foreground to end: no wake-up on the way in.
  if (admission.wake_refill) changed_.notify_all();
  absl::StatusOr<ExecResult> result;
  bool cold = false;
  std::unique_ptr<Zygote> zygote = std::move(admission.zygote);
  if (zygote == nullptr) zygote = ZygoteForMiss(request, admission, &cold, &result);
  if (zygote != nullptr) {
    ExecRequest early = request;
    early.return_at_exit = true;
    result = zygote->Run(early);
  }
  Done(std::move(zygote), result, cold);
  return result;
}

Pool::Hold Pool::HoldBackground() {
  std::lock_guard<std::mutex> lock(mu_);
  ++holds_;
  return Hold(this);
}

void Pool::Release() {
  bool quiet;
  {
    std::lock_guard<std::mutex> lock(mu_);
    --holds_;
    quiet = !ForegroundLocked();
  }
  if (quiet) {
    finished_cv_.notify_one();
    changed_.notify_all();
  }
}

Pool::Hold& Pool::Hold::operator=(Hold&& other) noexcept {
  if (this != &other) {
    if (pool_ != nullptr) pool_->Release();
    pool_ = std::exchange(other.pool_, nullptr);
  }
  return *this;
}

Pool::Hold::~Hold() {
  if (pool_ != nullptr) pool_->Release();
}

absl::Status Pool::Configure(const PoolConfig& config) {
  CUBICLE_RETURN_IF_ERROR(ValidatePoolConfig(config));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (config.refill_parallelism != config_.refill_parallelism) {
      return absl::InvalidArgumentError("refill_parallelism cannot change on a live pool");
    }
    config_ = config;
    config_.zygote.wait_until_ready = true;
    Emit(PoolEvent::Kind::kResized);
  }
  changed_.notify_all();
  finished_cv_.notify_one();  // a smaller max_idle may make teardown due
  return absl::OkStatus();
}

bool Pool::WaitWarm(absl::Duration limit) {
  std::unique_lock<std::mutex> lock(mu_);
  return changed_.wait_for(lock, absl::ToChronoMilliseconds(limit),
                           [&] { return idle_.size() >= config_.min_idle; });
}

PoolStats Pool::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  PoolStats s = stats_;
  s.idle = idle_.size();
  return s;
}

PoolConfig Pool::config() const {
  std::lock_guard<std::mutex> lock(mu_);
  return config_;
}

}  // namespace cubicle::runtime
