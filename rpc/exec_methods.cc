// exec.start, exec.status, exec.wait, exec.cancel (docs/protocol.md):
// managed executions, queued for a slot and polled, waited for or
// cancelled by id; an idempotency key makes a retried start harmless.
// Nothing here waits for a slot: exec.start answers with the id at once,
// exec.wait is answered by the execution's end or a timer.
#include <chrono>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/json/object.hpp>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"
#include "rpc/execution.h"
#include "rpc/on_drop.h"
#include "rpc/npu_methods.h"
#include "sessions/ids.h"
#include "sessions/workspace_store.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

constexpr absl::Duration kKeyWindow = absl::Seconds(60);
constexpr absl::Duration kKeepFinished = absl::Minutes(10);
constexpr size_t kMaxFinished = 1024;

}  // namespace

void Daemon::ForgetOldExecutionsLocked() {
  const absl::Time now = absl::Now();
  std::erase_if(keys_, [&](const auto& kv) { return now - kv.second.second > kKeyWindow; });
  size_t finished = 0;
  for (const auto& [id, e] : executions_) finished += e->ended();
  std::erase_if(executions_, [&](const auto& kv) {
    const Execution& e = *kv.second;
    bool drop = e.ended() && (now - e.finished > kKeepFinished || finished > kMaxFinished);
    if (drop) --finished;
    return drop;
  });
}

Expected<std::shared_ptr<Daemon::Execution>> Daemon::NewExecution(const std::optional<std::string>& key,
                                                                   const std::optional<std::string>& client_id,
                                                                   const std::string& session) {
  auto exec = std::make_shared<Execution>();
  exec->session = session;
  // ULIDs: they sort by creation and never repeat, across restarts too, so
  // a client's saved id never names another job.
  exec->id = client_id.value_or(sessions::NewId('e'));
  std::lock_guard<std::mutex> lock(exec_mu_);
  ForgetOldExecutionsLocked();
  if (key.has_value()) {
    auto it = keys_.find(*key);
    if (it != keys_.end()) {
      return Error{kDuplicateKey,
                   absl::StrCat("key '", *key, "' started execution ", it->second.first, " less than 60 s ago"),
                   json::object{{"exec_id", it->second.first}}};
    }
  }
  if (client_id.has_value() && executions_.count(*client_id)) {
    return Error{kDuplicateKey, absl::StrCat("execution '", *client_id, "' exists already"),
                 json::object{{"exec_id", *client_id}}};
  }
  if (records_ != nullptr) {
    // The records hold the keys and ids of executions before a restart.
    sessions::ExecRecord record;
    record.id = exec->id;
    record.key = key.value_or("");
    record.session = session;
    record.state = "queued";
    record.created_ms = absl::ToUnixMillis(exec->created);
    if (client_id.has_value()) {
      absl::StatusOr<std::optional<sessions::ExecRecord>> old = records_->GetExec(*client_id);
      if (old.ok() && old->has_value()) {
        return Error{kDuplicateKey, absl::StrCat("execution '", *client_id, "' exists already"),
                     json::object{{"exec_id", *client_id}}};
      }
    }
    absl::StatusOr<std::string> holder =
        record.key.empty() ? absl::StatusOr<std::string>(record.id)
                           : records_->PutExecIfKeyFree(record, record.created_ms - absl::ToInt64Milliseconds(kKeyWindow));
    if (record.key.empty()) RecordExec(record);
    if (holder.ok() && *holder != record.id) {
      return Error{kDuplicateKey, absl::StrCat("key '", *key, "' started execution ", *holder, " less than 60 s ago"),
                   json::object{{"exec_id", *holder}}};
    }
    if (!holder.ok()) Warn(absl::StrCat("recording execution ", record.id, ": ", holder.status().message()));
  }
  executions_[exec->id] = exec;
  if (key.has_value()) keys_[*key] = {exec->id, absl::Now()};
  return exec;
}

void Daemon::RecordExec(const sessions::ExecRecord& record) {
  if (records_ == nullptr) return;
  if (absl::Status s = records_->PutExec(record); !s.ok()) {
    Warn(absl::StrCat("recording execution ", record.id, ": ", s.message()));
  }
}

void Daemon::RecordExecEnd(const std::string& id, const char* state, const json::value& result) {
  if (records_ == nullptr) return;
  if (absl::Status s = records_->EndExec(id, state, absl::ToUnixMillis(absl::Now()), json::serialize(result));
      !s.ok()) {
    Warn(absl::StrCat("recording the end of execution ", id, ": ", s.message()));
  }
}

// exec.start's run params: as sandbox.run's, or, in a session, as
// session.exec's (its profile, its workspace at /workspace).
Expected<Daemon::RunParams> Daemon::ManagedRunParams(const json::object& params,
                                                     const std::optional<std::string>& session,
                                                     const std::string& request_id) {
  json::object run = params;
  for (const char* own : {"exec_id", "key", "stdin", "wait", "session"}) run.erase(own);
  if (!session.has_value()) return ParseRunParams(run, request_id);
  CUBICLE_RPC_ASSIGN_OR_RETURN(SessionTable * table, Sessions());
  absl::StatusOr<SessionInfo> info = table->Get(*session);
  if (!info.ok()) return Error{kNotFound, std::string(info.status().message()), nullptr};
  if (run.contains("profile") || run.contains("workspace")) {
    return InvalidParam("params", "session", "a session's executions run in its profile and workspace");
  }
  run["profile"] = info->profile;
  if (!run.contains("output_bytes")) run["output_bytes"] = config_.sessions.output_bytes;
  if (!run.contains("cwd")) run["cwd"] = "/workspace";
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ParseRunParams(run, request_id));
  AttachSessionWorkspace(info->workspace, &p);
  return p;
}

Expected<json::value> Daemon::ExecStart(const json::value& raw, const std::string& request_id) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "argv", "env", "cwd", "stdin", "timeout_ms", "output_bytes", "key",
                                         "exec_id", "limits", "workspace", "network", "breakers", "session", "wait",
                                         "environment"})) {
    return *bad;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> session, GetString(*params, "session", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ManagedRunParams(*params, session, request_id));
  if (auto refused = RefuseAccelerated(p.served->profile, "exec.start")) return *refused;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stdin_text, GetString(*params, "stdin", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "key", false));
  // A client's own id for the execution is its idempotency key as well.
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> client_id, GetString(*params, "exec_id", false));
  if (client_id.has_value()) {
    if (absl::Status valid = sessions::ValidateSessionKey(*client_id); !valid.ok()) {
      return InvalidParam("params", "exec_id", "must be 1 to 128 of [A-Za-z0-9._-], not starting with '.'");
    }
    if (!key.has_value()) key = client_id;
  }
  // The workspace's lease is held for the execution's whole life: taken
  // before it queues for a slot (waiting behind the workspace's other
  // writers, or refused at once with "wait": false).
  std::optional<WorkspaceLease> lease;
  if (session.has_value()) {
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> wait, GetBool(*params, "wait", false));
    lease = WorkspaceLease{absl::StrCat("session:", *session), absl::StrCat("session ", *session), wait.value_or(true)};
  } else {
    lease = WorkspaceLeaseOf(raw);
  }
  if (lease.has_value() && !lease->wait && leases_->Held(lease->key)) {
    return Error{kBusy, absl::StrCat(lease->what, " is in use by another execution (wait: false)"), nullptr};
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<Execution> exec, NewExecution(key, client_id, session.value_or("")));
  p.live = exec->live;
  // In flight (a drain waits for it) until it ends.
  in_flight_.fetch_add(1);
  auto managed = std::make_shared<ManagedRun>(ManagedRun{std::move(p), stdin_text.value_or("")});
  if (!lease.has_value()) {
    if (!SubmitManaged(exec, managed, nullptr)) {
      in_flight_.fetch_sub(1);
      std::lock_guard<std::mutex> lock(exec_mu_);
      executions_.erase(exec->id);
      if (key.has_value()) keys_.erase(*key);  // nothing started: a retry may use it
      RecordExecEnd(exec->id, "cancelled", json::object{{"error", "busy: not queued"}});
      return Error{kBusy,
                   absl::StrCat("busy: ", config_.max_concurrent, " executions run and ", config_.max_queue,
                                " wait already (concurrency.max_concurrent, max_queue)"),
                   nullptr};
    }
    return json::value(json::object{{"exec_id", exec->id}, {"state", "queued"}});
  }
  WaitForLease(exec, managed, *lease);
  return json::value(json::object{{"exec_id", exec->id}, {"state", "queued"}});
}

bool Daemon::SubmitManaged(const std::shared_ptr<Execution>& exec, std::shared_ptr<ManagedRun> managed,
                           std::shared_ptr<WorkspaceLeases::Lease> lease) {
  // Queued for a slot like any execution. Cancel withdraws it while it waits.
  const uint64_t ticket = queue_->Reserve();
  if (!exec->cancel->SetStop([queue = queue_.get(), ticket] { queue->Withdraw(ticket); })) {
    EndExecution(exec, "cancelled", nullptr);
    return true;
  }
  return queue_->Submit(ticket, [this, exec, managed, lease = std::move(lease)](bool run) mutable {
    RunManaged(exec, run, managed->run, managed->stdin_data, std::move(lease));
  });
}

void Daemon::WaitForLease(const std::shared_ptr<Execution>& exec, std::shared_ptr<ManagedRun> managed,
                          const WorkspaceLease& lease) {
  // Dropped uncalled (cancelled while it waited, the drain's deadline):
  // it never ran.
  auto unstarted = std::make_shared<OnDrop>([this, exec] { EndExecution(exec, "cancelled", nullptr); });
  auto ticket = std::make_shared<std::atomic<uint64_t>>(0);
  (void)exec->cancel->SetStop([this, key = lease.key, ticket] {
    if (const uint64_t t = ticket->load(); t != 0) leases_->Withdraw(key, t);
  });
  WorkspaceLeases::Start start = [this, exec, managed, unstarted](std::shared_ptr<WorkspaceLeases::Lease> held) {
    unstarted->Disarm();
    if (!SubmitManaged(exec, managed, std::move(held))) {
      EndExecution(exec, "cancelled", json::object{{"error", "busy: the queue was full once its workspace was free"}});
    }
  };
  std::optional<uint64_t> queued = leases_->Acquire(lease.key, lease.wait, start);
  if (!queued.has_value()) {
    // Taken between the check and now, and the request said not to wait.
    unstarted->Disarm();
    EndExecution(exec, "cancelled", json::object{{"error", absl::StrCat(lease.what, " is in use (wait: false)")}});
    return;
  }
  ticket->store(*queued);
}

void Daemon::RunManaged(const std::shared_ptr<Execution>& exec, bool run, RunParams& p, const std::string& stdin_data,
                        std::shared_ptr<WorkspaceLeases::Lease> lease) {
  if (!run) {
    lease.reset();
    return EndExecution(exec, "cancelled", nullptr);  // withdrawn: it never ran
  }
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    exec->state = "running";
  }
  if (records_ != nullptr) (void)records_->SetExecState(exec->id, "running", absl::ToUnixMillis(absl::Now()));
  RunWork work = [&](int cancel_fd) -> Expected<json::value> {
    if (exec->session.empty()) return RunToJson(p, stdin_data, cancel_fd);
    SessionRun in_session{exec->session, true, true, std::move(p), stdin_data, exec->id};
    return RunInSession(in_session, cancel_fd);
  };
  json::value outcome;
  const bool ran = RunCancellable(*exec->cancel, work, /*sandbox=*/true, [&](Expected<json::value> result) {
    outcome = result.ok() ? std::move(result).value()
                          : json::value(json::object{{"error", json::object{{"code", result.error().code},
                                                                             {"message", result.error().message}}}});
  });
  lease.reset();  // its workspace is free before anyone hears it ended
  // Not ran: cancelled between its turn and its start.
  EndExecution(exec, ran ? "done" : "cancelled", std::move(outcome));
}

void Daemon::EndExecution(const std::shared_ptr<Execution>& exec, const char* state, json::value result) {
  std::map<uint64_t, absl::AnyInvocable<void(json::value) &&>> waiters;
  json::value status;
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    exec->state = state;
    exec->result = std::move(result);
    exec->finished = absl::Now();
    waiters.swap(exec->waiters);
    status = exec->StatusJson();
  }
  RecordExecEnd(exec->id, state, exec->result);
  for (auto& [id, answer] : waiters) std::move(answer)(status);
  in_flight_.fetch_sub(1);
}

Expected<std::shared_ptr<Daemon::Execution>> Daemon::FindExecution(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"exec_id", "timeout_ms"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> id, GetString(*params, "exec_id", true));
  std::lock_guard<std::mutex> lock(exec_mu_);
  auto it = executions_.find(*id);
  if (it == executions_.end()) return Error{kNotFound, absl::StrCat("no execution '", *id, "'"), nullptr};
  return it->second;
}

Expected<json::value> Daemon::ExecStatus(const json::value& raw) {
  Expected<std::shared_ptr<Execution>> found = FindExecution(raw);
  if (!found.ok()) {
    // Not in memory: ended long ago, or before a restart.
    if (found.error().code == kNotFound) {
      if (std::optional<json::value> recorded = RecordedStatus(raw)) return *recorded;
    }
    return std::move(found).error();
  }
  std::lock_guard<std::mutex> lock(exec_mu_);
  return (*found)->StatusJson();
}

void Daemon::ExecWait(Request request) {
  Expected<std::shared_ptr<Execution>> found = FindExecution(request.call.params);
  int64_t timeout_ms = 30000;
  if (found.ok()) {
    if (const json::object* params = request.call.params.if_object(); params != nullptr) {
      Expected<std::optional<int64_t>> t = GetInt64(*params, "timeout_ms", false, 0, 600000);
      if (!t.ok()) found = t.error();
      if (t.ok()) timeout_ms = t->value_or(timeout_ms);
    }
  }
  if (!found.ok()) return request.replies->Add(ReplyTo(request.call, std::move(found).error()));
  std::shared_ptr<Execution> exec = *std::move(found);
  auto timer = std::make_shared<asio::steady_timer>(control_);
  std::unique_lock<std::mutex> lock(exec_mu_);
  // Ended, or the daemon ends its waits (a drain's deadline): at once.
  if (exec->ended() || timeout_ms == 0 || cut_off_) {
    json::value status = exec->StatusJson();
    lock.unlock();
    return request.replies->Add(ReplyTo(request.call, std::move(status)));
  }
  Defer(request);
  const uint64_t waiter = ++next_waiter_;
  auto shared = std::make_shared<Request>(std::move(request));
  exec->waiters[waiter] = [this, shared, timer](json::value status) mutable {
    // Its timer goes with it; cancelled on the control thread, which alone
    // runs its handler.
    asio::post(control_, [timer] { timer->cancel(); });
    Finish(*shared, std::move(status));
  };
  // The timeout, or the request's cancel (its client left, the daemon
  // ends its waits), takes the waiter out and answers with the state now.
  auto take = [this, exec, waiter]() {
    std::unique_lock<std::mutex> lock(exec_mu_);
    auto it = exec->waiters.find(waiter);
    if (it == exec->waiters.end()) return;  // answered already
    auto answer = std::move(it->second);
    exec->waiters.erase(it);
    json::value status = exec->StatusJson();
    lock.unlock();
    std::move(answer)(std::move(status));
  };
  lock.unlock();
  if (!shared->cancel->SetStop(take)) return take();  // cancelled already
  // Armed on the control thread, where its cancel runs too.
  asio::post(control_, [timer, timeout_ms, take] {
    timer->expires_after(std::chrono::milliseconds(timeout_ms));
    timer->async_wait([take](boost::system::error_code ec) {
      if (!ec) take();
    });
  });
}

Expected<json::value> Daemon::ExecCancel(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<Execution> exec, FindExecution(raw));
  // Queued: withdrawn now, it never runs (state "cancelled" before this
  // answers). Running: its sandbox is killed (reason "killed" soon).
  // Ended: nothing to do.
  exec->cancel->Cancel();
  std::lock_guard<std::mutex> lock(exec_mu_);
  return json::value(json::object{{"exec_id", exec->id}, {"state", exec->state}});
}

void Daemon::EndExecWaits() {
  std::vector<std::shared_ptr<Execution>> all;
  {
    std::lock_guard<std::mutex> lock(exec_mu_);
    for (const auto& [id, exec] : executions_) all.push_back(exec);
  }
  for (const std::shared_ptr<Execution>& exec : all) {
    std::map<uint64_t, absl::AnyInvocable<void(json::value) &&>> waiters;
    json::value status;
    {
      std::lock_guard<std::mutex> lock(exec_mu_);
      waiters.swap(exec->waiters);
      status = exec->StatusJson();
    }
    for (auto& [id, answer] : waiters) std::move(answer)(status);
  }
}

}  // namespace cubicle::rpc
