#include "runtime/child_plan.h"

#include <unistd.h>

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

absl::Status PlanHygiene(const SandboxSpec& spec, PayloadHygienePlan* hygiene) {
  CUBICLE_ASSIGN_OR_RETURN(const seccomp::BpfProgram* bpf, seccomp::Compiled(spec.seccomp));
  hygiene->die_with_parent = spec.die_with_parent;
  hygiene->new_session = spec.new_session;
  for (const RlimitSpec& r : spec.rlimits) hygiene->rlimits.push_back({r.resource, r.soft, r.hard});
  hygiene->load_seccomp = !bpf->instructions.empty();
  hygiene->seccomp = bpf->AsFprog();
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
  CUBICLE_RETURN_IF_ERROR(PlanHygiene(spec, &plan->hygiene));
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
