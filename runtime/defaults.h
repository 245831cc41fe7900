// The default sandbox of `cubicle run` and of profiles: DESIGN §8's
// baseline, as a plain SandboxSpec that front ends then extend.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "runtime/spec.h"

namespace cubicle::runtime {

inline constexpr uint64_t kDefaultTmpSize = 64ull << 20;
inline constexpr char kWorkspaceDir[] = "/workspace";

struct DefaultsOptions {
  uid_t uid = 1000;
  gid_t gid = 1000;
  std::string hostname = "cubicle";
  uint64_t tmp_size = kDefaultTmpSize;
  std::optional<std::string> workspace;  // host directory bound read-write at /workspace
};

// The system mounts, in order: /usr read-only; /bin, /lib, /lib64, /lib32,
// /sbin as the host has them (symlink or read-only bind); a generated /etc
// (passwd, group, hosts, nsswitch.conf) plus the host's /etc/alternatives
// links and ld.so.cache; a minimal /dev; a new /proc; /tmp capped at
// tmp_size; the workspace. Reads the host only to see which of those exist.
absl::StatusOr<SandboxSpec> DefaultSpec(const DefaultsOptions& options);

}  // namespace cubicle::runtime
