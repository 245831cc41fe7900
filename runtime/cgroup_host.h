// The process-wide view of this host's cgroups that the launcher uses:
// the layout, discovered once, and the start-up sweep of groups left by a
// cubicle that died (SIGKILL) before it could remove them.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cgroups/layout.h"
#include "cgroups/limits.h"

namespace cubicle::runtime {

// Where sandbox groups go: LayoutOptions::parent ("cubicle", under our own
// cgroup) unless this names another, relative to our own cgroup or, with a
// leading '/', to each hierarchy's root.
inline constexpr char kCgroupParentEnv[] = "CUBICLE_CGROUP_PARENT";

struct CgroupHost {
  absl::StatusOr<cgroups::Layout> layout;
  // The layout failed because the caller's configuration (kCgroupParentEnv)
  // is wrong, not the host: sandboxes fail with `layout`'s error instead of
  // degrading to rlimits.
  bool misconfigured = false;
  bool layout_cached = false;           // read from the host cache (runtime/host_cache.h)
  std::vector<std::string> swept;       // stale groups removed at start-up
  std::vector<std::string> sweep_errors;
  // Why the parents could not be made (rootless without a delegated
  // subtree, say), or empty. Not a sweep error: nothing of cubicle's can
  // live under a parent that does not exist, and each sandbox reports the
  // consequence itself (Create fails, or degrades rootless).
  std::string prepare_error;
};

// The layout options this process uses: the defaults, with the parent from
// kCgroupParentEnv when set (checked: InvalidArgument names the variable).
absl::StatusOr<cgroups::LayoutOptions> HostLayoutOptions();

// For `cubicle serve` under systemd's Delegate=yes on a pure cgroup v2
// host, before anything reads the layout: moves this process into a leaf
// of its cgroup and sets kCgroupParentEnv (inherited by the fork servers)
// to the sandboxes' parent beside it (cgroups/delegation.h). Nothing when
// kCgroupParentEnv is set already or nothing needs moving. What it did, for
// the log ("" when nothing).
absl::StatusOr<std::string> TakeDelegatedLeaf();

// Finds the layout (the host cache's, else discovered and its parents
// prepared, then cached) and sweeps stale groups on first use; later calls
// return the same result (thread-safe).
const CgroupHost& SharedCgroupHost();

// Whether this caller can make sandbox groups with the memory and pids
// controllers here; the error says why not (no cgroup mount, a missing
// controller, no writable delegated subtree when rootless).
absl::Status CgroupsUsable();

// The default limits sized to this host, whatever its cgroups: memory
// 1 GiB (at most half the host's RAM) and 1024 pids. Reads only sysconf.
// The daemon's unset ceilings are these (rpc/config.h).
cgroups::Limits HostDefaultLimits();

// The limits a default sandbox gets: HostDefaultLimits() when
// CgroupsUsable(); empty where they could not be enforced (`cubicle probe`
// says so, and explicit limits still warn).
cgroups::Limits DefaultLimits();

}  // namespace cubicle::runtime
