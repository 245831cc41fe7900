#include "runtime/breakers.h"

#include <signal.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cubicle::runtime {

absl::string_view BreakerName(Breaker b) {
  switch (b) {
    case Breaker::kCpu: return "cpu";
    case Breaker::kMemory: return "memory";
    case Breaker::kIo: return "io";
  }
  return "unknown";
}

std::optional<double> BreakerState::RatePerSecond(std::deque<std::pair<absl::Time, uint64_t>>* samples,
                                                  absl::Time now, uint64_t value, absl::Duration window) {
  samples->emplace_back(now, value);
  // Keep the newest sample at or before the window's start, and all after.
  while (samples->size() > 2 && (*samples)[1].first <= now - window) samples->pop_front();
  const auto& [t0, v0] = samples->front();
  absl::Duration span = now - t0;
  if (span < window * 0.9 || span <= absl::ZeroDuration() || value < v0) return std::nullopt;
  return static_cast<double>(value - v0) / absl::ToDoubleSeconds(span);
}

BreakerAction BreakerState::Trip(Breaker b, BreakerAction::Kind kind, int sig, std::string why) {
  if (kind == BreakerAction::Kind::kKillSandbox || !tripped_.has_value()) tripped_ = b;
  if (kind == BreakerAction::Kind::kSignalPayload) warning_signal_ = sig;
  return BreakerAction{kind, sig, b, std::move(why)};
}

BreakerAction BreakerState::MemoryMarkCrossed(absl::Time now) {
  if (!spec_.memory_mark.has_value() || memory_warned_at_.has_value()) return {};
  memory_warned_at_ = now;
  return Trip(Breaker::kMemory, BreakerAction::Kind::kSignalPayload, SIGTERM,
              absl::StrCat("memory above the breaker mark of ", *spec_.memory_mark, " bytes"));
}

BreakerAction BreakerState::Observe(absl::Time now, const UsageSample& s) {
  BreakerAction warn;
  // Memory: warned and the grace is over -> kill, whatever it uses now.
  if (spec_.memory_mark.has_value()) {
    if (memory_warned_at_.has_value() && now - *memory_warned_at_ >= spec_.memory_grace) {
      return Trip(Breaker::kMemory, BreakerAction::Kind::kKillSandbox, SIGKILL,
                  absl::StrCat("still running ", absl::FormatDuration(spec_.memory_grace),
                               " after SIGTERM for memory above the mark"));
    }
    if (s.memory_bytes.has_value() && *s.memory_bytes > *spec_.memory_mark) {
      BreakerAction a = MemoryMarkCrossed(now);
      if (a.kind != BreakerAction::Kind::kNone) {
        a.why = absl::StrCat("memory ", *s.memory_bytes, " bytes above the breaker mark of ",
                             *spec_.memory_mark);
        warn = a;
      }
    }
  }
  // IO: over the rate -> kill at once.
  if (spec_.io_bytes_per_sec.has_value() && s.io_bytes.has_value()) {
    std::optional<double> rate = RatePerSecond(&io_samples_, now, *s.io_bytes, spec_.io_window);
    if (rate.has_value() && *rate > static_cast<double>(*spec_.io_bytes_per_sec)) {
      return Trip(Breaker::kIo, BreakerAction::Kind::kKillSandbox, SIGKILL,
                  absl::StrFormat("block IO %.0f bytes/s over %s above the breaker's %d", *rate,
                                  absl::FormatDuration(spec_.io_window), *spec_.io_bytes_per_sec));
    }
  }
  // CPU: over the share -> SIGUSR1; still over after the grace -> kill;
  // back under by then -> armed again.
  if (spec_.cpu_share.has_value() && s.cpu_ns.has_value()) {
    std::optional<double> ns_per_s = RatePerSecond(&cpu_samples_, now, *s.cpu_ns, spec_.cpu_window);
    std::optional<double> share;
    if (ns_per_s.has_value()) share = *ns_per_s / 1e9;
    bool over = share.has_value() && *share > *spec_.cpu_share;
    if (cpu_warned_at_.has_value() && now - *cpu_warned_at_ >= spec_.cpu_grace) {
      if (over) {
        return Trip(Breaker::kCpu, BreakerAction::Kind::kKillSandbox, SIGKILL,
                    absl::StrFormat("cpu %.2f CPUs over %s, still above %.2f after a %s grace", *share,
                                    absl::FormatDuration(spec_.cpu_window), *spec_.cpu_share,
                                    absl::FormatDuration(spec_.cpu_grace)));
      }
      if (share.has_value()) cpu_warned_at_.reset();
    } else if (over && !cpu_warned_at_.has_value() && warn.kind == BreakerAction::Kind::kNone) {
      cpu_warned_at_ = now;
      warn = Trip(Breaker::kCpu, BreakerAction::Kind::kSignalPayload, SIGUSR1,
                  absl::StrFormat("cpu %.2f CPUs over %s above the breaker's %.2f", *share,
                                  absl::FormatDuration(spec_.cpu_window), *spec_.cpu_share));
    }
  }
  return warn;
}

absl::Duration BreakerState::SampleInterval() const {
  absl::Duration shortest = absl::Seconds(5);
  if (spec_.cpu_share) shortest = std::min({shortest, spec_.cpu_window, spec_.cpu_grace});
  if (spec_.memory_mark) shortest = std::min(shortest, spec_.memory_grace);
  if (spec_.io_bytes_per_sec) shortest = std::min(shortest, spec_.io_window);
  return std::clamp(shortest / 5, absl::Milliseconds(20), absl::Seconds(1));
}

}  // namespace cubicle::runtime
