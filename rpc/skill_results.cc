#include "rpc/skill_results.h"

#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rpc/results_json.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// Whether `st` is a pool refusing a request at its max_total (a cap, like
// the queue's: busy), rather than this host running out of something.
bool IsPoolBusy(const absl::Status& st) {
  return absl::IsResourceExhausted(st) && absl::StartsWith(st.message(), "pool ") &&
         absl::StrContains(st.message(), " is busy: ");
}

}  // namespace

Expected<SkillInvocation> ReadSkillRequest(const json::object& params) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> method, GetString(params, "method", true));
  json::value skill_params = params.contains("params") ? params.at("params") : json::value(nullptr);
  if (!skill_params.is_null() && !skill_params.is_object() && !skill_params.is_array()) {
    return InvalidParam("params", "params", "must be an object or an array");
  }
  SkillInvocation call;
  call.method = *std::move(method);
  call.params = std::move(skill_params);
  return call;
}

json::value TextOrBase64(const std::string& data) {
  return ValidUtf8(data) ? json::value(data) : json::value(absl::Base64Escape(data));
}

Error FromRunStatus(const absl::Status& st) {
  if (IsPoolBusy(st)) return Error{kBusy, std::string(st.message()), nullptr};
  if (absl::IsResourceExhausted(st)) return OutOfResources(st);
  if (absl::IsInvalidArgument(st)) return InvalidParams(st);
  return Error{kInternalError, std::string(st.message()), nullptr};
}

Error SkillFailed(const runtime::ExecResult& r, const std::string& out, const std::string& err, bool overlong,
                  absl::Duration timeout) {
  std::string why = overlong ? "the skill wrote a stdout line longer than 4 MiB"
                    : r.reason == runtime::ExitReason::kTimeout
                        ? absl::StrCat("the skill did not answer within ", absl::FormatDuration(timeout))
                        : absl::StrCat("the skill ended (", runtime::ExitReasonName(r.reason), ", status ",
                                       r.ShellStatus(), ") without answering");
  auto tail = [](const std::string& s) { return s.size() <= 4096 ? s : s.substr(s.size() - 4096); };
  json::object data{{"reason", std::string(runtime::ExitReasonName(r.reason))},
                    {"status", r.ShellStatus()},
                    {"stderr_tail", tail(err)},
                    {"stdout_tail", tail(out)}};
  if (r.reason == runtime::ExitReason::kSetupFailed) data["error"] = std::string(r.setup_error.message());
  return Error{kSkillFailed, why, std::move(data)};
}

json::object SkillAnswerJson(const SkillAnswer& answer, const std::string& profile, const skills::Skill* skill) {
  json::object out;
  if (const json::value* result = answer.response.if_contains("result")) out["result"] = *result;
  if (const json::value* error = answer.response.if_contains("error")) out["error"] = *error;
  out["logs"] = answer.logs;
  out["logs_truncated"] = answer.logs_truncated;
  out["stdout_logs"] = answer.stdout_logs;
  out["notifications"] = answer.notifications;
  out["wall_ms"] = absl::ToDoubleMilliseconds(answer.wall);
  out["profile"] = profile;
  if (skill != nullptr) {
    const skills::Manifest& m = skill->manifest;
    out["skill"] = json::object{{"name", m.name}, {"version", m.version.ToString()}, {"id", skill->id}};
  }
  return out;
}

Error SkillProcessFailed(const SkillProcess::CallOutcome& outcome, const SkillProcess::Ended& ended,
                         absl::Duration timeout) {
  using End = SkillProcess::CallEnd;
  if (outcome.end == End::kBusy) return Error{kBusy, "the skill is answering another call", nullptr};
  if (!ended.status.ok() && outcome.end == End::kEnded) return FromRunStatus(ended.status);
  Error e = SkillFailed(ended.result, ended.out_tail, ended.err_tail, outcome.end == End::kOverlong, timeout);
  json::object& data = e.data.as_object();
  switch (outcome.end) {
    case End::kTimedOut:
      e.message = absl::StrCat("the skill did not answer within ", absl::FormatDuration(timeout));
      data["reason"] = "timeout";
      break;
    case End::kStdinFull:
      e.message = absl::StrCat("the skill did not read its request within ", absl::FormatDuration(timeout));
      data["reason"] = "timeout";
      break;
    case End::kCancelled:
      e.message = "the call was cancelled before the skill answered";
      data["reason"] = "killed";
      break;
    default:
      break;
  }
  return e;
}

json::object UsageJson(const runtime::ExecResult& r) {
  json::object usage{{"user_ms", absl::ToDoubleMilliseconds(absl::DurationFromTimeval(r.rusage.ru_utime))},
                     {"system_ms", absl::ToDoubleMilliseconds(absl::DurationFromTimeval(r.rusage.ru_stime))}};
  if (r.cgroup.has_value()) {
    if (r.cgroup->memory_peak_bytes) usage["memory_peak_bytes"] = *r.cgroup->memory_peak_bytes;
    if (r.cgroup->cpu_usage_ns) usage["cpu_usage_ns"] = *r.cgroup->cpu_usage_ns;
  }
  return usage;
}

}  // namespace cubicle::rpc
