// Pools of zygotes: warm hits, cold misses, refill, live resize, busy, age.
#include <fcntl.h>

#include <gtest/gtest.h>

#include <thread>

#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "base/unique_fd.h"
#include "runtime/pool.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

runtime::ExecRequest Echo(const std::string& word) {
  runtime::ExecRequest r;
  r.argv = {"/bin/echo", word};
  return r;
}

std::unique_ptr<runtime::Pool> MakePool(runtime::PoolConfig config) {
  absl::StatusOr<std::unique_ptr<runtime::Pool>> pool =
      runtime::Pool::Create("test", TestSpec({}), std::move(config));
  EXPECT_TRUE(pool.ok()) << pool.status();
  return pool.ok() ? *std::move(pool) : nullptr;
}

// Every wait in these tests is bounded: 20 s is far beyond a zygote build.
constexpr absl::Duration kWarmLimit = absl::Seconds(20);

// A pool of `idle` zygotes (min_idle = max_idle), all built; nullptr (and a
// failure) when it cannot be made or does not fill.
std::unique_ptr<runtime::Pool> WarmPool(size_t idle) {
  runtime::PoolConfig config;
  config.min_idle = idle;
  config.max_idle = idle;
  std::unique_ptr<runtime::Pool> pool = MakePool(config);
  if (pool == nullptr) return nullptr;
  if (!pool->WaitWarm(kWarmLimit)) {
    ADD_FAILURE() << "the pool did not fill to " << idle;
    return nullptr;
  }
  return pool;
}

class CorePool : public HostHygieneTest {};

TEST_F(CorePool, FillsToMinIdleAndServesHits) {
  std::unique_ptr<runtime::Pool> pool = WarmPool(2);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->Stats().idle, 2u);
  absl::StatusOr<runtime::ExecResult> r = pool->Run(Echo("warm"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->reason, runtime::ExitReason::kExited);
  runtime::PoolStats s = pool->Stats();
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.misses, 0u);
  EXPECT_EQ(s.in_use, 0u);
  // And it refills behind the request.
  ASSERT_TRUE(pool->WaitWarm(kWarmLimit));
  EXPECT_GE(pool->Stats().built, 3u);
}

TEST_F(CorePool, AnEmptyPoolFallsBackToTheColdPathAndCountsAMiss) {
  runtime::PoolConfig config;
  config.min_idle = 0;
  config.max_idle = 0;
  std::unique_ptr<runtime::Pool> pool = MakePool(config);
  ASSERT_NE(pool, nullptr);
  TempDir dir;
  UniqueFd out(::open(dir.Join("out").c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0644));
  ASSERT_TRUE(out.valid());
  runtime::ExecRequest r = Echo("cold");
  r.stdout_fd = out.get();
  absl::StatusOr<runtime::ExecResult> result = pool->Run(r);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->reason, runtime::ExitReason::kExited);
  EXPECT_EQ(ReadFile(dir.Join("out")), "cold\n");
  EXPECT_EQ(pool->Stats().misses, 1u);
  EXPECT_EQ(pool->Stats().hits, 0u);
}

TEST_F(CorePool, RefillsAfterExhaustion) {
  runtime::PoolConfig config;
  config.min_idle = 1;
  config.max_idle = 1;
  std::unique_ptr<runtime::Pool> pool = MakePool(config);
  ASSERT_NE(pool, nullptr);
  for (int i = 0; i < 4; ++i) {
    absl::StatusOr<runtime::ExecResult> r = pool->Run(Echo("x"));
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->reason, runtime::ExitReason::kExited);
  }
  runtime::PoolStats s = pool->Stats();
  EXPECT_EQ(s.hits + s.misses, 4u);
  ASSERT_TRUE(pool->WaitWarm(kWarmLimit)) << "the pool did not refill";
  EXPECT_EQ(pool->Stats().idle, 1u);
}

TEST_F(CorePool, ConfigureResizesLive) {
  runtime::PoolConfig config;
  config.min_idle = 1;
  config.max_idle = 1;
  std::unique_ptr<runtime::Pool> pool = MakePool(config);
  ASSERT_NE(pool, nullptr);
  ASSERT_TRUE(pool->WaitWarm(kWarmLimit));
  config.min_idle = 3;
  config.max_idle = 3;
  ASSERT_TRUE(pool->Configure(config).ok());
  ASSERT_TRUE(pool->WaitWarm(kWarmLimit));
  EXPECT_EQ(pool->Stats().idle, 3u);
  config.min_idle = 0;
  config.max_idle = 0;
  ASSERT_TRUE(pool->Configure(config).ok());
  for (int i = 0; i < 200 && pool->Stats().idle > 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_EQ(pool->Stats().idle, 0u);
  EXPECT_GE(pool->Stats().expired, 3u);
  // Bad sizes are refused and change nothing.
  runtime::PoolConfig bad = config;
  bad.min_idle = 5;
  bad.max_idle = 2;
  absl::Status st = pool->Configure(bad);
  EXPECT_TRUE(absl::IsInvalidArgument(st));
  EXPECT_TRUE(absl::StrContains(st.message(), "min_idle 5 exceeds max_idle 2")) << st;
  EXPECT_EQ(pool->config().min_idle, 0u);
}

TEST_F(CorePool, OldZygotesAreReplaced) {
  runtime::PoolConfig config;
  config.min_idle = 1;
  config.max_idle = 1;
  config.max_age = absl::Milliseconds(200);
  std::unique_ptr<runtime::Pool> pool = MakePool(config);
  ASSERT_NE(pool, nullptr);
  ASSERT_TRUE(pool->WaitWarm(kWarmLimit));
  for (int i = 0; i < 300 && pool->Stats().expired == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_GE(pool->Stats().expired, 1u);
  ASSERT_TRUE(pool->WaitWarm(kWarmLimit));
  EXPECT_GE(pool->Stats().built, 2u);
}

TEST_F(CorePool, BeyondMaxTotalIsBusy) {
  runtime::PoolConfig config;
  config.min_idle = 0;
  config.max_idle = 0;
  config.max_total = 1;
  std::unique_ptr<runtime::Pool> pool = MakePool(config);
  ASSERT_NE(pool, nullptr);
  // One long execution holds the only slot.
  std::thread holder([&] {
    runtime::ExecRequest r;
    r.argv = {"/bin/sleep", "1"};
    (void)pool->Run(r);
  });
  for (int i = 0; i < 500 && pool->Stats().in_use == 0; ++i) absl::SleepFor(absl::Milliseconds(2));
  absl::StatusOr<runtime::ExecResult> refused = pool->Run(Echo("x"));
  holder.join();
  ASSERT_FALSE(refused.ok());
  EXPECT_TRUE(absl::IsResourceExhausted(refused.status())) << refused.status();
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "busy"));
  EXPECT_EQ(pool->Stats().busy, 1u);
}

// Waits (bounded) until `done` holds for the pool's stats.
template <typename Done>
bool WaitStats(runtime::Pool& pool, Done done) {
  for (int i = 0; i < 2000; ++i) {
    if (done(pool.Stats())) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return done(pool.Stats());
}

TEST_F(CorePool, AHoldDefersRefillAndTeardownUntilItEnds) {
  std::unique_ptr<runtime::Pool> pool = WarmPool(2);
  ASSERT_NE(pool, nullptr);
  {
    runtime::Pool::Hold hold = pool->HoldBackground();
    absl::StatusOr<runtime::ExecResult> r = pool->Run(Echo("held"));
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->reason, runtime::ExitReason::kExited);
    // One idle zygote is half of min_idle: not urgent, so nothing is built,
    // and the ended sandbox waits, for as long as the hold lives.
    for (int i = 0; i < 30; ++i) {
      runtime::PoolStats s = pool->Stats();
      ASSERT_EQ(s.building, 0u) << "refill started under a hold";
      ASSERT_EQ(s.idle, 1u);
      ASSERT_EQ(s.tearing_down, 1u) << "teardown started under a hold";
      absl::SleepFor(absl::Milliseconds(10));
    }
  }
  EXPECT_TRUE(WaitStats(*pool, [](const runtime::PoolStats& s) { return s.tearing_down == 0; }))
      << "the teardown did not follow the hold";
  EXPECT_TRUE(pool->WaitWarm(kWarmLimit)) << "the refill did not follow the hold";
  EXPECT_EQ(pool->Stats().idle, 2u);
}

TEST_F(CorePool, UnderAHoldAnEmptyingPoolStillRefillsAndABacklogIsTornDown) {
  std::unique_ptr<runtime::Pool> pool = WarmPool(2);
  ASSERT_NE(pool, nullptr);
  runtime::Pool::Hold hold = pool->HoldBackground();
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<runtime::ExecResult> r = pool->Run(Echo("x"));
    ASSERT_TRUE(r.ok()) << r.status();
  }
  // Below half of min_idle refill is urgent (the next request would take
  // the cold path), and max_idle ended sandboxes are a backlog to remove.
  EXPECT_TRUE(WaitStats(*pool, [](const runtime::PoolStats& s) { return s.idle >= 1; }))
      << "an empty pool did not refill under a hold";
  EXPECT_TRUE(WaitStats(*pool, [](const runtime::PoolStats& s) { return s.tearing_down == 0; }))
      << "a backlog of max_idle ended sandboxes was kept under a hold";
  runtime::Pool::Hold moved = std::move(hold);  // still one hold
  EXPECT_EQ(pool->Stats().idle, 1u) << "refill went past half of min_idle under a hold";
}

TEST_F(CorePool, InvalidConfigurationIsRefusedUpFront) {
  runtime::PoolConfig config;
  config.max_total = 0;
  EXPECT_FALSE(runtime::Pool::Create("bad", TestSpec({}), config).ok());
  config = {};
  config.refill_parallelism = 0;
  EXPECT_FALSE(runtime::Pool::Create("bad", TestSpec({}), config).ok());
}

}  // namespace
}  // namespace cubicle::test_support

#include "runtime/capture.h"

namespace cubicle::test_support {
namespace {

runtime::Runner ColdRunner() {
  return [](const runtime::ExecRequest& r) -> absl::StatusOr<runtime::ExecResult> {
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(TestSpec({}));
    if (!z.ok()) return z.status();
    return (*z)->Run(r);
  };
}

class CoreCapture : public HostHygieneTest {};

TEST_F(CoreCapture, FeedsStdinAndKeepsTheStreamsApart) {
  runtime::ExecRequest r;
  r.argv = {"/bin/sh", "-c", "tr a-z A-Z; echo to-stderr >&2"};
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(ColdRunner(), r, "hello\n", 1 << 20);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "HELLO\n");
  EXPECT_EQ(run->err, "to-stderr\n");
  EXPECT_FALSE(run->out_truncated);
  EXPECT_EQ(run->out_total, 6u);
}

// Without stdin the payload reads EOF at once, from /dev/null (the
// character device 1:3), and cannot write there as if it were a file.
TEST_F(CoreCapture, WithoutStdinThePayloadReadsEofFromDevNull) {
  runtime::ExecRequest r;
  r.argv = {"/bin/sh", "-c", "wc -c; stat -L -c %t:%T /dev/stdin; echo x >&0 || echo refused"};
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(ColdRunner(), r, "", 1 << 20);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->out, "0\n1:3\nrefused\n") << run->err;
}

TEST_F(CoreCapture, AnEndlessWriterIsTruncatedAtTheBudgetAndNeverBlocks) {
  runtime::ExecRequest r;
  // 4 MiB on stdout, far past the 1000-byte budget and any pipe buffer.
  r.argv = {"/bin/sh", "-c", "head -c 4194304 /dev/zero; echo done >&2"};
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(ColdRunner(), r, "", 1000);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited);
  EXPECT_EQ(run->out.size(), 1000u);
  EXPECT_TRUE(run->out_truncated);
  EXPECT_EQ(run->out_total, 4194304u);
  EXPECT_EQ(run->err, "done\n");
  EXPECT_FALSE(run->err_truncated);
}

}  // namespace
}  // namespace cubicle::test_support
