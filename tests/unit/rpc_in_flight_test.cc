// The daemon's request plumbing without a daemon: the execution queue, the
// cancellation of a request wherever it is, a connection's end, the
// gathering of a line's replies, the fd budget and the resource errors.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <latch>
#include <memory>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "rpc/execution_queue.h"
#include "rpc/fd_budget.h"
#include "rpc/in_flight.h"
#include "rpc/jsonrpc.h"

namespace cubicle::rpc {
namespace {

// ---------------------------------------------------------------------------
// ExecutionQueue

TEST(ExecutionQueue, RunsAtMostItsSlotsAndRefusesBeyondTheWaitingLine) {
  ExecutionQueue queue(/*slots=*/2, /*max_waiting=*/1);
  std::latch started(2);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<int> ran{0};
  auto job = [&](bool run) {
    if (!run) return;
    ++ran;
    started.count_down();
    released.wait();
  };
  ASSERT_TRUE(queue.Submit(queue.Reserve(), job));
  ASSERT_TRUE(queue.Submit(queue.Reserve(), job));
  started.wait();  // both slots taken
  EXPECT_EQ(queue.running(), 2u);
  std::latch third(1);
  ASSERT_TRUE(queue.Submit(queue.Reserve(), [&](bool run) {
    ran += run ? 1 : 0;
    third.count_down();
  }));
  EXPECT_EQ(queue.waiting(), 1u);
  bool called = false;
  EXPECT_FALSE(queue.Submit(queue.Reserve(), [&](bool) { called = true; })) << "2 running, 1 waiting: busy";
  EXPECT_FALSE(called) << "a refused job is dropped uncalled";
  EXPECT_FALSE(queue.TryRunHere().has_value()) << "the caller runs nothing while jobs run or wait";
  release.set_value();
  third.wait();  // a slot freed: the waiting job ran (before Stop, which would withdraw it)
  queue.Stop();
  EXPECT_EQ(ran.load(), 3);
}

TEST(ExecutionQueue, AWithdrawnJobIsCalledWithFalseAndNeverRuns) {
  ExecutionQueue queue(1, 4);
  std::latch started(1);
  std::promise<void> release;
  ASSERT_TRUE(queue.Submit(queue.Reserve(), [&](bool) {
    started.count_down();
    release.get_future().wait();
  }));
  started.wait();
  const uint64_t ticket = queue.Reserve();
  std::vector<bool> calls;
  ASSERT_TRUE(queue.Submit(ticket, [&](bool run) { calls.push_back(run); }));
  EXPECT_TRUE(queue.Withdraw(ticket));
  EXPECT_EQ(calls, std::vector<bool>{false}) << "called at once, on the withdrawing thread";
  EXPECT_FALSE(queue.Withdraw(ticket)) << "not waiting any more";
  EXPECT_FALSE(queue.Withdraw(queue.Reserve())) << "a ticket never submitted";
  EXPECT_EQ(queue.waiting(), 0u);
  release.set_value();
  queue.Stop();
  EXPECT_EQ(calls, std::vector<bool>{false});
}

TEST(ExecutionQueue, StopWithdrawsWhatWaitsAndTheCallerSlotCounts) {
  ExecutionQueue queue(1, 4);
  std::optional<ExecutionQueue::CallerSlot> here = queue.TryRunHere();
  ASSERT_TRUE(here.has_value());
  EXPECT_EQ(queue.running(), 1u);
  std::vector<bool> calls;
  ASSERT_TRUE(queue.Submit(queue.Reserve(), [&](bool run) { calls.push_back(run); }));
  EXPECT_EQ(queue.waiting(), 1u) << "the one slot is the caller's";
  std::thread stop([&] { queue.Stop(); });
  stop.join();  // the workers end; the caller's slot is not theirs to wait for
  EXPECT_EQ(calls, std::vector<bool>{false}) << "withdrawn: the one slot was the caller's";
  here.reset();
  EXPECT_FALSE(queue.Submit(queue.Reserve(), [](bool) {})) << "stopped";
}

// ---------------------------------------------------------------------------
// Cancellation, Connection, LineReplies

TEST(Cancellation, RunsTheStopSetNowOnceAndRefusesLaterOnes) {
  Cancellation c;
  int first = 0, second = 0;
  ASSERT_TRUE(c.SetStop([&] { ++first; }));
  ASSERT_TRUE(c.SetStop([&] { ++second; })) << "the request moved on: a new stop replaces the old";
  c.Cancel();
  c.Cancel();
  EXPECT_EQ(first, 0);
  EXPECT_EQ(second, 1);
  EXPECT_TRUE(c.cancelled());
  EXPECT_FALSE(c.SetStop([&] { ++first; })) << "cancelled: the caller must not go on";
  Cancellation cleared;
  ASSERT_TRUE(cleared.SetStop([&] { ++first; }));
  cleared.Clear();
  cleared.Cancel();
  EXPECT_EQ(first, 0) << "a cleared stop does not run";
}

TEST(Connection, ADisconnectCancelsItsRequestsOnlyWhenConfiguredTo) {
  for (OnDisconnect policy : {OnDisconnect::kCancel, OnDisconnect::kFinish}) {
    Connection connection(policy);
    auto tracked = std::make_shared<Cancellation>();
    auto answered = std::make_shared<Cancellation>();
    connection.Track(tracked);
    connection.Track(answered);
    connection.Forget(answered.get());
    EXPECT_EQ(connection.outstanding(), 1u);
    connection.Disconnect();
    EXPECT_EQ(tracked->cancelled(), policy == OnDisconnect::kCancel);
    EXPECT_FALSE(answered->cancelled()) << "answered before the disconnect";
    auto late = std::make_shared<Cancellation>();
    connection.Track(late);
    EXPECT_EQ(late->cancelled(), policy == OnDisconnect::kCancel) << "a request after the end";
  }
}

TEST(LineReplies, SendsOnceWhenEveryEntryHasAnswered) {
  std::vector<std::string> sent;
  auto batch = std::make_shared<LineReplies>(true, 3, [&](std::string s) { sent.push_back(std::move(s)); });
  batch->Add(R"({"id":1})");
  batch->Add("");  // a notification
  EXPECT_TRUE(sent.empty());
  batch->Add(R"({"id":2})");
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0], R"([{"id":1},{"id":2}])");
  LineReplies notifications(true, 2, [&](std::string s) { sent.push_back(std::move(s)); });
  notifications.Add("");
  notifications.Add("");
  EXPECT_EQ(sent.size(), 1u) << "a batch of notifications gets no reply";
  LineReplies single(false, 1, [&](std::string s) { sent.push_back(std::move(s)); });
  single.Add(R"({"id":3})");
  EXPECT_EQ(sent.back(), R"({"id":3})");
}

// ---------------------------------------------------------------------------
// The fd budget and running out of resources

TEST(FdBudget, ReservesExecutionsAndPoolsAndLeavesTheRestToConnections) {
  runtime::PoolConfig pool;
  pool.max_idle = 4;
  pool.refill_parallelism = 1;
  EXPECT_EQ(PoolFds(pool), (4 + 1 + 4) * kFdsPerZygote);
  absl::StatusOr<FdBudget> budget = PlanFds(1024, 8, {{"a", pool}, {"b", pool}});
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->executions, 8 * kFdsPerExecution);
  EXPECT_EQ(budget->pools, 2 * PoolFds(pool));
  EXPECT_EQ(budget->connections, 1024 - budget->reserved());
  absl::StatusOr<FdBudget> tight = PlanFds(256, 64, {{"a", pool}});
  ASSERT_FALSE(tight.ok());
  EXPECT_EQ(tight.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(tight.status().message(), "concurrency.max_concurrent 64 needs up to 2048"))
      << tight.status();
  EXPECT_TRUE(absl::StrContains(tight.status().message(), "RLIMIT_NOFILE is 256")) << tight.status();
}

TEST(OutOfResources, NamesTheResourceAndIsNeverBusy) {
  Error e = OutOfResources(absl::ResourceExhaustedError("pipe2(stdout): EMFILE: Too many open files"));
  EXPECT_EQ(e.code, kInternalError);
  EXPECT_EQ(e.message, "out of file descriptors (EMFILE): pipe2(stdout): EMFILE: Too many open files");
  EXPECT_EQ(e.data.at("resource"), "EMFILE");
  e = OutOfResources(absl::ResourceExhaustedError("clone3: EAGAIN: Resource temporarily unavailable"));
  EXPECT_EQ(e.code, kInternalError);
  EXPECT_TRUE(absl::StrContains(e.message, "out of processes or threads (EAGAIN)")) << e.message;
  e = OutOfResources(absl::ResourceExhaustedError("something else"));
  EXPECT_EQ(e.code, kInternalError);
  EXPECT_EQ(e.message, "out of resources: something else");
}

}  // namespace
}  // namespace cubicle::rpc
