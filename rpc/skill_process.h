// A skill process held open (docs/skills.md, "Skill sessions" and "Calling
// other skills"): a skill whose stdin is a pipe the daemon keeps, so that
// one process answers JSON-RPC requests in turn — a conversation's state
// stays in it between calls — and can send requests of its own (a call to
// another skill), answered on the same stdin.
//
// One thread per process runs it (runtime::RunCaptured on its runner:
// pooled and warm as a one-shot skill.call is) and reads its stdout line
// by line: a response to the call in flight wakes that call; a
// notification (progress) goes to the call's sink at once, so that it
// reaches the client before the response; a request goes to
// Options::on_request; anything else is the call's stdout_logs. Its stderr
// is the call's logs.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "runtime/capture.h"

namespace cubicle::rpc {

class SkillProcess {
 public:
  struct Options {
    runtime::Runner runner;
    // The skill's execution: argv, env, limits; its timeout is the
    // process's whole lifetime. Its cancel_fd is the process's own.
    runtime::ExecRequest request;
    // Bytes of stderr and of stdout logs kept per call.
    uint64_t log_budget = 1 << 20;
    size_t max_line = 4 << 20;
    // A JSON-RPC request the skill wrote (an object with "method" and
    // "id"), on the process's own thread: it must not block. Answer it
    // with Send(), from any thread (Spawn() runs work on one the process
    // owns). Null: every request is answered "method not found".
    std::function<void(SkillProcess& process, boost::json::object request)> on_request;
  };

  // Starts the skill's thread. The sandbox is made (or taken from its
  // pool) there: a skill that cannot start is seen by its first call.
  static absl::StatusOr<std::shared_ptr<SkillProcess>> Start(Options options);
  ~SkillProcess();  // Close()
  SkillProcess(const SkillProcess&) = delete;
  SkillProcess& operator=(const SkillProcess&) = delete;

  enum class CallEnd {
    kAnswered,   // `response` holds the skill's answer
    kBusy,       // another call is in flight: nothing was sent
    kTimedOut,   // no answer within the call's timeout
    kCancelled,  // the caller's cancel fd fired
    kEnded,      // the process ended (or never started) without answering
    kOverlong,   // a stdout line over max_line: the stream cannot be trusted
    kStdinFull,  // the skill did not read the request within the timeout
  };
  struct CallOutcome {
    CallEnd end = CallEnd::kEnded;
    boost::json::object response;  // kAnswered: the whole JSON-RPC response
    std::string logs;              // stderr read while the call was in flight (and before it, since the last call)
    bool logs_truncated = false;
    std::string stdout_logs;  // its stdout lines that were no message
    uint64_t notifications = 0;  // sent to the sink
    absl::Duration wall;
  };
  // Where a call's notifications go, each the skill's whole JSON-RPC
  // notification, on the process's thread, in the order written.
  using NotificationSink = std::function<void(const boost::json::object& notification)>;
  // One request (`method`, `params`) with an id of its own, answered
  // within `timeout`. `cancel_fd` (-1: none) readable abandons it (a late
  // answer is dropped: its id is no longer awaited).
  CallOutcome Call(absl::string_view method, const boost::json::value& params, absl::Duration timeout,
                   int cancel_fd, NotificationSink on_notification);

  // Writes `line` (one JSON-RPC message, without "\n") to the skill's
  // stdin, whole, by `deadline`. Thread-safe; lines never interleave.
  absl::Status Send(absl::string_view line, absl::Time deadline);

  // Runs `work` on a thread the process owns and joins at Close(); its
  // argument is an eventfd of its own that Close() makes readable first
  // (what the work started must end). False when the process is closing. The work
  // must hold the process by reference, never by a shared_ptr: the last
  // reference dropped there would join its own thread.
  bool Spawn(std::function<void(int cancel_fd)> work);

  struct Ended {
    absl::Status status;        // the run itself failed (no sandbox)
    runtime::ExecResult result;  // otherwise, how it ended
    std::string out_tail, err_tail;  // the last 4 KiB of each stream
  };
  // Closes its stdin, kills the sandbox and what Spawn() started, and
  // waits for both. Idempotent; thread-safe.
  const Ended& Close();

  bool ended() const;
  // How it ended, once ended() (else empty).
  std::optional<Ended> Outcome() const;
  uint64_t calls() const { return calls_.load(); }

 private:
  explicit SkillProcess(Options options);
  void Run(UniqueFd stdin_read);
  bool OnLine(absl::string_view text, bool overlong);
  void OnRead(int stream, absl::string_view data);
  void Wake();

  Options options_;
  UniqueFd stdin_write_;  // non-blocking; reset by Close()
  UniqueFd kill_fd_;      // the sandbox's cancel eventfd
  UniqueFd wake_fd_;      // the call in flight's wake-up
  std::thread runner_;

  mutable std::mutex mu_;
  bool in_call_ = false;
  std::optional<boost::json::value> awaited_;  // the call in flight's id
  NotificationSink sink_;
  uint64_t notifications_ = 0;
  std::optional<boost::json::object> response_;
  bool overlong_ = false;
  std::string logs_, stdout_logs_;
  bool logs_truncated_ = false;
  std::string out_tail_, err_tail_;
  std::optional<Ended> ended_;
  uint64_t next_id_ = 0;
  std::atomic<uint64_t> calls_{0};

  std::mutex send_mu_;  // one writer at a time
  std::mutex close_mu_;
  bool closed_ = false;
  std::mutex join_mu_;
  std::vector<std::thread> spawned_;       // under close_mu_
  std::vector<UniqueFd> spawn_cancel_fds_;  // under close_mu_; kept until the process goes
};

}  // namespace cubicle::rpc
