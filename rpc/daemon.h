// `cubicle serve`: the JSON-RPC 2.0 daemon (DESIGN §6). One JSON object per
// line over stdio or a Unix socket; a pool of zygotes per profile behind it.
// Methods and error codes: docs/protocol.md.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include <boost/json/value.hpp>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "npu/inventory.h"
#include "rpc/config.h"
#include "rpc/jsonrpc.h"
#include "rpc/metrics.h"
#include "rpc/running_executions.h"
#include "runtime/pool.h"

namespace cubicle::rpc {

struct Workers;  // rpc/request_threads.h

struct ServeOptions {
  bool stdio = true;          // serve on stdin/stdout; EOF on stdin ends the daemon
  // End when the parent process exits (the orchestrator that spawned a
  // stdio daemon and alone reads its replies): every running execution is
  // killed and nothing more is answered, then the daemon tears down as
  // after SIGTERM — every zygote killed, every cgroup removed — and Serve
  // returns 1. Bounded: executions are cancelled and waits (exec.wait,
  // pool.warm) end at once; only an npu.broker.run job, which runs outside
  // any sandbox, runs on to its end or its own timeout.
  bool die_with_parent = false;
  std::string socket_path;    // also (or only) on this Unix socket; empty: none
  uint32_t socket_mode = 0600;
  size_t max_line_bytes = 4 << 20;
  // Prometheus text (rpc/metrics.h) on a Unix socket or in a file.
  std::optional<MetricsTarget> metrics;
  // Where the daemon's own warnings go (the CLI logs them as JSON lines).
  std::function<void(const std::string&)> warn = [](const std::string&) {};
};

class Daemon {
 public:
  // Builds one pool per profile (refill starts in the background).
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(DaemonConfig config);
  ~Daemon();  // pools are destroyed: every zygote killed, every cgroup removed

  // Handles one line; `reply` receives the reply line (without "\n"), or is
  // not called when nothing is to be sent (notifications). May call `reply`
  // from a worker thread, after HandleLine returns. Thread-safe.
  //
  // With `may_run_here`, a line whose work would be the only request in
  // flight is not queued for a worker: its work is returned, for the
  // calling thread to run (and it counts as in flight until it has run).
  // Otherwise, and for lines answered at once, the result is empty.
  using Work = absl::AnyInvocable<void() &&>;
  Work HandleLine(const std::string& line, std::function<void(std::string)> reply,
                  bool may_run_here = false);

  // Serves until SIGTERM/SIGINT (or EOF on stdin for the stdio transport),
  // then drains in-flight work and shuts down, or until the parent exits
  // (ServeOptions::die_with_parent), then cancels it and shuts down the
  // same way. Returns the exit status.
  int Serve(const ServeOptions& options);

  // The operator metrics, Prometheus text format (rpc/metrics.h).
  std::string MetricsText();

  // Requests accepted and not yet answered.
  size_t in_flight() const { return in_flight_.load(); }

 private:
  class Server;  // Serve's io loop (rpc/daemon.cc)
  explicit Daemon(DaemonConfig config);
  boost::json::value Dispatch(const Call& call, Error* error);
  std::string Answer(const Incoming& in);  // the reply line to `in`, "" for none

  // health, pool.* (rpc/pool_methods.cc).
  boost::json::value Health();
  boost::json::value PoolStatsJson();
  Expected<runtime::Pool*> FindPool(const boost::json::object& params);
  Expected<boost::json::value> PoolConfigure(const boost::json::value& params);
  Expected<boost::json::value> PoolWarm(const boost::json::value& params);
  // Pool::WaitWarm that also ends when the daemon is abandoned.
  bool WaitWarm(runtime::Pool* pool, absl::Duration limit);

  // sandbox.run, skill.call (rpc/run_methods.cc).
  Expected<boost::json::value> SandboxRun(const boost::json::value& params);
  Expected<boost::json::value> SkillCall(const boost::json::value& params);
  // The fields sandbox.run, skill.call and exec.start share: profile, argv,
  // env, cwd, timeout_ms, limits, workspace, output_bytes, network.
  struct RunParams {
    runtime::Pool* pool = nullptr;
    runtime::ExecRequest request;
    uint64_t budget = 0;
    // A network policy narrower than the profile's (params.network): the
    // run gets a sandbox of its own instead of a pooled one.
    std::optional<runtime::SandboxSpec> narrowed;
  };
  Expected<RunParams> ParseRunParams(const boost::json::object& params);
  // sandbox.run's work once its params are parsed; `cancel_fd` kills it.
  Expected<boost::json::value> RunToJson(const RunParams& p, const std::string& stdin_data, int cancel_fd);
  // sandbox.run with accelerator chips (rpc/npu_methods.h): cold, after the probe.
  Expected<boost::json::value> SandboxRunAccelerated(const RunParams& p, const boost::json::object& params,
                                                     const std::string& stdin_data);

  // Managed executions, exec.* (rpc/exec_methods.cc): started in the
  // background, polled, waited for, cancelled; an idempotency key makes a
  // retried start harmless.
  struct Execution;
  Expected<boost::json::value> ExecStart(const boost::json::value& params);
  Expected<boost::json::value> ExecStatus(const boost::json::value& params, bool wait);
  Expected<boost::json::value> ExecCancel(const boost::json::value& params);
  Expected<std::shared_ptr<Execution>> NewExecution(const std::optional<std::string>& key);
  Expected<std::shared_ptr<Execution>> FindExecution(const boost::json::value& params);
  void ForgetOldExecutionsLocked();
  void WakeExecWaiters();  // exec.wait checks again (abandonment)
  std::mutex exec_mu_;
  std::condition_variable exec_done_;
  std::map<std::string, std::shared_ptr<Execution>> executions_;
  std::map<std::string, std::pair<std::string, absl::Time>> keys_;  // key -> (exec id, when)
  uint64_t next_exec_ = 0;

  DaemonConfig config_;
  std::map<std::string, std::unique_ptr<runtime::Pool>> pools_;
  std::unique_ptr<npu::Inventory> inventory_;  // npu.list and accelerated runs
  std::atomic<size_t> in_flight_{0};
  std::atomic<bool> stopping_{false};
  RunningExecutions running_;  // cancelled all at once when the daemon is abandoned
  std::unique_ptr<Workers> workers_;
};

}  // namespace cubicle::rpc
