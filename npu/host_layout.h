// Where the accelerator's files are on this host. Every lookup goes
// through a root directory that stands for "/" (`--npu-root`: "/" in
// production, a fake driver tree in tests and odd layouts); inside a
// sandbox everything appears at its standard path.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "npu/chip.h"

namespace cubicle::npu {

// Standard paths (inside a sandbox, and under the root on the host).
inline constexpr char kAscendDriverDir[] = "/usr/local/Ascend/driver";
inline constexpr char kAscendDriverLib64[] = "/usr/local/Ascend/driver/lib64";
inline constexpr char kAscendVersionInfo[] = "/usr/local/Ascend/driver/version.info";
inline constexpr char kAscendInstallInfo[] = "/etc/ascend_install.info";
inline constexpr char kAscendToolkit[] = "/usr/local/Ascend/ascend-toolkit";
inline constexpr char kAscendToolkitHome[] = "/usr/local/Ascend/ascend-toolkit/latest";
inline constexpr char kDcmiDir[] = "/usr/local/dcmi";

// The management nodes a chip needs beside its own, where the host has them.
inline constexpr const char* kAscendManagementNodes[] = {"davinci_manager", "devmm_svm", "hisi_hdc"};
inline constexpr const char* kNvidiaManagementNodes[] = {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools",
                                                        "nvidia-modeset"};

// The chip's node name: "davinci4", "nvidia0".
std::string ChipNodeName(Vendor vendor, int index);

struct DeviceNode {
  std::string host_path;     // under the root
  std::string sandbox_path;  // "/dev/davinci0"
  uint32_t major = 0;
  uint32_t minor = 0;
  bool operator==(const DeviceNode&) const = default;
};

class HostLayout {
 public:
  // `root` must be an absolute directory; "/" is the host itself. The
  // error names the flag's value.
  static absl::StatusOr<HostLayout> Open(absl::string_view root);

  const std::string& root() const { return root_; }
  // `path` (absolute) under the root: "/dev/davinci4" -> "<root>/dev/davinci4".
  std::string Host(absl::string_view path) const;

  // The character device at <root>/dev/<name>; NotFound when absent, and
  // FailedPrecondition when it is there but not a character device.
  absl::StatusOr<DeviceNode> Node(absl::string_view name, absl::string_view sandbox_name) const;

  // The logic ids of the chip nodes under <root>/dev ("davinciN"/"nvidiaN").
  std::vector<int> ChipNodes(Vendor vendor) const;

  // npu-smi: <root>/usr/local/bin, <root>/usr/local/sbin, then each
  // directory of $PATH under the root. nvidia-smi: <root>/usr/bin, then
  // $PATH. The host path, or nullopt when none is executable.
  std::optional<std::string> FindTool(Vendor vendor) const;
  // The same tool's path as a sandbox sees it: where it was found, less
  // the root ("/usr/local/sbin/npu-smi").
  std::optional<std::string> FindToolInSandbox(Vendor vendor) const;

  // libdcmi.so: <root>/usr/local/dcmi, then the driver's lib64/driver.
  std::optional<std::string> FindDcmi() const;

 private:
  explicit HostLayout(std::string root) : root_(std::move(root)) {}
  std::string root_;  // without a trailing "/" ("" for the host itself)
};

}  // namespace cubicle::npu
