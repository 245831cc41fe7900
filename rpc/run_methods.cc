// sandbox.run and skill.call (docs/protocol.md): a command, or a skill's
// one JSON-RPC call, in a fresh sandbox of a profile, answered when it ends.
#include <limits.h>
#include <stdlib.h>
#include <sys/eventfd.h>

#include <algorithm>
#include <cerrno>

#include <boost/json/object.hpp>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/json_reader.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "egress/policy_json.h"
#include "rpc/daemon.h"
#include "rpc/npu_methods.h"
#include "rpc/profile_config.h"
#include "rpc/request_threads.h"
#include "rpc/results_json.h"
#include "rpc/skill_catalog.h"
#include "rpc/skill_results.h"
#include "rpc/skill_static_policy.h"
#include "runtime/capture.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// A stream's bytes in the reply: text when it is UTF-8, else base64.
void PutStream(json::object& out, const char* name, const std::string& data, bool truncated, uint64_t total) {
  if (ValidUtf8(data)) {
    out[name] = data;
  } else {
    out[absl::StrCat(name, "_base64")] = absl::Base64Escape(data);
  }
  out[absl::StrCat(name, "_truncated")] = truncated;
  out[absl::StrCat(name, "_bytes")] = total;
}

json::object CapturedToJson(const runtime::CapturedRun& run, const std::string& profile) {
  json::object out = ResultToJson(run.result);
  out["profile"] = profile;
  PutStream(out, "stdout", run.out, run.out_truncated, run.out_total);
  PutStream(out, "stderr", run.err, run.err_truncated, run.err_total);
  return out;
}

Error LimitExceeded(std::string message) { return Error{kLimitExceeded, std::move(message), nullptr}; }

// A skill's limits with a request's over them: each field the request
// sets, or spells "unlimited", replaces the skill's.
cgroups::Limits OverSkillLimits(cgroups::Limits skill, const cgroups::Limits& asked,
                                const std::vector<std::string>& unlimited) {
  auto over = [](auto& field, const auto& request) {
    if (request.has_value()) field = request;
  };
  over(skill.memory_max, asked.memory_max);
  over(skill.memory_high, asked.memory_high);
  over(skill.pids_max, asked.pids_max);
  over(skill.cpus, asked.cpus);
  over(skill.cpu_weight, asked.cpu_weight);
  for (const std::string& key : unlimited) {
    if (key == "memory") skill.memory_max.reset();
    if (key == "memory_high") skill.memory_high.reset();
    if (key == "pids") skill.pids_max.reset();
  }
  skill.io = asked.io;
  return skill;
}

// ---------------------------------------------------------------------------
// The params sandbox.run, skill.call and exec.start share, a step each.

// NAME=value replacing NAME in `env`, or added.
void SetEnv(std::vector<std::string>& env, const std::string& name, const std::string& value) {
  std::erase_if(env, [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
  env.push_back(absl::StrCat(name, "=", value));
}

// What a skill called by name finds in its environment unless its profile
// or manifest says otherwise (docs/skills.md): numerical libraries on one
// thread each (the sandbox's CPU limit, not the host's core count, is what
// it has), plots without a display, unbuffered output, and TZ.
constexpr std::pair<const char*, const char*> kSkillEnvDefaults[] = {
    {"OMP_NUM_THREADS", "1"}, {"OPENBLAS_NUM_THREADS", "1"}, {"MKL_NUM_THREADS", "1"},
    {"MPLBACKEND", "Agg"},    {"PYTHONUNBUFFERED", "1"}};

bool HasEnv(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(), [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
}

// argv (the skill's command, for a skill: Daemon::ParseRunParams sets it
// once it knows where the skill runs), env (the request's over the
// skill's over the skill defaults over the environment's over the
// profile's) and cwd.
std::optional<Error> ReadCommand(const json::object& params, const Profile& profile, const skills::Skill* skill,
                                 const environments::Environment* environment, const std::string& skills_tz,
                                 runtime::ExecRequest* request) {
  if (skill == nullptr) {
    Expected<std::optional<std::vector<std::string>>> argv = GetStringArray(params, "argv", true);
    if (!argv.ok()) return argv.error();
    request->argv = **argv;
    if (request->argv.empty() || request->argv[0].empty()) {
      return InvalidParam("params", "argv", "must hold at least the command");
    }
  }
  request->env = profile.spec.env;
  SetEnvironmentVariables(profile, environment, &request->env);
  if (skill != nullptr) {
    for (const auto& [k, v] : kSkillEnvDefaults) {
      if (!HasEnv(request->env, k)) SetEnv(request->env, k, v);
    }
    if (!HasEnv(request->env, "TZ")) SetEnv(request->env, "TZ", skills_tz);
    for (const auto& [k, v] : skill->manifest.env) SetEnv(request->env, k, v);
  }
  Expected<std::optional<std::vector<std::pair<std::string, std::string>>>> env = GetStringMap(params, "env", false);
  if (!env.ok()) return env.error();
  for (const auto& [k, v] : env->value_or(std::vector<std::pair<std::string, std::string>>{})) {
    if (k.empty() || k.find('=') != std::string::npos) return InvalidParam("params.env", k, "is not a variable name");
    SetEnv(request->env, k, v);
  }
  Expected<std::optional<std::string>> cwd = GetString(params, "cwd", false);
  if (!cwd.ok()) return cwd.error();
  request->cwd = cwd->value_or(profile.spec.cwd);
  return std::nullopt;
}

// timeout_ms, at most the profile's ceiling; without one, the skill's
// (for `timeout_ms: auto`, its history's estimate under the profile's
// max_timeout_ms, into `auto_timeout`), else the profile's default.
std::optional<Error> ReadTimeout(const json::object& params, const Profile& profile, const skills::Skill* skill,
                                 const SkillStats& stats, runtime::ExecRequest* request,
                                 std::optional<TimeEstimate>* auto_timeout) {
  const int64_t max_timeout_ms = absl::ToInt64Milliseconds(profile.max_timeout);
  Expected<std::optional<int64_t>> timeout_ms = GetInt64(params, "timeout_ms", false, 1);
  if (!timeout_ms.ok()) return timeout_ms.error();
  if (timeout_ms->has_value() && **timeout_ms > max_timeout_ms) {
    return LimitExceeded(
        absl::StrCat("params.timeout_ms: ", **timeout_ms, " exceeds the profile's ceiling of ", max_timeout_ms));
  }
  request->timeout = timeout_ms->has_value() ? absl::Milliseconds(**timeout_ms) : profile.default_timeout;
  if (!timeout_ms->has_value() && skill != nullptr && skill->manifest.timeout.has_value()) {
    // Checked at load; a reload may have lowered the ceiling since.
    request->timeout = std::min(*skill->manifest.timeout, profile.max_timeout);
  }
  if (!timeout_ms->has_value() && skill != nullptr && skill->manifest.timeout_auto) {
    *auto_timeout = stats.Timeout(skill->id, profile.max_timeout);
    request->timeout = (*auto_timeout)->timeout;
  }
  return std::nullopt;
}

// limits, which may only tighten the profile's. A skill's are defaults:
// each field the request sets replaces the skill's (within the profile's).
// A skill's `memory: auto` is its history's estimate (`stats`), into
// `auto_memory`, unless the request sizes memory itself.
std::optional<Error> ReadLimits(const json::object& params, const Profile& profile, const skills::Skill* skill,
                                const SkillStats& stats, runtime::ExecRequest* request,
                                std::optional<MemoryEstimate>* auto_memory) {
  const json::value* limits = FindParam(params, "limits");
  const bool skill_limits = skill != nullptr && !skill->manifest.limits.empty();
  if (limits == nullptr && !skill_limits) return std::nullopt;
  std::vector<std::string> unlimited;
  cgroups::Limits asked;
  if (limits != nullptr) {
    absl::StatusOr<cgroups::Limits> parsed = ParseRequestLimits(*limits, "params.limits", &unlimited);
    if (!parsed.ok()) return InvalidParams(parsed.status());
    asked = *std::move(parsed);
  }
  std::optional<MemoryEstimate> estimate;
  if (skill_limits) {
    cgroups::Limits own = SkillLimitsOf(skill->manifest.limits);
    const std::optional<uint64_t>& ceiling = profile.spec.limits.memory_max;
    const bool sized_by_request = asked.memory_max.has_value() ||
                                  std::find(unlimited.begin(), unlimited.end(), "memory") != unlimited.end();
    // Checked at load; a reload may have taken the profile's ceiling away.
    if (skill->manifest.limits.memory_auto && ceiling.has_value() && !sized_by_request) {
      estimate = stats.Memory(skill->id, *ceiling);
      own.memory_max = estimate->bytes;
    }
    asked = OverSkillLimits(std::move(own), asked, unlimited);
  }
  absl::StatusOr<cgroups::Limits> tightened = TightenLimits(profile.spec.limits, asked, unlimited);
  if (!tightened.ok()) {
    return LimitExceeded(absl::StrCat(limits != nullptr ? "params.limits: " : "the skill's limits: ",
                                      tightened.status().message()));
  }
  request->limits = *std::move(tightened);
  *auto_memory = std::move(estimate);
  return std::nullopt;
}

// workspace, a real path under one of the configured roots.
std::optional<Error> ReadWorkspace(const json::object& params, const std::vector<std::string>& roots,
                                   runtime::ExecRequest* request) {
  Expected<std::optional<std::string>> workspace = GetString(params, "workspace", false);
  if (!workspace.ok()) return workspace.error();
  if (!workspace->has_value()) return std::nullopt;
  const std::string& asked = **workspace;
  if (roots.empty()) {
    return InvalidParam("params", "workspace", "is not accepted: the daemon has no workspace_roots configured");
  }
  char real[PATH_MAX];
  if (::realpath(asked.c_str(), real) == nullptr) {
    return InvalidParam("params", "workspace", absl::StrCat("'", asked, "': ", ErrnoName(errno)));
  }
  const std::string resolved = real;
  const bool under = std::any_of(roots.begin(), roots.end(), [&](const std::string& root) {
    return resolved == root || absl::StartsWith(resolved, root == "/" ? root : root + "/");
  });
  if (!under) {
    return InvalidParam("params", "workspace", absl::StrCat("'", asked, "' is not under a configured workspace root"));
  }
  request->workspace = resolved;
  return std::nullopt;
}

// output_bytes, at most the profile's budget.
std::optional<Error> ReadOutputBudget(const json::object& params, const Profile& profile, uint64_t* budget) {
  Expected<std::optional<int64_t>> output_bytes = GetInt64(params, "output_bytes", false, 0);
  if (!output_bytes.ok()) return output_bytes.error();
  *budget = profile.output_bytes;
  if (!output_bytes->has_value()) return std::nullopt;
  const uint64_t asked = static_cast<uint64_t>(**output_bytes);
  if (asked > *budget) {
    return LimitExceeded(absl::StrCat("params.output_bytes: ", asked, " exceeds the profile's ceiling of ", *budget));
  }
  *budget = asked;
  return std::nullopt;
}

// network (`path` names it), which may only narrow the profile's policy:
// a narrower one gets a sandbox of its own.
std::optional<Error> ReadNetwork(const json::value* network, const std::string& path, const Profile& profile,
                                 std::optional<runtime::SandboxSpec>* narrowed) {
  if (network == nullptr) return std::nullopt;
  absl::StatusOr<egress::Policy> policy = egress::PolicyFromJson(*network, path, profile.spec.egress);
  if (!policy.ok()) return InvalidParams(policy.status());
  if (absl::Status st = egress::CheckNarrows(profile.spec.egress, *policy); !st.ok()) {
    return LimitExceeded(absl::StrCat(path, ": ", st.message()));
  }
  if (*policy != profile.spec.egress) {
    // Over the spec the run has already (an environment's), or the profile's.
    runtime::SandboxSpec spec = narrowed->value_or(profile.spec);
    spec.egress = *std::move(policy);
    // No sockets but unix ones, unless the policy already refuses those too.
    if (spec.egress.mode == egress::NetMode::kNone && spec.seccomp != seccomp::Policy::kStrict) {
      spec.seccomp = seccomp::Policy::kNoNetwork;
    }
    *narrowed = std::move(spec);
  }
  return std::nullopt;
}

// A skill whose manifest asks for the strict policy, in a profile with
// another: the run gets a spec of its own, the profile's (or the one it
// has already) with the strict policy and no network, since strict
// refuses every socket and the egress bridge would have none to listen on.
void ReadSkillSeccomp(const skills::Skill* skill, const Profile& profile,
                      std::optional<runtime::SandboxSpec>* narrowed) {
  if (skill == nullptr || SkillSeccompOf(*skill, profile) != seccomp::Policy::kStrict) return;
  const runtime::SandboxSpec& current = narrowed->has_value() ? **narrowed : profile.spec;
  if (current.seccomp == seccomp::Policy::kStrict) return;
  runtime::SandboxSpec spec = current;
  spec.seccomp = seccomp::Policy::kStrict;
  spec.egress = egress::Policy{};
  *narrowed = std::move(spec);
}

// breakers, which may only tighten the profile's: a threshold the profile
// sets may only come down, one it does not set may be added, except io,
// whose accounting a sandbox gets only from a profile with an io breaker.
// Windows and graces are the request's to choose. Checked against the
// run's memory limit as a profile's are.
std::optional<Error> ReadBreakers(const json::object& params, const Profile& profile, runtime::ExecRequest* request) {
  const json::value* v = FindParam(params, "breakers");
  if (v == nullptr) return std::nullopt;
  const runtime::BreakerSpec& base = profile.spec.breakers;
  runtime::BreakerSpec b = base;
  if (absl::Status st = ParseBreakers(*v, "params.breakers", &b); !st.ok()) return InvalidParams(st);
  auto looser = [](const auto& asked, const auto& ceiling) { return asked && ceiling && *asked > *ceiling; };
  if (looser(b.cpu_share, base.cpu_share)) {
    return LimitExceeded(absl::StrCat("params.breakers.cpu: ", *b.cpu_share, " exceeds the profile's ", *base.cpu_share));
  }
  if (looser(b.memory_mark, base.memory_mark)) {
    return LimitExceeded(absl::StrCat("params.breakers.memory: ", cgroups::DescribeBytes(*b.memory_mark),
                                      " exceeds the profile's ", cgroups::DescribeBytes(*base.memory_mark)));
  }
  if (b.io_bytes_per_sec && !base.io_bytes_per_sec) {
    return InvalidParam("params.breakers", "io", "the profile has no io breaker, so its sandboxes account no io");
  }
  if (looser(b.io_bytes_per_sec, base.io_bytes_per_sec)) {
    return LimitExceeded(absl::StrCat("params.breakers.io: ", cgroups::DescribeBytes(*b.io_bytes_per_sec),
                                      "/s exceeds the profile's ", cgroups::DescribeBytes(*base.io_bytes_per_sec), "/s"));
  }
  const cgroups::Limits& limits = request->limits.has_value() ? *request->limits : profile.spec.limits;
  if (absl::Status st = runtime::ValidateBreakers(b, limits); !st.ok()) {
    return InvalidParam("params", "breakers", st.message());
  }
  request->breakers = std::move(b);
  return std::nullopt;
}

}  // namespace

Expected<Daemon::RunParams> Daemon::ParseRunParams(const json::object& params, const std::string& request_id,
                                                   std::shared_ptr<const skills::Skill> skill) {
  RunParams out;
  out.request.request_id = request_id;
  if (skill != nullptr) {
    out.served = profiles_.Find(skill->manifest.profile);
    if (out.served == nullptr) {
      return Error{kNotFound,
                   absl::StrCat("skill ", skill->Reference(), " runs in profile '", skill->manifest.profile,
                                "', which is not served any more"),
                   nullptr};
    }
  } else {
    CUBICLE_RPC_ASSIGN_OR_RETURN(out.served, FindProfile(params));
  }
  const Profile& profile = out.served->profile;
  if (auto e = ReadEnvironment(params, skill.get(), &out)) return *e;
  if (auto e = ReadCommand(params, profile, skill.get(), out.environment.get(), config_.skills_tz, &out.request)) {
    return *e;
  }
  if (auto e = ReadTimeout(params, profile, skill.get(), *skill_stats_, &out.request, &out.auto_timeout)) return *e;
  if (auto e = ReadLimits(params, profile, skill.get(), *skill_stats_, &out.request, &out.auto_memory)) return *e;
  if (auto e = ReadWorkspace(params, config_.workspace_roots, &out.request)) return *e;
  // "wait" (the workspace's lease, Daemon::WorkspaceLeaseOf) is read where
  // the lease is taken; here only checked.
  if (Expected<std::optional<bool>> wait = GetBool(params, "wait", false); !wait.ok()) return wait.error();
  if (auto e = ReadOutputBudget(params, profile, &out.budget)) return *e;
  if (skill != nullptr && skill->manifest.network.has_value()) {
    if (auto e = ReadNetwork(&*skill->manifest.network, "the skill's network", profile, &out.narrowed)) return *e;
  } else if (auto e = ReadNetwork(FindParam(params, "network"), "params.network", profile, &out.narrowed)) {
    return *e;
  }
  ReadSkillSeccomp(skill.get(), profile, &out.narrowed);
  if (auto e = ReadBreakers(params, profile, &out.request)) return *e;
  if (skill != nullptr) {
    out.request.argv = SkillArgv(*skill, profile, SkillRoute{out.environment.get(), out.narrowed.has_value()});
  }
  out.skill = std::move(skill);
  // Last: every param has read, and nothing has run.
  if (auto e = CheckRequirements(out)) return *e;
  return out;
}

Expected<Daemon::RunWork> Daemon::SandboxRun(const json::value& raw, const std::string& request_id) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"profile", "argv", "env", "cwd", "stdin", "stdin_base64", "timeout_ms",
                                         "output_bytes", "limits", "workspace", "wait", "network", "breakers", "npu",
                                         "gpu", "environment"})) {
    return *bad;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ParseRunParams(*params, request_id));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stdin_text, GetString(*params, "stdin", false));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> stdin_b64, GetString(*params, "stdin_base64", false));
  std::string stdin_data = stdin_text.value_or("");
  if (stdin_b64.has_value()) {
    if (stdin_text.has_value()) return InvalidParam("params", "stdin_base64", "cannot be given with stdin");
    if (!absl::Base64Unescape(*stdin_b64, &stdin_data)) return InvalidParam("params", "stdin_base64", "is not base64");
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunChips chips, ChipsOfRun(*params, p.served->profile));
  if (!chips.empty() && p.environment != nullptr) {
    return InvalidParam("params", "environment", "cannot be given with accelerators (npu, gpu)");
  }
  return RunWork([this, p = std::move(p), chips = std::move(chips), stdin_data = std::move(stdin_data)](int cancel_fd) {
    if (chips.empty()) return RunToJson(p, stdin_data, cancel_fd);  // the pool, as always
    return SandboxRunAccelerated(p, chips, stdin_data, cancel_fd);
  });
}

Expected<json::value> Daemon::SandboxRunAccelerated(const RunParams& p, const RunChips& chips,
                                                    const std::string& stdin_data, int cancel_fd) {
  const Profile& profile = p.served->profile;
  runtime::ExecRequest request = p.request;
  request.cancel_fd = cancel_fd;
  WatchForTheReader(&request);
  absl::StatusOr<AcceleratedRun> run = RunWithAccelerators(*inventory_, profile, chips, request, stdin_data, p.budget);
  if (!run.ok()) {
    if (absl::IsResourceExhausted(run.status())) return OutOfResources(run.status());
    // A chip that is gone or unusable fails the whole execution, naming it.
    const int code = absl::IsInvalidArgument(run.status()) ? kInvalidParams : kSetupFailed;
    return Error{code, std::string(run.status().message()), nullptr};
  }
  json::object out = CapturedToJson(run->captured, profile.name);
  out["accelerators"] = run->mapping;
  return json::value(std::move(out));
}

// The pool of the run's profile, or, for a run with a spec of its own (a
// narrower network policy, an environment: Daemon::RunParams::narrowed),
// a sandbox made for it (the cold path), attached to its own policy's
// gateway and taking its workspace at hand-off as a pooled one would.
runtime::Runner Daemon::RunnerOf(const RunParams& p) {
  if (p.narrowed.has_value()) {
    runtime::ZygoteOptions options;
    options.accept_workspace = p.request.workspace.has_value();
    return runtime::FreshSandboxRunner(*p.narrowed, options);
  }
  runtime::Pool* pool = p.served->pool.get();  // held by p
  return [pool](const runtime::ExecRequest& r) { return pool->Run(r); };
}

Expected<json::value> Daemon::RunToJson(const RunParams& p, const std::string& stdin_data, int cancel_fd) {
  runtime::Pool* pool = p.served->pool.get();  // held by p
  runtime::Runner runner = RunnerOf(p);
  runtime::ExecRequest request = p.request;
  request.cancel_fd = cancel_fd;
  WatchForTheReader(&request);
  runtime::CaptureOptions capture;
  capture.budget = p.budget;
  if (p.live != nullptr) {
    capture.on_kept = [live = p.live](int stream, absl::string_view kept) {
      std::lock_guard<std::mutex> lock(live->mu);
      (stream == 0 ? live->out : live->err).append(kept.data(), kept.size());
      for (auto& [id, watcher] : live->watchers) watcher();
    };
  }
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(runner, request, stdin_data, capture);
  if (!run.ok()) return FromRunStatus(run.status());
  // A sandbox the host had no room to make (EMFILE, EAGAIN from clone...)
  // is the daemon's failure, not the request's.
  const runtime::ExecResult& r = run->result;
  if (r.reason == runtime::ExitReason::kSetupFailed && absl::IsResourceExhausted(r.setup_error)) {
    return OutOfResources(r.setup_error);
  }
  json::object out = CapturedToJson(*run, pool->name());
  if (p.environment != nullptr) out["environment"] = p.environment->Reference();
  return json::value(std::move(out));
}

Expected<Daemon::RunWork> Daemon::SkillCall(const json::value& raw, const Request& r) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"skill", "profile", "argv", "env", "cwd", "timeout_ms", "output_bytes",
                                         "method", "params", "limits", "workspace", "wait", "network", "breakers",
                                         "progress_token", "environment"})) {
    return *bad;
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::shared_ptr<const skills::Skill> skill, SkillOfCall(*params));
  CUBICLE_RPC_ASSIGN_OR_RETURN(RunParams p, ParseRunParams(*params, r.request_id, std::move(skill)));
  if (auto refused = RefuseAccelerated(p.served->profile, "skill.call")) return *refused;
  CUBICLE_RPC_ASSIGN_OR_RETURN(SkillInvocation call, ReadSkillRequest(*params));
  CUBICLE_RPC_ASSIGN_OR_RETURN(call.progress, ProgressTo(*params, r.notify, r.request_id, ""));
  SkillAudit audit{r.client, call.method, params->contains("argv") ? params->at("argv") : json::value(nullptr),
                   call.params};
  if (p.environment != nullptr) audit.environment = p.environment->Reference();
  if (p.skill != nullptr) {
    // Checked when the skill was loaded: refused here, before anything
    // runs, and written to the audit trail like any refusal.
    if (std::optional<Error> refused = StaticPolicyRefusal(*p.skill, p.served->profile)) {
      AuditSkillCall(audit, p.request.request_id, p.served->profile.name, p.skill.get(),
                     Expected<json::value>(*refused), absl::ZeroDuration());
      return *std::move(refused);
    }
  }
  return RunWork([this, p = std::move(p), call = std::move(call), audit = std::move(audit)](int cancel_fd) {
    const absl::Time start = absl::Now();
    Expected<json::value> outcome = CallSkill(p, call, cancel_fd);
    NoteAutoLimits(p, &outcome);
    AuditSkillCall(audit, p.request.request_id, p.served->profile.name, p.skill.get(), outcome, absl::Now() - start);
    return outcome;
  });
}

Expected<json::value> Daemon::CallSkill(const RunParams& p, const SkillInvocation& call, int cancel_fd) {
  if (p.skill != nullptr && !p.skill->manifest.calls.empty()) return CallSkillProcess(p, call, cancel_fd);
  // Each skill is a fresh process, so a fixed id cannot collide.
  const json::value id = 1;
  const std::string line = rpc::Request(id, call.method, call.params) + "\n";
  std::optional<json::object> response;
  bool overlong = false;
  uint64_t notifications = 0;
  std::string stdout_logs;  // the skill's other stdout lines, kept as logs
  runtime::CaptureOptions options;
  options.budget = p.budget;
  options.max_line = kMaxSkillLine;
  options.on_stdout_line = [&](absl::string_view text, bool too_long) {
    if (too_long) {
      overlong = true;
      return true;
    }
    response = MatchResponse(text, id);
    if (response.has_value()) return true;  // answered: the sandbox may go, through its cancel fd
    if (std::optional<SkillMessage> message = ParseSkillMessage(text); message.has_value() && !message->request) {
      ++notifications;
      if (call.progress) call.progress(message->object);
      return false;
    }
    if (stdout_logs.size() < p.budget) {
      absl::StrAppend(&stdout_logs, text.substr(0, p.budget - stdout_logs.size()), "\n");
    }
    return false;
  };
  runtime::Pool* pool = p.served->pool.get();  // held by p
  runtime::Runner runner = RunnerOf(p);
  runtime::ExecRequest request = p.request;
  request.cancel_fd = cancel_fd;  // this execution's own eventfd, as the line hook needs
  WatchForTheReader(&request);
  absl::StatusOr<runtime::CapturedRun> run = runtime::RunCaptured(runner, request, line, options);
  if (!run.ok()) return FromRunStatus(run.status());
  if (!response.has_value()) {
    return SkillFailed(run->result, run->out, run->err, overlong, p.request.timeout);
  }
  SkillAnswer answer{*std::move(response), TextOrBase64(run->err), run->err_truncated, TextOrBase64(stdout_logs),
                     run->result.wall, notifications};
  json::object out = SkillAnswerJson(answer, pool->name(), p.skill.get());
  if (p.environment != nullptr) out["environment"] = p.environment->Reference();
  out["usage"] = UsageJson(run->result);
  return json::value(std::move(out));
}

}  // namespace cubicle::rpc
