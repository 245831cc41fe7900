// User-namespace id maps, written by the parent for its child.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cubicle::namespaces {

struct IdMap {
  uint32_t inside = 0;
  uint32_t outside = 0;
  uint32_t count = 1;
  bool operator==(const IdMap&) const = default;
};

struct IdMapping {
  std::vector<IdMap> uids;
  std::vector<IdMap> gids;
  // "deny" is required for an unprivileged writer, and cubicle writes it as
  // root too, as bwrap does: "allow" would let the sandbox's CAP_SETGID drop
  // groups that deny it access (CVE-2014-8989). "allow" only where the
  // sandbox imitates the host's root (SandboxSpec::map_all_host_ids).
  bool deny_setgroups = true;
};

// Writes setgroups, uid_map and gid_map of `pid`, in the order the kernel
// requires. Errors name the file and errno.
absl::Status WriteIdMaps(pid_t pid, const IdMapping& mapping);

// Every id the caller's own user namespace maps, each mapped to itself,
// and that namespace's setgroups: for a child namespace in which ids look
// as they do here. In the initial namespace that is every id ("0 0
// 4294967295") and "allow"; in a sandbox's, its few ids and (cubicle's,
// bwrap's) "deny", which a child namespace cannot undo anyway.
absl::StatusOr<IdMapping> IdentityOfOwnNamespace();

}  // namespace cubicle::namespaces

namespace cubicle::namespaces {

// An fd of a new, otherwise unused user namespace with `mapping` (for
// idmapped mounts). Costs one short-lived child process.
absl::StatusOr<int> MakeUserNamespaceFd(const IdMapping& mapping);

}  // namespace cubicle::namespaces
