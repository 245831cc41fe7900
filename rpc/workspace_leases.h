// One writer per workspace (issue 29): an execution that attaches a
// workspace — a session's, or a host directory under workspace_roots —
// holds that workspace's lease from the moment it is admitted until its
// work is done, so two executions never interleave their writes. A request
// that finds the lease held waits its turn (a session's executions are
// queued, in order) or fails at once, by its own choice. Waiting holds no
// thread and no execution slot.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/functional/any_invocable.h"

namespace cubicle::rpc {

class WorkspaceLeases : public std::enable_shared_from_this<WorkspaceLeases> {
 public:
  // Held for as long as the lease is: its destruction releases the lease
  // and starts the next waiter (through `post`, never on the releasing
  // thread, which may hold a lock of the execution queue).
  class Lease {
   public:
    ~Lease();
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    const std::string& key() const { return key_; }

   private:
    friend class WorkspaceLeases;
    Lease(std::weak_ptr<WorkspaceLeases> owner, std::string key) : owner_(std::move(owner)), key_(std::move(key)) {}
    std::weak_ptr<WorkspaceLeases> owner_;
    std::string key_;
  };
  using Start = absl::AnyInvocable<void(std::shared_ptr<Lease>) &&>;
  using Post = std::function<void(absl::AnyInvocable<void() &&>)>;

  static std::shared_ptr<WorkspaceLeases> Create(Post post);

  // Calls `start` with the lease of `key` at once (on this thread) when it
  // is free, returning 0. Otherwise, with `wait`, queues it behind the
  // others and returns its ticket (for Withdraw); without, returns nullopt
  // and leaves `start` with the caller, uncalled.
  std::optional<uint64_t> Acquire(const std::string& key, bool wait, Start& start);
  // The same for a start the caller does not keep: left uncalled, it is
  // destroyed on return.
  std::optional<uint64_t> Acquire(const std::string& key, bool wait, Start&& start) {
    return Acquire(key, wait, start);
  }
  // Drops every waiter (each destroyed uncalled): the daemon's drain has
  // reached its deadline.
  void WithdrawAll();
  // A waiter taken out of the queue (destroyed uncalled): true when it was
  // still waiting.
  bool Withdraw(const std::string& key, uint64_t ticket);
  // Whether `key`'s lease is held, and how many wait for it.
  bool Held(const std::string& key) const;
  size_t Waiting(const std::string& key) const;

 private:
  explicit WorkspaceLeases(Post post) : post_(std::move(post)) {}
  void Release(const std::string& key);
  struct Entry {
    bool held = false;
    std::deque<std::pair<uint64_t, Start>> waiting;
  };
  Post post_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;  // only keys held or waited for
  uint64_t next_ticket_ = 0;
};

}  // namespace cubicle::rpc
