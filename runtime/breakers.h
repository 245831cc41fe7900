// The runtime breakers (the product's "fuses"): watch what a running
// sandbox uses and stop it when it runs away, before it hits a hard limit.
//
//   CPU     above `cpu_share` CPUs averaged over `cpu_window` -> SIGUSR1 to the
//           payload; still above after `cpu_grace` -> SIGKILL (breaker_cpu).
//   memory  above `memory_mark` bytes -> SIGTERM to the payload; still running
//           after `memory_grace` -> SIGKILL (breaker_memory).
//   IO      block IO above `io_bytes_per_sec` averaged over `io_window` ->
//           SIGKILL (breaker_io).
//
// BreakerState is the decision logic alone (samples in, actions out), so it
// is tested without a kernel; the launcher feeds it from the sandbox's
// cgroup: a v1 memory threshold eventfd where the kernel offers one, and
// sampling on a timer otherwise (CPU and IO usage have no kernel event).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cubicle::runtime {

struct BreakerSpec {
  std::optional<double> cpu_share;
  absl::Duration cpu_window = absl::Seconds(5);
  absl::Duration cpu_grace = absl::Seconds(5);
  std::optional<uint64_t> memory_mark;
  absl::Duration memory_grace = absl::Seconds(5);
  std::optional<uint64_t> io_bytes_per_sec;
  absl::Duration io_window = absl::Seconds(2);

  bool any() const { return cpu_share || memory_mark || io_bytes_per_sec; }
  bool operator==(const BreakerSpec&) const = default;
};

enum class Breaker { kCpu, kMemory, kIo };

struct BreakerAction {
  enum class Kind { kNone, kSignalPayload, kKillSandbox };
  Kind kind = Kind::kNone;
  int signal = 0;
  Breaker breaker = Breaker::kCpu;
  std::string why;  // "cpu 1.93 CPUs over 0.5s > 0.5", for the result's warnings
};

// One sample of the sandbox's cgroup (cumulative CPU and IO, current memory).
struct UsageSample {
  std::optional<uint64_t> memory_bytes;
  std::optional<uint64_t> cpu_ns;
  std::optional<uint64_t> io_bytes;
};

class BreakerState {
 public:
  explicit BreakerState(const BreakerSpec& spec) : spec_(spec) {}

  // Feeds one sample taken at `now`; returns what to do now (at most one
  // action: a kill wins over a warning).
  BreakerAction Observe(absl::Time now, const UsageSample& sample);

  // The kernel said memory crossed the mark (v1 threshold event).
  BreakerAction MemoryMarkCrossed(absl::Time now);

  // How often to sample: a fifth of the shortest window or grace, within
  // [20 ms, 1 s].
  absl::Duration SampleInterval() const;

  // The breaker whose action has been taken, if any.
  std::optional<Breaker> tripped() const { return tripped_; }
  int warning_signal() const { return warning_signal_; }

 private:
  // Average rate over the trailing window; nullopt until the samples span
  // at least 90% of it.
  static std::optional<double> RatePerSecond(std::deque<std::pair<absl::Time, uint64_t>>* samples,
                                             absl::Time now, uint64_t value, absl::Duration window);
  BreakerAction Trip(Breaker b, BreakerAction::Kind kind, int sig, std::string why);

  BreakerSpec spec_;
  std::deque<std::pair<absl::Time, uint64_t>> cpu_samples_;
  std::deque<std::pair<absl::Time, uint64_t>> io_samples_;
  std::optional<absl::Time> cpu_warned_at_;
  std::optional<absl::Time> memory_warned_at_;
  std::optional<Breaker> tripped_;
  int warning_signal_ = 0;
};

absl::string_view BreakerName(Breaker b);  // "cpu" | "memory" | "io"

}  // namespace cubicle::runtime
