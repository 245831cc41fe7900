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
#include "cgroups/devices.h"
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

// What the payload keeps of its capabilities (bubblewrap's --cap-add and
// --cap-drop, and root's defaults there). Bits are 1 << CAP_*.
struct CapabilitySpec {
  uint64_t bounding = 0;  // the bounding set after setup
  uint64_t keep = 0;      // permitted and effective before execve
  // Also inheritable and ambient, with root's execve privileges locked
  // away (SECBIT_NOROOT): the payload has exactly `keep`, whatever its uid.
  // Off: execve applies the usual rules (uid 0 gets the bounding set,
  // others nothing).
  bool exact = false;
  // Without `exact`: the inheritable and ambient sets (bwrap run as root
  // without --cap-add/--cap-drop leaves all its sets as it got them, which
  // a launcher nested in a sandbox got from the outer one's --cap-add).
  uint64_t inheritable = 0;
  uint64_t ambient = 0;
  bool operator==(const CapabilitySpec&) const = default;
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

  // Device nodes passed through (npu/ fills it with the mounts that show
  // them). Non-empty: a device cgroup allows only these and the minimal
  // /dev's nodes. Empty: no device cgroup.
  std::vector<cgroups::DeviceRule> devices;
  // --- For the bubblewrap front end (cli/bwrap_args.h); the defaults are
  //     cubicle's own behaviour. ---
  // Map every host id to itself instead of one sandbox id: bwrap run as
  // root without --unshare-user, where ids must look like the host's.
  // Root only. The user namespace stays: its capabilities are not the host's.
  bool map_all_host_ids = false;
  // No user namespace at all: the sandbox shares the launcher's (the
  // host's), and its root is the host's root with the host's capabilities,
  // as bwrap run as root without --unshare-user. Root only; needs
  // namespaces.user false and no join_userns, map_all_host_ids or host ids.
  // Only the bubblewrap front end sets it, and only on its explicit,
  // out-of-band opt-in (docs/bwrap.md, docs/security.md).
  bool host_user_namespace = false;
  // Unset: every capability is dropped.
  std::optional<CapabilitySpec> capabilities;
  // False keeps the new UTS namespace's copy of the host's hostname.
  bool set_hostname = true;
  // Raw classic-BPF programs (struct sock_filter arrays), loaded after the
  // `seccomp` policy, in order.
  std::vector<std::string> seccomp_programs;
  // Non-empty: the payload's argv[0]; argv.front() is only the file executed.
  std::string argv0;
  // Where the payload starts when `cwd` cannot be entered, tried in order
  // (bwrap: the caller's cwd, else $HOME, else /). PWD follows.
  std::vector<std::string> cwd_fallbacks;
  // Nothing in the sandbox can create a user namespace: it runs in a
  // nested one, the only one its parent allows (bwrap --disable-userns).
  // Its mounts, hostname and network are set up before, by the sandbox's
  // own namespace; nothing is mounted afterwards (no hand-off workspace).
  bool disable_userns = false;
  // Setup fails unless creating a user namespace fails in the sandbox
  // (bwrap --assert-userns-disabled).
  bool assert_userns_disabled = false;
  // The payload is the sandbox's PID 1 (no cubicle init reaps or reports
  // for it); needs a pid namespace.
  bool as_pid_1 = false;
  // setsid() in the sandbox's init before it forks the payload, so that the
  // payload is in init's new session but not its leader (bwrap
  // --new-session where bwrap has a PID 1 of its own). Not with as_pid_1;
  // new_session (the payload's own setsid) should then be false.
  bool init_new_session = false;
  // Open fds of the launching process (>= 3, not close-on-exec) that the
  // payload keeps at the same numbers, as bwrap passes its inherited fds
  // on. They are inherited at clone: only meaningful to the process that
  // creates the sandbox (the cold path, `cubicle bwrap`), never a pool.
  std::vector<int> inherited_fds;  // at most kMaxInheritedFds
  // Network egress (egress/): none (lo only) or an allowlist served by the
  // host gateway through a bridge in init. An allowlist needs a network
  // namespace and a seccomp policy that permits AF_INET (kDefault).
  egress::Policy egress;
  // Existing namespaces to join instead of making new ones (bwrap's
  // --userns, --pidns, --userns2): fds of the launching process, like
  // inherited_fds, so only for the process that creates the sandbox.
  //  - join_userns: the launcher enters it just before clone, so the
  //    sandbox's new namespaces belong to it; no id maps are written (the
  //    namespace has its own) and ids change only where uid/gid differ
  //    from the launcher's. Needs namespaces.user false, and nothing the
  //    launcher does on the host afterwards (cgroups, devices, egress).
  //  - join_pidns: the sandbox's first process is made in it (under a new
  //    one of its own when namespaces.pid).
  //  - join_userns_after_setup: the sandbox enters it once its root,
  //    hostname and network are set up, before the payload starts.
  std::optional<int> join_userns;
  std::optional<int> join_pidns;
  std::optional<int> join_userns_after_setup;
  // cubicle's init stays dumpable, as bwrap's PID 1 is, so that a caller
  // without CAP_SYS_PTRACE can open /proc/PID/ns/* of the pid bwrap's
  // --info-fd and --json-status-fd report. Off: init is not dumpable.
  // What it opens, and to whom: docs/security.md.
  bool inspectable_init = false;
  // The SELinux context the payload executes in (bwrap --exec-label):
  // written to /proc/thread-self/attr/exec just before execve, through the
  // sandbox's own /proc as bwrap does. Empty: none. (--file-label is a
  // mount option: MountOp::selinux_context.)
  std::string exec_label;

  bool operator==(const SandboxSpec&) const = default;
};

inline constexpr uid_t kDefaultHostIdBase = 1'000'000;
// The most fds a spec may pass on (SandboxSpec::inherited_fds).
inline constexpr size_t kMaxInheritedFds = 64;

// The per-execution part of a spec (what a zygote's request carries):
// argv non-empty, cwd absolute without "..", timeout positive, env entries
// NAME=value.
absl::Status ValidateExecution(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                               const std::string& cwd, absl::Duration timeout);

// Rejects what cannot work before anything is created: empty argv, bad
// paths, unknown rlimits, a non-positive timeout, a bad mount plan.
// Whether breakers `b` can watch a sandbox with `limits`: positive
// thresholds, a memory mark below the memory limit. InvalidArgument says
// which does not hold.
absl::Status ValidateBreakers(const BreakerSpec& b, const cgroups::Limits& limits);

absl::Status ValidateSpec(const SandboxSpec& spec);

}  // namespace cubicle::runtime
