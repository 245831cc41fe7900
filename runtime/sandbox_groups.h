// The cgroups of a sandbox being made, and how each of its processes comes
// to start in them (docs/architecture.md, MakeGroups and PlaceAndRelease). Host side;
// internal to runtime/.
//
// The groups exist before the child does, so no payload instruction runs
// unconfined. On v2 the child is born in its group (CLONE_INTO_CGROUP). As
// root, a hybrid or v1 host's v1 groups are made only after clone, while
// the child builds its root (SandboxCgroup::CreateV2First, then
// CompleteDeferred), and the child joins them at the end of its setup from
// the tasks files sent to it. Otherwise the child joins its v1 groups
// first thing from tasks files opened before clone. Either way writing
// "0" to a tasks file moves the calling thread without the global write
// lock a cgroup.procs write takes, and so without the RCU grace period that
// write waits for after an idle spell. What the child cannot join (a file
// that would not open, clone3 refusing the v2 group) the launcher attaches.
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "cgroups/cgroup.h"
#include "cgroups/devices.h"
#include "runtime/child_plan.h"
#include "runtime/result.h"
#include "runtime/spec.h"

namespace cubicle::runtime {

class SandboxGroups {
 public:
  // Before clone: the sandbox's groups with the spec's limits (or, where
  // this host gives it none, RLIMIT_AS in `plan` and a warning in
  // `created`), the device group of passed-through devices, and the tasks
  // files the child joins from (into `plan->groups`). `keep_stat_files`:
  // open the stat files now, for a reply path that reads them.
  absl::Status Make(const SandboxSpec& spec, bool keep_stat_files, ChildPlan* plan, ExecResult* created);

  // The v2 group's dirfd for CLONE_INTO_CGROUP, or -1.
  int clone_into_fd() const;
  // After clone: whether the child was born in the v2 group. Drops the
  // launcher's copies of the tasks files (the child has its own).
  void Cloned(bool placed_on_v2);

  // Attaches `pid` to what it does not join itself. Nothing while the v1
  // groups are deferred: CompleteDeferred attaches then. Returns whether
  // anything was written (for the step clock).
  absl::StatusOr<bool> AttachRest(pid_t pid);
  // The device group, unless the child joins it.
  absl::Status AttachDevices(pid_t pid);

  // Whether the v1 groups are still to be made (CompleteDeferred).
  bool deferred() const { return deferred_; }
  // The v1 groups, made now; their tasks files go to the child on
  // `control` ('J'), or, where they cannot be opened, the launcher
  // attaches `pid`. New notes go to `created`.
  absl::Status CompleteDeferred(pid_t pid, int control, ExecResult* created);

  // Whether the child joins groups itself and says 'A' when it has.
  bool child_joins() const { return child_joins_; }

  // Files a process joins every group of the sandbox through by writing
  // "0" to each (v2 cgroup.procs, v1 tasks): for one that is not born in
  // them, a warm template's interpreter (runtime/warm_template.h).
  absl::StatusOr<std::vector<UniqueFd>> JoinFiles() const;

  std::unique_ptr<cgroups::SandboxCgroup> TakeCgroup() { return std::move(cgroup_); }
  std::unique_ptr<cgroups::DeviceCgroup> TakeDevices() { return std::move(devices_); }

 private:
  absl::Status MakeDeviceGroup(const SandboxSpec& spec, ExecResult* created);
  void OpenTaskFiles(ChildPlan* plan);
  void KeepStatFiles();

  std::unique_ptr<cgroups::SandboxCgroup> cgroup_;
  std::unique_ptr<cgroups::DeviceCgroup> devices_;
  std::vector<cgroups::SandboxCgroup::TaskFile> task_files_;
  bool keep_stat_files_ = false;
  bool deferred_ = false;         // v1 groups made after clone
  bool child_joins_ = false;      // the child joins its v1 groups (task files opened)
  bool devices_joined_ = false;   // ... and the v1 device group
  bool placed_on_v2_ = false;     // clone3 put it in the v2 group
};

}  // namespace cubicle::runtime
