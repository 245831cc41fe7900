// The end of a cold `cubicle run`: the process exits as soon as every
// process of its sandbox is dead, and what is left to undo — the
// namespaces' release, the cgroup's removal, the launcher's own address
// space — is undone by a cleaner process after it (docs/architecture.md,
// "The end of a cold run").
#pragma once

#include <sys/types.h>

#include <memory>

#include "base/unique_fd.h"
#include "cgroups/cgroup.h"
#include "cgroups/devices.h"

namespace cubicle::runtime {

class SandboxRemains;
[[noreturn]] void ExitAfterSandbox(SandboxRemains remains, int status);  // below

// What is left of a sandbox whose payload has exited and whose init
// lingers (ExecRequest::return_at_exit): init, the groups. Owning: if it is
// destroyed instead of passed to ExitAfterSandbox, it kills and reaps init
// and removes the groups there and then.
class SandboxRemains {
 public:
  SandboxRemains(pid_t init_pid, UniqueFd init_pidfd, std::unique_ptr<cgroups::SandboxCgroup> cgroup,
                 std::unique_ptr<cgroups::DeviceCgroup> devices);
  SandboxRemains(SandboxRemains&& other) noexcept;
  SandboxRemains& operator=(SandboxRemains&&) noexcept = delete;
  SandboxRemains(const SandboxRemains&) = delete;
  SandboxRemains& operator=(const SandboxRemains&) = delete;
  ~SandboxRemains();

 private:
  friend void ExitAfterSandbox(SandboxRemains remains, int status);
  // KillAndReapInit, then RemoveGroups: the whole teardown, here and now.
  void TearDownNow();
  // Kills init and waits for it: once init is gone, so is every process of
  // its pid namespace. Idempotent.
  void KillAndReapInit();
  // The groups' removal (init must be gone).
  void RemoveGroups();
  // The cleaner's body, on its own stack in the launcher's memory: `arg`
  // is the SandboxRemains it now owns.
  static int Cleaner(void* arg);

  pid_t init_pid_;
  UniqueFd init_pidfd_;
  bool init_reaped_ = false;
  std::unique_ptr<cgroups::SandboxCgroup> cgroup_;
  std::unique_ptr<cgroups::DeviceCgroup> devices_;
};

// Ends this process with `status` once every process of the sandbox is
// dead — init killed and reaped, which takes the rest of its pid namespace
// with it — so that a caller who sees the exit sees nothing of the sandbox
// running. The rest is left to a cleaner process started here, which
// outlives this one by about a millisecond: it holds the sandbox's
// namespaces, so that their release (the mount namespace's RCU grace
// period) is not in init's exit, removes the groups once init is gone,
// and owns this process's address space (it shares it, CLONE_VM), so that
// this process's exit does not unmap it. A `cubicle cleanup` or the next
// start sweeps groups a killed cleaner leaves.
//
// The caller's own descriptors (every fd without FD_CLOEXEC: the pipes it
// was handed; stdio becomes /dev/null) are closed before the cleaner
// starts, so the
// caller's reads reach EOF when this process exits, not when the cleaner
// does. Stdio is flushed first.
//
// Call it with one thread only and nothing else to do: the cleaner runs
// C++ on this process's heap, which is safe only while nothing else does.
// With more threads, as PID 1 of a pid namespace (whose exit would kill
// the cleaner), or if the cleaner cannot be started, the teardown is done
// here, before the exit.
[[noreturn]] void ExitAfterSandbox(SandboxRemains remains, int status);

}  // namespace cubicle::runtime
