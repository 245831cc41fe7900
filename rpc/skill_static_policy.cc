#include "rpc/skill_static_policy.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "egress/policy.h"
#include "runtime/result.h"
#include "seccomp/policy.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// The checker's answer is a few hundred bytes per violation, at most
// skills::kMaxStaticViolations per script: this holds a full batch.
constexpr uint64_t kCheckOutputBytes = 512 << 10;
// Why it failed, when it did: the end of its stderr.
constexpr size_t kReasonBytes = 512;

std::string Tail(const std::string& s) {
  std::string tail = s.size() <= kReasonBytes ? s : s.substr(s.size() - kReasonBytes);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  return tail;
}

bool IsPython(const skills::Skill& skill) { return skill.manifest.interpreter == skills::Interpreter::kPython; }

// A verdict is kept for this script (its id), this policy, and this
// Python (whose grammar decides what parses).
std::string CacheKey(const skills::Skill& skill, const Profile& profile) {
  if (skill.id.empty()) return "";  // no libcrypto: nothing tells two scripts apart cheaply
  std::vector<std::string> argv = StaticCheckerArgv(profile);
  argv.pop_back();  // the program: the same for every key
  return absl::StrCat(skill.id, "\n", profile.static_policy->digest, "\n", absl::StrJoin(argv, "\x1f"));
}

}  // namespace

std::vector<std::string> StaticCheckerArgv(const Profile& profile) {
  std::vector<std::string> argv =
      profile.interpreter.has_value() ? profile.interpreter->argv : std::vector<std::string>{"python3", "-I"};
  argv.push_back("-c");
  argv.push_back(std::string(skills::StaticCheckerProgram()));
  return argv;
}

StaticCheckRunner SandboxedStaticCheck(absl::Duration timeout) {
  return [timeout](const Profile& profile, const std::vector<std::string>& argv,
                   const std::string& stdin_data) -> absl::StatusOr<runtime::CapturedRun> {
    runtime::SandboxSpec spec = profile.spec;
    // The checker reads stdin and writes stdout: it gets no network, as a
    // request narrowed to "none" would have.
    spec.egress = egress::Policy{};
    if (spec.seccomp != seccomp::Policy::kStrict) spec.seccomp = seccomp::Policy::kNoNetwork;
    runtime::ExecRequest request;
    request.argv = argv;
    request.env = profile.spec.env;
    request.cwd = profile.spec.cwd;
    request.timeout = timeout;
    request.read_stats = false;
    runtime::CaptureOptions capture;
    capture.budget = kCheckOutputBytes;
    return runtime::RunCaptured(runtime::FreshSandboxRunner(std::move(spec)), std::move(request), stdin_data,
                                capture);
  };
}

absl::StatusOr<std::vector<skills::StaticVerdict>> StaticPolicyChecks::RunChecker(
    const Profile& profile, const std::vector<absl::string_view>& scripts) {
  const skills::StaticPolicy& policy = *profile.static_policy;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++last_.sandboxes;
  }
  absl::StatusOr<runtime::CapturedRun> run =
      run_(profile, StaticCheckerArgv(profile), skills::StaticCheckInput(policy, scripts));
  // FailedPrecondition: the sandbox failed, whatever the scripts;
  // Unavailable: the checker failed, maybe for one of them.
  if (!run.ok()) return absl::FailedPreconditionError(absl::StrCat("its sandbox: ", run.status().message()));
  const runtime::ExecResult& r = run->result;
  if (r.reason == runtime::ExitReason::kSetupFailed) {
    return absl::FailedPreconditionError(absl::StrCat("its sandbox could not be set up: ", r.setup_error.message()));
  }
  if (r.reason != runtime::ExitReason::kExited || r.exit_code != 0) {
    std::string why = absl::StrCat("the checker ended (", runtime::ExitReasonName(r.reason), ", status ",
                                   r.ShellStatus(), ")");
    if (const std::string tail = Tail(run->err); !tail.empty()) absl::StrAppend(&why, ": ", tail);
    return absl::UnavailableError(why);
  }
  if (run->out_truncated) return absl::UnavailableError("the checker wrote more than its output budget");
  absl::StatusOr<std::vector<skills::StaticVerdict>> verdicts =
      skills::ParseStaticCheckOutput(run->out, scripts.size(), policy);
  if (!verdicts.ok()) return absl::UnavailableError(verdicts.status().message());
  return verdicts;
}

void StaticPolicyChecks::CheckBatch(const std::vector<skills::Skill*>& skills, const std::vector<Pending>& batch,
                                    std::vector<absl::Status>* out,
                                    std::map<std::string, skills::StaticVerdict>* cache) {
  if (batch.empty()) return;
  absl::StatusOr<std::vector<skills::StaticVerdict>> verdicts =
      absl::DeadlineExceededError(absl::StrCat("this load's checks took more than ",
                                               absl::FormatDuration(kLoadDeadline), " in all"));
  if (absl::Now() < deadline_) {
    std::vector<absl::string_view> scripts;
    for (const Pending& p : batch) scripts.push_back(skills[p.index]->script);
    verdicts = RunChecker(*batch.front().profile, scripts);
  }
  if (verdicts.ok()) {
    for (size_t i = 0; i < batch.size(); ++i) {
      skills[batch[i].index]->static_policy = (*verdicts)[i];
      if (!batch[i].key.empty()) (*cache)[batch[i].key] = (*verdicts)[i];
    }
    return;
  }
  if (batch.size() > 1 && absl::IsUnavailable(verdicts.status())) {
    const auto half = batch.begin() + static_cast<std::ptrdiff_t>(batch.size() / 2);
    CheckBatch(skills, std::vector<Pending>(batch.begin(), half), out, cache);
    CheckBatch(skills, std::vector<Pending>(half, batch.end()), out, cache);
    return;
  }
  // Fails closed: a skill whose check could not be made is not served.
  for (const Pending& p : batch) {
    (*out)[p.index] = absl::UnavailableError(
        absl::StrCat("static_policy: the check in profile '", p.profile->name,
                     "' could not be made, so the skill is left out: ", verdicts.status().message()));
  }
}

std::vector<absl::Status> StaticPolicyChecks::CheckAll(
    const std::vector<skills::Skill*>& skills, const std::function<const Profile*(const std::string&)>& profiles) {
  const absl::Time start = absl::Now();
  deadline_ = start + kLoadDeadline;
  std::vector<absl::Status> out(skills.size());
  std::map<std::string, skills::StaticVerdict> previous;
  {
    std::lock_guard<std::mutex> lock(mu_);
    previous = std::move(cache_);
    cache_.clear();
    last_ = Counts{};
  }
  std::map<std::string, skills::StaticVerdict> cache;
  // What is left to check, by profile: one profile's scripts share a
  // sandbox.
  std::map<std::string, std::vector<Pending>> pending;
  size_t cached = 0;
  for (size_t i = 0; i < skills.size(); ++i) {
    skills::Skill& skill = *skills[i];
    skill.static_policy.reset();
    const Profile* profile = profiles(skill.manifest.profile);
    if (!IsPython(skill) || profile == nullptr || !profile->static_policy.has_value()) continue;
    Pending p{i, profile, CacheKey(skill, *profile)};
    if (auto hit = previous.find(p.key); !p.key.empty() && hit != previous.end()) {
      skill.static_policy = hit->second;
      cache[p.key] = hit->second;
      ++cached;
      continue;
    }
    pending[profile->name].push_back(std::move(p));
  }
  size_t checked = 0;
  for (const auto& [name, each] : pending) {
    std::vector<Pending> batch;
    size_t bytes = 0;
    for (const Pending& p : each) {
      const size_t size = skills[p.index]->script.size();
      if (!batch.empty() && (batch.size() == kBatchScripts || bytes + size > kBatchBytes)) {
        CheckBatch(skills, batch, &out, &cache);
        batch.clear();
        bytes = 0;
      }
      batch.push_back(p);
      bytes += size;
    }
    CheckBatch(skills, batch, &out, &cache);
    checked += each.size();
  }
  size_t denied = 0, failed = 0;
  for (size_t i = 0; i < skills.size(); ++i) {
    if (!out[i].ok()) ++failed;
    if (out[i].ok() && skills[i]->static_policy.has_value() && !skills[i]->static_policy->ok()) ++denied;
  }
  std::lock_guard<std::mutex> lock(mu_);
  cache_ = std::move(cache);
  last_.checked = checked;
  last_.cached = cached;
  last_.denied = denied;
  last_.failed = failed;
  last_.took = absl::Now() - start;
  return out;
}

json::object StaticPolicyChecks::LastLoad() const {
  std::lock_guard<std::mutex> lock(mu_);
  return json::object{{"checked", last_.checked},     {"cached", last_.cached},
                      {"denied", last_.denied},       {"failed", last_.failed},
                      {"sandboxes", last_.sandboxes}, {"ms", absl::ToDoubleMilliseconds(last_.took)}};
}

std::string StaticPolicyChecks::LastLoadSummary() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (last_.checked == 0 && last_.cached == 0) return "";
  std::string summary = absl::StrCat("static policy: ", last_.checked, " skill(s) checked in ", last_.sandboxes,
                                     " sandbox(es) (", absl::ToInt64Milliseconds(last_.took), " ms), ",
                                     last_.cached, " from the cache, ", last_.denied, " denied");
  if (last_.failed > 0) absl::StrAppend(&summary, ", ", last_.failed, " left out (the check failed)");
  return summary;
}

std::optional<Error> StaticPolicyRefusal(const skills::Skill& skill, const Profile& profile) {
  if (!IsPython(skill) || !profile.static_policy.has_value()) return std::nullopt;
  const std::optional<skills::StaticVerdict>& verdict = skill.static_policy;
  if (!verdict.has_value() || verdict->policy_digest != profile.static_policy->digest) {
    return Error{kBusy,
                 absl::StrCat("skill ", skill.Reference(), " has not been checked yet against the static policy ",
                              "profile '", profile.name, "' has now (a reload is checking it); try again"),
                 nullptr};
  }
  if (verdict->ok()) return std::nullopt;
  std::string message = absl::StrCat("skill ", skill.Reference(), " denied by the static policy: ",
                                     skills::DescribeViolation(verdict->violations.front()));
  if (verdict->violations.size() > 1 || verdict->truncated) {
    absl::StrAppend(&message, " and ", verdict->violations.size() - 1, verdict->truncated ? "+" : "",
                    " more (data.violations)");
  }
  return Error{kStaticPolicyDenied, std::move(message),
               json::object{{"reason", "static_policy"},
                            {"profile", profile.name},
                            {"violations", skills::ViolationsToJson(verdict->violations)},
                            {"truncated", verdict->truncated}}};
}

}  // namespace cubicle::rpc
