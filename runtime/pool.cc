#include "runtime/pool.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/hot_memory.h"
#include "base/status.h"

namespace cubicle::runtime {
namespace {

class InProcessMaker : public ZygoteMaker {
 public:
  absl::StatusOr<std::unique_ptr<Zygote>> Make(const SandboxSpec& spec, const ZygoteOptions& options) override {
    absl::StatusOr<std::unique_ptr<Zygote>> made = Zygote::Create(spec, options);
    // The build forked this process: the pages the next request writes
    // (its thread's stack and arena) are copied now rather than at its
    // first writes (base/hot_memory.h).
    UnshareHotMemory();
    return made;
  }
};

}  // namespace

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

absl::StatusOr<std::unique_ptr<Pool>> Pool::Create(std::string name, SandboxSpec profile, PoolConfig config,
                                                   ZygoteMakerFactory makers) {
  CUBICLE_RETURN_IF_ERROR(ValidatePoolConfig(config));
  SandboxSpec check = profile;
  if (check.argv.empty()) check.argv = {"/bin/true"};
  CUBICLE_RETURN_IF_ERROR(ValidateSpec(check));
  config.zygote.wait_until_ready = true;
  std::unique_ptr<Pool> pool(new Pool(std::move(name), std::move(profile), std::move(config), std::move(makers)));
  std::lock_guard<std::mutex> lock(pool->mu_);
  for (size_t i = 0; i < pool->config_.refill_parallelism; ++i) {
    pool->threads_.emplace_back([p = pool.get()] { p->RefillLoop(); });
  }
  pool->reaper_ = std::thread([p = pool.get()] { p->ReapLoop(); });
  return pool;
}

Pool::Pool(std::string name, SandboxSpec profile, PoolConfig config, ZygoteMakerFactory makers)
    : name_(std::move(name)), profile_(std::move(profile)), makers_(std::move(makers)), config_(std::move(config)) {}

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

// A maker for this refill thread; until one starts (a fork server that
// will not), every try counts as a failed build. Null once stopping.
std::unique_ptr<ZygoteMaker> Pool::StartMaker(std::unique_lock<std::mutex>& lock) {
  if (!makers_) return std::make_unique<InProcessMaker>();
  while (!stopping_) {
    lock.unlock();
    absl::StatusOr<std::unique_ptr<ZygoteMaker>> made = makers_();
    lock.lock();
    if (made.ok()) return *std::move(made);
    ++stats_.build_failures;
    stats_.last_error = std::string(made.status().message());
    changed_.wait_for(lock, std::chrono::seconds(1));
  }
  return nullptr;
}

void Pool::DropDeadLocked(std::vector<std::unique_ptr<Zygote>>* drop) {
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (it->zygote->alive()) {
      ++it;
      continue;
    }
    drop->push_back(std::move(it->zygote));
    it = idle_.erase(it);
    ++stats_.died;
  }
}

void Pool::RefillLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::unique_ptr<ZygoteMaker> maker = StartMaker(lock);
  while (!stopping_) {
    // A maker that died (a fork server killed) took its zygotes with it:
    // they are dropped, and a new one is started.
    if (!maker->alive()) {
      std::vector<std::unique_ptr<Zygote>> dead;
      DropDeadLocked(&dead);
      lock.unlock();
      dead.clear();
      maker.reset();
      lock.lock();
      ++stats_.maker_restarts;
      maker = StartMaker(lock);
      if (maker == nullptr) break;
      continue;
    }
    // Age and size first: what is dropped is destroyed outside the lock.
    std::vector<std::unique_ptr<Zygote>> drop;
    const absl::Time now = absl::Now();
    while (!idle_.empty() && (idle_.size() > config_.max_idle || now - idle_.front().born > config_.max_age)) {
      drop.push_back(std::move(idle_.front().zygote));
      idle_.pop_front();
      ++stats_.expired;
    }

    if (!drop.empty()) {
      lock.unlock();
      drop.clear();
      lock.lock();
      continue;
    }
    // A waiter whose limits need a zygote of their own comes first. Else
    // refill keeps min_idle ready, plus one for each waiter. It competes
    // with the requests for the CPUs (and for the kernel's namespace and
    // cgroup locks): while one runs or is held (a reply being written),
    // idle zygotes remain above half of min_idle and nobody waits, it
    // waits for the foreground to end.
    Waiter* special = UnclaimedSpecialLocked();
    const size_t ready = idle_.size() + stats_.building;
    const bool want = special != nullptr ||
                      (ready < config_.min_idle + DefaultWaitersLocked() && TotalLocked() < config_.max_total &&
                       (RefillUrgentLocked() || !ForegroundLocked()));
    if (!want) {
      // Woken by a request, a resize or the stop; else look again at the
      // oldest zygote's age.
      absl::Duration wait = idle_.empty() ? config_.max_age
                                          : config_.max_age - (now - idle_.front().born);
      wait = std::clamp(wait, absl::Milliseconds(10), absl::Seconds(1));
      changed_.wait_for(lock, absl::ToChronoMilliseconds(wait));
      continue;
    }
    ++stats_.building;
    ZygoteOptions options = config_.zygote;
    SandboxSpec spec_with_limits;
    if (special != nullptr) {
      special->claimed = true;
      spec_with_limits = profile_;
      spec_with_limits.limits = *special->limits;
    }
    lock.unlock();
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<Zygote>> made =
        maker->Make(special != nullptr ? spec_with_limits : profile_, options);
    const absl::Duration took = absl::Now() - start;
    lock.lock();
    --stats_.building;
    stats_.last_build = took;
    if (made.ok()) {
      ++stats_.built;
      stats_.refill.Record(took);
      stats_.refill_cpu.Record((*made)->build_cpu());
    } else {
      ++stats_.build_failures;
      stats_.last_error = std::string(made.status().message());
    }
    const bool delivered = DeliverLocked(special, made);
    if (!delivered && made.ok()) {
      if (special == nullptr) {
        idle_.push_back({*std::move(made), absl::Now()});
      } else {  // built for a waiter that gave up: its limits are no one else's
        finished_.push_back(*std::move(made));
        ++stats_.tearing_down;
      }
    }
    if (!made.ok() && !delivered) {
      // Do not spin on a host that cannot build this profile.
      changed_.wait_for(lock, std::chrono::milliseconds(100));
    }
    changed_.notify_all();
  }
}

size_t Pool::DefaultWaitersLocked() const {
  return static_cast<size_t>(
      std::count_if(waiters_.begin(), waiters_.end(), [](const Waiter* w) { return !w->limits.has_value(); }));
}

Pool::Waiter* Pool::UnclaimedSpecialLocked() const {
  for (Waiter* w : waiters_) {
    if (w->limits.has_value() && !w->claimed) return w;
  }
  return nullptr;
}

// A build for `claimed_by` goes to that waiter alone; any other build to
// the oldest waiter without limits of its own. A failed build is that
// waiter's answer too, so that no request waits on a host that cannot
// build.
bool Pool::DeliverLocked(Waiter* claimed_by, absl::StatusOr<std::unique_ptr<Zygote>>& made) {
  auto it = claimed_by != nullptr
                ? std::find(waiters_.begin(), waiters_.end(), claimed_by)
                : std::find_if(waiters_.begin(), waiters_.end(), [](const Waiter* w) { return !w->limits.has_value(); });
  if (it == waiters_.end()) return false;
  Waiter* w = *it;
  waiters_.erase(it);
  if (made.ok()) {
    w->zygote = *std::move(made);
  } else {
    w->error = made.status();
  }
  w->done = true;
  w->ready.notify_one();
  return true;
}

// How long a miss waits for a zygote when its request sets no timeout.
constexpr absl::Duration kMaxQueueWait = absl::Seconds(60);

absl::StatusOr<std::unique_ptr<Zygote>> Pool::AwaitZygote(const ExecRequest& request, bool own_limits, bool* cold) {
  *cold = false;
  std::unique_lock<std::mutex> lock(mu_);
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + std::min(request.timeout, kMaxQueueWait);
  for (;;) {
    // In this process a build of its own is a real choice: taken unless a
    // zygote is already on its way for this request (one being built beyond
    // what the waiters before it will get), which is sooner.
    if (!makers_ && (own_limits || stats_.building <= DefaultWaitersLocked())) {
      *cold = true;
      return nullptr;
    }
    Waiter waiter;
    if (own_limits) waiter.limits = request.limits;
    waiters_.push_back(&waiter);
    ++stats_.waiting;
    changed_.notify_all();  // refill is urgent now
    waiter.ready.wait_until(lock, absl::ToChronoTime(deadline), [&] { return waiter.done || stopping_; });
    --stats_.waiting;
    if (!waiter.done) {
      waiters_.erase(std::find(waiters_.begin(), waiters_.end(), &waiter));
      stats_.queue_wait.Record(absl::Now() - start);
      return absl::DeadlineExceededError(absl::StrCat("pool ", name_, ": no sandbox was ready within ",
                                                      absl::FormatDuration(absl::Now() - start)));
    }
    if (!waiter.error.ok()) return waiter.error;
    // A zygote whose groups cannot take this request's limits goes to the
    // others; this request then waits for one built with them.
    if (!own_limits && request.limits.has_value() && !waiter.zygote->CanApplyLimits(*request.limits)) {
      absl::StatusOr<std::unique_ptr<Zygote>> other = std::move(waiter.zygote);
      if (!DeliverLocked(nullptr, other)) idle_.push_front({*std::move(other), absl::Now()});
      own_limits = true;
      continue;
    }
    stats_.queue_wait.Record(absl::Now() - start);
    return std::move(waiter.zygote);
  }
}

// Teardown of ended executions (init's exit, the namespaces, the cgroup),
// on its own thread so that it never waits behind a refill build, and
// after the foreground (TeardownDueLocked).
void Pool::ReapLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_ || !finished_.empty()) {
    if (!TeardownDueLocked()) {
      finished_cv_.wait(lock);
      continue;
    }
    std::vector<std::unique_ptr<Zygote>> batch = std::move(finished_);
    finished_.clear();
    const size_t n = batch.size();
    lock.unlock();
    batch.clear();  // each ~Zygote reaps init and removes the cgroup
    lock.lock();
    stats_.tearing_down -= std::min(stats_.tearing_down, n);
  }
}

absl::StatusOr<ExecResult> Pool::Run(const ExecRequest& request) {
  CUBICLE_RETURN_IF_ERROR(ValidateRequest(request));
  std::unique_ptr<Zygote> zygote;
  bool hit = false;
  bool urgent = false;
  bool own_limits = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // A zygote that died waiting (its maker died) is only torn down.
    while (!idle_.empty() && !idle_.front().zygote->alive()) {
      finished_.push_back(std::move(idle_.front().zygote));
      idle_.pop_front();
      ++stats_.died;
      ++stats_.tearing_down;
    }
    // A warm zygote serves the request unless its cgroup cannot take the
    // request's limits (they need a controller the profile does not).
    own_limits = !idle_.empty() && request.limits.has_value() && !idle_.front().zygote->CanApplyLimits(*request.limits);
    if (!idle_.empty() && !own_limits) {
      zygote = std::move(idle_.front().zygote);
      idle_.pop_front();
      hit = true;
      ++stats_.hits;
    } else if (TotalLocked() >= config_.max_total && stats_.building <= waiters_.size()) {
      // Nothing idle, and nothing on its way that the requests already
      // waiting will not take.
      ++stats_.busy;
      return absl::ResourceExhaustedError(
          absl::StrCat("pool ", name_, " is busy: ", config_.max_total, " sandboxes exist already"));
    } else {
      ++stats_.misses;
    }
    ++stats_.in_use;
    urgent = RefillUrgentLocked();
  }
  // Else refill waits for the foreground to end: no wake-up on the way in.
  if (urgent) changed_.notify_all();
  absl::StatusOr<ExecResult> result;
  bool cold = false;
  if (!hit) {
    // The next zygote refill makes, or a build of the request's own.
    absl::StatusOr<std::unique_ptr<Zygote>> next = AwaitZygote(request, own_limits, &cold);
    if (next.ok()) {
      zygote = *std::move(next);
    } else {
      ExecResult failed;
      failed.reason = ExitReason::kSetupFailed;
      failed.setup_error = next.status();
      result = std::move(failed);
    }
  }
  if (cold) {
    // The cold path proper: no waiting for "ready", and no warm interpreter
    // to start first (exec'ing argv directly is faster than that).
    ZygoteOptions options = config().zygote;
    options.wait_until_ready = false;
    options.cold = true;
    options.interpreter.reset();
    SandboxSpec spec = profile_;
    if (request.limits.has_value()) spec.limits = *request.limits;
    absl::StatusOr<std::unique_ptr<Zygote>> made = Zygote::Create(spec, options);
    if (made.ok()) {
      zygote = *std::move(made);
    } else if (absl::IsInvalidArgument(made.status())) {
      result = made.status();
    } else {
      ExecResult failed;  // as the cold path reports it
      failed.reason = ExitReason::kSetupFailed;
      failed.setup_error = made.status();
      result = std::move(failed);
    }
  }
  if (zygote != nullptr) {
    runtime::ExecRequest early = request;
    early.return_at_exit = true;
    result = zygote->Run(early);
  }
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
