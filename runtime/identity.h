// Who the sandbox is on the host (DESIGN §4): the id maps of its user
// namespace, the host ids they map to, and the detached, idmapped mount
// trees that show a host directory's owner as the sandbox user. Host side;
// internal to runtime/.
#pragma once

#include <sys/types.h>

#include <string>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "namespaces/idmap.h"
#include "runtime/spec.h"

namespace cubicle::runtime {

struct Identity {
  namespaces::IdMapping mapping;
  uid_t host_uid = 0;
  gid_t host_gid = 0;
  // The launching thread drops its supplementary groups around the clone
  // (namespaces::ThreadGroupsCleared), so the sandbox starts with none.
  bool clear_groups = false;
};

// The identity `spec` asks for, as this caller may give it: InvalidArgument
// when it asks for ids the caller cannot map (rootless: only its own).
absl::StatusOr<Identity> ResolveIdentity(const SandboxSpec& spec);

// bwrap's devpts workaround, for a sandbox of bwrap's with bwrap's /dev
// (--dev) in a user namespace of its own whose ids are not 0: a devpts
// instance's root directory belongs to the root of the user namespace that
// mounts it (shown as the overflow id where that root is unmapped). So
// the namespace maps uid/gid 0 to the sandbox's host ids, the sandbox is
// set up as 0, and then it nests one more user namespace in which it has
// its own ids (ChildIds::set_up_as_root), as bwrap does: /dev/pts is the
// sandbox user's, and uid_map reads "UID 0 1" as under bwrap.
bool SetsUpAsRootForDevpts(const SandboxSpec& spec);

// The detached, idmapped mount of `source` for a bind that shows its
// owner as the sandbox user: nosuid, nodev, private, read-only when
// `readonly`; the source's own mount only (an idmap is per mount, and a
// mount below it may not take one). An empty fd when no idmap is needed:
// the owner is the sandbox's host user already (rootless: its uid is the
// caller's; a group other than the caller's cannot be mapped and shows as
// the host's). An error, never a plain bind, where the owner asked for
// cannot be shown: rootless with another's source, no new mount API
// (`new_mount_api` false), a filesystem without idmapped mounts.
absl::StatusOr<UniqueFd> OpenIdmappedTree(const std::string& source, const Identity& id, bool readonly,
                                          bool new_mount_api = true);

// A request's workspace as a detached mount to move in at hand-off:
// idmapped where it needs to be, else a plain clone; nosuid, nodev.
absl::StatusOr<UniqueFd> OpenWorkspaceTree(const std::string& workspace, const Identity& id);

}  // namespace cubicle::runtime
