// environment.list and environment.describe (docs/protocol.md), a run's
// environment read from its params or its skill, and a skill's requires
// checked before it runs (docs/skills.md, "Environments"). The set is
// loaded with the skills (Daemon::LoadSkills) and swapped with them.
#include <utility>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "rpc/daemon.h"

namespace cubicle::rpc {
namespace json = boost::json;

namespace {

json::value OrNull(const std::string& s) { return s.empty() ? json::value(nullptr) : json::value(s); }

json::array Strings(const std::vector<std::string>& strings) {
  json::array out;
  for (const std::string& s : strings) out.push_back(json::value(s));
  return out;
}

json::object RevisionJson(const environments::Environment& env) {
  return json::object{{"revision", env.revision},
                      {"description", env.description},
                      {"packages", env.packages.size()},
                      {"interpreter", env.own_interpreter}};
}

json::object DescribeJson(const environments::Environment& env) {
  json::array packages;
  for (const auto& [key, p] : env.packages.packages()) {
    packages.push_back(json::object{{"name", p.name}, {"version", p.version}, {"folder", p.folder}});
  }
  const std::string mount = environments::kMountPoint;
  return json::object{
      {"name", env.name},
      {"revision", env.revision},
      {"reference", env.Reference()},
      {"description", env.description},
      {"path", mount},
      {"prefix", env.prefix},
      {"interpreter", env.own_interpreter ? json::value(mount + "/bin/python3") : json::value(nullptr)},
      {"masks_host_interpreters", env.own_interpreter},
      {"system_site_packages", env.system_site_packages},
      {"python_path", Strings(env.python_path)},
      {"sys_path", Strings(env.SandboxPythonPath())},
      {"site_packages", Strings(env.site_packages)},
      {"packages", std::move(packages)},
      {"notes", Strings(env.notes)}};
}

}  // namespace

std::shared_ptr<const EnvironmentSet> Daemon::Environments() const {
  std::lock_guard<std::mutex> lock(skills_mu_);
  return environments_;
}

void Daemon::WarnEnvironmentErrors(const environments::Catalog& catalog) {
  for (const environments::LoadError& e : catalog.errors()) Warn(absl::StrCat("environment left out: ", e.message));
}

std::string Daemon::EnvironmentsSummary() const {
  std::shared_ptr<const EnvironmentSet> set = Environments();
  const environments::Catalog& c = *set->catalog;
  if (c.dir().empty()) return "";
  std::string summary = absl::StrCat("environments: ", c.revisions(), " revision(s) of ", c.environments().size(),
                                     " environment(s) from ", c.dir());
  if (!c.errors().empty()) {
    absl::StrAppend(&summary, ", ", c.errors().size(), " left out (environment.list says why)");
  }
  return summary;
}

json::object Daemon::EnvironmentsHealth() const {
  std::shared_ptr<const EnvironmentSet> set = Environments();
  const environments::Catalog& c = *set->catalog;
  return json::object{{"dir", OrNull(c.dir())},
                      {"environments", c.environments().size()},
                      {"revisions", c.revisions()},
                      {"errors", c.errors().size()}};
}

Expected<json::value> Daemon::EnvironmentList(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {})) return *bad;
  std::shared_ptr<const EnvironmentSet> set = Environments();
  const environments::Catalog& c = *set->catalog;
  json::array list;
  for (const auto& [name, revisions] : c.environments()) {
    json::array each;
    for (const auto& [revision, env] : revisions) each.push_back(RevisionJson(*env));
    const environments::Environment& latest = *revisions.rbegin()->second;
    list.push_back(json::object{{"name", name},
                                {"description", latest.description},
                                {"latest", latest.revision},
                                {"revisions", std::move(each)}});
  }
  json::array errors;
  for (const environments::LoadError& e : c.errors()) {
    errors.push_back(json::object{{"path", e.path}, {"error", e.message}});
  }
  // What a run on the host's own interpreter has, and what an environment
  // with an interpreter of its own masks.
  json::object host{{"python_version", OrNull(set->host.python_version)},
                    {"interpreters", Strings(set->host.interpreter_files)},
                    {"site_folders", Strings(set->host.site_folders)}};
  return json::value(json::object{{"dir", OrNull(c.dir())},
                                  {"path", environments::kMountPoint},
                                  {"environments", std::move(list)},
                                  {"errors", std::move(errors)},
                                  {"host", std::move(host)}});
}

Expected<json::value> Daemon::EnvironmentDescribe(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"name", "revision"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> name, GetString(*params, "name", true));
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<int64_t> revision, GetInt64(*params, "revision", false, 1));
  if (!skills::IsSkillName(*name)) {
    return InvalidParam("params", "name", absl::StrCat("'", name->substr(0, 64), "' is not an environment name"));
  }
  skills::EnvironmentRef ref{*name, std::nullopt};
  if (revision.has_value()) ref.revision = static_cast<uint64_t>(*revision);
  absl::StatusOr<std::shared_ptr<const environments::Environment>> found = Environments()->catalog->Find(ref);
  if (!found.ok()) return Error{kNotFound, std::string(found.status().message()), nullptr};
  return json::value(DescribeJson(**found));
}

std::optional<Error> Daemon::ReadEnvironment(const json::object& params, const skills::Skill* skill, RunParams* p) {
  Expected<std::optional<std::string>> asked = GetString(params, "environment", false);
  if (!asked.ok()) return asked.error();
  const bool skill_names_one = skill != nullptr && skill->manifest.environment.has_value();
  if (asked->has_value() && skill_names_one) {
    return InvalidParam("params", "environment",
                        absl::StrCat("cannot be given with skill ", skill->Reference(), ", whose manifest names its "
                                     "environment (", skill->manifest.environment->ToString(), ")"));
  }
  if (!asked->has_value() && !skill_names_one) return std::nullopt;
  absl::StatusOr<skills::EnvironmentRef> ref =
      asked->has_value() ? skills::ParseEnvironmentRef(**asked) : *skill->manifest.environment;
  if (!ref.ok()) return InvalidParam("params", "environment", ref.status().message());
  std::shared_ptr<const EnvironmentSet> set = Environments();
  absl::StatusOr<std::shared_ptr<const environments::Environment>> found = set->catalog->Find(*ref);
  if (!found.ok()) {
    std::string message(found.status().message());
    if (set->catalog->dir().empty()) absl::StrAppend(&message, "; the daemon has no environments.dir configured");
    return Error{kNotFound, std::move(message), nullptr};
  }
  p->environment = *std::move(found);
  const Profile& profile = p->served->profile;
  p->narrowed = EnvironmentSpec(p->narrowed.value_or(profile.spec), *p->environment, set->Of(profile.name).masks);
  return std::nullopt;
}

std::optional<Error> Daemon::CheckRequirements(const RunParams& p) const {
  if (p.skill == nullptr || p.skill->manifest.requirements.empty()) return std::nullopt;
  std::shared_ptr<const EnvironmentSet> set = Environments();
  const Profile& profile = p.served->profile;
  std::vector<environments::UnmetRequirement> unmet =
      UnmetSkillRequirements(*p.skill, p.environment.get(), set->Of(profile.name));
  if (unmet.empty()) return std::nullopt;
  std::vector<std::string> messages;
  json::array each;
  for (const environments::UnmetRequirement& u : unmet) {
    messages.push_back(u.message);
    json::value installed = u.installed.has_value() ? json::value(*u.installed) : json::value(nullptr);
    each.push_back(json::object{{"package", u.requirement.name},
                                {"requirement", u.requirement.Canonical()},
                                {"installed", std::move(installed)},
                                {"message", u.message}});
  }
  json::object data{{"unmet", std::move(each)},
                    {"skill", p.skill->Reference()},
                    {"profile", profile.name},
                    {"environment", p.environment != nullptr ? json::value(p.environment->Reference())
                                                             : json::value(nullptr)}};
  return Error{kRequirementsNotMet, absl::StrJoin(messages, "; "), std::move(data)};
}

}  // namespace cubicle::rpc
