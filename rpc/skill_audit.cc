// The skill audit trail's writer and audit.query (rpc/audit_log.h,
// docs/skills.md "Audit"): one line per skill.call, whatever its end.
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "rpc/daemon.h"
#include "rpc/jsonrpc.h"
#include "rpc/skill_catalog.h"
#include "rpc/skill_results.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

constexpr size_t kMaxQueryLimit = 1000;

// A time bound of audit.query: RFC 3339 text or Unix milliseconds.
Expected<absl::Time> TimeParam(const json::object& params, const char* key, absl::Time unset) {
  const json::value* v = params.if_contains(key);
  if (v == nullptr || v->is_null()) return unset;
  if (v->is_int64() || v->is_uint64()) return absl::FromUnixMillis(v->to_number<int64_t>());
  absl::Time at;
  std::string err;
  if (v->is_string() && absl::ParseTime(absl::RFC3339_full, std::string(v->as_string()), &at, &err)) return at;
  return Error{kInvalidParams, absl::StrCat(key, ": expected an RFC 3339 time or Unix milliseconds"),
               json::object{{"field", key}}};
}

}  // namespace

void Daemon::NoteAutoLimits(const RunParams& p, Expected<json::value>* outcome) {
  NoteAutoLimits(AutoLimitsUsed{p.request.limits.value_or(cgroups::Limits{}), p.auto_memory, p.auto_timeout}, outcome);
}

void Daemon::NoteAutoLimits(const AutoLimitsUsed& used, Expected<json::value>* outcome) {
  if (!used.memory.has_value() && !used.timeout.has_value()) return;
  json::object limits = LimitsToJson(used.limits);
  limits["auto"] = true;
  if (used.memory.has_value()) {
    limits["basis"] = used.memory->basis;
    limits["samples"] = used.memory->samples;
  }
  if (used.timeout.has_value()) {
    limits["timeout_ms"] = absl::ToInt64Milliseconds(used.timeout->timeout);
    limits["timeout_basis"] = used.timeout->basis;
    limits["timeout_samples"] = used.timeout->samples;
  }
  if (outcome->ok()) {
    if (json::object* result = outcome->value().if_object()) (*result)["limits"] = std::move(limits);
    return;
  }
  Error e = std::move(*outcome).error();
  if (json::object* data = e.data.if_object()) {
    // The kernel's OOM kill or the memory breaker, or the end of the
    // call's time, at a limit the history chose: the next estimate rises
    // past it (rpc/skill_stats.h). A run ends by one reason only.
    const json::value* reason = data->if_contains("reason");
    if (reason != nullptr && used.memory.has_value() && (*reason == "oom" || *reason == "breaker_memory")) {
      (*data)["auto_limit_breached"] = "memory";
    }
    if (reason != nullptr && used.timeout.has_value() && *reason == "timeout") {
      (*data)["auto_limit_breached"] = "timeout";
    }
    (*data)["limits"] = std::move(limits);
  }
  *outcome = std::move(e);
}

size_t Daemon::AutoLimitSkills(const std::string& profile) const {
  size_t n = 0;
  for (const auto& [name, versions] : Skills()->skills()) {
    for (const auto& [version, skill] : versions) {
      const skills::Manifest& m = skill->manifest;
      n += m.profile == profile && (m.limits.memory_auto || m.timeout_auto) ? 1 : 0;
    }
  }
  return n;
}

void Daemon::AuditSkillCall(const SkillAudit& call, const std::string& request_id, const std::string& profile,
                            const skills::Skill* skill, const Expected<json::value>& outcome, absl::Duration took) {
  if (audit_ == nullptr && skill == nullptr) return;
  json::object line{{"request_id", request_id},
                    {"profile", profile},
                    {"method", call.method},
                    {"params_sha256", JsonSha256(call.params)},
                    {"duration_ms", absl::ToDoubleMilliseconds(took)}};
  if (!call.client.empty()) line["client"] = call.client;
  // Which revision of which environment it ran in: with the skill's id,
  // what a rerun needs to be the same run.
  if (!call.environment.empty()) line["environment"] = call.environment;
  line["skill"] = nullptr;
  if (skill != nullptr) {
    const skills::Manifest& m = skill->manifest;
    line["skill"] = json::object{{"name", m.name}, {"version", m.version.ToString()}, {"id", skill->id}};
  }
  if (!call.argv.is_null()) line["argv_sha256"] = JsonSha256(call.argv);
  if (!call.skill_session.empty()) line["skill_session"] = call.skill_session;
  if (!call.caller.is_null()) line["caller"] = call.caller;
  if (outcome.ok()) {
    const json::object& r = outcome->as_object();
    if (const json::value* result = r.if_contains("result")) {
      line["outcome"] = "ok";
      line["result_sha256"] = JsonSha256(*result);
    } else {
      line["outcome"] = "error";  // the skill answered with a JSON-RPC error
      line["result_sha256"] = JsonSha256(r.at("error"));
    }
    if (const json::value* usage = r.if_contains("usage")) line["usage"] = *usage;
    if (const json::value* limits = r.if_contains("limits")) line["limits"] = *limits;
  } else {
    const Error& e = outcome.error();
    line["outcome"] = e.code == kSkillFailed ? "failed" : "refused";
    line["error_code"] = e.code;
    if (const json::object* data = e.data.if_object()) {
      if (const json::value* reason = data->if_contains("reason")) line["reason"] = *reason;
      if (const json::value* limits = data->if_contains("limits")) line["limits"] = *limits;
      if (const json::value* breached = data->if_contains("auto_limit_breached")) {
        line["auto_limit_breached"] = *breached;
      }
    }
  }
  RecordAuditLine(std::move(line), skill != nullptr);
}

void Daemon::AuditSkillSessionEnd(const SkillSession& session, const SkillProcess::Ended* ended, const char* why) {
  const skills::Skill* skill = session.skill.get();
  if (audit_ == nullptr && skill == nullptr) return;
  json::object line{{"request_id", session.request_id},
                    {"profile", session.served->profile.name},
                    {"skill_session", session.key},
                    {"outcome", "session_end"},
                    {"reason", why},
                    {"calls", session.calls},
                    {"duration_ms", absl::ToDoubleMilliseconds(absl::Now() - session.created)}};
  if (!session.client.empty()) line["client"] = session.client;
  if (!session.environment.empty()) line["environment"] = session.environment;
  line["skill"] = nullptr;
  if (skill != nullptr) {
    const skills::Manifest& m = skill->manifest;
    line["skill"] = json::object{{"name", m.name}, {"version", m.version.ToString()}, {"id", skill->id}};
  }
  if (!session.argv.is_null()) line["argv_sha256"] = JsonSha256(session.argv);
  // A process that never ran has no usage: the line says so, and feeds nothing.
  if (ended != nullptr && ended->status.ok()) line["usage"] = UsageJson(ended->result);
  RecordAuditLine(std::move(line), skill != nullptr);
}

void Daemon::RecordAuditLine(json::object line, bool of_skill) {
  // The skill's history (rpc/skill_stats.h) reads what the line says, as a
  // restart reads it again from the trail.
  if (of_skill) {
    line["ts"] = absl::FormatTime(absl::RFC3339_full, absl::Now(), absl::UTCTimeZone());
    if (std::optional<std::pair<std::string, SkillRun>> run = SkillRunOfAuditLine(line)) {
      skill_stats_->Record(run->first, std::move(run->second));
    }
  }
  if (audit_ == nullptr) return;
  if (absl::Status written = audit_->Append(std::move(line)); !written.ok()) {
    Warn(absl::StrCat("audit: ", written.message()));
  }
}

Expected<json::value> Daemon::AuditQuery(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"skill", "request_id", "since", "until", "limit"})) return *bad;
  if (audit_ == nullptr) {
    return Error{kInvalidRequest,
                 "the audit trail needs a state directory: set sessions.state_dir in the config or pass --state-dir",
                 nullptr};
  }
  AuditFilter filter;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> skill, GetString(*params, "skill", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> request_id, GetString(*params, "request_id", false));
  filter.skill = skill.value_or("");
  filter.request_id = request_id.value_or("");
  CUBICLE_RPC_ASSIGN_OR_RETURN(filter.since, TimeParam(*params, "since", absl::InfinitePast()));
  CUBICLE_RPC_ASSIGN_OR_RETURN(filter.until, TimeParam(*params, "until", absl::InfiniteFuture()));
  if (const json::value* limit = params->if_contains("limit")) {
    if (!limit->is_int64() || limit->as_int64() < 1 || static_cast<size_t>(limit->as_int64()) > kMaxQueryLimit) {
      return InvalidParam("limit", "limit", absl::StrCat("must be a whole number from 1 to ", kMaxQueryLimit));
    }
    filter.limit = static_cast<size_t>(limit->as_int64());
  }
  absl::StatusOr<std::vector<json::object>> lines = audit_->Query(filter);
  if (!lines.ok()) return Error{kInternalError, absl::StrCat("audit.query: ", lines.status().message()), nullptr};
  json::array out;
  for (json::object& l : *lines) out.push_back(std::move(l));
  return json::value(json::object{{"entries", std::move(out)}});
}

}  // namespace cubicle::rpc
