#include "runtime/spec.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "runtime/result.h"

namespace cubicle::runtime {

absl::Status ValidateExecution(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                               const std::string& cwd, absl::Duration timeout) {
  if (argv.empty() || argv[0].empty()) {
    return absl::InvalidArgumentError("no command given: argv is empty");
  }
  CUBICLE_RETURN_IF_ERROR(rootfs::NormalizeSandboxPath(cwd, "working directory").status());
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("timeout ", absl::FormatDuration(timeout), ": must be positive"));
  }
  for (const std::string& kv : env) {
    size_t eq = kv.find('=');
    if (eq == 0 || eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("environment entry '", kv, "': expected NAME=value"));
    }
  }
  return absl::OkStatus();
}

namespace {

// Whose user namespace the sandbox lives in: the host's (bwrap as root
// without --unshare-user), its own, or a joined one; exactly one.
absl::Status ValidateUserNamespaceChoice(const SandboxSpec& spec) {
  if (spec.host_user_namespace) {
    if (spec.namespaces.user || spec.join_userns.has_value() || spec.map_all_host_ids ||
        spec.host_uid.has_value() || spec.host_gid.has_value()) {
      return absl::InvalidArgumentError(
          "a sandbox in the host's user namespace makes or joins no other and maps no ids");
    }
  } else if (spec.namespaces.user == spec.join_userns.has_value()) {
    return absl::InvalidArgumentError(
        spec.join_userns.has_value()
            ? "a sandbox joins an existing user namespace or makes its own, not both"
            : "a sandbox always has a user namespace of its own, or joins a given one (it cannot share the caller's)");
  }
  return absl::OkStatus();
}

absl::Status ValidateJoinedUserNamespace(const SandboxSpec& spec) {
  if (!spec.join_userns.has_value()) return absl::OkStatus();
  // The launcher has left the host's user namespace by then, and with it
  // the privileges these need after clone.
  if (!spec.limits.empty() || spec.breakers.any() || !spec.devices.empty() ||
      spec.egress.mode == egress::NetMode::kAllowlist) {
    return absl::InvalidArgumentError(
        "joining a user namespace cannot be combined with cgroup limits, breakers, devices or an egress allowlist");
  }
  if (spec.map_all_host_ids || spec.host_uid.has_value() || spec.host_gid.has_value()) {
    return absl::InvalidArgumentError("a joined user namespace has its own id maps: no host ids can be given");
  }
  return absl::OkStatus();
}

absl::Status ValidateHostname(const std::string& hostname) {
  if (hostname.empty() || hostname.size() > 64 || hostname.find_first_of("/\n\0 ", 0, 4) != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("hostname '", hostname, "': 1 to 64 characters, no spaces or '/'"));
  }
  return absl::OkStatus();
}

// Namespaces and ids: which namespaces are made or joined, and the
// hostname of the new UTS namespace.
absl::Status ValidateNamespaces(const SandboxSpec& spec) {
  if (!spec.namespaces.mount) {
    return absl::InvalidArgumentError("a sandbox always has its own mount namespace (it cannot be shared)");
  }
  CUBICLE_RETURN_IF_ERROR(ValidateUserNamespaceChoice(spec));
  for (const std::optional<int>& fd : {spec.join_userns, spec.join_pidns, spec.join_userns_after_setup}) {
    if (fd.has_value() && *fd < 0) {
      return absl::InvalidArgumentError(absl::StrCat("namespace fd ", *fd, ": must not be negative"));
    }
  }
  CUBICLE_RETURN_IF_ERROR(ValidateJoinedUserNamespace(spec));
  return ValidateHostname(spec.hostname);
}

absl::Status ValidateRlimits(const std::vector<RlimitSpec>& rlimits) {
  for (const RlimitSpec& r : rlimits) {
    if (r.resource < 0 || r.resource >= RLIM_NLIMITS) {
      return absl::InvalidArgumentError(absl::StrCat("rlimit resource ", r.resource, " is unknown"));
    }
    if (r.soft > r.hard) {
      return absl::InvalidArgumentError(
          absl::StrCat("rlimit ", r.resource, ": soft limit ", r.soft, " exceeds hard limit ", r.hard));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateSeccompPrograms(const std::vector<std::string>& programs) {
  for (const std::string& program : programs) {
    // struct sock_filter is 8 bytes; the kernel takes 1 to BPF_MAXINSNS (4096).
    if (program.empty() || program.size() % 8 != 0 || program.size() / 8 > 4096) {
      return absl::InvalidArgumentError(absl::StrCat("seccomp program of ", program.size(),
                                                     " bytes: must be 1 to 4096 sock_filter (8-byte) instructions"));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateInheritedFds(const std::vector<int>& fds) {
  if (fds.size() > kMaxInheritedFds) {
    return absl::InvalidArgumentError(
        absl::StrCat(fds.size(), " inherited fds; at most ", kMaxInheritedFds, " can be passed on"));
  }
  for (size_t i = 0; i < fds.size(); ++i) {
    const int fd = fds[i];
    if (fd < 3 || std::find(fds.begin(), fds.begin() + i, fd) != fds.begin() + i) {
      return absl::InvalidArgumentError(
          absl::StrCat("inherited fd ", fd, ": must be 3 or above, and listed once (0-2 are the payload's stdio)"));
    }
  }
  return absl::OkStatus();
}

// The payload as PID 1 has no cubicle init, and with it no bridge.
absl::Status ValidatePayloadAsPid1(const SandboxSpec& spec) {
  if (!spec.as_pid_1) return absl::OkStatus();
  if (!spec.namespaces.pid) {
    return absl::InvalidArgumentError("the payload can be PID 1 only in a new pid namespace");
  }
  if (spec.egress.mode == egress::NetMode::kAllowlist) {
    return absl::InvalidArgumentError(
        "an egress allowlist needs cubicle's init (its bridge) and cannot be combined with the payload as PID 1");
  }
  return absl::OkStatus();
}

// The payload's process: rlimits, extra seccomp programs, where it starts,
// which fds it keeps, and whether it is PID 1. Most of these come from the
// bubblewrap front end.
absl::Status ValidatePayloadProcess(const SandboxSpec& spec) {
  CUBICLE_RETURN_IF_ERROR(ValidateRlimits(spec.rlimits));
  CUBICLE_RETURN_IF_ERROR(ValidateSeccompPrograms(spec.seccomp_programs));
  for (const std::string& dir : spec.cwd_fallbacks) {
    CUBICLE_RETURN_IF_ERROR(rootfs::NormalizeSandboxPath(dir, "working directory fallback").status());
  }
  CUBICLE_RETURN_IF_ERROR(ValidateInheritedFds(spec.inherited_fds));
  return ValidatePayloadAsPid1(spec);
}


// What the sandbox's cgroup enforces: limits, the breakers that watch it,
// and the device allowlist.
absl::Status ValidateCgroupSettings(const SandboxSpec& spec) {
  CUBICLE_RETURN_IF_ERROR(cgroups::ValidateLimits(spec.limits, nullptr));
  CUBICLE_RETURN_IF_ERROR(ValidateBreakers(spec.breakers, spec.limits));
  return cgroups::ValidateDeviceRules(spec.devices);
}

absl::Status ValidateEgress(const SandboxSpec& spec) {
  CUBICLE_RETURN_IF_ERROR(egress::ValidatePolicy(spec.egress));
  if (spec.egress.mode != egress::NetMode::kAllowlist) return absl::OkStatus();
  if (!spec.namespaces.net) {
    return absl::InvalidArgumentError(
        "network policy allowlist needs the sandbox's own network namespace (the bridge listens in it)");
  }
  if (spec.seccomp == seccomp::Policy::kNoNetwork || spec.seccomp == seccomp::Policy::kStrict) {
    return absl::InvalidArgumentError(absl::StrCat("network policy allowlist needs seccomp policy 'default': '",
                                                   std::string(seccomp::PolicyName(spec.seccomp)),
                                                   "' refuses socket(AF_INET)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateBreakers(const BreakerSpec& b, const cgroups::Limits& limits) {
  if (b.cpu_share && !(*b.cpu_share > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("breaker cpu share ", *b.cpu_share, ": must be positive"));
  }
  if (b.memory_mark && *b.memory_mark == 0) {
    return absl::InvalidArgumentError("breaker memory mark 0: must be positive");
  }
  if (b.memory_mark && limits.memory_max && *b.memory_mark >= *limits.memory_max) {
    return absl::InvalidArgumentError(absl::StrCat("breaker memory mark ", *b.memory_mark,
                                                   " must be below the memory limit ", *limits.memory_max));
  }
  if (b.io_bytes_per_sec && *b.io_bytes_per_sec == 0) {
    return absl::InvalidArgumentError("breaker io rate 0: must be positive");
  }
  for (absl::Duration d : {b.cpu_window, b.cpu_grace, b.memory_grace, b.io_window}) {
    if (d <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError("breaker windows and graces must be positive");
    }
  }
  return absl::OkStatus();
}

// As bubblewrap does, everything is checked before the first syscall, so
// that a bad spec never leaves half a sandbox. The order of the steps is
// the order in which errors are reported.
absl::Status ValidateSpec(const SandboxSpec& spec) {
  CUBICLE_RETURN_IF_ERROR(ValidateExecution(spec.argv, spec.env, spec.cwd, spec.timeout));
  CUBICLE_RETURN_IF_ERROR(ValidateNamespaces(spec));
  CUBICLE_RETURN_IF_ERROR(ValidatePayloadProcess(spec));
  CUBICLE_RETURN_IF_ERROR(ValidateCgroupSettings(spec));
  CUBICLE_RETURN_IF_ERROR(ValidateEgress(spec));
  return rootfs::ValidatePlan(spec.mounts);
}

absl::string_view ExitReasonName(ExitReason reason) {
  switch (reason) {
    case ExitReason::kExited: return "exited";
    case ExitReason::kSignaled: return "signaled";
    case ExitReason::kTimeout: return "timeout";
    case ExitReason::kSetupFailed: return "setup_failed";
    case ExitReason::kOom: return "oom";
    case ExitReason::kBreakerCpu: return "breaker_cpu";
    case ExitReason::kBreakerMemory: return "breaker_memory";
    case ExitReason::kBreakerIo: return "breaker_io";
    case ExitReason::kKilled: return "killed";
  }
  return "unknown";
}

int ExecResult::ShellStatus() const {
  switch (reason) {
    case ExitReason::kExited: return exit_code;
    case ExitReason::kSignaled: return 128 + signal;
    case ExitReason::kTimeout: return 124;
    case ExitReason::kSetupFailed: return 125;
    case ExitReason::kOom: return 128 + signal;
    case ExitReason::kBreakerCpu:
    case ExitReason::kBreakerMemory:
    case ExitReason::kBreakerIo:
    case ExitReason::kKilled:
      return signal != 0 ? 128 + signal : exit_code;
  }
  return 125;
}

}  // namespace cubicle::runtime
