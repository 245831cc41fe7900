// The daemon's life: its pools made, each line taken in and answered
// (HandleLine: at once, on the control pool, or as an execution queued for
// a slot), and Serve's io loop — transports, signals, the parent watch,
// metrics — until a drain or an abandonment ends it. The methods are in
// rpc/{run,exec,pool}_methods.cc; the transports in rpc/transports.cc.
#include "rpc/daemon.h"

#include <signal.h>
#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <future>
#include <vector>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "egress/gateway_process.h"
#include "rpc/mcp_http.h"
#include "rpc/metrics_server.h"
#include "rpc/npu_methods.h"
#include "rpc/results_json.h"
#include "rpc/systemd.h"
#include "rpc/transports.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "runtime/probe.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

absl::StatusOr<std::unique_ptr<Daemon>> Daemon::Create(DaemonConfig config) {
  std::unique_ptr<Daemon> d(new Daemon(std::move(config)));
  // Every fd the daemon may hold at once is budgeted before anything is
  // made: a configuration the limit cannot hold is refused here, not met
  // by a request as EMFILE.
  CUBICLE_ASSIGN_OR_RETURN(uint64_t nofile, RaiseFileLimit());
  std::map<std::string, runtime::PoolConfig> pool_configs;
  for (const auto& [name, profile] : d->config_.profiles) pool_configs[name] = profile.pool;
  CUBICLE_ASSIGN_OR_RETURN(d->fds_, PlanFds(nofile, d->config_.max_concurrent, pool_configs));
  auto served = std::make_shared<ProfileSet>();
  for (auto& [name, profile] : d->config_.profiles) {
    CUBICLE_ASSIGN_OR_RETURN(std::shared_ptr<runtime::Pool> pool, d->MakePool(d->config_, profile));
    (*served)[name] = std::make_shared<const ServedProfile>(ServedProfile{std::move(profile), std::move(pool)});
  }
  // From now on the profiles are those served, which a reload replaces.
  d->config_.profiles.clear();
  d->profiles_.Replace(std::move(served), {});
  // Its errors are said once Serve has the log (WarnSkillErrors).
  std::vector<const Profile*> profiles;
  for (const auto& [name, s] : *d->profiles_.Current()) profiles.push_back(&s->profile);
  d->ServeCatalogs(d->ReadCatalogs(d->config_.skills_dir, d->config_.environments_dir, profiles), /*warn=*/false);
  npu::InventoryOptions npu_options;
  npu_options.root = d->config_.npu.root;
  npu_options.cache_window = d->config_.npu.cache_window;
  CUBICLE_ASSIGN_OR_RETURN(npu_options.probe_spec, runtime::DefaultSpec({}));
  npu_options.probe_spec.limits = runtime::DefaultLimits();
  CUBICLE_ASSIGN_OR_RETURN(d->inventory_, npu::Inventory::Create(std::move(npu_options)));
  d->queue_ = std::make_unique<ExecutionQueue>(d->config_.max_concurrent, d->config_.max_queue);
  d->leases_ = WorkspaceLeases::Create(
      [raw = d.get()](absl::AnyInvocable<void() &&> next) { asio::post(raw->control_, std::move(next)); });
  d->drain_sweep_ = std::make_unique<asio::steady_timer>(d->control_);
  d->control_thread_ = std::thread([raw = d.get()] { raw->control_.run(); });
  CUBICLE_RETURN_IF_ERROR(d->OpenState());
  d->ArmReaper();
  return d;
}

namespace {

// How long a scrape waits for the egress gateways' counts, all together.
constexpr absl::Duration kGatewayCountsWait = absl::Milliseconds(100);

// Every method, for the metrics' labels: anything else counts as "other".
std::vector<std::string> KnownMethods() {
  return {"sandbox.run", "skill.call", "skill.list", "skill.describe", "skill.session.open", "skill.session.close",
          "skill.session.list", "environment.list", "environment.describe", "exec.start", "exec.status", "exec.wait",
          "exec.follow", "exec.cancel", "exec.list", "exec.logs", "session.create", "session.get", "session.list",
          "session.exec", "session.destroy", "files.put", "files.get", "files.list", "files.stat", "files.delete",
          "health", "probe", "pool.stats", "pool.configure", "pool.warm", "npu.list", "npu.broker.run",
          "audit.query"};
}

}  // namespace

Daemon::Daemon(DaemonConfig config)
    : request_metrics_(KnownMethods()),
      warn_([](const std::string& m) { std::fprintf(stderr, "cubicle serve: %s\n", m.c_str()); }),
      config_(std::move(config)),
      control_work_(asio::make_work_guard(control_)) {
  skill_stats_ = std::make_unique<SkillStats>(config_.auto_limits);
  skill_sessions_ = std::make_unique<SkillSessionTable>(
      config_.skill_sessions.max_sessions, [this](const SkillSession& session, const char* why) {
        std::optional<SkillProcess::Ended> ended = session.process->Outcome();
        LogSkillSession(session, why, ended.has_value() ? &*ended : nullptr);
        AuditSkillSessionEnd(session, ended.has_value() ? &*ended : nullptr, why);
      });
}

Daemon::~Daemon() {
  if (queue_ != nullptr) queue_->Stop();
  // Before the pools their sandboxes came from.
  skill_sessions_->CloseAll();
  control_work_.reset();
  control_.stop();  // pending timers of waits nobody will read
  // Reaping runs on the slow pool and needs the table: joined first.
  if (control_thread_.joinable()) control_thread_.join();
  reaper_.reset();  // timers of control_, which is stopped
  drain_sweep_.reset();
  slow_.join();
  sessions_.reset();
  records_.reset();
  profiles_.Clear();
}

void Daemon::Warn(const std::string& message) {
  std::lock_guard<std::mutex> lock(warn_mu_);
  warn_(message);
}

std::string Daemon::MetricsText() {
  std::map<std::string, PoolMetrics> pools;
  const std::shared_ptr<const ProfileSet> profiles = profiles_.Current();
  for (const auto& [name, served] : *profiles) {
    pools[name] = PoolMetrics{served->pool->Stats(), served->pool->config()};
  }
  ReloadMetrics reloads;
  {
    std::lock_guard<std::mutex> lock(reloads_mu_);
    reloads = ReloadMetrics{reloads_.ok, reloads_.refused};
  }
  // A gateway that does not answer in time counts as at its last answer:
  // a scrape runs on the daemon's io thread.
  egress::GatewayRegistry& registry = egress::SharedGateways();
  EgressMetrics gateways{registry.ReadCounts(kGatewayCountsWait), registry.live()};
  std::string text = PrometheusText(pools, in_flight_.load(), reloads, gateways) + request_metrics_.Text();
  if (sessions_ != nullptr) text += SessionMetricsText(sessions_->Counts());
  return text;
}

namespace {

void Signal(int fd) {
  uint64_t one = 1;
  (void)!::write(fd, &one, sizeof(one));  // an eventfd: fails only when it would overflow
}

}  // namespace

std::optional<Error> Daemon::Refusal() const {
  if (parent_gone_) return Error{kShuttingDown, "the daemon is shutting down: its parent exited", nullptr};
  if (stopping_) return Error{kShuttingDown, "the daemon is shutting down", nullptr};
  return std::nullopt;
}

Daemon::Work Daemon::HandleLine(const std::string& line, std::function<void(std::string)> reply,
                                const Origin& origin) {
  Incoming in = ParseLine(line, std::string::npos);
  if (in.entries.empty()) return {};
  auto replies = std::make_shared<LineReplies>(in.batch, in.entries.size(), std::move(reply));
  // Alone, a run of a sandbox runs where it was read: handing it to a
  // worker would put a wake-up of another thread (and of an idle CPU) on
  // its path. Only these: the reader watches stdin from the sandbox's wait
  // (WatchForTheReader), and nothing else here may block for long.
  if (origin.may_run_here && origin.scope == nullptr && !in.batch && !in.entries[0].error && RunsASandbox(in.entries[0].call) &&
      !WorkspaceLeaseOf(in.entries[0].call).has_value() && !Refusal()) {
    if (std::optional<ExecutionQueue::CallerSlot> slot = queue_->TryRunHere()) {
      Request request{std::move(in.entries[0].call), nullptr, std::make_shared<Cancellation>(), nullptr};
      request.replies = Observed(request.call, replies, line.size(), origin, &request);
      Expected<RunWork> work = Guarded([&] { return PrepareExecution(request); });
      if (!work.ok()) {
        replies->Add(ReplyTo(request.call, std::move(work).error()));
        return {};
      }
      request.call.params = nullptr;  // read: the work holds what it needs
      Defer(request);
      return Work([this, request = std::move(request), work = std::move(work).value(),
                   slot = std::move(*slot)]() mutable { RunExecution(request, work); });
    }
  }
  for (Entry& e : in.entries) {
    if (e.error) {
      if (e.error->code == kLineTooLong) request_metrics_.Rejected("line_too_long");
      replies->Add(e.NeedsReply() ? ErrorReply(e.call.id, *e.error) : "");
      continue;
    }
    if (origin.scope != nullptr) {
      rpc::ProfileOf profile_of = [this](const std::string& m, const json::value& p) { return this->ProfileOf(m, p); };
      if (std::optional<std::string> refused = ApiKeys::Refusal(*origin.scope, e.call.method, e.call.params, profile_of)) {
        request_metrics_.Rejected("forbidden");
        replies->Add(ReplyTo(e.call, Error{kForbidden, *refused, nullptr}));
        continue;
      }
    }
    Request request{std::move(e.call), nullptr, std::make_shared<Cancellation>(), origin.connection, origin.notify};
    request.replies = Observed(request.call, replies, in.batch ? 0 : line.size(), origin, &request);
    Start(std::move(request));
  }
  return {};
}

std::shared_ptr<LineReplies> Daemon::Observed(const Call& call, std::shared_ptr<LineReplies> line, size_t bytes_in,
                                              const Origin& origin, Request* request) {
  auto facts = std::make_shared<RequestFacts>(
      FactsOf(call.id, call.method, call.params, bytes_in, origin.scope != nullptr ? origin.scope->name : origin.client));
  request->request_id = facts->request_id;
  request->client = facts->client;
  const bool runs = call.method == "sandbox.run" || call.method == "session.exec";
  return LineReplies::PassThrough([this, facts, line, runs](std::string reply) {
    const absl::Duration took = absl::Now() - facts->started;
    const Outcome outcome = OutcomeOf(reply, runs);
    request_metrics_.Observe(facts->method, outcome, took);
    if (events_->On()) {
      const json::object fields = LogFields(*facts, outcome, took, reply.size());
      std::lock_guard<std::mutex> lock(events_->mu);
      events_->write("request", fields);
    }
    line->Add(std::move(reply));
  });
}

void Daemon::Start(Request request) {
  const std::string& method = request.call.method;
  auto answer = [&](const Expected<json::value>& result) { request.replies->Add(ReplyTo(request.call, result)); };
  if (RunsASandbox(request.call) || method == "npu.broker.run" || method == "skill.call" ||
      method == "skill.session.close") {
    if (std::optional<Error> refused = Refusal()) return answer(*refused);
    Expected<RunWork> work = Guarded([&] { return PrepareExecution(request); });
    if (!work.ok()) return answer(std::move(work).error());
    std::optional<WorkspaceLease> lease = WorkspaceLeaseOf(request.call);
    request.call.params = nullptr;  // read: the work holds what it needs
    if (!lease.has_value()) return Enqueue(std::move(request), std::move(work).value());
    // One writer per workspace: it waits for (or, with "wait": false,
    // refuses behind) whatever execution holds that directory now.
    return AdmitToLease(std::move(request), lease->key, lease->what, lease->wait,
                        [this, work = std::move(work).value()](
                            Request request, std::shared_ptr<WorkspaceLeases::Lease> held) mutable {
                          EnqueueDeferred(std::move(request),
                                          [work = std::move(work), held = std::move(held)](int cancel_fd) mutable {
                                            Expected<json::value> result = std::move(work)(cancel_fd);
                                            held.reset();  // free before the reply
                                            return result;
                                          });
                        });
  }
  if (method == "exec.wait") return ExecWait(std::move(request));
  if (method == "exec.follow") return ExecFollow(std::move(request));
  if (method == "session.exec") return SessionExec(std::move(request));
  if (method == "session.destroy") return SessionDestroy(std::move(request));
  if (method == "files.put" || method == "files.get" || method == "files.list" || method == "files.stat" ||
      method == "files.delete") {
    return FilesMethod(std::move(request));
  }
  if (method == "session.create") {
    // A restore reads an archive of up to the workspace's size: on the
    // slow pool, like probe.
    if (std::optional<Error> refused = Refusal()) return answer(*refused);
    Defer(request);
    asio::post(slow_, [this, request = std::move(request)]() mutable {
      Finish(request, Guarded([&] { return SessionCreate(request.call.params); }));
    });
    return;
  }
  if (method == "pool.warm") return PoolWarm(std::move(request));
  // Reading files (audit.query, up to the audit's rotated files) or
  // running a probe: on the slow pool.
  if (method == "probe" || method == "npu.list" || method == "audit.query") {
    if (std::optional<Error> refused = Refusal()) return answer(*refused);
    Defer(request);
    asio::post(slow_, [this, request = std::move(request)]() mutable {
      Finish(request, Guarded([&]() -> Expected<json::value> {
               if (request.call.method == "probe") return json::value(ProbeToJson(runtime::Probe()));
               if (request.call.method == "audit.query") return AuditQuery(request.call.params);
               return NpuList(*inventory_, request.call.params);
             }));
    });
    return;
  }
  answer(Guarded([&] { return AnswerNow(request); }));
}

Expected<json::value> Daemon::AnswerNow(const Request& request) {
  const Call& call = request.call;
  const std::string& request_id = request.request_id;
  if (call.method == "health") return Health();
  if (call.method == "pool.stats") return json::value(json::object{{"pools", PoolStatsJson()}});
  if (call.method == "pool.configure") return PoolConfigure(call.params);
  if (call.method == "skill.list") return SkillList(call.params);
  if (call.method == "skill.describe") return SkillDescribe(call.params);
  if (call.method == "skill.session.list") return SkillSessionList(call.params);
  if (call.method == "skill.session.open") {
    if (std::optional<Error> refused = Refusal()) return *refused;
    return SkillSessionOpen(call.params, request_id, request.client);
  }
  if (call.method == "environment.list") return EnvironmentList(call.params);
  if (call.method == "environment.describe") return EnvironmentDescribe(call.params);
  if (call.method == "exec.start") {
    if (std::optional<Error> refused = Refusal()) return *refused;
    return ExecStart(call.params, request_id);
  }
  if (call.method == "exec.status") return ExecStatus(call.params);
  if (call.method == "exec.list") return ExecList(call.params);
  if (call.method == "exec.logs") return ExecLogs(call.params);
  if (call.method == "session.get") return SessionGet(call.params);
  if (call.method == "session.list") return SessionList(call.params);
  if (call.method == "exec.cancel") return ExecCancel(call.params);
  return Error{kMethodNotFound, absl::StrCat("no method named '", call.method, "'"), nullptr};
}

Expected<Daemon::RunWork> Daemon::PrepareExecution(const Request& request) {
  const Call& call = request.call;
  const std::string& request_id = request.request_id;
  if (call.method == "sandbox.run") return SandboxRun(call.params, request_id);
  if (call.method == "skill.call") {
    if (IsSkillSessionCall(call)) {
      CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(call.params));
      return SkillSessionCall(*params, request);
    }
    return SkillCall(call.params, request);
  }
  if (call.method == "skill.session.close") return SkillSessionClose(call.params);
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::string job, BrokerJobParam(call.params));
  // Outside any sandbox and without a cancel (npu/broker.h): it runs to
  // its end or its own timeout.
  return RunWork([this, job](int) { return NpuBrokerRun(config_.npu.broker, job); });
}

void Daemon::Defer(const Request& request) {
  in_flight_.fetch_add(1);
  if (request.connection != nullptr) request.connection->Track(request.cancel);
}

void Daemon::Finish(Request& request, Expected<json::value> result) {
  if (request.connection != nullptr) request.connection->Forget(request.cancel.get());
  request.replies->Add(ReplyTo(request.call, result));
  in_flight_.fetch_sub(1);
}

void Daemon::Enqueue(Request request, RunWork work) {
  Defer(request);
  EnqueueDeferred(std::move(request), std::move(work));
}

void Daemon::EnqueueDeferred(Request request, RunWork work) {
  const uint64_t ticket = queue_->Reserve();
  if (!request.cancel->SetStop([queue = queue_.get(), ticket] { queue->Withdraw(ticket); })) {
    return Finish(request, Error{kShuttingDown, "cancelled before it ran", nullptr});
  }
  auto keep = std::make_shared<Request>(request);  // answers a refusal, after the job is dropped
  auto job = [this, request = std::move(request), work = std::move(work)](bool run) mutable {
    if (!run) {
      // Withdrawn: by a drain's deadline, the parent's death, or the
      // client's disconnect (then no one reads this).
      return Finish(request, Error{kShuttingDown, "withdrawn before it ran: the daemon is shutting down", nullptr});
    }
    RunExecution(request, work);
  };
  const bool queued = queue_->Submit(ticket, std::move(job));
  if (!queued) {
    keep->cancel->Clear();
    Finish(*keep, Error{kBusy,
                        absl::StrCat("busy: ", config_.max_concurrent, " executions run and ", config_.max_queue,
                                     " wait already (concurrency.max_concurrent, max_queue)"),
                        nullptr});
  }
}

void Daemon::RunExecution(Request& request, RunWork& work) {
  const bool ran = RunCancellable(*request.cancel, work, RunsASandbox(request.call),
                                  [&](Expected<json::value> result) { Finish(request, std::move(result)); });
  if (!ran) Finish(request, Error{kShuttingDown, "cancelled before it ran", nullptr});
}

bool Daemon::RunCancellable(Cancellation& cancel, RunWork& work, bool sandbox,
                            absl::FunctionRef<void(Expected<json::value>)> done) {
  // Its own cancel eventfd, held only while it runs: the stop (exec.cancel,
  // a disconnect, a drain's deadline) and CancelAll write it. The stop owns
  // it too, so a late one writes an fd that is still this one.
  auto cancel_fd = std::make_shared<UniqueFd>(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!*cancel_fd) {
    done(OutOfResources(ErrnoStatus(errno, "eventfd")));
    return true;
  }
  RunningExecutions::Tracked tracked = running_.Track(cancel_fd->get());
  if (!cancel.SetStop([cancel_fd] { Signal(cancel_fd->get()); })) return false;
  // A request that runs a sandbox holds back every pool's refill and
  // teardown until its reply is out (runtime::Pool::Hold): they would
  // share the CPUs with it, and a refill's fork of this process makes the
  // reply's writes copy-on-write faults.
  std::shared_ptr<const ProfileSet> held = profiles_.Current();  // outlives the holds
  std::vector<runtime::Pool::Hold> holds;
  if (sandbox) {
    holds.reserve(held->size());
    for (const auto& [name, served] : *held) holds.push_back(served->pool->HoldBackground());
  }
  Expected<json::value> result = Guarded([&] { return std::move(work)(cancel_fd->get()); });
  cancel.Clear();
  done(std::move(result));
  return true;
}

void Daemon::CancelEverything() {
  cut_off_ = true;
  running_.CancelAll();
  queue_->WithdrawAll();
  leases_->WithdrawAll();  // each waiter dropped answers its request
  EndExecWaits();
  skill_sessions_->CloseAll();
}

// ---------------------------------------------------------------------------
// Serve

namespace {

// Written whole or not at all (a rename): whoever waits for the file never
// reads half a number.
absl::Status WritePortFile(const std::string& path, uint16_t port) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", tmp, ")"));
  const std::string text = absl::StrCat(port, "\n");
  if (::write(fd.get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    ::unlink(tmp.c_str());
    return ErrnoStatus(errno, absl::StrCat("write(", tmp, ")"));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return ErrnoStatus(err, absl::StrCat("rename(", tmp, ", ", path, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

// Serve's io loop: the transports, the signals, the parent watch and the
// metrics, and the two ways it ends — a drain (SIGTERM, SIGINT, EOF on
// stdin) bounded by DaemonConfig::drain_timeout, or an abandonment (the
// parent died) that cancels what runs first — both followed by the same
// teardown. SIGHUP reloads the configuration and ends nothing.
class Daemon::Server {
 public:
  Server(Daemon* daemon, const ServeOptions& options)
      : daemon_(daemon),
        options_(options),
        work_(asio::make_work_guard(io_)),
        signals_(io_, SIGTERM, SIGINT, SIGHUP),
        drain_timer_(io_),
        deadline_timer_(io_),
        ready_timer_(io_) {}

  // Everything that may fail comes before the stdio transport reads a line.
  absl::Status Start() {
    CUBICLE_RETURN_IF_ERROR(ListenOnSocket());
    CUBICLE_RETURN_IF_ERROR(ListenOnHttp());
    CUBICLE_RETURN_IF_ERROR(StartMetrics());
    WatchSignals();
    CUBICLE_RETURN_IF_ERROR(WatchParent());
    StartStdio();
    StartFront();
    if (systemd::Notifying()) {
      systemd::Notify("STATUS=warming the pools");
      NotifyWhenReady();
    }
    return absl::OkStatus();
  }

  // Type=notify: READY=1 once every pool holds its min_idle (what /readyz
  // says), so that what systemd starts after the daemon finds it warm.
  void NotifyWhenReady() {
    const json::value* ready = nullptr;
    json::object readiness = daemon_->Readiness();
    ready = readiness.if_contains("ready");
    if (ready != nullptr && ready->is_bool() && ready->as_bool()) {
      systemd::Notify(absl::StrCat("READY=1\nSTATUS=serving: every pool holds its min_idle\nMAINPID=", ::getpid()));
      return;
    }
    ready_timer_.expires_after(std::chrono::milliseconds(20));
    ready_timer_.async_wait([this](boost::system::error_code ec) {
      if (!ec) NotifyWhenReady();
    });
  }

  // Until drained; then the teardown. Returns the exit status.
  int Run() {
    io_.run();
    TearDown();
    return exit_code_;
  }

 private:
  absl::Status ListenOnSocket() {
    if (options_.socket_path.empty() && options_.socket_fd < 0) return absl::OkStatus();
    absl::StatusOr<std::unique_ptr<UnixAcceptor>> made =
        options_.socket_fd >= 0 ? AdoptUnix(io_, options_.socket_fd)
                                : ListenUnix(io_, options_.socket_path, options_.socket_mode);
    if (!made.ok()) return absl::Status(made.status().code(), absl::StrCat("socket ", made.status().message()));
    const DaemonConfig& config = daemon_->config_;
    SocketLimits limits;
    limits.max_line = options_.max_line_bytes;
    limits.line_timeout = config.line_timeout;
    limits.idle_timeout = config.idle_timeout;
    limits.max_connections = daemon_->fds_.connections;
    limits.on_disconnect = config.on_disconnect;
    limits.peers = options_.keys;
    listener_ = std::make_unique<SocketListener>(daemon_, *std::move(made), limits, options_.warn);
    listener_->Start();
    return absl::OkStatus();
  }

  absl::Status ListenOnHttp() {
    if (!options_.http.has_value()) return absl::OkStatus();
    const DaemonConfig& config = daemon_->config_;
    HttpLimits limits;
    limits.max_body_bytes = options_.max_line_bytes;
    limits.read_timeout = config.line_timeout;
    limits.max_connections = daemon_->fds_.connections;
    limits.on_disconnect = config.on_disconnect;
    HttpBackend backend;
    Daemon* d = daemon_;
    backend.rpc = [d](HttpCall call) {
      (void)d->HandleLine(call.line, std::move(call.reply),
                          Origin{std::move(call.connection), false, std::move(call.notify), nullptr, call.key_name});
    };
    backend.profile_of = [d](const std::string& method, const json::value& params) { return d->ProfileOf(method, params); };
    backend.metrics = [d] { return d->MetricsText(); };
    backend.rejected = [d](absl::string_view reason) { d->CountRejected(reason); };
    backend.readiness = [d] { return d->Readiness(); };
    mcp_ = std::make_shared<McpHttp>(io_, config.mcp, McpOptionsFor(config), d, options_.warn);
    mcp_->Start();
    backend.mcp = [mcp = std::weak_ptr<McpHttp>(mcp_)](HttpRouteRequest request,
                                                       std::shared_ptr<HttpRouteAnswer> answer) {
      if (std::shared_ptr<McpHttp> live = mcp.lock()) return live->Serve(std::move(request), std::move(answer));
      answer->Respond(503, "application/json", R"({"error":"the daemon is shutting down"})");
    };
    if (options_.http->fd >= 0) {
      CUBICLE_ASSIGN_OR_RETURN(http_, HttpFront::Adopt(io_, options_.http->fd, limits, options_.keys,
                                                       std::move(backend), options_.warn));
    } else {
      CUBICLE_ASSIGN_OR_RETURN(http_, HttpFront::Start(io_, options_.http->endpoint, limits, options_.keys,
                                                       std::move(backend), options_.warn));
    }
    const std::string where = absl::StrCat(options_.http->endpoint.address().to_string(), ":", http_->port());
    options_.info(absl::StrCat("serving HTTP on ", where, options_.keys ? "" : " without authentication"));
    if (!options_.http->port_file.empty()) {
      CUBICLE_RETURN_IF_ERROR(WritePortFile(options_.http->port_file, http_->port()));
    }
    return absl::OkStatus();
  }

  absl::Status StartMetrics() {
    if (!options_.metrics.has_value()) return absl::OkStatus();
    CUBICLE_ASSIGN_OR_RETURN(metrics_, MetricsServer::Start(io_, *options_.metrics, options_.socket_mode,
                                                            [d = daemon_] { return d->MetricsText(); },
                                                            options_.warn));
    if (options_.metrics->kind == MetricsTarget::Kind::kTcp) {
      options_.info(absl::StrCat("serving metrics on ", options_.metrics->endpoint.address().to_string(), ":",
                                 metrics_->port()));
    }
    return absl::OkStatus();
  }

  void WatchSignals() {
    signals_.async_wait([this](boost::system::error_code ec, int signal) {
      if (ec) return;
      if (signal != SIGHUP) return BeginShutdown();
      Reload();
      WatchSignals();
    });
  }

  // SIGHUP: the configuration read again and applied, or refused, off the
  // io thread (reading it runs a sandbox per warm profile, and new pools
  // start fork servers). A drain waits for it to end.
  void Reload() {
    if (!options_.reload) return options_.warn("SIGHUP: this daemon has no configuration to read again");
    if (daemon_->stopping_) return options_.warn("SIGHUP ignored: the daemon is shutting down");
    reloads_running_.fetch_add(1);
    asio::post(daemon_->slow_, [this] {
      absl::Status outcome = ReloadOnce();
      daemon_->CountReload(outcome);
      if (!outcome.ok()) {
        options_.warn(absl::StrCat("configuration reload refused, the running configuration is kept: ",
                                   outcome.message()));
      }
      reloads_running_.fetch_sub(1);
    });
  }

  absl::Status ReloadOnce() {
    CUBICLE_ASSIGN_OR_RETURN(ReloadedConfig next, options_.reload());
    CUBICLE_ASSIGN_OR_RETURN(ReloadPlan plan, daemon_->Reload(next.config));
    if (options_.configure_log) {
      // Applied with the rest; a file that cannot be opened keeps the
      // lines where they went, and says so there.
      if (absl::Status log = options_.configure_log(next.config.log); !log.ok()) {
        options_.warn(absl::StrCat("reload: the log stays where it was: ", log.message()));
      }
    }
    std::string keys;
    if (next.keys != nullptr) {
      // Swapped on the io thread, between two requests or accepts; said
      // done once it is.
      std::promise<void> swapped;
      asio::post(io_, [&] {
        if (http_ != nullptr) http_->SetKeys(next.keys);
        if (listener_ != nullptr) listener_->SetPeers(next.keys);
        swapped.set_value();
      });
      swapped.get_future().wait();
      keys = absl::StrCat("; keys reloaded (", next.keys->size(), ")");
    }
    const std::string skills = daemon_->SkillsSummary();
    const std::string environments = daemon_->EnvironmentsSummary();
    options_.info(absl::StrCat("configuration reloaded: ", plan.Summary(), keys, skills.empty() ? "" : "; ", skills,
                               environments.empty() ? "" : "; ", environments));
    return absl::OkStatus();
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

  void StartFront() {
    if (!options_.front) return;
    front_ = options_.front(daemon_, [this] { asio::post(io_, [this] { BeginShutdown(); }); });
  }

  // Shutdown: stop taking requests, let in-flight ones finish — until the
  // drain's deadline, which cancels what is left — then stop.
  void BeginShutdown() {
    if (daemon_->stopping_.exchange(true)) return;
    systemd::Notify("STOPPING=1\nSTATUS=draining");
    ready_timer_.cancel();
    if (listener_) listener_->Close();
    if (http_) http_->Close();
    if (metrics_) metrics_->Stop();
    deadline_timer_.expires_after(absl::ToChronoMilliseconds(daemon_->config_.drain_timeout));
    deadline_timer_.async_wait([this](boost::system::error_code ec) {
      if (ec || daemon_->in_flight_.load() == 0) return;
      options_.warn(absl::StrCat("the drain's deadline (", absl::FormatDuration(daemon_->config_.drain_timeout),
                                 ") passed with ", daemon_->in_flight_.load(),
                                 " requests in flight: cancelling them"));
      daemon_->CancelEverything();
    });
    CheckDrained();
  }

  void CheckDrained() {
    if (daemon_->in_flight_.load() == 0 && reloads_running_.load() == 0) {
      deadline_timer_.cancel();
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
    daemon_->parent_gone_ = true;
    BeginShutdown();
    daemon_->CancelEverything();
  }

  // What ~Daemon promises, done here while the io loop's objects live.
  void TearDown() {
    front_.reset();
    stdio_.reset();
    listener_.reset();  // every connection closed
    http_.reset();
    if (mcp_) mcp_->Stop();  // MCP sessions end with the daemon; their workspaces stay, reaped by their TTL
    mcp_.reset();
    daemon_->queue_->Stop();
    // An activated socket is systemd's, which keeps it for the next start.
    if (!options_.socket_path.empty() && options_.socket_fd < 0) ::unlink(options_.socket_path.c_str());
    if (metrics_) metrics_->Finish();
    std::lock_guard<std::mutex> lock(daemon_->reload_mu_);
    daemon_->profiles_.Clear();  // every zygote killed, every cgroup removed
  }

  Daemon* daemon_;
  const ServeOptions& options_;
  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_;
  asio::signal_set signals_;
  asio::steady_timer drain_timer_;     // polls in_flight while draining
  asio::steady_timer deadline_timer_;  // the drain's deadline
  asio::steady_timer ready_timer_;     // polls readiness until READY=1 is sent
  std::unique_ptr<SocketListener> listener_;
  std::unique_ptr<HttpFront> http_;
  std::shared_ptr<McpHttp> mcp_;  // /mcp on http_
  std::unique_ptr<MetricsServer> metrics_;
  std::unique_ptr<asio::posix::stream_descriptor> parent_watch_;
  std::unique_ptr<StdioTransport> stdio_;
  std::unique_ptr<ServeFront> front_;
  std::atomic<int> reloads_running_{0};
  int exit_code_ = 0;
};

int Daemon::Serve(const ServeOptions& options) {
  {
    std::lock_guard<std::mutex> lock(warn_mu_);
    warn_ = options.warn;
  }
  {
    std::lock_guard<std::mutex> lock(events_->mu);
    events_->write = options.log_event;
    events_->enabled = options.logs_events;
  }
  Server server(this, options);
  if (absl::Status started = server.Start(); !started.ok()) {
    std::fprintf(stderr, "cubicle serve: %s\n", std::string(started.message()).c_str());
    return 1;
  }
  AnnounceCatalogs(options.info);
  return server.Run();
}

}  // namespace cubicle::rpc
