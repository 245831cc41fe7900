// session.create, session.get, session.list, session.destroy, session.exec
// (docs/protocol.md, "Sessions"), and the reaper. Executions in a session
// hold its workspace lease (rpc/workspace_leases.h) from admission to
// their end, so they run one at a time and in order; archive and restore
// I/O run on the slow pool, never on a transport's or the control thread.
#include <unistd.h>

#include <chrono>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "rpc/daemon.h"
#include "rpc/on_drop.h"
#include "sessions/ids.h"
#include "sessions/workspace_files.h"

namespace cubicle::rpc {
namespace asio = boost::asio;
namespace json = boost::json;

namespace {

// Ended executions kept in the records at most, whatever their age.
constexpr size_t kKeepRecordedExecutions = 100'000;

std::string LeaseKey(const std::string& session) { return absl::StrCat("session:", session); }

int64_t Ms(absl::Time t) { return absl::ToUnixMillis(t); }

json::object InfoJson(const SessionInfo& info) {
  json::object out{{"session", info.key},
                   {"profile", info.profile},
                   {"created_ms", Ms(info.created)},
                   {"last_used_ms", Ms(info.last_used)},
                   {"idle_ttl_ms", absl::ToInt64Milliseconds(info.idle_ttl)},
                   {"expires_ms", Ms(std::min(info.last_used + info.idle_ttl, info.expires))},
                   {"workspace", json::object{{"size_bytes", info.workspace_bytes}, {"capped", info.capped}}},
                   {"executing", info.executing}};
  return out;
}

// absl codes of the session table as JSON-RPC errors.
Error SessionError(const absl::Status& s) {
  if (absl::IsNotFound(s)) return Error{kNotFound, std::string(s.message()), nullptr};
  if (absl::IsInvalidArgument(s)) return Error{kInvalidParams, std::string(s.message()), nullptr};
  if (absl::IsResourceExhausted(s)) return Error{kLimitExceeded, std::string(s.message()), nullptr};
  if (absl::IsFailedPrecondition(s) || absl::IsUnavailable(s)) return Error{kBusy, std::string(s.message()), nullptr};
  return Error{kInternalError, std::string(s.message()), nullptr};
}

json::value OutputsJson(const sessions::Outputs& outputs) {
  json::array files, refused;
  for (const sessions::FileInfo& f : outputs.files) {
    files.push_back(json::object{{"path", f.path}, {"size", f.size}, {"sha256", f.sha256}});
  }
  for (const auto& [path, why] : outputs.refused) refused.push_back(json::object{{"path", path}, {"reason", why}});
  return json::object{{"files", std::move(files)}, {"refused", std::move(refused)}};
}

}  // namespace

absl::Status Daemon::OpenState() {
  const SessionsConfig& c = config_.sessions;
  if (!c.enabled()) return absl::OkStatus();
  CUBICLE_ASSIGN_OR_RETURN(sessions::StateDir dir, sessions::StateDir::Open(c.state_dir));
  state_dir_.emplace(std::move(dir));
  CUBICLE_ASSIGN_OR_RETURN(records_, sessions::Records::Open(c.state_dir + "/records.db"));
  CUBICLE_ASSIGN_OR_RETURN(audit_, AuditLog::Open(c.state_dir + "/audit"));
  // The skills' histories (limits from history) as the trail left them.
  if (absl::Status st = RebuildSkillStats(*audit_, kSkillStatsRebuildLines, skill_stats_.get()); !st.ok()) {
    Warn(absl::StrCat("skill history: reading the audit trail: ", st.message()));
  }
  const bool root = ::geteuid() == 0;
  CUBICLE_ASSIGN_OR_RETURN(sessions::WorkspaceStore store,
                           sessions::WorkspaceStore::Open(c.state_dir + "/workspaces", /*mount_tmpfs=*/root));
  std::unique_ptr<sessions::ArchiveStore> archive;
  if (c.archive) {
    CUBICLE_ASSIGN_OR_RETURN(std::unique_ptr<sessions::LocalArchiveStore> local,
                             sessions::LocalArchiveStore::Create(c.state_dir + "/archives"));
    archive = std::move(local);
  }
  // The workspace belongs to the operator's owner, else to the sandbox
  // user's host ids (attached then without an idmap); rootless, to us.
  std::shared_ptr<const ServedProfile> sessions_profile = profiles_.Find(c.default_profile);
  const runtime::SandboxSpec& spec = sessions_profile->profile.spec;
  uid_t uid = ::geteuid();
  gid_t gid = ::getegid();
  if (c.workspace_uid != static_cast<uid_t>(-1)) {
    uid = c.workspace_uid;
    gid = c.workspace_gid;
  } else if (root) {
    uid = spec.host_uid.value_or(runtime::kDefaultHostIdBase + spec.uid);
    gid = spec.host_gid.value_or(runtime::kDefaultHostIdBase + spec.gid);
  }
  sessions_ = std::make_unique<SessionTable>(c, std::move(store), std::move(archive), records_.get(), uid, gid,
                                             [this](const std::string& m) { Warn(m); });
  CUBICLE_ASSIGN_OR_RETURN(size_t lost, records_->MarkUnfinishedLost(
                                            Ms(absl::Now()), R"json({"reason":"lost","detail":"the daemon stopped while it ran"})json"));
  if (lost > 0) Warn(absl::StrCat(lost, " execution(s) were running when the daemon stopped: now 'lost'"));
  ForgetOldRecords();
  return sessions_->Recover();
}

Expected<SessionTable*> Daemon::Sessions() {
  if (sessions_ == nullptr) {
    return Error{kInvalidRequest,
                 "sessions need a state directory: set sessions.state_dir in the config or pass --state-dir",
                 nullptr};
  }
  return sessions_.get();
}

Expected<json::value> Daemon::SessionCreate(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(SessionTable * table, Sessions());
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"session", "profile", "idle_ttl_ms", "workspace_bytes"})) return *bad;
  const SessionsConfig& c = config_.sessions;
  SessionRequest request;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "session", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> profile, GetString(*params, "profile", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> ttl, GetInt64(*params, "idle_ttl_ms", false, 1000,
                                                                    absl::ToInt64Milliseconds(c.max_idle_ttl)));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> bytes,
                               GetInt64(*params, "workspace_bytes", false, 1 << 20,
                                        static_cast<int64_t>(c.max_workspace_bytes)));
  request.key = key.value_or("");
  request.profile = profile.value_or(c.default_profile);
  if (profiles_.Find(request.profile) == nullptr) {
    return Error{kNotFound, absl::StrCat("no profile named '", request.profile, "'"), nullptr};
  }
  request.idle_ttl = ttl ? absl::Milliseconds(*ttl) : c.idle_ttl;
  request.workspace_bytes = bytes ? static_cast<uint64_t>(*bytes) : c.workspace_bytes;
  absl::StatusOr<std::pair<SessionInfo, bool>> made = table->Create(request);
  if (!made.ok()) return SessionError(made.status());
  json::object out = InfoJson(made->first);
  out["created"] = made->second;
  out["restored"] = made->first.restored;
  if (!made->first.restore_error.empty()) out["restore_error"] = made->first.restore_error;
  ArmReaper();
  return json::value(std::move(out));
}

Expected<json::value> Daemon::SessionGet(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(SessionTable * table, Sessions());
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"session"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "session", true));
  absl::StatusOr<SessionInfo> info = table->Get(*key);
  if (!info.ok()) return SessionError(info.status());
  json::object out = InfoJson(*info);
  out["queued"] = leases_->Waiting(LeaseKey(*key));
  return json::value(std::move(out));
}

Expected<json::value> Daemon::SessionList(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(SessionTable * table, Sessions());
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {})) return *bad;
  json::array out;
  for (const SessionInfo& info : table->List()) out.push_back(InfoJson(info));
  return json::value(json::object{{"sessions", std::move(out)}, {"max_sessions", config_.sessions.max_sessions}});
}

void Daemon::SessionDestroy(Request request) {
  Expected<std::pair<std::string, bool>> parsed = Guarded([&]() -> Expected<std::pair<std::string, bool>> {
    CUBICLE_RPC_ASSIGN_OR_RETURN(SessionTable * table, Sessions());
    (void)table;
    CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(request.call.params));
    if (auto bad = RejectUnknown(*params, {"session", "archive"})) return *bad;
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "session", true));
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> archive, GetBool(*params, "archive", false));
    return std::make_pair(*key, archive.value_or(true));
  });
  if (!parsed.ok()) return request.replies->Add(ReplyTo(request.call, std::move(parsed).error()));
  auto [key, archive] = std::move(parsed).value();
  // Not while an execution holds the workspace: destroy takes the lease
  // itself, refusing rather than waiting behind a long run.
  Defer(request);
  WorkspaceLeases::Start destroy = [this, request, key, archive](std::shared_ptr<WorkspaceLeases::Lease> lease) mutable {
    asio::post(slow_, [this, request = std::move(request), key, archive, lease = std::move(lease)]() mutable {
      absl::Status done = sessions_->Destroy(key, archive);
      lease.reset();
      if (!done.ok()) return Finish(request, SessionError(done));
      Finish(request, json::value(json::object{{"session", key}, {"destroyed", true}, {"archived", archive}}));
    });
  };
  if (!leases_->Acquire(LeaseKey(key), /*wait=*/false, destroy).has_value()) {
    Finish(request, Error{kBusy, absl::StrCat("session ", key, " is executing; cancel its executions first"),
                          nullptr});
  }
}

void Daemon::AttachSessionWorkspace(const std::string& workspace, RunParams* run) {
  if (::geteuid() == 0) {
    run->request.workspace = workspace;  // attached at hand-off to a pooled zygote
    return;
  }
  // Rootless, a zygote cannot attach a mount at hand-off (runtime/zygote.h):
  // the workspace is a bind of the sandbox's own spec, on the cold path.
  runtime::SandboxSpec spec = run->narrowed.value_or(run->served->profile.spec);
  rootfs::MountOp bind;
  bind.kind = rootfs::MountKind::kBind;
  bind.source = workspace;
  bind.dest = "/workspace";
  spec.mounts.push_back(std::move(bind));
  run->narrowed = std::move(spec);
}

void Daemon::AdmitToLease(Request request, const std::string& lease_key, const std::string& what, bool wait,
                          absl::AnyInvocable<void(Request, std::shared_ptr<WorkspaceLeases::Lease>) &&> admitted) {
  Defer(request);
  // What answers it if it is dropped: the request without its params,
  // which may hold megabytes (files.put) that need not be copied.
  auto keep = std::make_shared<Request>(
      Request{Call{request.call.id, request.call.notification, request.call.method, nullptr}, request.replies,
              request.cancel, request.connection, nullptr, request.request_id, request.client});
  auto unanswered = std::make_shared<OnDrop>([this, keep, what] {
    Finish(*keep, Error{kShuttingDown, absl::StrCat("cancelled while it waited for ", what), nullptr});
  });
  // While it waits, a cancel (exec.cancel, a disconnect, a drain) takes it
  // out of the lease's queue, which drops it, which answers it; once
  // admitted, whoever holds it next sets the stop.
  auto ticket = std::make_shared<std::atomic<uint64_t>>(0);
  if (!request.cancel->SetStop([this, lease_key, ticket] {
        if (const uint64_t t = ticket->load(); t != 0) leases_->Withdraw(lease_key, t);
      })) {
    unanswered->Disarm();
    return Finish(request, Error{kShuttingDown, "cancelled before it ran", nullptr});
  }
  WorkspaceLeases::Start start = [request = std::move(request), unanswered, admitted = std::move(admitted)](
                                     std::shared_ptr<WorkspaceLeases::Lease> lease) mutable {
    unanswered->Disarm();
    std::move(admitted)(std::move(request), std::move(lease));
  };
  std::optional<uint64_t> queued = leases_->Acquire(lease_key, wait, start);
  if (!queued.has_value()) {
    unanswered->Disarm();
    keep->cancel->Clear();
    return Finish(*keep, Error{kBusy, absl::StrCat(what, " is in use by another execution (wait: false)"), nullptr});
  }
  ticket->store(*queued);
}

void Daemon::AdmitToSession(Request request, const std::string& key, bool wait,
                            absl::AnyInvocable<void(Request, std::shared_ptr<WorkspaceLeases::Lease>) &&> admitted) {
  AdmitToLease(std::move(request), LeaseKey(key), absl::StrCat("session ", key), wait, std::move(admitted));
}

void Daemon::SessionExec(Request request) {
  using Prepared = SessionRun;
  Expected<Prepared> prepared = Guarded([&]() -> Expected<Prepared> {
    if (std::optional<Error> refused = Refusal()) return *refused;
    CUBICLE_RPC_ASSIGN_OR_RETURN(SessionTable * table, Sessions());
    CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(request.call.params));
    if (auto bad = RejectUnknown(*params, {"session", "argv", "env", "cwd", "stdin", "timeout_ms", "limits",
                                           "output_bytes", "network", "breakers", "wait", "collect_outputs",
                                           "environment"})) {
      return *bad;
    }
    Prepared p;
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "session", true));
    p.key = *key;
    absl::StatusOr<SessionInfo> info = table->Get(p.key);
    if (!info.ok()) return SessionError(info.status());
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> wait, GetBool(*params, "wait", false));
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> collect, GetBool(*params, "collect_outputs", false));
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stdin_text, GetString(*params, "stdin", false));
    p.wait = wait.value_or(true);
    p.collect = collect.value_or(true);
    p.stdin_data = stdin_text.value_or("");
    // The run's params as sandbox.run reads them, in the session's profile,
    // with its workspace attached as the cwd.
    json::object run = *params;
    for (const char* own : {"session", "wait", "collect_outputs", "stdin"}) run.erase(own);
    run["profile"] = info->profile;
    if (run.find("output_bytes") == run.end()) run["output_bytes"] = config_.sessions.output_bytes;
    if (run.find("cwd") == run.end()) run["cwd"] = "/workspace";
    CUBICLE_RPC_ASSIGN_OR_RETURN(p.run, ParseRunParams(run, request.request_id));
    AttachSessionWorkspace(info->workspace, &p.run);
    return p;
  });
  if (!prepared.ok()) return request.replies->Add(ReplyTo(request.call, std::move(prepared).error()));
  request.call.params = nullptr;
  auto p = std::make_shared<Prepared>(std::move(prepared).value());
  AdmitToSession(std::move(request), p->key, p->wait,
                 [this, p](Request request, std::shared_ptr<WorkspaceLeases::Lease> lease) mutable {
                   RunWork work = [this, p, lease = std::move(lease)](int cancel_fd) mutable {
                     Expected<json::value> result = RunInSession(*p, cancel_fd);
                     lease.reset();  // free before the reply: the client may go on at once
                     return result;
                   };
                   EnqueueDeferred(std::move(request), std::move(work));
                 });
}

Expected<json::value> Daemon::RunInSession(SessionRun& s, int cancel_fd) {
  absl::StatusOr<SessionInfo> begun = sessions_->BeginExecution(s.key);
  if (!begun.ok()) return SessionError(begun.status());
  // session.exec records itself; a managed one (exec.start) is recorded
  // from its start to its end by the exec.* code.
  const bool own_record = s.exec_id.empty();
  sessions::ExecRecord record;
  record.id = own_record ? sessions::NewId('e') : s.exec_id;
  record.session = s.key;
  record.state = "running";
  record.created_ms = record.started_ms = Ms(absl::Now());
  if (own_record) RecordExec(record);
  // What outputs/ held before, to tell what this execution made.
  absl::StatusOr<int> root = sessions_->Root(s.key);
  std::optional<sessions::TreeSnapshot> before;
  if (s.collect && root.ok()) {
    absl::StatusOr<sessions::TreeSnapshot> snap = sessions::SnapshotTree(*root, "outputs", 10'000);
    if (snap.ok()) before = *std::move(snap);
  }
  Expected<json::value> result = RunToJson(s.run, s.stdin_data, cancel_fd);
  sessions_->EndExecution(s.key);
  if (!result.ok()) {
    if (own_record) RecordExecEnd(record.id, "done", json::object{{"error", result.error().message}});
    return result;
  }
  json::object& out = result.value().as_object();
  out["exec_id"] = record.id;
  out["session"] = s.key;
  if (before.has_value()) {
    const SessionsConfig& c = config_.sessions;
    sessions::ArtifactLimits limits;
    limits.max_file_bytes = c.max_file_bytes;
    limits.max_files = c.max_output_files;
    limits.max_total_bytes = c.max_output_bytes;
    absl::StatusOr<sessions::Outputs> outputs = sessions::CollectOutputs(*root, "outputs", *before, limits);
    out["outputs"] = outputs.ok() ? OutputsJson(*outputs)
                                  : json::value(json::object{{"error", std::string(outputs.status().message())}});
  }
  if (own_record) RecordExecEnd(record.id, "done", result.value());
  return result;
}

void Daemon::ArmReaper() {
  if (sessions_ == nullptr) return;
  asio::post(control_, [this] {
    const absl::Time next = sessions_->NextDeadline();
    if (next == absl::InfiniteFuture() || next >= reaper_at_) return;
    reaper_at_ = next;
    if (reaper_ == nullptr) reaper_ = std::make_unique<asio::steady_timer>(control_);
    const auto wait = std::chrono::milliseconds(std::max<int64_t>(0, absl::ToInt64Milliseconds(next - absl::Now())));
    reaper_->expires_after(wait + std::chrono::milliseconds(10));
    reaper_->async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;  // re-armed earlier, or the daemon stops
      reaper_at_ = absl::InfiniteFuture();
      asio::post(slow_, [this] { ReapExpired(); });
    });
  });
}

void Daemon::ForgetOldRecords() {
  const int64_t before = Ms(absl::Now() - config_.sessions.keep_executions);
  if (absl::StatusOr<size_t> dropped = records_->ForgetEnded(before, kKeepRecordedExecutions); !dropped.ok()) {
    Warn(absl::StrCat("forgetting old execution records: ", dropped.status().message()));
  }
}

void Daemon::ReapExpired() {
  ForgetOldRecords();
  for (const std::string& key : sessions_->Expired(absl::Now())) {
    // A session whose lease is held (an execution admitted or waiting, a
    // files write) is not idle, whatever its clock says.
    WorkspaceLeases::Start reap = [&](std::shared_ptr<WorkspaceLeases::Lease>) {
      absl::Status done = sessions_->Destroy(key, /*archive=*/true);
      if (done.ok()) {
        Warn(absl::StrCat("session ", key, " reaped (idle past its TTL or its lifetime)"));
      } else if (!absl::IsNotFound(done)) {
        Warn(absl::StrCat("session ", key, ": reaping it: ", done.message()));
      }
    };
    (void)leases_->Acquire(LeaseKey(key), /*wait=*/false, reap);
  }
  ArmReaper();
}

}  // namespace cubicle::rpc
