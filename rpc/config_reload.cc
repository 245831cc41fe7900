#include "rpc/config_reload.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace cubicle::rpc {

std::vector<std::string> RestartOnlyChanges(const DaemonConfig& running, const DaemonConfig& next) {
  std::vector<std::string> changed;
  auto check = [&](const char* name, bool same) {
    if (!same) changed.push_back(name);
  };
  // The socket is bound, the execution queue and the fd budget sized,
  // the listeners' limits given, the state directory locked and the
  // zygotes' /workspace mountpoint decided once, at start.
  check("socket.path", running.socket_path == next.socket_path);
  check("socket.mode", running.socket_mode == next.socket_mode);
  check("concurrency.max_concurrent", running.max_concurrent == next.max_concurrent);
  check("concurrency.max_queue", running.max_queue == next.max_queue);
  check("connections.on_disconnect", running.on_disconnect == next.on_disconnect);
  check("connections.line_timeout_ms", running.line_timeout == next.line_timeout);
  check("connections.idle_timeout_ms", running.idle_timeout == next.idle_timeout);
  check("shutdown.drain_timeout_ms", running.drain_timeout == next.drain_timeout);
  check("workspace_roots", running.workspace_roots == next.workspace_roots);
  // The sessions' profile defaults to "python" or the first by name: it
  // matters only where there are sessions.
  SessionsConfig a = running.sessions, b = next.sessions;
  if (!a.enabled() && !b.enabled()) a.default_profile = b.default_profile;
  check("sessions", a == b);
  check("npu", running.npu == next.npu);
  check("skills.tz", running.skills_tz == next.skills_tz);
  check("skills.sessions", running.skill_sessions == next.skill_sessions);
  check("skills.max_call_depth", running.skills_max_call_depth == next.skills_max_call_depth);
  check("skills.max_calls", running.skills_max_calls == next.skills_max_calls);
  check("skills.auto_limits", running.auto_limits == next.auto_limits);
  return changed;
}

ProfileChange CompareProfiles(const Profile& running, const Profile& next) {
  const runtime::PoolConfig& a = running.pool;
  const runtime::PoolConfig& b = next.pool;
  // What the zygotes are made from (rpc/config.h ZygoteRecipeOf): the rest
  // of ZygoteRecipeOf comes from restart-only settings. The spec's timeout
  // is only each request's default (default_timeout): no zygote reads it.
  runtime::SandboxSpec spec = running.spec;
  spec.timeout = next.spec.timeout;
  const bool same_sandbox = spec == next.spec && running.interpreter == next.interpreter &&
                            a.zygote.interpreter == b.zygote.interpreter &&
                            a.zygote.allow_proc_fallback == b.zygote.allow_proc_fallback &&
                            a.refill_parallelism == b.refill_parallelism;
  if (!same_sandbox) return ProfileChange::kReplaced;
  if (a.min_idle != b.min_idle || a.max_idle != b.max_idle || a.max_total != b.max_total || a.max_age != b.max_age) {
    return ProfileChange::kResized;
  }
  const bool same_requests = running.default_timeout == next.default_timeout &&
                             running.max_timeout == next.max_timeout && running.output_bytes == next.output_bytes &&
                             running.npus == next.npus && running.gpus == next.gpus &&
                             running.static_policy == next.static_policy && running.python_path == next.python_path;
  return same_requests ? ProfileChange::kSame : ProfileChange::kUpdated;
}

bool ReloadPlan::changes_nothing() const {
  return added.empty() && removed.empty() && replaced.empty() && resized.empty() && updated.empty();
}

std::string ReloadPlan::Summary() const {
  if (changes_nothing()) return "no profile changed";
  std::vector<std::string> parts;
  for (const auto& [what, names] : {std::pair{"added", &added},
                                    {"removed", &removed},
                                    {"replaced", &replaced},
                                    {"resized", &resized},
                                    {"updated", &updated}}) {
    if (!names->empty()) parts.push_back(absl::StrCat(what, ": ", absl::StrJoin(*names, ", ")));
  }
  return absl::StrCat("profiles ", absl::StrJoin(parts, "; "));
}

ReloadPlan PlanReload(const std::map<std::string, Profile>& running, const std::map<std::string, Profile>& next) {
  ReloadPlan plan;
  for (const auto& [name, profile] : running) {
    if (next.count(name) == 0) plan.removed.push_back(name);
  }
  for (const auto& [name, profile] : next) {
    auto before = running.find(name);
    if (before == running.end()) {
      plan.added.push_back(name);
      continue;
    }
    switch (CompareProfiles(before->second, profile)) {
      case ProfileChange::kSame:
        break;
      case ProfileChange::kUpdated:
        plan.updated.push_back(name);
        break;
      case ProfileChange::kResized:
        plan.resized.push_back(name);
        break;
      case ProfileChange::kReplaced:
        plan.replaced.push_back(name);
        break;
    }
  }
  return plan;
}

}  // namespace cubicle::rpc
