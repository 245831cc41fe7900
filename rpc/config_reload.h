// What a configuration reload (SIGHUP; docs/config.md, "Reloading") would
// change, worked out from the running configuration and the new one before
// anything is touched: the settings only a restart can change, and what
// becomes of each profile. Pure: no pool, no sandbox, no host state.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "rpc/config.h"

namespace cubicle::rpc {

// The settings of `next` that differ from `running` and that only a
// restart can change — where the daemon listens, how much it runs at
// once, how connections and the drain behave, workspace roots, sessions,
// the NPU — named as the file names them ("concurrency.max_concurrent").
// Empty: a reload may apply `next`. Ceilings are not among them: they
// bound the profiles, which are compared themselves.
std::vector<std::string> RestartOnlyChanges(const DaemonConfig& running, const DaemonConfig& next);

// What a reload does to a profile present before and after.
enum class ProfileChange {
  kSame,
  // Only what requests read (timeouts, output budget, chips) and the
  // static policy (which the skills' load after the reload applies): new
  // requests read the new values; the pool stays as it is.
  kUpdated,
  // Its pool's sizes (min_idle, max_idle, max_total, max_age_s), and maybe
  // what requests read: the pool is resized in place.
  kResized,
  // Its sandbox (the spec: mounts, limits, seccomp, network policy...),
  // its interpreter or its refill_parallelism: a new pool serves new
  // requests, and the old one drains.
  kReplaced,
};
ProfileChange CompareProfiles(const Profile& running, const Profile& next);

// The profiles a reload adds, removes, replaces, resizes and updates
// (each at most in one list, by name).
struct ReloadPlan {
  std::vector<std::string> added, removed, replaced, resized, updated;

  bool changes_nothing() const;
  // "profiles added: a; removed: b, c; resized: d", or "no profile changed".
  std::string Summary() const;
};
ReloadPlan PlanReload(const std::map<std::string, Profile>& running, const std::map<std::string, Profile>& next);

}  // namespace cubicle::rpc
