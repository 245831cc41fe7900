// skill.list and skill.describe (docs/protocol.md), and the catalog of
// skills the daemon serves (docs/skills.md): loaded from the skills
// directory at start and at every reload, against the profiles served
// then, and swapped whole. skill.call by name is rpc/run_methods.cc's.
#include <utility>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"
#include "rpc/skill_catalog.h"
#include "runtime/warm.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

// The skill's verdict under its profile's static policy: {"ok": true},
// {"ok": false, "violations": [...]}, or null (no policy, or not Python).
json::value StaticPolicyJson(const skills::Skill& skill) {
  if (!skill.static_policy.has_value()) return nullptr;
  return skills::StaticVerdictToJson(*skill.static_policy);
}

json::object VersionJson(const skills::Skill& skill) {
  const skills::Manifest& m = skill.manifest;
  return json::object{{"version", m.version.ToString()},
                      {"id", skill.id},
                      {"prerelease", m.version.is_prerelease()},
                      {"profile", m.profile},
                      {"description", m.description},
                      {"static_policy", StaticPolicyJson(skill)}};
}

// skill.describe's "auto_limits": what a call of an auto skill would get
// now (into `limits` and `timeout`), with the rule's figures; null for a
// skill with no auto limit. The memory keys stay at the top, as the first
// version had them; the timeout's are in "timeout".
json::value AutoLimitsJson(const skills::Skill& skill, const Profile& profile, const SkillStats& stats,
                           cgroups::Limits* limits, std::optional<absl::Duration>* timeout) {
  const skills::Manifest& m = skill.manifest;
  const std::optional<uint64_t>& ceiling = profile.spec.limits.memory_max;
  const bool memory_auto = m.limits.memory_auto && ceiling.has_value();
  if (!memory_auto && !m.timeout_auto) return nullptr;
  const AutoLimitsConfig& c = stats.config();
  json::object out{{"headroom", c.headroom}, {"min_samples", c.min_samples}, {"window", c.window}};
  if (memory_auto) {
    const MemoryEstimate e = stats.Memory(skill.id, *ceiling);
    limits->memory_max = e.bytes;
    out["memory"] = e.bytes;
    out["basis"] = e.basis;
    out["samples"] = e.samples;
    out["ceiling"] = *ceiling;
    out["floor"] = c.floor;
  }
  if (m.timeout_auto) {
    const TimeEstimate e = stats.Timeout(skill.id, profile.max_timeout);
    *timeout = e.timeout;
    out["timeout"] = json::object{{"timeout_ms", absl::ToInt64Milliseconds(e.timeout)},
                                  {"basis", e.basis},
                                  {"samples", e.samples},
                                  {"ceiling_ms", absl::ToInt64Milliseconds(profile.max_timeout)},
                                  {"floor_ms", absl::ToInt64Milliseconds(c.time_floor)}};
  }
  return out;
}

// skill.describe's result: the skill as loaded, and what a call by name
// gets in `served` (null when its profile went away meanwhile: then the
// manifest's own values), with its history in `stats`.
json::object DescribeJson(const skills::Skill& skill, const ServedProfile* served, const SkillStats& stats) {
  const skills::Manifest& m = skill.manifest;
  json::array requirements;
  for (const skills::Requirement& r : m.requirements) requirements.push_back(json::value(r.Canonical()));
  json::object env;
  for (const auto& [name, value] : m.env) env[name] = value;
  cgroups::Limits limits = SkillLimitsOf(m.limits);
  std::optional<absl::Duration> timeout = m.timeout;
  bool warm = false;
  json::value auto_limits = nullptr;
  // The policy a call gets: unknown (null) without its profile, unless the manifest names it.
  json::value seccomp_policy = skill.manifest.strict_seccomp ? json::value("strict") : json::value(nullptr);
  if (served != nullptr) {
    seccomp_policy = json::value(std::string(seccomp::PolicyName(SkillSeccompOf(skill, served->profile))));
    const Profile& profile = served->profile;
    auto_limits = AutoLimitsJson(skill, profile, stats, &limits, &timeout);
    if (absl::StatusOr<cgroups::Limits> t = TightenLimits(profile.spec.limits, limits); t.ok()) limits = *t;
    if (!timeout.has_value()) timeout = profile.default_timeout;
    // A skill in an environment runs in a sandbox made for the call.
    warm = profile.interpreter.has_value() && !m.environment.has_value() &&
           SkillSeccompOf(skill, profile) == profile.spec.seccomp &&
           runtime::MatchWarmInvocation(*profile.interpreter, SkillArgv(skill, profile, SkillRoute{})).has_value();
  }
  return json::object{{"name", m.name},
                      {"version", m.version.ToString()},
                      {"id", skill.id},
                      {"description", m.description},
                      {"profile", m.profile},
                      {"interpreter", std::string(skills::InterpreterName(m.interpreter))},
                      {"warm", warm},
                      {"entry", m.entry},
                      {"script_bytes", skill.script.size()},
                      {"requires", std::move(requirements)},
                      {"env", std::move(env)},
                      {"limits", LimitsToJson(limits)},
                      {"auto_limits", std::move(auto_limits)},
                      {"history", stats.HistoryJson(skill.id)},
                      {"timeout_ms", timeout.has_value() ? json::value(absl::ToInt64Milliseconds(*timeout))
                                                         : json::value(nullptr)},
                      {"network", m.network.value_or(nullptr)},
                      {"seccomp", std::move(seccomp_policy)},
                      {"static_policy", StaticPolicyJson(skill)},
                      {"environment", m.environment.has_value() ? json::value(m.environment->ToString())
                                                                : json::value(nullptr)},
                      {"folder", skill.folder},
                      {"manifest_path", skill.manifest_path},
                      {"manifest", m.document}};
}

}  // namespace

std::shared_ptr<const skills::Catalog> Daemon::Skills() const {
  std::lock_guard<std::mutex> lock(skills_mu_);
  return skills_;
}

Daemon::Catalogs Daemon::ReadCatalogs(const std::string& skills_dir, const std::string& environments_dir,
                                      const std::vector<const Profile*>& profiles) {
  Catalogs next;
  next.environments = LoadEnvironmentSet(environments_dir, profiles);
  next.skills = LoadSkillCatalog(
      skills_dir,
      [&](const std::string& name) -> const Profile* {
        for (const Profile* p : profiles) {
          if (p->name == name) return p;
        }
        return nullptr;
      },
      &static_checks_, next.environments->catalog.get());
  return next;
}

void Daemon::ServeCatalogs(Catalogs next, bool warn) {
  if (warn) {
    WarnEnvironmentErrors(*next.environments->catalog);
    WarnSkillErrors(*next.skills);
  }
  std::shared_ptr<const skills::Catalog> old;
  std::shared_ptr<const EnvironmentSet> old_environments;
  {
    std::lock_guard<std::mutex> lock(skills_mu_);
    old = std::exchange(skills_, std::move(next.skills));
    old_environments = std::exchange(environments_, std::move(next.environments));
  }
  // The old catalogs go here, outside the lock, when no request holds one
  // of their skills or environments.
}

void Daemon::AnnounceCatalogs(const std::function<void(const std::string&)>& info) {
  if (std::shared_ptr<const EnvironmentSet> environments = Environments(); !environments->catalog->dir().empty()) {
    WarnEnvironmentErrors(*environments->catalog);
    info(EnvironmentsSummary());
  }
  if (std::shared_ptr<const skills::Catalog> skills = Skills(); !skills->dir().empty()) {
    WarnSkillErrors(*skills);
    info(SkillsSummary());
  }
}

void Daemon::WarnSkillErrors(const skills::Catalog& catalog) {
  for (const skills::LoadError& e : catalog.errors()) Warn(absl::StrCat("skill left out: ", e.message));
  for (const auto& [name, versions] : catalog.skills()) {
    for (const auto& [version, skill] : versions) {
      if (!skill->static_policy.has_value() || skill->static_policy->ok()) continue;
      const std::vector<skills::StaticViolation>& v = skill->static_policy->violations;
      Warn(absl::StrCat("skill denied by the static policy of profile ", skill->manifest.profile, ": ",
                        skill->Reference(), " (", skill->manifest_path, "): ", skills::DescribeViolation(v.front()),
                        v.size() > 1 ? absl::StrCat(" and ", v.size() - 1, " more") : ""));
    }
  }
}

std::string Daemon::SkillsSummary() const {
  std::shared_ptr<const skills::Catalog> c = Skills();
  if (c->dir().empty()) return "";
  std::string summary = absl::StrCat("skills: ", c->versions(), " version(s) of ", c->skills().size(),
                                     " skill(s) from ", c->dir());
  if (!c->errors().empty()) absl::StrAppend(&summary, ", ", c->errors().size(), " left out (skill.list says why)");
  if (std::string checks = static_checks_.LastLoadSummary(); !checks.empty()) absl::StrAppend(&summary, "; ", checks);
  return summary;
}

json::object Daemon::SkillsHealth() const {
  std::shared_ptr<const skills::Catalog> c = Skills();
  return json::object{{"dir", c->dir().empty() ? json::value(nullptr) : json::value(c->dir())},
                      {"skills", c->skills().size()},
                      {"versions", c->versions()},
                      {"errors", c->errors().size()},
                      {"static_policy", static_checks_.LastLoad()}};
}

Expected<json::value> Daemon::SkillList(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {})) return *bad;
  std::shared_ptr<const skills::Catalog> c = Skills();
  json::array list;
  for (const auto& [name, versions] : c->skills()) {
    json::array each;
    for (const auto& [version, skill] : versions) each.push_back(VersionJson(*skill));
    // What a call by name runs, and its description; a skill with
    // prereleases only shows its highest.
    absl::StatusOr<std::shared_ptr<const skills::Skill>> latest = c->Find(name, skills::VersionSelector());
    const skills::Skill& shown = latest.ok() ? **latest : *versions.rbegin()->second;
    list.push_back(json::object{
        {"name", name},
        {"description", shown.manifest.description},
        {"latest", latest.ok() ? json::value((*latest)->manifest.version.ToString()) : json::value(nullptr)},
        {"versions", std::move(each)}});
  }
  json::array errors;
  for (const skills::LoadError& e : c->errors()) {
    errors.push_back(json::object{{"path", e.path}, {"error", e.message}});
  }
  return json::value(json::object{{"dir", c->dir().empty() ? json::value(nullptr) : json::value(c->dir())},
                                  {"skills", std::move(list)},
                                  {"errors", std::move(errors)}});
}

Expected<json::value> Daemon::SkillDescribe(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"name", "version"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> name, GetString(*params, "name", true));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> version, GetString(*params, "version", false));
  if (!skills::IsSkillName(*name)) {
    return InvalidParam("params", "name", absl::StrCat("'", name->substr(0, 64), "' is not a skill name"));
  }
  absl::StatusOr<skills::VersionSelector> selector = skills::VersionSelector::Parse(version.value_or(""));
  if (!selector.ok()) return InvalidParam("params", "version", selector.status().message());
  absl::StatusOr<std::shared_ptr<const skills::Skill>> found = Skills()->Find(*name, *selector);
  if (!found.ok()) return Error{kNotFound, std::string(found.status().message()), nullptr};
  std::shared_ptr<const ServedProfile> served = profiles_.Find((*found)->manifest.profile);
  return json::value(DescribeJson(**found, served.get(), *skill_stats_));
}

Expected<std::shared_ptr<const skills::Skill>> Daemon::SkillOfCall(const json::object& params) {
  if (FindParam(params, "skill") == nullptr) return std::shared_ptr<const skills::Skill>();
  if (FindParam(params, "argv") != nullptr) {
    return InvalidParam("params", "skill", "cannot be given with argv: a call names a skill or gives a command");
  }
  if (FindParam(params, "profile") != nullptr) {
    return InvalidParam("params", "profile", "cannot be given with skill: the skill's manifest names its profile");
  }
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> reference, GetString(params, "skill", true));
  absl::StatusOr<std::shared_ptr<const skills::Skill>> found = Skills()->Find(*reference);
  if (absl::IsNotFound(found.status())) return Error{kNotFound, std::string(found.status().message()), nullptr};
  if (!found.ok()) return InvalidParam("params", "skill", found.status().message());
  return *std::move(found);
}

}  // namespace cubicle::rpc
