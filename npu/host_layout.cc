#include "npu/host_layout.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "rootfs/mount_plan.h"

namespace cubicle::npu {

std::string ChipNodeName(Vendor vendor, int index) {
  return absl::StrCat(vendor == Vendor::kAscend ? "davinci" : "nvidia", index);
}

absl::StatusOr<HostLayout> HostLayout::Open(absl::string_view root) {
  absl::StatusOr<std::string> normal = rootfs::NormalizeSandboxPath(root.empty() ? "/" : root, "--npu-root");
  if (!normal.ok()) {
    // "/" itself is fine here; NormalizeSandboxPath only refuses relative
    // paths, "..", NUL and empty ones.
    return normal.status();
  }
  struct stat st;
  if (::stat(normal->c_str(), &st) != 0) {
    // Bad input, whatever the errno: the caller named a directory that is not there.
    return absl::InvalidArgumentError(ErrnoStatus(errno, absl::StrCat("--npu-root ", *normal)).message());
  }
  if (!S_ISDIR(st.st_mode)) return absl::InvalidArgumentError(absl::StrCat("--npu-root ", *normal, ": not a directory"));
  return HostLayout(*normal == "/" ? "" : *normal);
}

std::string HostLayout::Host(absl::string_view path) const { return absl::StrCat(root_, path); }

absl::StatusOr<DeviceNode> HostLayout::Node(absl::string_view name, absl::string_view sandbox_name) const {
  std::string path = Host(absl::StrCat("/dev/", name));
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::NotFoundError(absl::StrCat(path, " does not exist"));
    return ErrnoStatus(errno, absl::StrCat("lstat(", path, ")"));
  }
  if (!S_ISCHR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, " is not a character device"));
  }
  return DeviceNode{path, absl::StrCat("/dev/", sandbox_name), major(st.st_rdev), minor(st.st_rdev)};
}

std::vector<int> HostLayout::ChipNodes(Vendor vendor) const {
  std::vector<int> ids;
  const std::string prefix = vendor == Vendor::kAscend ? "davinci" : "nvidia";
  std::string dev = Host("/dev");
  DIR* dir = ::opendir(dev.c_str());
  if (dir == nullptr) return ids;
  while (struct dirent* e = ::readdir(dir)) {
    absl::string_view name = e->d_name;
    if (!absl::ConsumePrefix(&name, prefix)) continue;
    int id;
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; }) ||
        !absl::SimpleAtoi(name, &id)) {
      continue;  // davinci_manager, nvidiactl, nvidia-uvm
    }
    ids.push_back(id);
  }
  ::closedir(dir);
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<std::string> HostLayout::FindTool(Vendor vendor) const {
  const char* name = vendor == Vendor::kAscend ? "npu-smi" : "nvidia-smi";
  std::vector<std::string> dirs = vendor == Vendor::kAscend
                                      ? std::vector<std::string>{"/usr/local/bin", "/usr/local/sbin"}
                                      : std::vector<std::string>{"/usr/bin"};
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    for (absl::string_view d : absl::StrSplit(path, ':', absl::SkipEmpty())) {
      if (d[0] == '/' && !absl::StrContains(d, "..")) dirs.emplace_back(d);
    }
  }
  for (const std::string& d : dirs) {
    std::string candidate = Host(absl::StrCat(d, "/", name));
    struct stat st;
    if (::stat(candidate.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(candidate.c_str(), X_OK) == 0) {
      return candidate;
    }
  }
  return std::nullopt;
}

std::optional<std::string> HostLayout::FindToolInSandbox(Vendor vendor) const {
  std::optional<std::string> host = FindTool(vendor);
  if (!host.has_value()) return std::nullopt;
  return host->substr(root_.size());
}

std::optional<std::string> HostLayout::FindDcmi() const {
  for (const char* p : {"/usr/local/dcmi/libdcmi.so", "/usr/local/Ascend/driver/lib64/driver/libdcmi.so"}) {
    std::string candidate = Host(p);
    if (::access(candidate.c_str(), R_OK) == 0) return candidate;
  }
  return std::nullopt;
}

}  // namespace cubicle::npu
