// The device cgroup of one sandbox: the kernel refuses to open any device
// node but those allowed, whatever nodes the sandbox can see. cubicle's
// passthrough (npu/) hands a sandbox a few chips; this is the kernel-side
// guarantee that those — and the minimal /dev — are all it can open.
//
// v1 (the `devices` controller): a group "cubicle-<pid>-dev-<seq>" under
// our own devices cgroup, `devices.deny a`, then one `devices.allow` per
// rule. v2 has no such files (a BPF_PROG_TYPE_CGROUP_DEVICE program does the
// job there); it is not implemented yet: Create() says so with
// Unimplemented and the caller decides.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cubicle::cgroups {

struct DeviceRule {
  char type = 'c';          // 'c' or 'b'
  uint32_t major = 0;
  int64_t minor = -1;       // -1: every minor ("*")
  std::string access = "rwm";

  bool operator==(const DeviceRule&) const = default;
};

// "c 240:4 rwm", as devices.allow wants it.
std::string DeviceRuleLine(const DeviceRule& rule);

// Type c or b, access a non-empty subset of "rwm" without repeats.
absl::Status ValidateDeviceRules(const std::vector<DeviceRule>& rules);

// The nodes of cubicle's minimal /dev (null, zero, full, random, urandom,
// tty, the devpts instance and its ptmx): every sandbox with a device
// allow list gets these too.
std::vector<DeviceRule> MinimalDevRules();

class DeviceCgroup {
 public:
  // Finds the devices hierarchy in `mountinfo` / `proc_self_cgroup`
  // (the texts of /proc/self/mountinfo and /proc/self/cgroup), makes the
  // group and writes the rules. Unimplemented where only cgroup v2 is
  // mounted; FailedPrecondition where there is no devices hierarchy. On
  // failure nothing is left behind.
  static absl::StatusOr<std::unique_ptr<DeviceCgroup>> Create(const std::vector<DeviceRule>& allow);

  DeviceCgroup(const DeviceCgroup&) = delete;
  DeviceCgroup& operator=(const DeviceCgroup&) = delete;
  // Remove(), best effort.
  ~DeviceCgroup();

  // Writes `pid` to the group's cgroup.procs.
  absl::Status Attach(pid_t pid);
  // Removes the group once it is empty (bounded wait); idempotent.
  absl::Status Remove();

  const std::string& path() const { return path_; }

 private:
  DeviceCgroup() = default;
  std::string path_;
  bool removed_ = false;
};

}  // namespace cubicle::cgroups
