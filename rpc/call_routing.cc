// What a call needs known before it is started (rpc/daemon.h): the host
// workspace lease it must hold, the profile it would run in (what a
// caller's scope is checked against), and whether it makes a sandbox.
#include <limits.h>
#include <stdlib.h>

#include <boost/json/object.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rpc/daemon.h"

namespace cubicle::rpc {
namespace json = boost::json;

std::optional<Daemon::WorkspaceLease> Daemon::WorkspaceLeaseOf(const json::value& raw) const {
  const json::object* params = raw.if_object();
  if (params == nullptr) return std::nullopt;
  const json::value* workspace = params->if_contains("workspace");
  if (workspace == nullptr || !workspace->is_string()) return std::nullopt;
  char real[PATH_MAX];
  if (::realpath(std::string(workspace->as_string()).c_str(), real) == nullptr) return std::nullopt;
  const json::value* wait = params->if_contains("wait");
  return WorkspaceLease{absl::StrCat("workspace:", real), absl::StrCat("workspace ", real),
                        wait == nullptr || !wait->is_bool() || wait->as_bool()};
}

std::optional<std::string> Daemon::ProfileOf(const std::string& method, const json::value& raw) {
  const json::object* params = raw.if_object();
  auto member = [&](const char* name) -> std::optional<std::string> {
    const json::value* v = params == nullptr ? nullptr : params->if_contains(name);
    if (v == nullptr || !v->is_string()) return std::nullopt;
    return std::string(v->as_string());
  };
  const bool in_session = method == "session.exec" || method == "session.get" || method == "session.destroy" ||
                          absl::StartsWith(method, "files.") || (method == "exec.start" && member("session"));
  if (in_session) {
    // The session's own profile; an unknown session is refused by the
    // method itself, running nothing.
    std::optional<std::string> key = member("session");
    if (!key.has_value() || sessions_ == nullptr) return std::nullopt;
    absl::StatusOr<SessionInfo> info = sessions_->Get(*key);
    if (!info.ok()) return std::nullopt;
    return info->profile;
  }
  if (method == "session.create") return member("profile").value_or(config_.sessions.default_profile);
  if ((method == "skill.call" || method == "skill.session.close") && member("skill_session")) {
    // The skill session's own profile; an unknown one is refused by the
    // method itself.
    std::shared_ptr<SkillSession> session = skill_sessions_->Find(*member("skill_session"));
    if (session == nullptr) return std::nullopt;
    return session->served->profile.name;
  }
  if (method == "skill.session.open" && member("skill")) {
    absl::StatusOr<std::shared_ptr<const skills::Skill>> skill = Skills()->Find(*member("skill"));
    if (!skill.ok()) return std::nullopt;
    return (*skill)->manifest.profile;
  }
  if (method == "skill.session.open") return member("profile").value_or("shell");
  if (method == "skill.call" && member("skill")) {
    // The skill's own profile; an unknown skill is refused by the method
    // itself, running nothing.
    absl::StatusOr<std::shared_ptr<const skills::Skill>> skill = Skills()->Find(*member("skill"));
    if (!skill.ok()) return std::nullopt;
    return (*skill)->manifest.profile;
  }
  if (method == "sandbox.run" || method == "skill.call" || method == "exec.start" || method == "pool.configure" ||
      method == "pool.warm") {
    return member("profile").value_or("shell");
  }
  return std::nullopt;
}

bool Daemon::RunsASandbox(const Call& call) const {
  // A call in a skill session makes none: its sandbox is the session's.
  return call.method == "sandbox.run" || (call.method == "skill.call" && !IsSkillSessionCall(call));
}

}  // namespace cubicle::rpc
