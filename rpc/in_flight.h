// A request while the daemon answers it: how the replies of its line are
// gathered (LineReplies), how it is stopped wherever it is (Cancellation:
// queued, running, waiting), and the client connection it came on, whose
// end stops it when the configuration says so (Connection;
// docs/config.md, "connections").
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"

namespace cubicle::rpc {

// What a request's stop does is set by whoever holds the request now: the
// execution queue (withdraw it), a running sandbox (write its cancel
// eventfd), a wait (end it). A stop owns what it touches (a shared fd, a
// ticket), so running one late is harmless.
class Cancellation {
 public:
  // Sets how to stop the request where it is now. False, and `stop` is
  // dropped, once the request is cancelled: the caller must not go on.
  bool SetStop(absl::AnyInvocable<void()> stop);
  // The request has moved on or ended: nothing to stop (the old stop and
  // what it owns are released now).
  void Clear();
  // Stops the request, once: runs the stop set now (on this thread), and
  // refuses every later SetStop.
  void Cancel();
  bool cancelled() const;

 private:
  mutable std::mutex mu_;
  bool cancelled_ = false;
  absl::AnyInvocable<void()> stop_;
};

// What becomes of the requests of a client that disconnects before their
// replies (docs/config.md, connections.on_disconnect).
enum class OnDisconnect {
  kCancel,  // queued ones never run, running ones are killed, waits end
  kFinish,  // they run to their end; the replies are dropped
};

// One client connection on the Unix socket: its requests not yet answered,
// so that its end can stop them. Thread-safe.
class Connection {
 public:
  explicit Connection(OnDisconnect policy) : policy_(policy) {}

  // Tracks a request until Forget. A request that comes after the
  // disconnect is cancelled at once (with kCancel).
  void Track(const std::shared_ptr<Cancellation>& request);
  void Forget(const Cancellation* request);
  // The client is gone: with kCancel, every request tracked is cancelled.
  void Disconnect();
  size_t outstanding() const;

 private:
  const OnDisconnect policy_;
  mutable std::mutex mu_;
  bool disconnected_ = false;
  std::map<const Cancellation*, std::shared_ptr<Cancellation>> requests_;
};

// The replies to one line: sent together — the one reply, or one array for
// a batch — once each of its `entries` has answered (Add, exactly once
// each; "" for an entry with no reply, a notification). Thread-safe; the
// last Add sends, on its own thread.
class LineReplies {
 public:
  LineReplies(bool batch, size_t entries, std::function<void(std::string)> send);
  // One entry's reply handed to `send` as it is, "" included (a
  // notification's): a stage in front of the line's own LineReplies.
  static std::shared_ptr<LineReplies> PassThrough(std::function<void(std::string)> send);
  void Add(std::string reply);

 private:
  const bool batch_;
  bool pass_through_ = false;
  std::function<void(std::string)> send_;
  std::mutex mu_;
  size_t left_;
  std::vector<std::string> replies_;
};

}  // namespace cubicle::rpc
