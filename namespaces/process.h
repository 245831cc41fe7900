// Child-side steps between clone and execve. Every function here is
// async-signal-safe and allocation-free, returns false with a ChildError on
// failure, and is named for the step it performs.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>

#include "base/child_error.h"

namespace cubicle::namespaces {

// Blocks until the launcher says the id maps are written (one byte on the
// control socket). EOF means the launcher died: the caller must exit.
bool WaitForLauncher(int control_fd, ChildError* error);

// Makes the id switch the maps allow: setresgid/setresuid. Until this runs
// the child still carries the launcher's kuid and every file it creates
// fails with EOVERFLOW. Supplementary groups are not touched: setgroups is
// "deny" in cubicle's user namespaces, and as root the launcher cleared
// them before clone (namespaces::ThreadGroupsCleared).
bool BecomeSandboxIds(uid_t uid, gid_t gid, ChildError* error);

// In a user namespace the launcher joined (no maps of ours), the ids are
// what its maps make of the launcher's; each changes only when asked for.
// The uid first, as bwrap does, so that the errors are bwrap's: a switch
// away from uid 0 drops the capabilities, and a gid switch after it fails.
bool SwitchJoinedIds(bool set_uid, uid_t uid, bool set_gid, gid_t gid, ChildError* error);

// Dies with the launcher: PR_SET_PDEATHSIG(SIGKILL). The kernel clears it
// on every credential change, so call it after BecomeSandboxIds.
bool DieWithParent(ChildError* error);

// False (with an error) when the launcher's end of the control socket is
// gone, i.e. it died before DieWithParent took effect.
bool LauncherStillThere(int control_fd, ChildError* error);

bool SetHostname(const char* hostname, ChildError* error);

// Brings up `lo` in the (new, empty) network namespace.
bool BringUpLoopback(ChildError* error);

struct Rlimit {
  int resource;
  rlim_t soft;
  rlim_t hard;
};

bool ApplyRlimits(const Rlimit* limits, size_t count, ChildError* error);

// Drops every capability: bounding set, ambient set, then effective,
// permitted and inheritable; locks the securebits so no later execve (even
// of a setuid binary, or as uid 0) can regain any.
bool DropAllCapabilities(ChildError* error);

bool SetNoNewPrivs(ChildError* error);

// Closes every fd >= 3 except `keep` (which should be O_CLOEXEC).
bool CloseOtherFds(int keep, ChildError* error);

// Closes every fd, 0-2 included, except the `count` fds in `keep`. The
// sandbox's init runs this: it never execs, so close-on-exec never applies,
// and whatever the launcher had open (other sandboxes' pipes in a daemon,
// the write end of the payload's stdin) would stay open for its lifetime.
bool CloseAllFdsExcept(const int* keep, size_t count, ChildError* error);

// Restores default dispositions and an empty signal mask.
void ResetSignals();

// execve, with a PATH search (inside the sandbox) when argv[0] has no '/'.
// With a nonzero `exec_token` each try is instead execveat(AT_FDCWD, path,
// argv, envp, 0, exec_token): the one exec the strict policy's filter lets
// through (seccomp/policy.h, Policy::kStrict). Returns only on failure,
// with errno set.
void ExecSearchingPath(const char* file, char* const argv[], char* const envp[], const char* path,
                       uint64_t exec_token = 0);

}  // namespace cubicle::namespaces
