// The daemon's life: its pools made, each line taken in and answered
// (HandleLine), and Serve's io loop — transports, signals, the parent
// watch, metrics — until a drain or an abandonment ends it. The methods are
// in rpc/{run,exec,pool}_methods.cc; the transports in rpc/transports.cc.
#include "rpc/daemon.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "rpc/metrics_server.h"
#include "rpc/npu_methods.h"
#include "rpc/request_threads.h"
#include "rpc/results_json.h"
#include "rpc/transports.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "runtime/probe.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(DaemonConfig config) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(config)));
  for (auto& [name, profile] : d->config_.profiles) {
    runtime::PoolConfig pool_config = profile.pool;
    pool_config.zygote = ZygoteRecipeOf(d->config_, profile).options;
    // Made by fork servers where the daemon has one to start: the daemon
    // itself never forks for a zygote then.
    runtime::ZygoteMakerFactory makers;
    if (!d->config_.fork_server.empty()) {
      makers = runtime::ForkServerMakers(d->config_.fork_server, d->config_.source, name);
    }
    CUBICLE_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Pool> pool,
                             runtime::Pool::Create(name, profile.spec, pool_config, std::move(makers)));
    d->pools_.emplace(name, std::move(pool));
  }
  npu::InventoryOptions npu_options;
  npu_options.root = d->config_.npu.root;
  npu_options.cache_window = d->config_.npu.cache_window;
  CUBICLE_ASSIGN_OR_RETURN(npu_options.probe_spec, runtime::DefaultSpec({}));
  npu_options.probe_spec.limits = runtime::DefaultLimits();
  CUBICLE_ASSIGN_OR_RETURN(d->inventory_, npu::Inventory::Create(std::move(npu_options)));
  d->workers_ = std::make_unique<Workers>(std::max<size_t>(1, d->config_.max_concurrent));
  return d;
}

Daemon::Daemon(DaemonConfig config) : config_(std::move(config)) {}

Daemon::~Daemon() {
  if (workers_ != nullptr) workers_->pool.join();
  pools_.clear();
}

std::string Daemon::MetricsText() {
  std::map<std::string, PoolMetrics> pools;
  for (auto& [name, pool] : pools_) pools[name] = PoolMetrics{pool->Stats(), pool->config()};
  return PrometheusText(pools, in_flight_.load());
}

json::value Daemon::Dispatch(const Call& call, Error* error) {
  auto take = [&](Expected<json::value> r) -> json::value {
    if (r.ok()) return std::move(r).value();
    *error = std::move(r).error();
    return nullptr;
  };
  if (running_.abandoned()) {  // queued before the parent died: no one will read it
    *error = Error{kShuttingDown, "the daemon is shutting down: its parent exited", nullptr};
    return nullptr;
  }
  if (call.method == "health") return Health();
  if (call.method == "pool.stats") return json::object{{"pools", PoolStatsJson()}};
  if (call.method == "pool.configure") return take(PoolConfigure(call.params));
  if (call.method == "pool.warm") return take(PoolWarm(call.params));
  if (call.method == "sandbox.run") return take(SandboxRun(call.params));
  if (call.method == "skill.call") return take(SkillCall(call.params));
  if (call.method == "exec.start") return take(ExecStart(call.params));
  if (call.method == "exec.status") return take(ExecStatus(call.params, false));
  if (call.method == "exec.wait") return take(ExecStatus(call.params, true));
  if (call.method == "exec.cancel") return take(ExecCancel(call.params));
  if (call.method == "probe") return ProbeToJson(runtime::Probe());
  if (call.method == "npu.list") return take(NpuList(*inventory_, call.params));
  if (call.method == "npu.broker.run") return take(NpuBrokerRun(config_.npu.broker, call.params));
  *error = Error{kMethodNotFound, absl::StrCat("no method named '", call.method, "'"), nullptr};
  return nullptr;
}

namespace {

std::string ReplyLine(const Incoming& in, const std::vector<std::string>& replies) {
  return in.batch ? Batch(replies) : (replies.empty() ? "" : replies.front());
}

// The reply to a line refused as a whole (shutting down, busy): each
// entry's own error where it has one, else `error`.
std::string Refuse(const Incoming& in, const Error& error) {
  std::vector<std::string> replies;
  for (const Entry& e : in.entries) {
    if (e.NeedsReply()) replies.push_back(ErrorReply(e.call.id, e.error ? *e.error : error));
  }
  return ReplyLine(in, replies);
}

bool RunsASandbox(const Entry& e) {
  return !e.error && (e.call.method == "sandbox.run" || e.call.method == "skill.call");
}

}  // namespace

std::string Daemon::Answer(const Incoming& in) {
  std::vector<std::string> replies;
  for (const Entry& e : in.entries) {
    if (e.error) {
      if (e.NeedsReply()) replies.push_back(ErrorReply(e.call.id, *e.error));
      continue;
    }
    Error error;
    error.code = 0;
    json::value result;
    try {
      result = Dispatch(e.call, &error);
    } catch (const std::exception& ex) {  // Boost.JSON's, caught at the edge
      error = Error{kInternalError, ex.what(), nullptr};
    }
    if (!e.NeedsReply()) continue;
    replies.push_back(error.code != 0 ? ErrorReply(e.call.id, error) : Result(e.call.id, result));
  }
  return ReplyLine(in, replies);
}

Daemon::Work Daemon::HandleLine(const std::string& line, std::function<void(std::string)> reply, bool may_run_here) {
  Incoming in = ParseLine(line, std::string::npos);
  if (in.entries.empty()) return {};
  auto send = [&](std::string out) {
    if (!out.empty()) reply(std::move(out));
  };
  if (stopping_) {
    send(Refuse(in, Error{kShuttingDown, "the daemon is shutting down", nullptr}));
    return {};
  }
  // Every entry needing work goes to the workers as one task; the cap on
  // accepted requests bounds both the queue and the daemon's memory.
  const bool runs_a_sandbox = !in.batch && in.entries.size() == 1 && RunsASandbox(in.entries[0]);
  const size_t cap = config_.max_concurrent + config_.max_queue;
  const size_t before = in_flight_.fetch_add(1);
  if (before >= cap) {
    in_flight_.fetch_sub(1);
    send(Refuse(in, Error{kBusy, absl::StrCat("busy: ", cap, " requests are running or queued"), nullptr}));
    return {};
  }
  auto work = [this, in = std::move(in), reply = std::move(reply)]() mutable {
    Slot slot(workers_->slots);
    // A request that runs a sandbox holds back every pool's refill and
    // teardown until its reply is out (runtime::Pool::Hold): they would
    // share the CPUs with it, and a refill's fork of this process makes
    // the reply's writes copy-on-write faults.
    std::vector<runtime::Pool::Hold> holds;
    if (std::any_of(in.entries.begin(), in.entries.end(), RunsASandbox)) {
      holds.reserve(pools_.size());
      for (auto& [name, pool] : pools_) holds.push_back(pool->HoldBackground());
    }
    std::string out = Answer(in);
    if (!out.empty()) reply(std::move(out));
    holds.clear();  // written (stdio) or queued for the socket's writer
    in_flight_.fetch_sub(1);
  };
  // Alone, a run of a sandbox runs where it was read: handing it to a
  // worker would put a wake-up of another thread (and of an idle CPU) on
  // its path. Only these: the reader watches stdin from the sandbox's wait
  // (WatchForTheReader), and nothing else here may block for long.
  if (may_run_here && before == 0 && runs_a_sandbox) return Work(std::move(work));
  asio::post(workers_->pool, std::move(work));
  return {};
}

// ---------------------------------------------------------------------------
// Serve

// Serve's io loop: the transports, the signals, the parent watch and the
// metrics, and the two ways it ends — a drain (SIGTERM, SIGINT, EOF on
// stdin), or an abandonment (the parent died) that cancels what runs
// first — both followed by the same teardown.
class Daemon::Server {
 public:
  Server(Daemon* daemon, const ServeOptions& options)
      : daemon_(daemon),
        options_(options),
        work_(asio::make_work_guard(io_)),
        signals_(io_, SIGTERM, SIGINT),
        drain_timer_(io_) {}

  // Everything that may fail comes before the stdio transport reads a line.
  absl::Status Start() {
    CUBICLE_RETURN_IF_ERROR(ListenOnSocket());
    CUBICLE_RETURN_IF_ERROR(StartMetrics());
    WatchSignals();
    CUBICLE_RETURN_IF_ERROR(WatchParent());
    StartStdio();
    return absl::OkStatus();
  }

  // Until drained; then the teardown. Returns the exit status.
  int Run() {
    io_.run();
    TearDown();
    return exit_code_;
  }

 private:
  absl::Status ListenOnSocket() {
    if (options_.socket_path.empty()) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<UnixAcceptor>> made =
        ListenUnix(io_, options_.socket_path, options_.socket_mode);
    if (!made.ok()) return absl::Status(made.status().code(), absl::StrCat("socket ", made.status().message()));
    acceptor_ = *std::move(made);
    AcceptClients(daemon_, *acceptor_, options_.max_line_bytes);
    return absl::OkStatus();
  }

  absl::Status StartMetrics() {
    if (!options_.metrics.has_value()) return absl::OkStatus();
    CUBICLE_ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(io_, *options_.metrics, options_.socket_mode,
                                                            [d = daemon_] { return d->MetricsText(); },
                                                            options_.warn));
    return absl::OkStatus();
  }

  void WatchSignals() {
    signals_.async_wait([this](boost::system::error_code ec, int) {
      if (!ec) BeginShutdown();
    });
  }

  // A daemon serving its spawner's stdio belongs to that process: when it
  // exits, however it dies, the daemon ends (Abandon). Watched through a
  // pidfd of the parent process rather than PR_SET_PDEATHSIG, which
  // follows the parent *thread*: an orchestrator that spawned the daemon
  // from a worker thread would lose it when that thread ends. A
  // socket-only daemon is a service and outlives its parent.
  absl::Status WatchParent() {
    if (!options_.die_with_parent) return absl::OkStatus();
    const pid_t parent = ::getppid();
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, parent, 0));
    if (pidfd < 0) {
      // No pidfds (Linux < 5.3): the thread-bound signal is the best there
      // is, and it kills at once, with no teardown.
      if (::prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) return ErrnoStatus(errno, "prctl(PR_SET_PDEATHSIG)");
    } else {
      parent_watch_ = std::make_unique<asio::posix::stream_descriptor>(io_, pidfd);
    }
    if (::getppid() != parent) {  // gone before the watch existed
      return absl::FailedPreconditionError("the parent process exited before the daemon started");
    }
    if (parent_watch_) {
      parent_watch_->async_wait(asio::posix::stream_descriptor::wait_read,
                                [this, parent](boost::system::error_code ec) {
                                  if (!ec) Abandon(parent);
                                });
    }
    return absl::OkStatus();
  }

  void StartStdio() {
    if (!options_.stdio) return;
    stdio_ = std::make_unique<StdioTransport>(daemon_, options_.max_line_bytes,
                                              [this] { asio::post(io_, [this] { BeginShutdown(); }); });
  }

  // Shutdown: stop taking requests, let in-flight ones finish, then stop.
  void BeginShutdown() {
    if (daemon_->stopping_.exchange(true)) return;
    boost::system::error_code ignored;
    if (acceptor_) acceptor_->close(ignored);
    if (metrics_) metrics_->Stop();
    CheckDrained();
  }

  void CheckDrained() {
    if (daemon_->in_flight_.load() == 0) {
      work_.reset();
      io_.stop();
      return;
    }
    drain_timer_.expires_after(std::chrono::milliseconds(10));
    drain_timer_.async_wait([this](boost::system::error_code) { CheckDrained(); });
  }

  // The parent, which alone reads the replies, is gone: nothing is waited
  // for. Every running execution is killed, waits end, queued requests are
  // refused; then the drain finds nothing left, and the teardown runs.
  void Abandon(pid_t parent) {
    options_.warn(absl::StrCat("the parent process ", parent,
                               " exited: ending every sandbox, then the daemon"));
    exit_code_ = 1;
    daemon_->running_.CancelAll();
    daemon_->WakeExecWaiters();
    BeginShutdown();
  }

  // What ~Daemon promises, done here while the io loop's objects live.
  void TearDown() {
    stdio_.reset();
    daemon_->workers_->pool.join();
    if (!options_.socket_path.empty()) ::unlink(options_.socket_path.c_str());
    if (metrics_) metrics_->Finish();
    daemon_->pools_.clear();  // every zygote killed, every cgroup removed
  }

  Daemon* daemon_;
  const ServeOptions& options_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::signal_set signals_;
  asio::steady_timer drain_timer_;
  std::unique_ptr<UnixAcceptor> acceptor_;
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<asio::posix::stream_descriptor> parent_watch_;
  std::unique_ptr<StdioTransport> stdio_;
  int exit_code_ = 0;
};

int Daemon::Serve(const ServeOptions& options) {
  Server server(this, options);
  if (absl::Status started = server.Start(); !started.ok()) {
    std::fprintf(stderr, "cubicle serve: %s\n", std::string(started.message()).c_str());
    return 1;
  }
  return server.Run();
}

}  // namespace cubicle::rpc
