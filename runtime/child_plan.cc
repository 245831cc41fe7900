#include "runtime/child_plan.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/identity.h"
#include "runtime/zygote.h"
#include "seccomp/policy.h"

namespace cubicle::runtime {
namespace {

void PlanIds(const SandboxSpec& spec, ChildIds* ids) {
  ids->uid = spec.uid;
  ids->gid = spec.gid;
  if (spec.join_userns.has_value()) {
    // As bwrap: ids the caller names differently from its own are switched
    // to; the others stay what the namespace's maps make of the caller's.
    ids->joined_userns = true;
    ids->switch_uid = spec.uid != ::getuid();
    ids->switch_gid = spec.gid != ::getgid();
  }
  ids->userns_after_setup_fd = spec.join_userns_after_setup.value_or(-1);
  ids->set_up_as_root = SetsUpAsRootForDevpts(spec);
  ids->disable_userns = spec.disable_userns;
  ids->assert_userns_disabled = spec.assert_userns_disabled;
}

void PlanSystem(const SandboxSpec& spec, ChildSystem* system) {
  system->pid_namespace = spec.namespaces.pid;
  system->net_namespace = spec.namespaces.net;
  system->uts_namespace = spec.namespaces.uts;
  system->set_hostname = spec.set_hostname;
  system->hostname = spec.hostname;
  system->init_new_session = spec.init_new_session && !spec.as_pid_1;
  system->init_dumpable = spec.inspectable_init;
}

// Whether the route's payload execs after loading the filter: a template
// loads none, and an adopted interpreter runs its request in place (the
// filter it loads is its template's to send: WarmTemplate::SendPlan).
bool ExecsAfterFilter(PayloadRoute route) {
  return route != PayloadRoute::kTemplate && route != PayloadRoute::kAdopted;
}

// The policy's filter for `route`. Under the strict policy a payload that
// execs gets a copy tied to a token of this sandbox's own, made here, in
// the launcher, daemon or fork server, whose memory no payload can read;
// a pooled zygote builds its plan when it is made, so each sandbox, not
// each profile, has its own.
absl::Status PlanSeccomp(const SandboxSpec& spec, PayloadRoute route, PayloadHygienePlan* hygiene) {
  if (spec.seccomp != seccomp::Policy::kStrict || !ExecsAfterFilter(route)) {
    const seccomp::Policy policy = ExecsAfterFilter(route) ? spec.seccomp : seccomp::NoExecVariant(spec.seccomp);
    CUBICLE_ASSIGN_OR_RETURN(const seccomp::BpfProgram* bpf, seccomp::Compiled(policy));
    hygiene->load_seccomp = !bpf->instructions.empty();
    hygiene->seccomp = bpf->AsFprog();
    return absl::OkStatus();
  }
  // An inspectable init is dumpable: its payload could read the token
  // from init's memory (/proc/1/mem) where Yama allows it.
  if (spec.inspectable_init) {
    return absl::InvalidArgumentError("the strict seccomp policy cannot serve a sandbox whose init is inspectable");
  }
  CUBICLE_ASSIGN_OR_RETURN(const seccomp::BpfProgram* strict, seccomp::Compiled(seccomp::Policy::kStrict));
  CUBICLE_ASSIGN_OR_RETURN(hygiene->exec_token, seccomp::NewExecToken());
  CUBICLE_ASSIGN_OR_RETURN(seccomp::BpfProgram own, seccomp::WithExecToken(*strict, hygiene->exec_token));
  hygiene->own_seccomp = std::move(own.instructions);
  hygiene->load_seccomp = true;
  hygiene->seccomp = sock_fprog{static_cast<unsigned short>(hygiene->own_seccomp.size()), hygiene->own_seccomp.data()};
  return absl::OkStatus();
}

absl::Status PlanHygiene(const SandboxSpec& spec, PayloadRoute route, PayloadHygienePlan* hygiene) {
  hygiene->die_with_parent = spec.die_with_parent;
  hygiene->new_session = spec.new_session;
  for (const RlimitSpec& r : spec.rlimits) hygiene->rlimits.push_back({r.resource, r.soft, r.hard});
  CUBICLE_RETURN_IF_ERROR(PlanSeccomp(spec, route, hygiene));
  if (spec.capabilities.has_value()) {
    hygiene->keep_capabilities = true;
    const CapabilitySpec& caps = *spec.capabilities;
    hygiene->capabilities = {caps.bounding, caps.keep, caps.exact, caps.inheritable, caps.ambient};
  }
  // The programs stay in `spec`, which outlives the plan.
  for (const std::string& program : spec.seccomp_programs) {
    hygiene->extra_seccomp.push_back(sock_fprog{static_cast<unsigned short>(program.size() / sizeof(sock_filter)),
                                                reinterpret_cast<sock_filter*>(const_cast<char*>(program.data()))});
  }
  hygiene->argv0 = spec.argv0;
  hygiene->exec_label = spec.exec_label;
  hygiene->inherited_fds = spec.inherited_fds;
  hygiene->cwd_fallbacks = spec.cwd_fallbacks;
  for (const std::string& dir : spec.cwd_fallbacks) hygiene->pwd_entries.push_back(absl::StrCat("PWD=", dir));
  return absl::OkStatus();
}

void PlanWarmCommand(const SandboxSpec& spec, const WarmInterpreter& interpreter, bool is_template,
                     WarmCommand* warm) {
  warm->strings = is_template ? TemplateCommandLine(interpreter, kWarmSocketFd, kTemplateOwnerFd)
                              : WarmCommandLine(interpreter, kWarmSocketFd);
  const size_t argc = warm->strings.size();
  warm->strings.insert(warm->strings.end(), spec.env.begin(), spec.env.end());
  for (size_t i = 0; i < warm->strings.size(); ++i) {
    (i < argc ? warm->argv : warm->envp).push_back(warm->strings[i].data());
  }
  warm->argv.push_back(nullptr);
  warm->envp.push_back(nullptr);
  warm->search_path = SearchPath(spec.env);
  warm->r_library = IsRInterpreter(interpreter);
}

}  // namespace

PayloadRoute ChoosePayloadRoute(const SandboxSpec& spec, const ZygoteOptions& options, bool ahead_of_request) {
  if (spec.as_pid_1) return PayloadRoute::kAsPid1;
  if (options.template_owner >= 0) return PayloadRoute::kTemplate;
  if (options.warm_template != nullptr) return PayloadRoute::kAdopted;
  if (options.interpreter.has_value()) return PayloadRoute::kWarm;
  return ahead_of_request ? PayloadRoute::kArmed : PayloadRoute::kSpawned;
}

const char* PayloadRouteName(PayloadRoute route) {
  switch (route) {
    case PayloadRoute::kSpawned: return "spawned";
    case PayloadRoute::kArmed: return "armed";
    case PayloadRoute::kWarm: return "warm";
    case PayloadRoute::kAdopted: return "adopted";
    case PayloadRoute::kTemplate: return "template";
    case PayloadRoute::kAsPid1: return "as-pid-1";
  }
  return "?";
}

std::string SearchPath(const std::vector<std::string>& env) {
  for (const std::string& kv : env) {
    if (kv.rfind("PATH=", 0) == 0) return kv.substr(5);
  }
  return "/usr/local/bin:/usr/bin:/bin";
}

absl::Status BuildChildPlan(const SandboxSpec& spec, const ZygoteOptions& options, const HostFeatures& features,
                            bool ahead_of_request, ChildPlan* plan) {
  plan->route = ChoosePayloadRoute(spec, options, ahead_of_request);
  // The prepared plan points into spec.mounts, which outlives it.
  plan->rootfs = rootfs::Prepare(spec.mounts, spec.readonly_root, features.new_mount_api, features.openat2);
  // The host's procfs would show the host's processes, not the joined pid
  // namespace's: a procfs there is its own or none.
  plan->rootfs.allow_proc_fallback = options.allow_proc_fallback && !spec.join_pidns.has_value();
  PlanIds(spec, &plan->ids);
  PlanSystem(spec, &plan->system);
  CUBICLE_RETURN_IF_ERROR(PlanHygiene(spec, plan->route, &plan->hygiene));
  if (plan->route == PayloadRoute::kWarm || plan->route == PayloadRoute::kTemplate) {
    PlanWarmCommand(spec, *options.interpreter, plan->route == PayloadRoute::kTemplate, &plan->warm);
  }
  if (plan->route == PayloadRoute::kSpawned || plan->route == PayloadRoute::kArmed) {
    plan->memory.payload_stack.reset(new char[kPayloadStackBytes]);
  }
  plan->memory.prefault = ahead_of_request;
  if (plan->memory.prefault) plan->memory.text = namespaces::ExecutableSegments();
  return absl::OkStatus();
}

}  // namespace cubicle::runtime
