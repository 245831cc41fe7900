// The skills the daemon serves (docs/skills.md): the skills directory
// ("skills.dir", docs/config.md) loaded by skills/catalog.h, each skill
// checked against the profile it names — that the profile exists, takes
// skill.call, and has room for its limits, timeout, network and script —
// and how a skill becomes the command its sandbox runs. A skill that does
// not fit is reported like a bad manifest and left out; the rest serve.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "absl/status/status.h"
#include "cgroups/limits.h"
#include "rpc/config.h"
#include "rpc/environment_catalog.h"
#include "seccomp/policy.h"
#include "skills/catalog.h"

namespace cubicle::rpc {

// The profile of that name, or null when there is none.
using ProfileLookup = std::function<const Profile*(const std::string& name)>;

// Whether `skill` can run in `profile` (null: no such profile) as a
// request with its manifest's values would, and in the environment it
// names, which must be in `environments` (null: none are served):
// InvalidArgument naming the manifest's field otherwise ("limits: memory:
// 1 GiB exceeds the profile's 256 MiB", "environment: no environment
// named 'sci' (there are none)").
absl::Status CheckSkillFits(const skills::Skill& skill, const Profile* profile,
                            const environments::Catalog* environments = nullptr);

class StaticPolicyChecks;

// `dir` loaded, each skill checked against its profile and environment and
// then, by `static_checks`, its profile's static policy
// (rpc/skill_static_policy.h; null: not checked, which leaves skill.call
// refusing the Python skills of a profile with a policy as not checked
// yet). An empty `dir` (no skills directory configured) is an empty
// catalog.
std::shared_ptr<const skills::Catalog> LoadSkillCatalog(const std::string& dir, const ProfileLookup& profiles,
                                                        StaticPolicyChecks* static_checks,
                                                        const environments::Catalog* environments = nullptr);

// The seccomp policy `skill` runs under in `profile`: the profile's, or
// strict where the manifest asks for it (docs/skills.md, "seccomp").
seccomp::Policy SkillSeccompOf(const skills::Skill& skill, const Profile& profile);

// A manifest's limits as a request's (cgroups' names).
cgroups::Limits SkillLimitsOf(const skills::SkillLimits& limits);

// {"memory", "memory_high", "pids", "cpus", "cpu_weight"}: those set.
boost::json::object LimitsToJson(const cgroups::Limits& limits);

}  // namespace cubicle::rpc
