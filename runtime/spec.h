// SandboxSpec: one plain value describing one sandbox (DESIGN §3). Every
// front end produces one; every back end consumes one.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "cgroups/limits.h"
#include "egress/policy.h"
#include "runtime/breakers.h"
#include "namespaces/clone.h"
#include "rootfs/mount_plan.h"
#include "seccomp/policy.h"

namespace cubicle::runtime {

struct RlimitSpec {
  int resource = 0;  // RLIMIT_*
  rlim_t soft = 0;
  rlim_t hard = 0;
  bool operator==(const RlimitSpec&) const = default;
};

struct SandboxSpec {
  namespaces::NamespaceSet namespaces;

  // Ids inside the sandbox, and the host ids they map to. Unset host ids
  // mean: the caller's own when rootless; kDefaultHostIdBase + id as root,
  // so that even an escape lands on an unprivileged, unused host id.
  uid_t uid = 1000;
  gid_t gid = 1000;
  std::optional<uid_t> host_uid;
  std::optional<gid_t> host_gid;

  rootfs::MountPlan mounts;
  bool readonly_root = true;

  std::string hostname = "cubicle";
  std::vector<std::string> env;  // "NAME=value"; nothing is inherited
  std::string cwd = "/";
  std::vector<std::string> argv;
  std::vector<RlimitSpec> rlimits;
  // cgroup limits (memory, pids, CPU, IO). Empty: no cgroup is made.
  cgroups::Limits limits;
  // Runtime breakers (they need a cgroup to watch; see breakers.h).
  BreakerSpec breakers;
  seccomp::Policy seccomp = seccomp::Policy::kNoNetwork;

  bool new_session = true;       // setsid(): no controlling terminal
  bool die_with_parent = true;
  absl::Duration timeout = absl::InfiniteDuration();

  // Network egress (egress/): none (lo only) or an allowlist served by the
  // host gateway through a bridge in init. An allowlist needs a network
  // namespace and a seccomp policy that permits AF_INET (kDefault).
  egress::Policy egress;

  bool operator==(const SandboxSpec&) const = default;
};

inline constexpr uid_t kDefaultHostIdBase = 1'000'000;

// The per-execution part of a spec (what a zygote's request carries):
// argv non-empty, cwd absolute without "..", timeout positive, env entries
// NAME=value.
absl::Status ValidateExecution(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                               const std::string& cwd, absl::Duration timeout);

// Rejects what cannot work before anything is created: empty argv, bad
// paths, unknown rlimits, a non-positive timeout, a bad mount plan.
absl::Status ValidateSpec(const SandboxSpec& spec);

}  // namespace cubicle::runtime
