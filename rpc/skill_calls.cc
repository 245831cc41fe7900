// Skills calling skills (docs/skills.md, "Calling other skills"): a skill
// whose manifest lists `calls` runs as a skill process (rpc/skill_process.h)
// — its stdin a pipe the daemon holds — and may write a JSON-RPC request,
// `skill.call {skill, method, params, timeout_ms}`, on its stdout. The
// daemon checks it against the caller's manifest, the depth of the chain
// and the caller's count of calls, runs the callee in a sandbox of its
// own, with its own manifest's limits, on a thread of the caller's
// process, and writes the answer to the caller's stdin. The audit line of
// each callee names its caller.
#include <utility>

#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rpc/daemon.h"
#include "rpc/skill_results.h"
#include "rpc/skill_static_policy.h"
#include "sessions/ids.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// How long a refusal or an answer may wait for room in the caller's stdin.
constexpr absl::Duration kReplyWrite = absl::Seconds(10);

json::object CallerJson(const SkillCaller& caller) {
  json::object out{{"request_id", caller.request_id}, {"depth", caller.depth}};
  if (caller.skill != nullptr) {
    const skills::Manifest& m = caller.skill->manifest;
    out["skill"] = json::object{{"name", m.name}, {"version", m.version.ToString()}, {"id", caller.skill->id}};
  }
  return out;
}

// Whether the caller's manifest allows `callee`: an entry of its name
// whose selector its version matches.
bool Allowed(const skills::Skill& caller, const skills::Skill& callee) {
  for (const skills::SkillReference& r : caller.manifest.calls) {
    if (r.name == callee.manifest.name && r.selector.Matches(callee.manifest.version)) return true;
  }
  return false;
}

std::string AllowedList(const skills::Skill& caller) {
  std::vector<std::string> texts;
  for (const skills::SkillReference& r : caller.manifest.calls) texts.push_back(r.text);
  return absl::StrJoin(texts, ", ");
}

}  // namespace

SkillProcess::Options Daemon::SkillProcessOptions(const RunParams& p, std::shared_ptr<SkillCaller> caller) {
  SkillProcess::Options options;
  options.runner = RunnerOf(p);
  options.request = p.request;
  options.log_budget = p.budget;
  options.max_line = kMaxSkillLine;
  options.on_request = [this, caller = std::move(caller)](SkillProcess& process, json::object request) {
    OnSkillRequest(process, caller, std::move(request));
  };
  return options;
}

Expected<json::value> Daemon::CallSkillProcess(const RunParams& p, const SkillInvocation& call, int cancel_fd) {
  auto caller = std::make_shared<SkillCaller>();
  caller->skill = p.skill;
  caller->request_id = p.request.request_id;
  caller->client = call.client;
  caller->depth = call.depth;
  runtime::Pool* pool = p.served->pool.get();  // held by p
  absl::StatusOr<std::shared_ptr<SkillProcess>> process = SkillProcess::Start(SkillProcessOptions(p, caller));
  if (!process.ok()) return FromRunStatus(process.status());
  SkillProcess::CallOutcome outcome =
      (*process)->Call(call.method, call.params, p.request.timeout, cancel_fd, call.progress);
  // Answered or not, the process goes now, with any callee still running.
  const SkillProcess::Ended& ended = (*process)->Close();
  if (outcome.end != SkillProcess::CallEnd::kAnswered) return SkillProcessFailed(outcome, ended, p.request.timeout);
  SkillAnswer answer{std::move(outcome.response), TextOrBase64(outcome.logs), outcome.logs_truncated,
                     TextOrBase64(outcome.stdout_logs), outcome.wall, outcome.notifications};
  json::object out = SkillAnswerJson(answer, pool->name(), p.skill.get());
  if (p.environment != nullptr) out["environment"] = p.environment->Reference();
  out["usage"] = UsageJson(ended.result);
  out["skill_calls"] = caller->calls.load();
  return json::value(std::move(out));
}

void Daemon::OnSkillRequest(SkillProcess& process, const std::shared_ptr<SkillCaller>& caller,
                            json::object request) {
  const json::value id = request.at("id");
  auto refuse = [&](Error e) { (void)process.Send(ErrorReply(id, e), absl::Now() + kReplyWrite); };
  if (request.at("method") != "skill.call") {
    return refuse(Error{kMethodNotFound,
                        absl::StrCat("a skill may send only skill.call, not '",
                                     std::string(request.at("method").as_string()).substr(0, 64), "'"),
                        nullptr});
  }
  const json::value* raw = request.if_contains("params");
  if (raw == nullptr || !raw->is_object()) return refuse(InvalidParam("", "params", "expected an object"));
  const json::object& params = raw->get_object();
  if (auto bad = RejectUnknown(params, {"skill", "method", "params", "timeout_ms"})) return refuse(*bad);
  Expected<std::optional<std::string>> reference = GetString(params, "skill", true);
  if (!reference.ok()) return refuse(reference.error());
  if (std::optional<Error> refused = Refusal()) return refuse(*refused);
  if (caller->skill == nullptr) {
    return refuse(Error{kForbidden,
                        "only a skill installed by name may call skills (its manifest's `calls` lists them)",
                        nullptr});
  }
  absl::StatusOr<std::shared_ptr<const skills::Skill>> callee = Skills()->Find(**reference);
  if (absl::IsNotFound(callee.status())) return refuse(Error{kNotFound, std::string(callee.status().message()), nullptr});
  if (!callee.ok()) return refuse(InvalidParam("params", "skill", callee.status().message()));
  const skills::Skill& from = *caller->skill;
  if (!Allowed(from, **callee)) {
    return refuse(Error{kForbidden,
                        absl::StrCat("skill ", from.Reference(), " may not call ", (*callee)->Reference(),
                                     ": its manifest's calls allow ",
                                     from.manifest.calls.empty() ? "none" : AllowedList(from)),
                        nullptr});
  }
  if (caller->depth + 1 > config_.skills_max_call_depth) {
    return refuse(Error{kLimitExceeded,
                        absl::StrCat("skill ", from.Reference(), " is at call depth ", caller->depth,
                                     ": a call from it would pass skills.max_call_depth (",
                                     config_.skills_max_call_depth, ")"),
                        nullptr});
  }
  if (caller->calls.fetch_add(1) >= config_.skills_max_calls) {
    caller->calls.fetch_sub(1);
    return refuse(Error{kLimitExceeded,
                        absl::StrCat("skill ", from.Reference(), " made ", config_.skills_max_calls,
                                     " calls already (skills.max_calls)"),
                        nullptr});
  }
  // On a thread of the caller's process, which Close() cancels and joins:
  // the process is held by reference (rpc/skill_process.h, Spawn).
  const bool spawned = process.Spawn(
      [this, &process, caller, callee = *std::move(callee), params, id](int cancel_fd) {
        Expected<json::value> out = Guarded([&] { return RunCalleeSkill(*caller, callee, params, cancel_fd); });
        (void)process.Send(out.ok() ? Result(id, *out) : ErrorReply(id, out.error()), absl::Now() + kReplyWrite);
      });
  if (!spawned) refuse(Error{kShuttingDown, "the calling skill is being closed", nullptr});
}

Expected<json::value> Daemon::RunCalleeSkill(const SkillCaller& caller, std::shared_ptr<const skills::Skill> callee,
                                             const json::object& params, int cancel_fd) {
  const std::string request_id = sessions::NewId('q');
  const absl::Time start = absl::Now();
  CUBICLE_RPC_ASSIGN_OR_RETURN(SkillInvocation call, ReadSkillRequest(params));
  call.depth = caller.depth + 1;
  call.client = caller.client;
  SkillAudit audit{caller.client, call.method, json::value(nullptr), call.params, "", CallerJson(caller)};
  Expected<RunParams> p = ParseRunParams(params, request_id, callee);
  if (p.ok() && p->environment != nullptr) audit.environment = p->environment->Reference();
  auto run = [&]() -> Expected<json::value> {
    if (!p.ok()) return p.error();
    if (auto refused = RefuseAccelerated(p->served->profile, "skill.call")) return *refused;
    // A callee its profile's static policy denies is refused as a call by
    // a client is, and audited so.
    if (auto refused = StaticPolicyRefusal(*callee, p->served->profile)) return *refused;
    return CallSkill(*p, call, cancel_fd);
  };
  Expected<json::value> outcome = run();
  if (p.ok()) NoteAutoLimits(*p, &outcome);
  const std::string profile = p.ok() ? p->served->profile.name : callee->manifest.profile;
  AuditSkillCall(audit, request_id, profile, callee.get(), outcome, absl::Now() - start);
  if (outcome.ok()) outcome->as_object()["request_id"] = request_id;
  return outcome;
}

}  // namespace cubicle::rpc
