// Skill sessions (docs/skills.md, "Skill sessions"; docs/protocol.md):
// skill.session.open starts a skill as a skill process (rpc/skill_process.h)
// and keeps it; skill.call {skill_session} sends it one request and answers
// with its response, streaming the notifications it sends before as
// skill.progress; skill.session.close ends it, and so do its idle timeout
// and its lifetime (rpc/skill_sessions.h's reaper).
#include <utility>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"
#include "rpc/npu_methods.h"
#include "rpc/skill_results.h"
#include "rpc/skill_static_policy.h"
#include "sessions/ids.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

json::object SessionJson(const SkillSession& s) {
  json::object out{{"skill_session", s.key},
                   {"profile", s.served->profile.name},
                   {"skill", nullptr},
                   {"created_ms", absl::ToUnixMillis(s.created)},
                   {"last_used_ms", absl::ToUnixMillis(s.last_used)},
                   {"idle_timeout_ms", absl::ToInt64Milliseconds(s.idle_timeout)},
                   {"expires_ms", absl::ToUnixMillis(s.Expires())},
                   {"timeout_ms", absl::ToInt64Milliseconds(s.call_timeout)},
                   {"calls", s.calls},
                   {"busy", s.busy},
                   {"alive", !s.process->ended()}};
  if (!s.environment.empty()) out["environment"] = s.environment;
  if (s.skill != nullptr) {
    const skills::Manifest& m = s.skill->manifest;
    out["skill"] = json::object{{"name", m.name}, {"version", m.version.ToString()}, {"id", s.skill->id}};
  }
  return out;
}

// How the process ended, for skill.session.close and the log.
json::object EndedJson(const SkillProcess::Ended& ended) {
  if (!ended.status.ok()) return json::object{{"reason", "setup_failed"}, {"error", std::string(ended.status.message())}};
  json::object out{{"reason", std::string(runtime::ExitReasonName(ended.result.reason))},
                   {"status", ended.result.ShellStatus()},
                   {"wall_ms", absl::ToDoubleMilliseconds(ended.result.wall)},
                   {"usage", UsageJson(ended.result)}};
  return out;
}

}  // namespace

bool Daemon::IsSkillSessionCall(const Call& call) const {
  const json::object* params = call.params.if_object();
  return call.method == "skill.call" && params != nullptr && params->contains("skill_session");
}

Expected<std::function<void(const json::object&)>> Daemon::ProgressTo(const json::object& call_params,
                                                                       std::function<void(std::string)> notify,
                                                                       const std::string& request_id,
                                                                       const std::string& skill_session) {
  json::value token = nullptr;
  if (const json::value* t = call_params.if_contains("progress_token")) {
    const bool fits = (t->is_string() && !t->as_string().empty() && t->as_string().size() <= 128) || t->is_int64() ||
                      t->is_uint64();
    if (!fits) return InvalidParam("params", "progress_token", "must be a string of 1 to 128 bytes or a whole number");
    token = *t;
  }
  if (!notify) return std::function<void(const json::object&)>();
  return std::function<void(const json::object&)>([notify = std::move(notify), request_id, skill_session,
                                                   token](const json::object& note) {
    json::object params{{"request_id", request_id}, {"method", note.at("method")}};
    if (!token.is_null()) params["progress_token"] = token;
    if (!skill_session.empty()) params["skill_session"] = skill_session;
    if (const json::value* p = note.if_contains("params")) params["params"] = *p;
    notify(Notification("skill.progress", params));
  });
}

Expected<json::value> Daemon::SkillSessionOpen(const json::value& raw, const std::string& request_id,
                                               const std::string& client) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"skill", "profile", "argv", "env", "cwd", "timeout_ms", "output_bytes",
                                         "limits", "network", "breakers", "idle_timeout_ms", "environment"})) {
    return *bad;
  }
  const DaemonConfig::SkillSessionsConfig& limits = config_.skill_sessions;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> idle_ms, GetInt64(*params, "idle_timeout_ms", false, 1));
  const absl::Duration idle = idle_ms.has_value() ? absl::Milliseconds(*idle_ms) : limits.idle_timeout;
  if (idle > limits.max_idle_timeout) {
    return Error{kLimitExceeded,
                 absl::StrCat("params.idle_timeout_ms: ", *idle_ms, " exceeds skills.sessions.max_idle_timeout_ms (",
                              absl::ToInt64Milliseconds(limits.max_idle_timeout), ")"),
                 nullptr};
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<const skills::Skill> skill, SkillOfCall(*params));
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ParseRunParams(*params, request_id, skill));
  if (auto refused = RefuseAccelerated(p.served->profile, "skill.session.open")) return *refused;
  if (skill != nullptr) {
    // A session runs the script the load checked: one its profile's
    // static policy denies is never started.
    if (std::optional<Error> refused = StaticPolicyRefusal(*skill, p.served->profile)) return *refused;
  }
  if (skill_sessions_->size() >= skill_sessions_->max_sessions()) {
    return Error{kLimitExceeded,
                 absl::StrCat(skill_sessions_->max_sessions(),
                              " skill sessions are open already (skills.sessions.max_sessions)"),
                 nullptr};
  }

  auto session = std::make_shared<SkillSession>();
  session->key = sessions::NewId('k');
  session->served = p.served;
  session->skill = skill;
  session->argv = params->contains("argv") ? params->at("argv") : json::value(nullptr);
  session->client = client;
  session->request_id = request_id;
  if (p.environment != nullptr) session->environment = p.environment->Reference();
  session->call_timeout = p.request.timeout;  // each call's; the process lives for the session
  session->limits = p.request.limits.value_or(cgroups::Limits{});
  session->auto_memory = p.auto_memory;
  session->timeout_auto = p.auto_timeout.has_value();
  session->idle_timeout = idle;
  session->created = session->last_used = absl::Now();
  session->end_of_life = session->created + limits.max_lifetime;

  auto caller = std::make_shared<SkillCaller>();
  caller->skill = skill;
  caller->request_id = request_id;
  caller->client = client;
  // Its pool (or spec) is held by the session's `served`; the process
  // lives as long as the session may.
  SkillProcess::Options options = SkillProcessOptions(p, std::move(caller));
  options.request.timeout = limits.max_lifetime;
  absl::StatusOr<std::shared_ptr<SkillProcess>> process = SkillProcess::Start(std::move(options));
  if (!process.ok()) return FromRunStatus(process.status());
  session->process = *std::move(process);
  if (absl::Status added = skill_sessions_->Add(session); !added.ok()) {
    session->process->Close();
    if (absl::IsResourceExhausted(added)) return Error{kLimitExceeded, std::string(added.message()), nullptr};
    return Error{kShuttingDown, std::string(added.message()), nullptr};
  }
  LogSkillSession(*session, "opened", nullptr);
  return json::value(SessionJson(*session));
}

Expected<Daemon::RunWork> Daemon::SkillSessionCall(const json::object& params, const Request& r) {
  if (auto bad = RejectUnknown(params, {"skill_session", "method", "params", "timeout_ms", "progress_token"})) {
    return *bad;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(params, "skill_session", true));
  std::shared_ptr<SkillSession> session = skill_sessions_->Find(*key);
  if (session == nullptr) {
    return Error{kNotFound, absl::StrCat("no skill session '", key->substr(0, 64), "' (closed, or never opened)"),
                 nullptr};
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(SkillInvocation call, ReadSkillRequest(params));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> timeout_ms, GetInt64(params, "timeout_ms", false, 1));
  absl::Duration timeout = session->call_timeout;
  std::optional<TimeEstimate> auto_timeout;
  if (!timeout_ms.has_value() && session->timeout_auto && session->skill != nullptr) {
    // Each call's own estimate: the session's calls feed it as they end.
    auto_timeout = skill_stats_->Timeout(session->skill->id, session->served->profile.max_timeout);
    timeout = auto_timeout->timeout;
  }
  if (timeout_ms.has_value()) {
    const absl::Duration ceiling = session->served->profile.max_timeout;
    if (absl::Milliseconds(*timeout_ms) > ceiling) {
      return Error{kLimitExceeded,
                   absl::StrCat("params.timeout_ms: ", *timeout_ms, " exceeds the profile's ceiling of ",
                                absl::ToInt64Milliseconds(ceiling)),
                   nullptr};
    }
    timeout = absl::Milliseconds(*timeout_ms);
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(call.progress, ProgressTo(params, r.notify, r.request_id, session->key));
  SkillAudit audit{session->client.empty() ? r.client : session->client, call.method, session->argv, call.params,
                   session->key, json::value(nullptr), session->environment};
  return RunWork([this, session, call = std::move(call), timeout, auto_timeout, audit = std::move(audit),
                  request_id = r.request_id](int cancel_fd) {
    const absl::Time start = absl::Now();
    Expected<json::value> outcome = CallInSession(*session, call, timeout, cancel_fd);
    NoteAutoLimits(AutoLimitsUsed{session->limits, session->auto_memory, auto_timeout}, &outcome);
    AuditSkillCall(audit, request_id, session->served->profile.name, session->skill.get(), outcome,
                   absl::Now() - start);
    return outcome;
  });
}

Expected<json::value> Daemon::CallInSession(SkillSession& session, const SkillInvocation& call,
                                            absl::Duration timeout, int cancel_fd) {
  if (!skill_sessions_->Begin(session)) {
    return Error{kBusy, absl::StrCat("skill session ", session.key, " is answering another call"), nullptr};
  }
  SkillProcess::CallOutcome outcome = session.process->Call(call.method, call.params, timeout, cancel_fd, call.progress);
  skill_sessions_->End(session);
  using End = SkillProcess::CallEnd;
  if (outcome.end == End::kAnswered) {
    SkillAnswer answer{std::move(outcome.response), TextOrBase64(outcome.logs), outcome.logs_truncated,
                       TextOrBase64(outcome.stdout_logs), outcome.wall, outcome.notifications};
    json::object out = SkillAnswerJson(answer, session.served->profile.name, session.skill.get());
    out["skill_session"] = session.key;
    return json::value(std::move(out));
  }
  if (outcome.end == End::kBusy) {
    return Error{kBusy, absl::StrCat("skill session ", session.key, " is answering another call"), nullptr};
  }
  // No answer: what the skill holds can no longer be trusted to match the
  // conversation (a late answer, a half-read request). The session ends.
  std::shared_ptr<SkillSession> removed = skill_sessions_->Remove(session.key);
  const SkillProcess::Ended& ended = session.process->Close();
  if (removed != nullptr) {
    LogSkillSession(session, "failed", &ended);
    AuditSkillSessionEnd(session, &ended, "failed");
  }
  Error e = SkillProcessFailed(outcome, ended, timeout);
  e.message = absl::StrCat(e.message, "; skill session ", session.key, " is closed");
  if (json::object* data = e.data.if_object()) (*data)["skill_session"] = session.key;
  return e;
}

Expected<Daemon::RunWork> Daemon::SkillSessionClose(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"skill_session"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> key, GetString(*params, "skill_session", true));
  std::shared_ptr<SkillSession> session = skill_sessions_->Remove(*key);
  if (session == nullptr) {
    return Error{kNotFound, absl::StrCat("no skill session '", key->substr(0, 64), "' (closed, or never opened)"),
                 nullptr};
  }
  // Closing joins its thread: on an execution's thread, not the caller's.
  return RunWork([this, session](int) -> Expected<json::value> {
    const SkillProcess::Ended& ended = session->process->Close();
    LogSkillSession(*session, "closed", &ended);
    AuditSkillSessionEnd(*session, &ended, "closed");
    json::object out = SessionJson(*session);
    out["ended"] = EndedJson(ended);
    return json::value(std::move(out));
  });
}

Expected<json::value> Daemon::SkillSessionList(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {})) return *bad;
  json::array list;
  for (const std::shared_ptr<SkillSession>& s : skill_sessions_->List()) list.push_back(SessionJson(*s));
  return json::value(
      json::object{{"skill_sessions", std::move(list)}, {"max_sessions", skill_sessions_->max_sessions()}});
}

void Daemon::LogSkillSession(const SkillSession& session, const char* event, const SkillProcess::Ended* ended) {
  if (!events_->On()) return;
  json::object fields{{"event", event},
                      {"skill_session", session.key},
                      {"profile", session.served->profile.name},
                      {"request_id", session.request_id},
                      {"calls", session.calls}};
  if (session.skill != nullptr) fields["skill"] = session.skill->Reference();
  if (ended != nullptr) fields["ended"] = EndedJson(*ended);
  std::lock_guard<std::mutex> lock(events_->mu);
  events_->write("skill_session", fields);
}

}  // namespace cubicle::rpc
