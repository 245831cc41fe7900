#include "rpc/skill_catalog.h"

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "egress/policy.h"
#include "egress/policy_json.h"
#include "namespaces/exec_request.h"
#include "rpc/skill_static_policy.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// What a call may still add to the execution request beside the skill's
// command and environment: its own env, cwd and the search path.
constexpr size_t kRequestRoom = 4096;

absl::Status FieldError(absl::string_view field, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", problem));
}

size_t StringsBytes(const std::vector<std::string>& strings) {
  size_t n = 0;
  for (const std::string& s : strings) n += s.size() + 1;
  return n;
}

}  // namespace

seccomp::Policy SkillSeccompOf(const skills::Skill& skill, const Profile& profile) {
  return skill.manifest.strict_seccomp ? seccomp::Policy::kStrict : profile.spec.seccomp;
}

cgroups::Limits SkillLimitsOf(const skills::SkillLimits& limits) {
  cgroups::Limits out;
  out.memory_max = limits.memory;
  out.memory_high = limits.memory_high;
  out.pids_max = limits.pids;
  out.cpus = limits.cpus;
  out.cpu_weight = limits.cpu_weight;
  return out;
}

json::object LimitsToJson(const cgroups::Limits& limits) {
  json::object out;
  if (limits.memory_max) out["memory"] = *limits.memory_max;
  if (limits.memory_high) out["memory_high"] = *limits.memory_high;
  if (limits.pids_max) out["pids"] = *limits.pids_max;
  if (limits.cpus) out["cpus"] = *limits.cpus;
  if (limits.cpu_weight) out["cpu_weight"] = *limits.cpu_weight;
  return out;
}

absl::Status CheckSkillFits(const skills::Skill& skill, const Profile* profile,
                            const environments::Catalog* environments) {
  const skills::Manifest& m = skill.manifest;
  if (profile == nullptr) {
    return FieldError("profile", absl::StrCat("no profile named '", m.profile, "' is configured"));
  }
  if (!profile->npus.empty() || !profile->gpus.empty()) {
    return FieldError("profile", absl::StrCat("'", m.profile, "' passes accelerators through, which skill.call "
                                                              "does not take"));
  }
  if (!m.limits.empty()) {
    absl::StatusOr<cgroups::Limits> tightened = TightenLimits(profile->spec.limits, SkillLimitsOf(m.limits));
    if (!tightened.ok()) return FieldError("limits", tightened.status().message());
  }
  if (m.limits.memory_auto && !profile->spec.limits.memory_max.has_value()) {
    // The estimate is bounded by the ceiling: without one, nothing would.
    return FieldError("limits", absl::StrCat("memory: auto needs a memory limit in profile '", m.profile,
                                             "' (its ceiling), which sets none"));
  }
  if (m.timeout.has_value() && *m.timeout > profile->max_timeout) {
    return FieldError("timeout_ms", absl::StrCat(absl::ToInt64Milliseconds(*m.timeout),
                                                 " exceeds the profile's ceiling of ",
                                                 absl::ToInt64Milliseconds(profile->max_timeout)));
  }
  SkillRoute route;
  if (m.network.has_value()) {
    absl::StatusOr<egress::Policy> policy = egress::PolicyFromJson(*m.network, "network", profile->spec.egress);
    if (!policy.ok()) return policy.status();
    if (absl::Status st = egress::CheckNarrows(profile->spec.egress, *policy); !st.ok()) {
      return FieldError("network", st.message());
    }
    route.own_sandbox = *policy != profile->spec.egress;
  }
  // A skill asking for the strict policy in a profile that has another runs
  // in a sandbox made for it.
  if (SkillSeccompOf(skill, *profile) != profile->spec.seccomp) route.own_sandbox = true;
  std::shared_ptr<const environments::Environment> environment;
  if (m.environment.has_value()) {
    const environments::Catalog none;
    absl::StatusOr<std::shared_ptr<const environments::Environment>> found =
        (environments != nullptr ? environments : &none)->Find(*m.environment);
    if (!found.ok()) return FieldError("environment", found.status().message());
    environment = *std::move(found);
    route.environment = environment.get();
    route.own_sandbox = true;
  }
  // The script travels inside one execution request, with the environment.
  std::vector<std::string> env = profile->spec.env;
  SetEnvironmentVariables(*profile, route.environment, &env);
  for (const auto& [name, value] : m.env) env.push_back(absl::StrCat(name, "=", value));
  const size_t bytes = StringsBytes(SkillArgv(skill, *profile, route)) + StringsBytes(env) + kRequestRoom;
  if (bytes > namespaces::kMaxExecRequestBytes) {
    return FieldError("entry", absl::StrCat("the script (", skill.script.size(), " bytes) with the environment "
                                            "needs about ", bytes, " bytes of an execution request, which holds ",
                                            namespaces::kMaxExecRequestBytes));
  }
  return absl::OkStatus();
}

std::shared_ptr<const skills::Catalog> LoadSkillCatalog(const std::string& dir, const ProfileLookup& profiles,
                                                        StaticPolicyChecks* static_checks,
                                                        const environments::Catalog* environments) {
  if (dir.empty()) return std::make_shared<const skills::Catalog>();
  skills::LoadOptions options;
  options.check = [&](const skills::Skill& skill) {
    return CheckSkillFits(skill, profiles(skill.manifest.profile), environments);
  };
  if (static_checks != nullptr) {
    options.check_all = [&](const std::vector<skills::Skill*>& skills) {
      return static_checks->CheckAll(skills, profiles);
    };
  }
  return std::make_shared<const skills::Catalog>(skills::Catalog::Load(dir, options));
}

}  // namespace cubicle::rpc
