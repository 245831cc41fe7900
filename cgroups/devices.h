// The device cgroup of one sandbox: the kernel refuses to open any device
// node but those allowed, whatever nodes the sandbox can see. cubicle's
// passthrough (npu/) hands a sandbox a few chips; this is the kernel-side
// guarantee that those — and the minimal /dev — are all it can open.
//
// v1 (the `devices` controller): a group "cubicle-<pid>-dev-<seq>" under
// our own devices cgroup, `devices.deny a`, then one `devices.allow` per
// rule. v2 has no such files: a BPF_PROG_TYPE_CGROUP_DEVICE program,
// assembled here and loaded with the raw bpf() syscall, is attached to the
// sandbox's own v2 group and goes away with it.
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
  // Where a v1 devices hierarchy is mounted (/proc/self/mountinfo), makes
  // the group there and writes the rules. Otherwise, with a v2 group
  // (`v2_dir_fd`, the sandbox's), attaches the device program to it.
  // FailedPrecondition when neither is possible. On failure nothing is left
  // behind.
  static absl::StatusOr<std::unique_ptr<DeviceCgroup>> Create(const std::vector<DeviceRule>& allow,
                                                              int v2_dir_fd = -1);

  DeviceCgroup(const DeviceCgroup&) = delete;
  DeviceCgroup& operator=(const DeviceCgroup&) = delete;
  // Remove(), best effort.
  ~DeviceCgroup();

  // Writes `pid` to the v1 group's cgroup.procs (v2: nothing to do, the
  // sandbox is placed in its v2 group with its other controllers).
  absl::Status Attach(pid_t pid);
  // Removes the group once it is empty (bounded wait); idempotent.
  absl::Status Remove();

  const std::string& path() const { return path_; }  // empty on v2
  bool v2() const { return path_.empty(); }

 private:
  DeviceCgroup() = default;
  std::string path_;
  bool removed_ = false;
};

// Removes the v1 device groups ("cubicle-<pid>-dev-<seq>") whose owner is
// gone — a cubicle killed with SIGKILL — once they are empty (their
// sandboxes died with their owner, or SweepStale killed them), and the
// shared parent when it is left empty. Returns the names removed; a group
// that still holds processes is an error naming it and stays. Nothing to do
// (an empty list) where there is no v1 devices hierarchy.
struct DeviceSweep {
  std::vector<std::string> removed;
  std::vector<std::string> failed;  // "name: why"
};
// DeviceCgroup::Create runs it once per process; `cubicle cleanup` too.
absl::StatusOr<DeviceSweep> SweepStaleDeviceGroups();

// The cgroup v2 device program for `allow`: default deny; an access is
// allowed when its type, major, minor (unless the rule's is "*") match a
// rule and its access bits are within the rule's. Exposed for tests.
struct DeviceProgram {
  std::vector<uint64_t> raw;  // struct bpf_insn, 8 bytes each
};
DeviceProgram AssembleDeviceProgram(const std::vector<DeviceRule>& allow);

// Loads the program (BPF_PROG_LOAD, BPF_PROG_TYPE_CGROUP_DEVICE) and
// attaches it (BPF_PROG_ATTACH, BPF_CGROUP_DEVICE) to the v2 group open as
// `cgroup_fd`. The attachment holds the program; no fd stays open.
absl::Status AttachDeviceProgram(int cgroup_fd, const std::vector<DeviceRule>& allow);

}  // namespace cubicle::cgroups
