#include "runtime/breakers.h"

#include <signal.h>

#include <gtest/gtest.h>

namespace cubicle::runtime {
namespace {

using Kind = BreakerAction::Kind;

const absl::Time kStart = absl::FromUnixSeconds(1000);

absl::Time At(double seconds) { return kStart + absl::Seconds(seconds); }

UsageSample Cpu(double cpu_seconds) {
  UsageSample s;
  s.cpu_ns = static_cast<uint64_t>(cpu_seconds * 1e9);
  return s;
}

TEST(CpuBreaker, WarnsThenKillsWhenStillAboveAfterTheGrace) {
  BreakerSpec spec;
  spec.cpu_share = 0.5;
  spec.cpu_window = absl::Seconds(1);
  spec.cpu_grace = absl::Seconds(1);
  BreakerState state(spec);
  // One full CPU: nothing until the samples span the window.
  EXPECT_EQ(state.Observe(At(0), Cpu(0)).kind, Kind::kNone);
  EXPECT_EQ(state.Observe(At(0.5), Cpu(0.5)).kind, Kind::kNone);
  BreakerAction warn = state.Observe(At(1.0), Cpu(1.0));
  EXPECT_EQ(warn.kind, Kind::kSignalPayload);
  EXPECT_EQ(warn.signal, SIGUSR1);
  EXPECT_EQ(warn.breaker, Breaker::kCpu);
  EXPECT_EQ(state.Observe(At(1.5), Cpu(1.5)).kind, Kind::kNone) << "within the grace";
  BreakerAction kill = state.Observe(At(2.0), Cpu(2.0));
  EXPECT_EQ(kill.kind, Kind::kKillSandbox);
  EXPECT_EQ(state.tripped(), Breaker::kCpu);
}

TEST(CpuBreaker, RearmsWhenTheLoadDropsDuringTheGrace) {
  BreakerSpec spec;
  spec.cpu_share = 0.5;
  spec.cpu_window = absl::Seconds(1);
  spec.cpu_grace = absl::Seconds(1);
  BreakerState state(spec);
  state.Observe(At(0), Cpu(0));
  EXPECT_EQ(state.Observe(At(1), Cpu(1)).kind, Kind::kSignalPayload);
  // The payload heard SIGUSR1 and slowed to 0.1 CPU.
  EXPECT_EQ(state.Observe(At(1.5), Cpu(1.05)).kind, Kind::kNone);
  EXPECT_EQ(state.Observe(At(2.0), Cpu(1.1)).kind, Kind::kNone) << "under the share: no kill";
  // It speeds up again (0.55 CPU over [1.5, 2.5]): a new warning, not a kill.
  EXPECT_EQ(state.Observe(At(2.5), Cpu(1.6)).kind, Kind::kSignalPayload);
}

TEST(CpuBreaker, StaysQuietUnderTheShare) {
  BreakerSpec spec;
  spec.cpu_share = 1.5;
  spec.cpu_window = absl::Seconds(1);
  BreakerState state(spec);
  for (int i = 0; i <= 20; ++i) {
    EXPECT_EQ(state.Observe(At(i * 0.25), Cpu(i * 0.25)).kind, Kind::kNone) << i;
  }
  EXPECT_FALSE(state.tripped().has_value());
}

TEST(MemoryBreaker, TermThenKillAfterTheGraceWhateverItUsesThen) {
  BreakerSpec spec;
  spec.memory_mark = 100;
  spec.memory_grace = absl::Seconds(5);
  BreakerState state(spec);
  UsageSample s;
  s.memory_bytes = 50;
  EXPECT_EQ(state.Observe(At(0), s).kind, Kind::kNone);
  s.memory_bytes = 150;
  BreakerAction term = state.Observe(At(1), s);
  EXPECT_EQ(term.kind, Kind::kSignalPayload);
  EXPECT_EQ(term.signal, SIGTERM);
  EXPECT_EQ(state.Observe(At(2), s).kind, Kind::kNone) << "one SIGTERM only";
  s.memory_bytes = 10;
  EXPECT_EQ(state.Observe(At(5.9), s).kind, Kind::kNone);
  EXPECT_EQ(state.Observe(At(6.0), s).kind, Kind::kKillSandbox);
  EXPECT_EQ(state.tripped(), Breaker::kMemory);
}

TEST(MemoryBreaker, KernelThresholdEventWarnsOnce) {
  BreakerSpec spec;
  spec.memory_mark = 100;
  BreakerState state(spec);
  EXPECT_EQ(state.MemoryMarkCrossed(At(0)).signal, SIGTERM);
  EXPECT_EQ(state.MemoryMarkCrossed(At(0.1)).kind, Kind::kNone);
  EXPECT_EQ(state.warning_signal(), SIGTERM);
}

TEST(IoBreaker, KillsAtOnceAboveTheRate) {
  BreakerSpec spec;
  spec.io_bytes_per_sec = 1000;
  spec.io_window = absl::Seconds(1);
  BreakerState state(spec);
  UsageSample s;
  s.io_bytes = 0;
  state.Observe(At(0), s);
  s.io_bytes = 900;
  EXPECT_EQ(state.Observe(At(1), s).kind, Kind::kNone) << "900 B/s is under 1000";
  s.io_bytes = 3000;
  BreakerAction kill = state.Observe(At(2), s);
  EXPECT_EQ(kill.kind, Kind::kKillSandbox);
  EXPECT_EQ(kill.breaker, Breaker::kIo);
}

TEST(Breakers, SampleIntervalFollowsTheShortestWindow) {
  BreakerSpec spec;
  spec.cpu_share = 1;
  spec.cpu_window = absl::Milliseconds(500);
  EXPECT_EQ(BreakerState(spec).SampleInterval(), absl::Milliseconds(100));
  spec.cpu_window = absl::Milliseconds(10);
  spec.cpu_grace = absl::Milliseconds(10);
  EXPECT_EQ(BreakerState(spec).SampleInterval(), absl::Milliseconds(20)) << "clamped";
}

}  // namespace
}  // namespace cubicle::runtime
