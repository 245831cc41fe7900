// Keeping a chosen set of capabilities across execve (the bubblewrap front
// end's --cap-add/--cap-drop, and root's defaults there). cubicle's own
// sandboxes drop them all (process.h, DropAllCapabilities). Child side:
// async-signal-safe and allocation-free.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "base/child_error.h"

namespace cubicle::namespaces {

struct KeptCapabilities {
  uint64_t bounding = 0;  // 1 << CAP_* bits
  uint64_t keep = 0;      // permitted and effective
  // Also inheritable and ambient, and root's execve privileges locked away
  // (SECBIT_NOROOT): the program executed has exactly `keep`, whatever its
  // uid. Off: execve's usual rules apply (uid 0 gets the bounding set).
  bool exact = false;
  // Without `exact`: the inheritable and ambient sets (each within `keep`
  // for the kernel to allow it).
  uint64_t inheritable = 0;
  uint64_t ambient = 0;
};

// Shrinks the bounding set, then sets the permitted/effective (and, when
// exact, inheritable and ambient) sets. Needs the capabilities to keep in
// the caller's permitted set (a new user namespace has them all).
bool KeepCapabilities(const KeptCapabilities& caps, ChildError* error);

// Moves the caller into a new user namespace nested in its own, in which
// it is `uid`/`gid`: they map to its own ids in the parent (bwrap's second
// user namespace). With `only_one` (bubblewrap's --disable-userns), the
// caller's namespace first allows exactly one more user namespace
// (user.max_user_namespaces = 1): nothing in the new one can create
// another (the parent's count is at its maximum), nor raise the limit (its
// capabilities are the nested namespace's, not the parent's). `proc_fd` is
// a directory fd of a procfs of the caller's pid namespace or an
// ancestor's (the sandbox may have none mounted). Call it last among the
// steps that need the sandbox's own capabilities (mounts, hostname,
// loopback).
bool EnterNestedUserNamespace(int proc_fd, bool only_one, uid_t uid, gid_t gid, ChildError* error);

}  // namespace cubicle::namespaces
