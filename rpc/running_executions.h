// The executions a daemon runs now, each by the eventfd that cancels it
// (runtime::ExecRequest::cancel_fd), so that all can be killed at once when
// the daemon is abandoned: its parent, the orchestrator that alone reads
// its replies, has died (rpc/daemon.h, ServeOptions::die_with_parent).
#pragma once

#include <mutex>
#include <set>

#include "base/unique_fd.h"

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

  // The cancel fd of an execution that has none of its own (sandbox.run):
  // one eventfd for all of them, readable once the daemon is abandoned.
  // -1 if it could not be made (then such runs end by their timeout).
  int shared_fd() const { return shared_.get(); }

  // Tracks an execution's own eventfd (exec.start's, skill.call's) until
  // the result is destroyed; written at once when already abandoned.
  Tracked Track(int fd);

  // Makes every cancel fd, tracked now or later, and the shared one,
  // readable: each execution is killed (reason `killed`).
  void CancelAll();
  bool abandoned() const;

 private:
  UniqueFd shared_;
  mutable std::mutex mu_;
  std::multiset<int> tracked_;
  bool abandoned_ = false;
};

}  // namespace cubicle::rpc
