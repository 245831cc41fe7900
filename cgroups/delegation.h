// A delegated cgroup v2 subtree whose root holds the daemon itself.
//
// systemd's Delegate=yes hands a service its own cgroup, with the service's
// main process in it. cgroup v2 enables controllers for child groups only
// from a group that holds no processes (the "no internal processes" rule),
// so the sandboxes' parent below it cannot get memory or pids: writing
// cgroup.subtree_control fails with EBUSY. systemd ≥ 254 can start the
// process in a subgroup (DelegateSubgroup=); Debian 12's 252 cannot. As crun
// and podman do, the daemon then moves itself into a leaf of its own,
// <own>/daemon, and makes the sandboxes' groups beside it, under
// <own>/cubicle, named absolutely so that every process it starts (fork
// servers, which are born in the leaf) agrees on where they are.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cgroups/layout.h"

namespace cubicle::cgroups {

struct LeafMove {
  std::string leaf;    // the directory `pid` now lives in
  std::string parent;  // the sandboxes' parent, from the hierarchy's root: LayoutOptions::parent
};

// Moves `pid` (the calling process; its threads follow) into
// <own>/`leaf_name` when `layout` is a pure v2 host, our cgroup is not the
// root, the memory and pids controllers are offered to it but not yet
// enabled for its children, and `pid` is the only process in it. nullopt
// when any of that does not hold: nothing needs moving, or something else
// shares the cgroup (PrepareParents' EBUSY error then says what to do).
// Errors carry the failing step and errno.
absl::StatusOr<std::optional<LeafMove>> MoveIntoLeaf(const Layout& layout, pid_t pid,
                                                     absl::string_view leaf_name = "daemon");

}  // namespace cubicle::cgroups
