// From Limits to cgroupfs writes: which hierarchies a sandbox gets a group
// in, and what is written to which file, in order. Pure: the layout says
// where each controller lives; nothing is touched. SandboxCgroup::Create
// applies a plan; tests read one.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cgroups/cgroupfs.h"
#include "cgroups/layout.h"
#include "cgroups/limits.h"

namespace cubicle::cgroups {

struct LimitWrite {
  int hierarchy = -1;  // index into Layout::hierarchies
  std::string file;    // "memory.max"
  std::string value;   // "67108864\n"
  cgroupfs::WriteMode mode = cgroupfs::WriteMode::kReplace;
  // A file some kernels lack: when it is missing the write is skipped and
  // `if_missing` becomes a note of the sandbox (empty: required file).
  std::string if_missing;

  bool operator==(const LimitWrite&) const = default;
};

struct GroupPlan {
  // Where the sandbox gets a group, in creation order: the unified
  // hierarchy whenever there is one (placement and kill), every hierarchy
  // a limit needs, and those that give the outcomes (memory, pids, CPU
  // time) and the v1 freezer (kill) where the host has them.
  std::vector<int> hierarchies;
  std::vector<LimitWrite> writes;  // applied in this order
  std::vector<std::string> notes;  // what the layout forces to degrade
};

// InvalidArgument naming the field when a limit needs a controller this
// host does not offer: "pids_max: needs the pids controller, which this
// host (cgroups v1) does not offer".
absl::StatusOr<GroupPlan> PlanGroups(const Layout& layout, const Limits& limits);

}  // namespace cubicle::cgroups
