// Creating the sandbox's first process in its new namespaces.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace cubicle::namespaces {

// The namespaces a sandbox may ask for, as CLONE_NEW* bits.
struct NamespaceSet {
  bool user = true;
  bool mount = true;
  bool pid = true;
  bool net = true;
  bool uts = true;
  bool ipc = true;
  bool cgroup = true;

  uint64_t CloneFlags() const;
  bool operator==(const NamespaceSet&) const = default;
};

struct CloneResult {
  pid_t pid = -1;     // 0 in the child, -errno on failure in the parent
  int pidfd = -1;     // parent only; -1 when the kernel has no CLONE_PIDFD
  bool used_clone3 = false;
};

// Forks (fork semantics: no new stack, the child returns 0) into new
// namespaces. Uses clone3 with CLONE_PIDFD (and CLONE_INTO_CGROUP when
// cgroup_fd >= 0); where the kernel has no clone3 (ENOSYS) falls back to
// clone, and then `cgroup_fd` must be handled by the caller. `try_clone3`
// lets a cached probe result skip the doomed first attempt.
// The child must not rely on glibc's cached thread state (no raise(),
// no pthread calls); it should make raw syscalls until execve.
CloneResult CloneInto(uint64_t flags, int cgroup_fd, bool try_clone3);

// CloneInto from a short-lived intermediate process, for a new pid
// namespace under one the caller joined with setns(CLONE_NEWPID): the
// kernel nests a new pid namespace only under the creator's own (active)
// one, so a process must first live in the joined one. The intermediate
// clones with CLONE_PARENT, so the sandbox's first process is the caller's
// own child; this returns (in the caller) once the intermediate is reaped,
// with the sandbox's pid as the caller sees it and its pidfd (a kernel
// without pidfds fails with ENOSYS: nothing else names the process across
// the namespaces). The child returns 0, as with CloneInto.
//
// `join_userns_fd` and `join_pidns_fd` (-1: none) are joined by the
// intermediate itself, so that the caller keeps its own (setns into a user
// namespace is for good, and one into a pid namespace needs privilege in
// the caller's own user namespace): a warm template's sandboxes are made
// in the template's user and pid namespaces this way. With a pid namespace
// to join, a second intermediate, born in it, clones the sandbox; it too
// is the caller's child (CLONE_PARENT), reaped before this returns.
CloneResult CloneViaIntermediate(uint64_t flags, int cgroup_fd, bool try_clone3, int join_userns_fd = -1,
                                 int join_pidns_fd = -1);

// Clears the calling thread's supplementary groups for the clone of a
// sandbox, and puts them back afterwards (Restore, or the destructor).
//
// Why: a user namespace whose /proc/PID/setgroups reads "allow" lets a
// process with CAP_SETGID in it call setgroups(2), which can *drop* a
// group that a file's permissions deny (the CVE-2014-8989 class), so
// cubicle writes "deny" as bwrap does. "deny" can only be written before
// gid_map, and once it is, the child can no longer clear the groups it
// inherited, which as root include gid 0 and still count in every host
// permission check. So the groups go before the child exists: it inherits
// the cloning thread's credentials.
//
// Why this thread only: credentials are per thread in the kernel; the raw
// setgroups syscall changes only the caller (glibc's wrapper would
// broadcast to every thread of a daemon, and a concurrent clone on another
// thread would then lose its groups too, or get them back early). The
// alternatives cost more: an intermediate process that drops its groups and
// clones with CLONE_PARENT adds a fork to every launch; writing "allow"
// and clearing them in the child leaves setgroups open to the payload.
// Needs CAP_SETGID (root); rootless callers cannot clear groups at all.
class ThreadGroupsCleared {
 public:
  // Whether this thread may clear its groups: CAP_SETGID in its user
  // namespace, and that namespace's setgroups reads "allow". Root on the
  // host may; a launcher nested in a sandbox (uid 0 of a user namespace
  // whose setgroups reads "deny") may not, whatever its capabilities, so
  // the sandboxes it makes keep the groups it has.
  static bool Possible();

  ThreadGroupsCleared() = default;
  ThreadGroupsCleared(const ThreadGroupsCleared&) = delete;
  ThreadGroupsCleared& operator=(const ThreadGroupsCleared&) = delete;
  ~ThreadGroupsCleared() { Restore().IgnoreError(); }

  // Saves and clears this thread's groups (no syscall but getgroups when
  // it has none).
  absl::Status Clear();
  // Puts the saved groups back (a no-op unless Clear() cleared some).
  absl::Status Restore();

 private:
  std::vector<gid_t> saved_;
  bool cleared_ = false;
};

// pidfd_send_signal, falling back to kill(pid) where pidfd is -1.
int SignalProcess(int pidfd, pid_t pid, int sig);

// Polls `pidfd` without sleeping for at most `bound_ns`: whether the
// process has exited by then. A sandbox's init takes a fraction of a
// millisecond to exit, and on a virtual machine the wake-up of an idle
// vCPU from a sleeping wait can cost more than that. On one CPU it
// returns at once: the spin would take the CPU from the very exit it
// waits for.
bool SpinUntilExited(int pidfd, int64_t bound_ns);
// The bound a launcher waiting for its sandbox's init uses.
constexpr int64_t kInitExitSpinNs = 1'000'000;

}  // namespace cubicle::namespaces
