// A chip selection turned into additions to a SandboxSpec: the selected
// chips' nodes renumbered from 0 in ascending host id, the management nodes
// the host has, the driver's user-space files read-only, the driver's
// environment, and the device-cgroup allow list. Plain data in, plain data
// out; only stat() of the host's files.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cgroups/devices.h"
#include "npu/chip.h"
#include "npu/host_layout.h"
#include "rootfs/mount_plan.h"
#include "runtime/spec.h"

namespace cubicle::npu {

// "6,4" -> {4, 6}: ids in ascending order, duplicates collapsed. Each a
// decimal id 0..1023. `what` ("--npu") names the flag in errors.
absl::StatusOr<std::vector<int>> ParseChipList(absl::string_view text, absl::string_view what);

struct ChipMapping {
  int host_id = -1;     // /dev/davinci<host_id> on the host
  int sandbox_id = -1;  // /dev/davinci<sandbox_id> inside
  bool operator==(const ChipMapping&) const = default;
};

struct Passthrough {
  Vendor vendor = Vendor::kAscend;
  std::vector<DeviceNode> nodes;      // chips, then management nodes
  std::vector<ChipMapping> mapping;   // ascending host id
  rootfs::MountPlan mounts;           // to append after the spec's /dev
  std::vector<std::string> env;       // "NAME=value", merged by Apply
  std::vector<cgroups::DeviceRule> devices;
};

// Plans the passthrough of `ids` (as ParseChipList returns them). A chip
// whose node is missing is NotFound naming it ("NPU 7: /dev/davinci7 does
// not exist"); nothing is probed here.
absl::StatusOr<Passthrough> PlanPassthrough(const HostLayout& host, Vendor vendor, const std::vector<int>& ids);

// Appends the mounts (after the spec's kDev op, which must exist), the
// device rules, and merges the environment: variables the spec already has
// are extended (LD_LIBRARY_PATH, PYTHONPATH appended; PATH gains
// /usr/local/bin), the others set.
absl::Status ApplyPassthrough(const Passthrough& p, runtime::SandboxSpec* spec);

// "NPU" or "GPU", for messages.
absl::string_view ChipWord(Vendor vendor);

}  // namespace cubicle::npu
