// A pool's background side: refill threads that make zygotes through
// their maker (in this process, or a fork server) and deliver them to the
// waiting requests or the idle list, and the teardown of ended ones.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/hot_memory.h"
#include "runtime/pool.h"
#include "runtime/warm_template.h"

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

// How long a miss waits for a zygote when its request sets no timeout.
constexpr absl::Duration kMaxQueueWait = absl::Seconds(60);

}  // namespace

// A maker for this refill thread; until one starts (a fork server that
// will not), every try counts as a failed build. Null once stopping.
std::unique_ptr<ZygoteMaker> Pool::StartMaker(std::unique_lock<std::mutex>& lock) {
  if (!makers_) return std::make_unique<InProcessMaker>();
  while (!stopping_) {
    lock.unlock();
    absl::StatusOr<std::unique_ptr<ZygoteMaker>> made = makers_();
    lock.lock();
    if (made.ok()) {
      ++stats_.makers_alive;
      return *std::move(made);
    }
    ++stats_.build_failures;
    ++stats_.consecutive_build_failures;
    stats_.last_error = std::string(made.status().message());
    Emit(PoolEvent::Kind::kBuildFailed, absl::StrCat("starting its zygote maker: ", made.status().message()));
    changed_.wait_for(lock, std::chrono::seconds(1));
  }
  return nullptr;
}

// A maker that died (a fork server killed) took its zygotes with it: they
// are dropped, and a new one is started. Null once stopping.
std::unique_ptr<ZygoteMaker> Pool::RestartMaker(std::unique_lock<std::mutex>& lock,
                                                std::unique_ptr<ZygoteMaker> dead_maker) {
  std::vector<std::unique_ptr<Zygote>> dead;
  for (auto it = idle_.begin(); it != idle_.end();) {
    if (it->zygote->alive()) {
      ++it;
      continue;
    }
    dead.push_back(std::move(it->zygote));
    it = idle_.erase(it);
    ++stats_.died;
  }
  --stats_.makers_alive;
  lock.unlock();
  Emit(PoolEvent::Kind::kMakerRestarted, "", dead.size());
  dead.clear();
  dead_maker.reset();
  lock.lock();
  ++stats_.maker_restarts;
  return StartMaker(lock);
}

// Idle zygotes past max_age or beyond max_idle, destroyed outside the
// lock. Whether any were.
bool Pool::DropExpired(std::unique_lock<std::mutex>& lock) {
  std::vector<std::unique_ptr<Zygote>> drop;
  const absl::Time now = absl::Now();
  while (!idle_.empty() && (idle_.size() > config_.max_idle || now - idle_.front().born > config_.max_age)) {
    drop.push_back(std::move(idle_.front().zygote));
    idle_.pop_front();
    ++stats_.expired;
  }
  if (drop.empty()) return false;
  lock.unlock();
  Emit(PoolEvent::Kind::kExpired, "", drop.size());
  drop.clear();
  lock.lock();
  return true;
}

// A waiter whose limits need a zygote of their own comes first. Else
// refill keeps min_idle ready, plus one for each waiter. It competes with
// the requests for the CPUs (and for the kernel's namespace and cgroup
// locks): while one runs or is held (a reply being written), idle zygotes
// remain above half of min_idle and nobody waits, it waits for the
// foreground to end.
bool Pool::BuildWantedLocked(Waiter** special) const {
  *special = UnclaimedSpecialLocked();
  if (*special != nullptr) return true;
  const size_t ready = idle_.size() + stats_.building;
  return ready < config_.min_idle + DefaultWaitersLocked() && TotalLocked() < config_.max_total &&
         (RefillUrgentLocked() || !ForegroundLocked());
}

// Woken by a request, a resize or the stop; else looks again at the oldest
// zygote's age.
void Pool::WaitForWork(std::unique_lock<std::mutex>& lock) {
  const absl::Time now = absl::Now();
  absl::Duration wait = idle_.empty() ? config_.max_age : config_.max_age - (now - idle_.front().born);
  wait = std::clamp(wait, absl::Milliseconds(10), absl::Seconds(1));
  changed_.wait_for(lock, absl::ToChronoMilliseconds(wait));
}

// One build, outside the lock, then its delivery: to a waiter, else to the
// idle list (a zygote built for a waiter that gave up is torn down: its
// limits are no one else's).
void Pool::BuildOne(std::unique_lock<std::mutex>& lock, ZygoteMaker& maker, Waiter* special) {
  ++stats_.building;
  const ZygoteOptions options = config_.zygote;
  SandboxSpec spec_with_limits;
  if (special != nullptr) {
    special->claimed = true;
    spec_with_limits = profile_;
    spec_with_limits.limits = *special->limits;
  }
  lock.unlock();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<Zygote>> made = maker.Make(special != nullptr ? spec_with_limits : profile_, options);
  const absl::Duration took = absl::Now() - start;
  lock.lock();
  --stats_.building;
  stats_.last_build = took;
  if (made.ok()) {
    ++stats_.built;
    stats_.consecutive_build_failures = 0;
    stats_.refill.Record(took);
    stats_.refill_cpu.Record((*made)->build_cpu());
    CountTemplateStarts(**made);
  } else {
    ++stats_.build_failures;
    ++stats_.consecutive_build_failures;
    stats_.last_error = std::string(made.status().message());
    Emit(PoolEvent::Kind::kBuildFailed, stats_.last_error);
  }
  const bool delivered = DeliverLocked(special, made);
  if (!delivered && made.ok() && special == nullptr) {
    idle_.push_back({*std::move(made), absl::Now()});
  } else if (!delivered && made.ok()) {
    finished_.push_back(*std::move(made));
    ++stats_.tearing_down;
  } else if (!delivered) {
    // Do not spin on a host that cannot build this profile.
    changed_.wait_for(lock, std::chrono::milliseconds(100));
  }
  changed_.notify_all();
}

// A fork server says in a zygote's creation steps when it started a warm
// template for it (runtime/fork_server.h, kTemplateStartStep).
void Pool::CountTemplateStarts(const Zygote& zygote) {
  for (const auto& [step, took] : zygote.creation().steps) {
    if (step == kTemplateStartStep || step == kTemplateRestartStep) ++stats_.template_starts;
    if (step == kTemplateRestartStep) ++stats_.template_deaths;
  }
}

void Pool::RefillLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  std::unique_ptr<ZygoteMaker> maker = StartMaker(lock);
  while (!stopping_ && maker != nullptr) {
    if (!maker->alive()) {
      maker = RestartMaker(lock, std::move(maker));
      continue;
    }
    if (DropExpired(lock)) continue;
    Waiter* special = nullptr;
    if (BuildWantedLocked(&special)) {
      BuildOne(lock, *maker, special);
    } else {
      WaitForWork(lock);
    }
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

}  // namespace cubicle::runtime
