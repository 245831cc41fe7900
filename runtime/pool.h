// A pool keeps zygotes of one profile warm (DESIGN §5): a request takes one
// that is already built and only pays for the hand-off. Refill runs in the
// background. A request that finds the pool empty (a miss) waits for the
// next zygote refill finishes, where one is on its way or its maker is a
// fork server (the daemon never forks itself for a request); a pool that
// makes its zygotes in this process builds one on the spot otherwise (the
// cold path). Zygotes are single-use.
//
// Refill threads live as long as the pool: a zygote's init dies with the
// thread that created it (PR_SET_PDEATHSIG is per thread), so a zygote must
// never be made by a thread that may exit before it is used.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cgroups/limits.h"
#include "runtime/histogram.h"
#include "runtime/result.h"
#include "runtime/spec.h"
#include "runtime/zygote.h"

namespace cubicle::runtime {

// Where a pool's zygotes are made: by Zygote::Create in this process (the
// default), or by a fork server (runtime/fork_server.h), which keeps the
// forks out of a large, threaded process. Each refill thread makes its own
// maker, on its own thread: a zygote dies with the thread that made it, a
// fork server with the thread that started it.
class ZygoteMaker {
 public:
  virtual ~ZygoteMaker() = default;
  virtual absl::StatusOr<std::unique_ptr<Zygote>> Make(const SandboxSpec& spec, const ZygoteOptions& options) = 0;
  // False once the maker cannot make more (its server died): the pool
  // drops the zygotes that died with it and starts a new maker.
  virtual bool alive() const { return true; }
};
using ZygoteMakerFactory = std::function<absl::StatusOr<std::unique_ptr<ZygoteMaker>>()>;

struct PoolConfig {
  size_t min_idle = 2;            // refill keeps at least this many ready
  size_t max_idle = 4;            // idle zygotes above this are dropped
  size_t max_total = 16;          // idle + being built + running
  // Zygotes built at once. Two: under sustained load a pool refilled one
  // zygote at a time is bound by one build's wall time (its handshakes
  // included) while CPUs idle; a second build overlaps those waits.
  size_t refill_parallelism = 2;
  absl::Duration max_age = absl::Minutes(10);  // older idle zygotes are replaced
  ZygoteOptions zygote;
};

absl::Status ValidatePoolConfig(const PoolConfig& config);

struct PoolStats {
  size_t idle = 0;
  size_t building = 0;
  size_t in_use = 0;
  size_t waiting = 0;       // misses waiting for the next zygote
  size_t tearing_down = 0;  // ended executions whose sandbox is being removed
  uint64_t hits = 0;     // requests served by a warm zygote
  uint64_t misses = 0;   // requests that found none idle (waited, or built one on the spot)
  uint64_t busy = 0;     // requests refused at max_total
  uint64_t built = 0;
  uint64_t build_failures = 0;
  uint64_t expired = 0;  // idle zygotes dropped for age or by a resize
  uint64_t died = 0;     // idle zygotes found dead (their maker died)
  uint64_t maker_restarts = 0;  // makers (fork servers) started again after they died
  // Makers alive as their refill threads last saw them (each looks at
  // least once a second): refill_parallelism when healthy.
  size_t makers_alive = 0;
  // Warm templates started by the fork servers (the first, replacements
  // for age or use, and those for one that had died), and how many of
  // those starts found the last one dead.
  uint64_t template_starts = 0;
  uint64_t template_deaths = 0;
  uint64_t consecutive_build_failures = 0;  // since the last build that succeeded
  absl::Duration last_build;  // how long the last refill build took
  std::string last_error;     // why the last build (or maker start) failed
  LatencyHistogram refill;      // Zygote::Create of refill builds that succeeded
  LatencyHistogram refill_cpu;  // CPU time of each of those builds (the maker's and the sandbox's)
  LatencyHistogram queue_wait;  // misses: the wait for the next zygote
  LatencyHistogram handoff;     // hits: the request to the payload running
  LatencyHistogram cold_start;  // misses: the request to the payload running
};

// What an operator wants to hear of a pool as it happens (the daemon logs
// them at info): a build or a maker's start that failed, with its error;
// idle zygotes dropped for age or by a resize; zygotes found dead with
// their maker, which is started again; the pool's sizes changed.
struct PoolEvent {
  enum class Kind { kBuildFailed, kExpired, kMakerRestarted, kResized };
  Kind kind;
  std::string pool;
  std::string error;  // kBuildFailed
  size_t count = 0;   // kExpired: zygotes dropped; kMakerRestarted: zygotes that died with it
  PoolConfig sizes;   // kResized: the new configuration
};
// "build_failed", "expired", "maker_restarted", "resized".
const char* PoolEventName(PoolEvent::Kind kind);
// Called on the pool's own threads, sometimes under its lock: it must be
// quick and must not call the pool.
using PoolEventSink = std::function<void(const PoolEvent&)>;

class Pool {
 public:
  // Starts the refill threads. `profile` and `config` must be valid.
  // `makers`: where the refill threads make zygotes (unset: in this
  // process). `events`: who hears of them (unset: nobody).
  static absl::StatusOr<std::unique_ptr<Pool>> Create(std::string name, SandboxSpec profile, PoolConfig config,
                                                      ZygoteMakerFactory makers = nullptr,
                                                      PoolEventSink events = nullptr);
  ~Pool();  // stops refilling, destroys every idle zygote (kills, removes cgroups)

  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

  // Runs `request` in a warm zygote, or in one built now. ResourceExhausted
  // ("busy") when max_total sandboxes exist already.
  absl::StatusOr<ExecResult> Run(const ExecRequest& request);

  // Holds back the pool's background work while it lives: refill that is
  // not urgent (the pool still at half of min_idle or more) and the
  // teardown of ended executions, which otherwise start the moment Run()
  // returns. A caller with more to do on the request's path after Run()
  // (the daemon: its reply) holds the pools until that is done, so that a
  // zygote build (a fork of this process, then the sandbox's setup) or a
  // teardown never shares the CPUs with it. Teardown goes ahead anyway once
  // max_idle (at least 1) ended executions wait, so a pool that is never
  // quiet keeps no backlog. Run() holds the pool itself while it runs.
  class Hold {
   public:
    Hold() = default;
    Hold(Hold&& other) noexcept : pool_(std::exchange(other.pool_, nullptr)) {}
    Hold& operator=(Hold&& other) noexcept;
    ~Hold();

   private:
    friend class Pool;
    explicit Hold(Pool* pool) : pool_(pool) {}
    Pool* pool_ = nullptr;
  };
  Hold HoldBackground();

  // Resizes live; refill follows the new bounds.
  absl::Status Configure(const PoolConfig& config);

  // Waits (at most `limit`) until min_idle zygotes are ready.
  bool WaitWarm(absl::Duration limit);

  PoolStats Stats() const;
  const std::string& name() const { return name_; }
  PoolConfig config() const;

 private:
  struct Idle {
    std::unique_ptr<Zygote> zygote;
    absl::Time born;
  };
  // A miss waiting for a zygote. One whose limits the profile's zygotes
  // cannot take (a controller they have no group in) gets one built for it.
  struct Waiter {
    std::optional<cgroups::Limits> limits;
    bool claimed = false;  // a refill thread builds for it
    bool done = false;
    std::unique_ptr<Zygote> zygote;
    absl::Status error;
    std::condition_variable ready;
  };
  Pool(std::string name, SandboxSpec profile, PoolConfig config, ZygoteMakerFactory makers, PoolEventSink events);
  void Emit(PoolEvent::Kind kind, std::string error = "", size_t count = 0) const;
  // The request side (pool.cc).
  struct Admission {
    std::unique_ptr<Zygote> zygote;  // a hit
    bool own_limits = false;         // a miss that needs a zygote built with its limits
    bool cold_only = false;          // a miss no pooled zygote can serve (ColdOnlyLocked)
    bool wake_refill = false;
  };
  bool ColdOnlyLocked(const ExecRequest& request) const;
  absl::StatusOr<Admission> Admit(const ExecRequest& request);
  std::unique_ptr<Zygote> ZygoteForMiss(const ExecRequest& request, const Admission& admission, bool* cold,
                                        absl::StatusOr<ExecResult>* result);
  absl::StatusOr<std::unique_ptr<Zygote>> BuildForRequest(const ExecRequest& request);
  void Done(std::unique_ptr<Zygote> zygote, const absl::StatusOr<ExecResult>& result, bool cold);

  // The refill side (pool_refill.cc).
  void RefillLoop();
  std::unique_ptr<ZygoteMaker> StartMaker(std::unique_lock<std::mutex>& lock);
  std::unique_ptr<ZygoteMaker> RestartMaker(std::unique_lock<std::mutex>& lock, std::unique_ptr<ZygoteMaker> dead);
  bool DropExpired(std::unique_lock<std::mutex>& lock);
  bool BuildWantedLocked(Waiter** special) const;
  void WaitForWork(std::unique_lock<std::mutex>& lock);
  void BuildOne(std::unique_lock<std::mutex>& lock, ZygoteMaker& maker, Waiter* special);
  void CountTemplateStarts(const Zygote& zygote);
  // A zygote for a miss: the next one refill finishes (or the build's
  // error), waited for at most `limit`; or null with `*cold` set when the
  // request should build its own (in-process makers, nothing on its way).
  absl::StatusOr<std::unique_ptr<Zygote>> AwaitZygote(const ExecRequest& request, bool own_limits, bool* cold);
  // Hands a finished build to the oldest waiter it suits; false when none.
  bool DeliverLocked(Waiter* claimed_by, absl::StatusOr<std::unique_ptr<Zygote>>& made);
  size_t DefaultWaitersLocked() const;
  Waiter* UnclaimedSpecialLocked() const;

  // Sandboxes being torn down are not counted: they hold nothing a new
  // request needs, and a lagging teardown must not make the pool "busy".
  // Waiting requests hold no sandbox yet: theirs is counted as building.
  size_t TotalLocked() const { return idle_.size() + stats_.building + stats_.in_use - stats_.waiting; }
  // Whether a request is running or held (Hold): background work waits.
  bool ForegroundLocked() const { return stats_.in_use > 0 || holds_ > 0; }
  // Whether refill must not wait for the foreground: the pool is below
  // half of min_idle, and the next requests would take the cold path.
  bool RefillUrgentLocked() const {
    return !waiters_.empty() || idle_.size() + stats_.building < (config_.min_idle + 1) / 2;
  }
  bool TeardownDueLocked() const {
    return !finished_.empty() &&
           (stopping_ || !ForegroundLocked() || finished_.size() >= std::max<size_t>(1, config_.max_idle));
  }
  void Release();
  void ReapLoop();

  const std::string name_;
  const SandboxSpec profile_;
  const ZygoteMakerFactory makers_;
  const PoolEventSink events_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  PoolConfig config_;
  std::deque<Idle> idle_;
  std::deque<Waiter*> waiters_;  // oldest first
  // Zygotes whose execution has ended: their teardown (init's exit, the
  // namespaces, the cgroup) runs on the refill threads, off the request path.
  std::vector<std::unique_ptr<Zygote>> finished_;
  PoolStats stats_;
  size_t holds_ = 0;  // live Holds
  bool stopping_ = false;
  std::vector<std::thread> threads_;
  std::condition_variable finished_cv_;
  std::thread reaper_;
};

}  // namespace cubicle::runtime
