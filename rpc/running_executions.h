// The executions a daemon runs now, each by the eventfd that cancels it
// (runtime::ExecRequest::cancel_fd), so that all can be killed at once when
// the daemon is abandoned — its parent, the orchestrator that alone reads
// its replies, has died (rpc/daemon.h, ServeOptions::die_with_parent) — or
// its drain's deadline has passed.
#pragma once

#include <mutex>
#include <set>

namespace cubicle::rpc {

class RunningExecutions {
 public:
  RunningExecutions();

  // Cancels what it tracks while it lives; returned by Track.
  class Tracked {
   public:
    Tracked(Tracked&& other) noexcept : owner_(other.owner_), fd_(other.fd_) { other.owner_ = nullptr; }
    Tracked(const Tracked&) = delete;
    Tracked& operator=(const Tracked&) = delete;
    Tracked& operator=(Tracked&&) = delete;
    ~Tracked();

   private:
    friend class RunningExecutions;
    Tracked(RunningExecutions* owner, int fd) : owner_(owner), fd_(fd) {}
    RunningExecutions* owner_;
    int fd_;
  };

  // Tracks an execution's own eventfd until the result is destroyed;
  // written at once when CancelAll has run.
  Tracked Track(int fd);

  // Makes every cancel fd, tracked now or later, readable: each execution
  // is killed (reason `killed`).
  void CancelAll();
  bool abandoned() const;

 private:
  mutable std::mutex mu_;
  std::multiset<int> tracked_;
  bool abandoned_ = false;
};

}  // namespace cubicle::rpc
