// Which host file a sandbox path shows, and where a host file shows in a
// sandbox, by a mount plan's binds: what the daemon needs to mask the
// host's interpreters wherever a profile's binds show them, and to read
// the packages in a profile's python_path folders (docs/skills.md,
// "Environments"). Later operations cover earlier ones, as when they are
// applied.
#pragma once

#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "rootfs/mount_plan.h"

namespace cubicle::rootfs {

// The host path the sandbox path `path` (absolute, normalized) shows
// through the last operation covering it: a bind's source with the rest
// of the path after it. nullopt when what covers it is no bind (a tmpfs, a
// file, a symlink on the way, an overlay), or nothing does. Touches no
// filesystem.
std::optional<std::string> HostPathOf(const MountPlan& plan, absl::string_view path);

// Where the sandbox shows the host file `host_real` (a real path, without
// symlinks): under the dest of the last bind whose source's real path
// holds it, when no later operation covers it there. Reads the host (the
// real paths of bind sources).
std::optional<std::string> SandboxPathOf(const MountPlan& plan, absl::string_view host_real);

}  // namespace cubicle::rootfs
