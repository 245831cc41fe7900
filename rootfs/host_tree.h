// Host-side halves of bind mounts: what the launcher prepares before clone,
// with its own privileges, for the sandbox to attach (DESIGN §5: mount
// sources opened on the host and passed in as fds).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/unique_fd.h"

namespace cubicle::rootfs {

// The MOUNT_ATTR_* flags of a bind: always nosuid; nodev unless `devices`
// (bwrap --dev-bind); read-only when asked.
uint64_t BindMountAttrs(bool readonly, bool devices);

// Whether a process whose only ids are `uid`/`gid` (no supplementary
// groups, no capabilities over the host's files) can look `path` up: every
// directory on the way grants it search by its mode bits. Conservative:
// a symlink on the way, a group match (an ACL mask may apply), anything
// that cannot be stat'ed answers false. Reads only metadata.
bool MayLookUpAs(absl::string_view path, uid_t uid, gid_t gid);

struct HostTree {
  UniqueFd fd;  // a detached mount (open_tree(OPEN_TREE_CLONE))
  bool is_dir = true;
};

// Clones the mount tree at the host path `source` (recursively), detached,
// with the bind's flags set on every mount of it and private propagation
// (no mount event crosses between it and the host's). Needs CAP_SYS_ADMIN
// over the caller's mount namespace; errors name the step and errno.
absl::StatusOr<HostTree> CloneBindSource(const std::string& source, bool readonly, bool devices);

}  // namespace cubicle::rootfs
