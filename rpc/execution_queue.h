// Where the daemon's executions wait and run (docs/config.md,
// "concurrency"): `slots` at once, on as many worker threads, and at most
// `max_waiting` more waiting in order. Only executions come here —
// sandbox.run, skill.call, exec.start's runs, npu.broker.run jobs — so
// nothing else ever waits for a slot.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace cubicle::rpc {

class ExecutionQueue {
 public:
  // Called once: with true on a worker when its turn comes, or with false
  // (on the withdrawing thread) when it is withdrawn before it started.
  using Job = absl::AnyInvocable<void(bool run) &&>;

  ExecutionQueue(size_t slots, size_t max_waiting);
  ~ExecutionQueue();  // Stop()
  ExecutionQueue(const ExecutionQueue&) = delete;
  ExecutionQueue& operator=(const ExecutionQueue&) = delete;

  // A ticket for a job not submitted yet, so that a Cancellation can name
  // it before the job can start (Withdraw of a ticket not queued does
  // nothing).
  uint64_t Reserve() { return next_ticket_.fetch_add(1) + 1; }
  // Queues `job`; false, and `job` is dropped uncalled, when `slots` jobs
  // run and `max_waiting` wait already (busy).
  bool Submit(uint64_t ticket, Job job);
  // Calls the job of `ticket` with false if it has not started, and
  // forgets it; false if it is not waiting.
  bool Withdraw(uint64_t ticket);
  // Withdraws every waiting job (a drain's deadline, an abandonment).
  void WithdrawAll();

  // A slot for the caller's own thread, taken only when no job runs or
  // waits: it counts as a running job until it is destroyed.
  class CallerSlot {
   public:
    CallerSlot(CallerSlot&& other) noexcept : queue_(std::exchange(other.queue_, nullptr)) {}
    CallerSlot(const CallerSlot&) = delete;
    CallerSlot& operator=(const CallerSlot&) = delete;
    CallerSlot& operator=(CallerSlot&&) = delete;
    ~CallerSlot();

   private:
    friend class ExecutionQueue;
    explicit CallerSlot(ExecutionQueue* queue) : queue_(queue) {}
    ExecutionQueue* queue_;
  };
  std::optional<CallerSlot> TryRunHere();

  size_t running() const;
  size_t waiting() const;

  // Withdraws what waits and joins the workers once what runs has ended.
  void Stop();

 private:
  struct Waiting {
    uint64_t ticket;
    Job job;
  };
  void Work();
  void Release();

  const size_t slots_;
  const size_t max_waiting_;
  std::atomic<uint64_t> next_ticket_{0};
  mutable std::mutex mu_;
  std::condition_variable turn_;
  std::deque<Waiting> waiting_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace cubicle::rpc
