// `cubicle serve`: the JSON-RPC 2.0 daemon (DESIGN §6). One JSON object per
// line over stdio or a Unix socket; a pool of zygotes per profile behind it.
// Methods and error codes: docs/protocol.md.
//
// Only executions wait for a slot (rpc/execution_queue.h): every other
// method is answered on the thread that read its line, or, when it takes
// time (probe, npu.list), on a small control pool; exec.wait and pool.warm
// hold no thread while they wait (a timer on the control thread, or the
// execution's end, answers them).
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/json/value.hpp>

#include "absl/functional/any_invocable.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "npu/inventory.h"
#include "rpc/config.h"
#include "rpc/config_reload.h"
#include "rpc/environment_catalog.h"
#include "rpc/execution_queue.h"
#include "rpc/fd_budget.h"
#include "rpc/http_front.h"
#include "rpc/in_flight.h"
#include "rpc/jsonrpc.h"
#include "rpc/audit_log.h"
#include "rpc/metrics.h"
#include "rpc/npu_methods.h"
#include "rpc/request_log.h"
#include "rpc/running_executions.h"
#include "rpc/served_profiles.h"
#include "rpc/session_table.h"
#include "rpc/skill_catalog.h"
#include "rpc/skill_process.h"
#include "rpc/skill_results.h"
#include "rpc/skill_sessions.h"
#include "rpc/skill_static_policy.h"
#include "rpc/skill_stats.h"
#include "rpc/workspace_leases.h"
#include "runtime/capture.h"
#include "runtime/pool.h"
#include "sessions/records.h"
#include "sessions/state_dir.h"
#include "skills/catalog.h"

namespace cubicle::rpc {

class Daemon;

// A front of the caller's own beside the transports (`cubicle mcp`'s,
// rpc/mcp_stdio.h), made by ServeOptions::front.
class ServeFront {
 public:
  virtual ~ServeFront() = default;
};

// What SIGHUP reads again (docs/config.md, "Reloading"): the configuration,
// read and checked exactly as at start, and the HTTP keys.
struct ReloadedConfig {
  DaemonConfig config;
  std::shared_ptr<const ApiKeys> keys;  // null: the keys stay as they are
};

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
  // A listening Unix socket passed by socket activation (rpc/systemd.h),
  // served instead of making socket_path; its owner removes it. -1: none.
  int socket_fd = -1;
  size_t max_line_bytes = 4 << 20;
  // Prometheus text (rpc/metrics.h) on a Unix socket or in a file.
  std::optional<MetricsTarget> metrics;
  // Also HTTP/1.1 on a TCP address (rpc/http_front.h).
  struct Http {
    boost::asio::ip::tcp::endpoint endpoint;
    std::string port_file;  // the bound port is written here (port 0: an ephemeral one)
    int fd = -1;            // a listening socket passed by socket activation, served as it is
  };
  std::optional<Http> http;
  // Made once everything that may fail has started; `end` begins the
  // drain as EOF on stdin does. Destroyed first at the teardown.
  std::function<std::unique_ptr<ServeFront>(Daemon* daemon, std::function<void()> end)> front;
  // The keys file (rpc/api_keys.h): HTTP's keys (null: HTTP without
  // authentication), and the "uid" entries that let other users on the
  // socket (null: the socket's mode alone decides).
  std::shared_ptr<const ApiKeys> keys;
  // SIGHUP reads the configuration again with this and applies it, or
  // refuses it whole (Daemon::Reload); unset: SIGHUP is only logged.
  std::function<absl::StatusOr<ReloadedConfig>()> reload;
  // Where the daemon's own warnings go (the CLI logs them as JSON lines).
  std::function<void(const std::string&)> warn = [](const std::string&) {};
  // Where it says what it serves on (the bound HTTP port).
  std::function<void(const std::string&)> info = [](const std::string&) {};
  // Info-level events, one log line each: "request" per answered request
  // (rpc/request_log.h) and "pool" (runtime::PoolEvent). `logs_events`
  // says whether they are wanted now — the level can change at a reload —
  // so that nothing is built for a line not written. Null: none.
  std::function<void(absl::string_view event, const boost::json::object& fields)> log_event;
  std::function<bool()> logs_events;
  // Applies the configuration's "log" (cli::ConfigureLog) after each
  // reload that is applied; null: the setting is only read at start.
  std::function<absl::Status(const LogSettings&)> configure_log;
};

// ServeOptions::log_event and logs_events behind a lock: what the daemon
// and its pools write info-level events through.
struct DaemonEventLog {
  std::mutex mu;
  std::function<void(absl::string_view, const boost::json::object&)> write;
  std::function<bool()> enabled;
  bool On() const { return write && enabled && enabled(); }
};

// Where a line came from.
struct Origin {
  // The socket client's connection, whose end may cancel the line's
  // requests (DaemonConfig::on_disconnect); null over stdio.
  std::shared_ptr<Connection> connection;
  // Over stdio: a lone sandbox run may run on the calling thread
  // (Daemon::HandleLine).
  bool may_run_here = false;
  // Where notifications for the line's requests go (exec.follow's
  // exec.output), each a whole JSON-RPC line without "\n"; null: they are
  // dropped (an HTTP client that asked for one JSON reply).
  std::function<void(std::string)> notify;
  // What the caller may do (a socket client of another user, by its
  // "uid" entry in the keys file); null: every right.
  std::shared_ptr<const ApiKey> scope;
  // Who asked, where `scope` does not say: the HTTP key's name.
  std::string client;
};

class Daemon {
 public:
  // Raises RLIMIT_NOFILE and checks the configuration fits it
  // (rpc/fd_budget.h); builds one pool per profile (refill starts in the
  // background).
  static absl::StatusOr<std::unique_ptr<Daemon>> Create(DaemonConfig config);
  ~Daemon();  // pools are destroyed: every zygote killed, every cgroup removed

  // Handles one line; `reply` receives the reply line (without "\n"), or is
  // not called when nothing is to be sent (notifications). May call `reply`
  // from another thread, after HandleLine returns. Thread-safe.
  //
  // With `origin.may_run_here`, a line that is one sandbox run, when no
  // execution runs or waits, is not queued: its work is returned, for the
  // calling thread to run (it holds an execution slot until it has run).
  // Otherwise, and for lines answered at once, the result is empty.
  using Work = absl::AnyInvocable<void() &&>;
  Work HandleLine(const std::string& line, std::function<void(std::string)> reply, const Origin& origin = {});

  // Serves until SIGTERM/SIGINT (or EOF on stdin for the stdio transport),
  // then drains in-flight work — at most DaemonConfig::drain_timeout, then
  // cancels what is left — and shuts down, or until the parent exits
  // (ServeOptions::die_with_parent), then cancels it and shuts down the
  // same way. SIGHUP reloads the configuration (ServeOptions::reload).
  // Returns the exit status.
  int Serve(const ServeOptions& options);

  // The operator metrics, Prometheus text format (rpc/metrics.h).
  std::string MetricsText();
  // A request refused before it was read as one (RequestMetrics::Rejected).
  void CountRejected(absl::string_view reason) { request_metrics_.Rejected(reason); }

  // {"ready": bool, "pools": {NAME: {"idle", "min_idle"}}}: ready when
  // every pool holds its min_idle and the daemon is not draining (HTTP's
  // /readyz).
  boost::json::object Readiness();

  // The profile a call would run in, for a caller's profile scope
  // (rpc/api_keys.h ProfileOf): the one it names, the default, or its
  // session's; nullopt for a call that uses none. Thread-safe.
  std::optional<std::string> ProfileOf(const std::string& method, const boost::json::value& params);

  // Requests accepted and not yet answered, and exec.start executions not
  // ended.
  size_t in_flight() const { return in_flight_.load(); }

 private:
  class Server;  // Serve's io loop (rpc/daemon.cc)
  explicit Daemon(DaemonConfig config);

  // One entry of a line while it is answered (rpc/in_flight.h).
  struct Request {
    Call call;
    std::shared_ptr<LineReplies> replies;
    std::shared_ptr<Cancellation> cancel = std::make_shared<Cancellation>();
    std::shared_ptr<Connection> connection;  // null over stdio
    std::function<void(std::string)> notify;  // Origin::notify
    std::string request_id;                   // RequestFacts::request_id
    std::string client;                       // RequestFacts::client
  };
  // An execution's work once its params are read, given its cancel fd.
  using RunWork = absl::AnyInvocable<Expected<boost::json::value>(int cancel_fd) &&>;

  // Answers `request` at once, or starts what will (rpc/daemon.cc).
  void Start(Request request);
  // A deferred request: counted in flight and tracked by its connection
  // until Finish answers it.
  void Defer(const Request& request);
  void Finish(Request& request, Expected<boost::json::value> result);
  // Methods answered on the calling thread; `request_id` is the request's
  // (an execution it starts runs as that request).
  Expected<boost::json::value> AnswerNow(const Request& request);
  // The work of an execution method (sandbox.run, skill.call,
  // npu.broker.run), its params read now so that bad ones are answered at
  // once. Its sandbox runs as request `request_id` (egress tags it).
  Expected<RunWork> PrepareExecution(const Request& request);
  // Queues an execution for a slot; busy when the queue is full.
  void Enqueue(Request request, RunWork work);
  // The same for a request Defer'd already.
  void EnqueueDeferred(Request request, RunWork work);
  // Runs it on this thread (a slot held) and answers it.
  void RunExecution(Request& request, RunWork& work);
  // Runs `work` with a cancel eventfd of its own, which `cancel`'s stop
  // writes while it runs, and hands the result to `done` — for a sandbox
  // run, with every pool's background held back until `done` returns.
  // False when `cancel` was cancelled before it started: nothing ran.
  bool RunCancellable(Cancellation& cancel, RunWork& work, bool sandbox,
                      absl::FunctionRef<void(Expected<boost::json::value>)> done);
  bool RunsASandbox(const Call& call) const;
  // The lease a run's host workspace ("workspace" in its params) needs,
  // and whether the request waits for it ("wait", default true).
  struct WorkspaceLease {
    std::string key, what;
    bool wait = true;
  };
  std::optional<WorkspaceLease> WorkspaceLeaseOf(const Call& call) const { return WorkspaceLeaseOf(call.params); }
  std::optional<WorkspaceLease> WorkspaceLeaseOf(const boost::json::value& params) const;
  // The refusal of new work while draining or abandoned; nullopt otherwise.
  std::optional<Error> Refusal() const;
  // The drain's deadline passed, or the parent died: queued executions
  // are withdrawn (answered -32005), running ones killed, waits answered.
  void CancelEverything();

  // health, pool.* (rpc/pool_methods.cc).
  boost::json::value Health();
  boost::json::value PoolStatsJson();
  // The profile "profile" in `params` names (default "shell"), as served
  // now; -32004 when there is none.
  Expected<std::shared_ptr<const ServedProfile>> FindProfile(const boost::json::object& params);
  Expected<boost::json::value> PoolConfigure(const boost::json::value& params);
  // pool.warm: resized now, answered once warm or at its timeout (a
  // poll on the control thread).
  void PoolWarm(Request request);
  void PollWarm(std::shared_ptr<Request> request, std::shared_ptr<runtime::Pool> pool, absl::Time deadline);
  // Checks that the pools served (every pool's config, one of them
  // changed), with those draining, fit the fd budget; InvalidArgument
  // saying so otherwise.
  absl::Status CheckFdBudget(const std::string& name, const runtime::PoolConfig& changed);
  absl::Status CheckFdBudget(std::map<std::string, runtime::PoolConfig> serving);

  // Configuration reloads (rpc/daemon_reload.cc).
  // A pool of `profile` as `config` makes it (by fork servers of
  // config_.fork_server where there is one).
  absl::StatusOr<std::shared_ptr<runtime::Pool>> MakePool(const DaemonConfig& config, const Profile& profile);
  // Applies `next` to the profiles and pools — added ones made, removed
  // and replaced ones drained, resized ones resized in place — or refuses
  // it whole, changing nothing: a setting only a restart can change, pools
  // over the fd budget, a pool that cannot be made. One reload at a time.
  absl::StatusOr<ReloadPlan> Reload(const DaemonConfig& next);
  absl::Status RefuseRestartOnly(const DaemonConfig& next) const;
  absl::Status CheckReloadFds(const DaemonConfig& next, const ReloadPlan& plan);
  absl::StatusOr<std::map<std::string, std::shared_ptr<runtime::Pool>>> MakePools(const DaemonConfig& next,
                                                                                  const ReloadPlan& plan);
  void CommitReload(const DaemonConfig& next, const ReloadPlan& plan, const ProfileSet& running,
                    std::map<std::string, std::shared_ptr<runtime::Pool>> made);
  // Counts a reload's outcome (health, metrics).
  void CountReload(const absl::Status& outcome);
  boost::json::object ReloadsJson();
  // Destroys (on the slow pool) the draining pools no request holds any
  // more; looks again later while some still drain. On the control thread.
  void SweepDrained();

  // sandbox.run, skill.call (rpc/run_methods.cc).
  Expected<RunWork> SandboxRun(const boost::json::value& params, const std::string& request_id);
  Expected<RunWork> SkillCall(const boost::json::value& params, const Request& request);
  // The fields sandbox.run, skill.call and exec.start share: profile, argv,
  // env, cwd, timeout_ms, limits, workspace, output_bytes, network.
  // An execution's output so far (exec.status, exec.logs), as its capture
  // keeps it.
  // exec.follow's watchers are told (under `mu`, so each must only post
  // work elsewhere) whenever output is kept.
  struct LiveOutput {
    std::mutex mu;
    std::string out, err;
    std::map<uint64_t, std::function<void()>> watchers;
  };
  struct RunParams {
    std::shared_ptr<LiveOutput> live;  // optional
    // Its profile and pool, held until the execution has been answered
    // (a reload meanwhile does not take them away).
    std::shared_ptr<const ServedProfile> served;
    runtime::ExecRequest request;
    uint64_t budget = 0;
    // A spec of the run's own — a network policy narrower than the
    // profile's (params.network), an environment, a rootless session's
    // workspace: the run gets a sandbox made for it instead of a pooled one.
    std::optional<runtime::SandboxSpec> narrowed;
    // The environment it runs in (params.environment, or its skill's);
    // null: none.
    std::shared_ptr<const environments::Environment> environment;
    // skill.call by name: the skill, as the catalog held it when the call
    // was read (its script, not a path); null otherwise.
    std::shared_ptr<const skills::Skill> skill;
    // A skill whose memory limit is sized from its history (`memory:
    // auto`) and which the request did not size itself: the estimate its
    // request.limits holds.
    std::optional<MemoryEstimate> auto_memory;
    // A skill whose timeout is sized from its history (`timeout_ms: auto`)
    // and which the request did not time itself: the estimate its
    // request.timeout holds.
    std::optional<TimeEstimate> auto_timeout;
  };
  // `request_id`: the daemon's id of the request the run serves
  // (runtime::ExecRequest::request_id). With `skill`, the call runs that
  // skill: its command, and its manifest's env, limits, timeout and
  // network under what the request says (docs/skills.md, "Calling a skill").
  Expected<RunParams> ParseRunParams(const boost::json::object& params, const std::string& request_id,
                                     std::shared_ptr<const skills::Skill> skill = nullptr);
  // skill.call's work: the request to the skill's stdin, its response
  // back. A skill whose manifest lists `calls` is held open as a skill
  // process (rpc/skill_process.h) so that it can send its calls and read
  // their answers; any other gets its request from memory.
  Expected<boost::json::value> CallSkill(const RunParams& p, const SkillInvocation& call, int cancel_fd);
  Expected<boost::json::value> CallSkillProcess(const RunParams& p, const SkillInvocation& call, int cancel_fd);
  // A skill process of `p`'s command, pool and limits, whose requests are
  // answered as `caller`'s (rpc/skill_calls.cc).
  SkillProcess::Options SkillProcessOptions(const RunParams& p, std::shared_ptr<SkillCaller> caller);
  // What skill.call writes to the audit trail once the call has ended
  // (rpc/skill_audit.cc); nothing without a state directory.
  struct SkillAudit {
    std::string client;
    std::string method;
    boost::json::value argv;    // an argv call's command
    boost::json::value params;  // as the skill received them
    std::string skill_session;  // a call in a skill session: its key
    // A call a skill made: its caller's request id and skill, and depth.
    boost::json::value caller;
    std::string environment;  // "sci@3" when it ran in one
  };
  void AuditSkillCall(const SkillAudit& call, const std::string& request_id, const std::string& profile,
                      const skills::Skill* skill, const Expected<boost::json::value>& outcome, absl::Duration took);
  // A skill session's end (closed, failed, idle, lifetime): one line with
  // its process's usage over its life, which its skill's history keeps as
  // one run (rpc/skill_stats.h, SkillRunKind::kSession).
  void AuditSkillSessionEnd(const SkillSession& session, const SkillProcess::Ended* ended, const char* why);
  // Feeds `line` to its skill's history (when it names one), then appends
  // it to the trail: as a restart reads it again.
  void RecordAuditLine(boost::json::object line, bool of_skill);
  // Limits from history (rpc/skill_stats.h, docs/skills.md): an auto
  // skill's outcome says the limits it ran with ("limits", with the
  // timeout_ms when that was estimated, and on an error from a run past
  // its estimate "auto_limit_breached": "memory" or "timeout"), which the
  // audit line carries and the stats read back.
  struct AutoLimitsUsed {
    cgroups::Limits limits;  // the run's
    std::optional<MemoryEstimate> memory;
    std::optional<TimeEstimate> timeout;
  };
  static void NoteAutoLimits(const AutoLimitsUsed& used, Expected<boost::json::value>* outcome);
  static void NoteAutoLimits(const RunParams& p, Expected<boost::json::value>* outcome);
  // pool.stats' "auto_limit_skills" of a profile: how many skills it
  // serves size their memory or timeout from history.
  size_t AutoLimitSkills(const std::string& profile) const;
  std::unique_ptr<SkillStats> skill_stats_;

  // Skill sessions (rpc/skill_session_methods.cc, docs/skills.md "Skill
  // sessions"): skill.session.open, skill.call {skill_session},
  // skill.session.close, skill.session.list.
  Expected<boost::json::value> SkillSessionOpen(const boost::json::value& params, const std::string& request_id,
                                                const std::string& client);
  Expected<RunWork> SkillSessionCall(const boost::json::object& params, const Request& request);
  Expected<RunWork> SkillSessionClose(const boost::json::value& params);
  Expected<boost::json::value> SkillSessionList(const boost::json::value& params);
  bool IsSkillSessionCall(const Call& call) const;
  Expected<boost::json::value> CallInSession(SkillSession& session, const SkillInvocation& call,
                                             absl::Duration timeout, int cancel_fd);
  // A "skill_session" info line: opened, closed, failed, idle, lifetime.
  void LogSkillSession(const SkillSession& session, const char* event, const SkillProcess::Ended* ended);
  // What sends a skill's notifications to `notify` as skill.progress, with
  // the call's "progress_token" (checked here) when it has one.
  static Expected<std::function<void(const boost::json::object&)>> ProgressTo(
      const boost::json::object& call_params, std::function<void(std::string)> notify, const std::string& request_id,
      const std::string& skill_session);
  std::unique_ptr<SkillSessionTable> skill_sessions_;

  // Skills calling skills (rpc/skill_calls.cc, docs/skills.md "Calling
  // other skills"): a request a skill process wrote, answered on its stdin
  // (refused there at once, or run on a thread of the process's own).
  void OnSkillRequest(SkillProcess& process, const std::shared_ptr<SkillCaller>& caller,
                      boost::json::object request);
  // The callee's work, on a thread of its caller's process.
  Expected<boost::json::value> RunCalleeSkill(const SkillCaller& caller, std::shared_ptr<const skills::Skill> callee,
                                              const boost::json::object& params, int cancel_fd);
  Expected<boost::json::value> AuditQuery(const boost::json::value& params);
  // What runs it: its profile's pool, or a sandbox made for it.
  static runtime::Runner RunnerOf(const RunParams& p);
  // sandbox.run's work once its params are parsed; `cancel_fd` kills it.
  Expected<boost::json::value> RunToJson(const RunParams& p, const std::string& stdin_data, int cancel_fd);
  // sandbox.run with accelerator chips (rpc/npu_methods.h): cold, after the probe.
  Expected<boost::json::value> SandboxRunAccelerated(const RunParams& p, const RunChips& chips,
                                                     const std::string& stdin_data, int cancel_fd);

  // Skills (rpc/skill_methods.cc, docs/skills.md): the catalog served
  // now, which a reload replaces whole; a request keeps the skill it found.
  std::shared_ptr<const skills::Catalog> Skills() const;
  // The environments directory and then the skills directory, loaded
  // against `profiles` (a skill's environment must be one of those
  // loaded), each Python skill checked against its profile's static policy
  // (in sandboxes: this can take a moment). A reload reads them against
  // its new profiles before it commits them, so that all are served
  // together.
  struct Catalogs {
    std::shared_ptr<const skills::Catalog> skills;
    std::shared_ptr<const EnvironmentSet> environments;
  };
  Catalogs ReadCatalogs(const std::string& skills_dir, const std::string& environments_dir,
                        const std::vector<const Profile*>& profiles);
  // Serves `next` from now on; each error is warned when `warn`.
  void ServeCatalogs(Catalogs next, bool warn);
  // The skills left out, and those the static policy denies.
  void WarnSkillErrors(const skills::Catalog& catalog);
  // At start, once the log is there: what each catalog left out (warned)
  // and what it serves (`info`).
  void AnnounceCatalogs(const std::function<void(const std::string&)>& info);
  // "skills: 4 version(s) of 3 skill(s) from DIR, 1 left out (...)"; ""
  // without a skills directory.
  std::string SkillsSummary() const;
  boost::json::object SkillsHealth() const;
  Expected<boost::json::value> SkillList(const boost::json::value& params);
  Expected<boost::json::value> SkillDescribe(const boost::json::value& params);
  // The skill a skill.call names in "skill"; null for a call with argv.
  Expected<std::shared_ptr<const skills::Skill>> SkillOfCall(const boost::json::object& params);
  mutable std::mutex skills_mu_;
  std::shared_ptr<const skills::Catalog> skills_ = std::make_shared<const skills::Catalog>();
  // The static policy's checks and their cache, kept across reloads.
  StaticPolicyChecks static_checks_{SandboxedStaticCheck(absl::Seconds(10))};
  std::shared_ptr<const EnvironmentSet> environments_ = std::make_shared<const EnvironmentSet>();

  // Environments (rpc/environment_methods.cc, docs/skills.md
  // "Environments"): loaded with the skills, swapped with them.
  std::shared_ptr<const EnvironmentSet> Environments() const;
  void WarnEnvironmentErrors(const environments::Catalog& catalog);
  // "environments: 3 revision(s) of 2 environment(s) from DIR, ..."; ""
  // without an environments directory.
  std::string EnvironmentsSummary() const;
  boost::json::object EnvironmentsHealth() const;
  Expected<boost::json::value> EnvironmentList(const boost::json::value& params);
  Expected<boost::json::value> EnvironmentDescribe(const boost::json::value& params);
  // The run's environment (params.environment, or its skill's manifest's)
  // into `p`, with the spec it runs in; -32602 for one that does not read
  // or a request's with a skill that names its own, -32004 for one not
  // served.
  std::optional<Error> ReadEnvironment(const boost::json::object& params, const skills::Skill* skill, RunParams* p);
  // -32009 when a skill's requires are not met where it would run.
  std::optional<Error> CheckRequirements(const RunParams& p) const;

  // Sessions and files.* (rpc/session_methods.cc, rpc/files_methods.cc).
  // Opens the state directory (refused while another daemon holds it),
  // its records and workspaces, and finds the live sessions again.
  absl::Status OpenState();
  Expected<boost::json::value> SessionCreate(const boost::json::value& params);
  Expected<boost::json::value> SessionGet(const boost::json::value& params);
  Expected<boost::json::value> SessionList(const boost::json::value& params);
  void SessionDestroy(Request request);
  void SessionExec(Request request);
  struct SessionRun {
    std::string key;
    bool wait = true;
    bool collect = true;  // the outputs/ files it made or changed, in its result
    RunParams run;
    std::string stdin_data;
    // A managed execution's id (exec.start {session}): recorded already,
    // its end recorded by EndExecution. Empty: session.exec's own.
    std::string exec_id;
  };
  Expected<boost::json::value> RunInSession(SessionRun& run, int cancel_fd);
  // The session's workspace at /workspace: at hand-off as root, else in a
  // spec of the run's own (the cold path).
  void AttachSessionWorkspace(const std::string& workspace, RunParams* run);
  // The durable record of an execution (nothing without a state
  // directory); a failure to record is logged, never the execution's.
  void RecordExec(const sessions::ExecRecord& record);
  void RecordExecEnd(const std::string& id, const char* state, const boost::json::value& result);
  // Admits `request` to the session's workspace lease (waiting behind the
  // session's other writers, or refused at once without `wait`), then
  // calls `admitted` with the lease; a request cancelled while it waits is
  // answered here.
  void AdmitToSession(Request request, const std::string& key, bool wait,
                      absl::AnyInvocable<void(Request, std::shared_ptr<WorkspaceLeases::Lease>) &&> admitted);
  // The same for any lease: a session's, or a host workspace's ("what"
  // names it in errors).
  void AdmitToLease(Request request, const std::string& lease_key, const std::string& what, bool wait,
                    absl::AnyInvocable<void(Request, std::shared_ptr<WorkspaceLeases::Lease>) &&> admitted);
  Expected<SessionTable*> Sessions();
  void FilesMethod(Request request);
  Expected<boost::json::value> FilesAnswer(const Call& call, int root);
  // The reaper: a timer on the control thread set to the next session's
  // deadline; the archiving itself runs on the slow pool.
  void ArmReaper();
  void ReapExpired();
  // Drops ended executions older than sessions.keep_executions from the
  // records: at start and with every reaping.
  void ForgetOldRecords();
  std::optional<sessions::StateDir> state_dir_;
  // The skill audit trail (rpc/audit_log.h): with a state directory only.
  std::unique_ptr<AuditLog> audit_;
  std::unique_ptr<sessions::Records> records_;
  std::unique_ptr<SessionTable> sessions_;
  std::shared_ptr<WorkspaceLeases> leases_;
  std::unique_ptr<boost::asio::steady_timer> reaper_;
  absl::Time reaper_at_ = absl::InfiniteFuture();
  // The line's replies for one of its calls, seen on their way out by the
  // request log and metrics (rpc/request_log.h). `request` receives the
  // id and the caller the log line will carry.
  std::shared_ptr<LineReplies> Observed(const Call& call, std::shared_ptr<LineReplies> line, size_t bytes_in,
                                        const Origin& origin, Request* request);
  RequestMetrics request_metrics_;
  // Where info-level events go, set by Serve and shared with the pools'
  // event sinks, whose threads may outlive it.
  std::shared_ptr<DaemonEventLog> events_ = std::make_shared<DaemonEventLog>();
  // Where the daemon's own warnings go: stderr until Serve gives its own.
  void Warn(const std::string& message);
  std::mutex warn_mu_;
  std::function<void(const std::string&)> warn_;

  // Managed executions, exec.* (rpc/exec_methods.cc): queued, polled,
  // waited for, cancelled; an idempotency key makes a retried start
  // harmless. Not tied to the connection that started them.
  struct Execution;
  Expected<boost::json::value> ExecStart(const boost::json::value& params, const std::string& request_id);
  Expected<boost::json::value> ExecStatus(const boost::json::value& params);
  void ExecWait(Request request);
  Expected<boost::json::value> ExecCancel(const boost::json::value& params);
  Expected<boost::json::value> ExecList(const boost::json::value& params);
  // exec.status of an execution the records hold and memory does not.
  std::optional<boost::json::value> RecordedStatus(const boost::json::value& params);
  // The stream so far (running) or as kept (ended): live or recorded.
  Expected<std::string> ExecOutput(const std::string& id, bool stdout_stream, bool* ended);
  Expected<boost::json::value> ExecLogs(const boost::json::value& params);
  // exec.follow (rpc/exec_follow.cc): output as notifications while it
  // runs, then exec.status's result once it has ended.
  struct Follower;
  void ExecFollow(Request request);
  void FollowRecorded(Request request, const std::string& id, const size_t offsets[2]);
  // Sends what `f` has not sent yet; at the end (`final`), all of it.
  void Pump(Follower& f, bool final);
  Expected<std::shared_ptr<Execution>> NewExecution(const std::optional<std::string>& key,
                                                    const std::optional<std::string>& client_id,
                                                    const std::string& session);
  struct ManagedRun {
    RunParams run;
    std::string stdin_data;
  };
  Expected<RunParams> ManagedRunParams(const boost::json::object& params, const std::optional<std::string>& session,
                                       const std::string& request_id);
  // Queues it for a slot (holding `lease` until it ends); false when the
  // queue is full.
  bool SubmitManaged(const std::shared_ptr<Execution>& exec, std::shared_ptr<ManagedRun> managed,
                     std::shared_ptr<WorkspaceLeases::Lease> lease);
  // Submits it once its workspace's lease is free.
  void WaitForLease(const std::shared_ptr<Execution>& exec, std::shared_ptr<ManagedRun> managed,
                    const WorkspaceLease& lease);
  Expected<std::shared_ptr<Execution>> FindExecution(const boost::json::value& params);
  // Runs it (holding its workspace's `lease`, released before its end is
  // known to anyone) and ends it.
  void RunManaged(const std::shared_ptr<Execution>& exec, bool run, RunParams& p, const std::string& stdin_data,
                  std::shared_ptr<WorkspaceLeases::Lease> lease);
  // Ends it (done or cancelled) and answers its waiters.
  void EndExecution(const std::shared_ptr<Execution>& exec, const char* state, boost::json::value result);
  void ForgetOldExecutionsLocked();
  void EndExecWaits();  // every exec.wait answered now (CancelEverything)
  std::mutex exec_mu_;
  std::map<std::string, std::shared_ptr<Execution>> executions_;
  std::map<std::string, std::pair<std::string, absl::Time>> keys_;  // key -> (exec id, when)
  uint64_t next_exec_ = 0;
  uint64_t next_waiter_ = 0;

  // As at start: the settings only a restart changes are read here. Its
  // profiles are moved into profiles_ by Create.
  DaemonConfig config_;
  FdBudget fds_;
  ServedProfiles profiles_;
  std::mutex reload_mu_;  // one reload at a time, and none during the teardown
  struct ReloadCounts {
    uint64_t ok = 0;
    uint64_t refused = 0;
    std::string last_error;  // of the last refused reload
  };
  std::mutex reloads_mu_;
  ReloadCounts reloads_;
  std::unique_ptr<boost::asio::steady_timer> drain_sweep_;  // SweepDrained's, on control_
  std::unique_ptr<npu::Inventory> inventory_;  // npu.list and accelerated runs
  std::atomic<size_t> in_flight_{0};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> parent_gone_{false};
  std::atomic<bool> cut_off_{false};  // CancelEverything ran: waits end, nothing new runs
  RunningExecutions running_;  // cancelled all at once by CancelEverything
  std::unique_ptr<ExecutionQueue> queue_;
  // The control thread: timers of exec.wait and pool.warm.
  boost::asio::io_context control_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> control_work_;
  std::thread control_thread_;
  // probe and npu.list, which run real sandboxes or commands: never on an
  // execution slot, never on a transport's thread.
  boost::asio::thread_pool slow_{2};
};

}  // namespace cubicle::rpc
