#include "runtime/identity.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status.h"
#include "namespaces/clone.h"

namespace cubicle::runtime {
namespace {

// The host's own ids, no maps: a joined user namespace's maps decide, or
// the sandbox stays in the host's user namespace.
Identity HostIds(uid_t uid, gid_t gid) {
  Identity id;
  id.host_uid = uid;
  id.host_gid = gid;
  id.clear_groups = false;
  return id;
}

absl::Status SetAttributes(int tree, const std::string& source, uint64_t set, int userns_fd, const char* what) {
  struct mount_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.attr_set = set;
  // Private: a mount made later under the host's source stays out.
  attr.propagation = MS_PRIVATE;
  if (userns_fd >= 0) attr.userns_fd = static_cast<uint64_t>(userns_fd);
  if (::mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("mount_setattr(", source, what, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Identity> ResolveIdentity(const SandboxSpec& spec) {
  const uid_t euid = ::geteuid();
  const gid_t egid = ::getegid();
  // A joined namespace's maps decide; nothing is written, no groups are
  // touched, and no tree is idmapped for it.
  if (spec.join_userns.has_value()) return HostIds(euid, egid);
  if (spec.host_user_namespace) {
    // No user namespace: no maps, and the host's root with its groups, as
    // bwrap run as root without --unshare-user.
    if (euid != 0) return absl::InvalidArgumentError("a sandbox in the host's user namespace needs root");
    return HostIds(euid, egid);
  }
  Identity id;
  if (spec.map_all_host_ids) {
    // Every id is itself: the ids look like the host's, while the
    // capabilities stay those of a user namespace, not the host's.
    if (euid != 0) {
      return absl::InvalidArgumentError("mapping every host id needs root (a rootless sandbox maps only its own ids)");
    }
    id.host_uid = spec.uid;
    id.host_gid = spec.gid;
    // bwrap as root makes no user namespace: setgroups is the launcher's
    // (the host's "allow") and so are root's groups. Every id the
    // launcher's namespace has: all of them on the host, the few of a
    // sandbox it is nested in (uid 0 there is "root" to bwrap too).
    CUBICLE_ASSIGN_OR_RETURN(id.mapping, namespaces::IdentityOfOwnNamespace());
    id.clear_groups = false;
    return id;
  }
  if (euid == 0) {
    id.host_uid = spec.host_uid.value_or(kDefaultHostIdBase + spec.uid);
    id.host_gid = spec.host_gid.value_or(kDefaultHostIdBase + spec.gid);
    // "deny", as bwrap writes it: nothing in the sandbox may change its
    // groups. The host's groups (root's gid 0 among them) are gone before
    // clone instead, where this launcher may drop them; uid 0 nested in a
    // sandbox may not, and keeps them as any rootless launcher does.
    id.mapping.deny_setgroups = true;
    id.clear_groups = namespaces::ThreadGroupsCleared::Possible();
  } else {
    id.host_uid = spec.host_uid.value_or(euid);
    id.host_gid = spec.host_gid.value_or(egid);
    if (id.host_uid != euid || id.host_gid != egid) {
      return absl::InvalidArgumentError(absl::StrCat(
          "host ids ", id.host_uid, ":", id.host_gid, " requested, but rootless (uid ", euid,
          ") can only map its own ids ", euid, ":", egid));
    }
    id.mapping.deny_setgroups = true;
    id.clear_groups = false;
  }
  const bool as_root = SetsUpAsRootForDevpts(spec);
  id.mapping.uids = {{as_root ? 0 : spec.uid, id.host_uid, 1}};
  id.mapping.gids = {{as_root ? 0 : spec.gid, id.host_gid, 1}};
  return id;
}

bool SetsUpAsRootForDevpts(const SandboxSpec& spec) {
  if (!spec.namespaces.user || spec.map_all_host_ids || spec.join_userns.has_value() || (spec.uid == 0 && spec.gid == 0)) {
    return false;
  }
  for (const rootfs::MountOp& op : spec.mounts) {
    if (op.kind == rootfs::MountKind::kDev && op.bwrap_style) return true;
  }
  return false;
}

namespace {

// The user namespaces idmapped mounts are made with, one per mapping, kept:
// making one costs a process of its own (milliseconds), and a daemon
// attaches the same few workspace owners to every execution. Each caller
// gets its own dup, so a cache cleared meanwhile closes nothing in use.
absl::StatusOr<UniqueFd> CachedUserNamespace(const namespaces::IdMapping& idmap) {
  constexpr size_t kMaxCached = 64;
  static absl::Mutex mu(absl::kConstInit);
  static auto* cache = new std::map<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>, UniqueFd>();
  const auto key = std::make_tuple(idmap.uids[0].inside, idmap.uids[0].outside, idmap.gids[0].inside,
                                   idmap.gids[0].outside);
  absl::MutexLock lock(&mu);
  auto it = cache->find(key);
  if (it == cache->end()) {
    CUBICLE_ASSIGN_OR_RETURN(int ns_raw, namespaces::MakeUserNamespaceFd(idmap));
    if (cache->size() >= kMaxCached) cache->clear();
    it = cache->emplace(key, UniqueFd(ns_raw)).first;
  }
  UniqueFd copy(::fcntl(it->second.get(), F_DUPFD_CLOEXEC, 0));
  if (!copy) return ErrnoStatus(errno, "dup(user namespace)");
  return copy;
}

}  // namespace

// Needs privilege over the source's filesystem: root only (rootless
// callers can show only their own files, which need no idmap).
absl::StatusOr<UniqueFd> OpenIdmappedTree(const std::string& source, const Identity& id, bool readonly,
                                          bool new_mount_api) {
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("stat(", source, ")"));
  if (st.st_uid == id.host_uid && st.st_gid == id.host_gid) return UniqueFd();  // already right
  if (::geteuid() != 0) {
    if (st.st_uid == id.host_uid) return UniqueFd();
    return absl::InvalidArgumentError(absl::StrCat(
        source, " belongs to uid ", st.st_uid, ", not to the caller (uid ", id.host_uid,
        "): rootless, cubicle can show only the caller's own files as the sandbox user (an idmapped mount "
        "of another's needs root)"));
  }
  if (!new_mount_api) {
    return absl::FailedPreconditionError(absl::StrCat(
        source, " belongs to ", st.st_uid, ":", st.st_gid,
        ": showing it as the sandbox user needs an idmapped mount, which needs mount_setattr (Linux 5.12)"));
  }
  namespaces::IdMapping idmap;
  idmap.uids = {{st.st_uid, id.host_uid, 1}};
  idmap.gids = {{st.st_gid, id.host_gid, 1}};
  idmap.deny_setgroups = true;
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd userns, CachedUserNamespace(idmap));
  UniqueFd tree(::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return ErrnoStatus(errno, absl::StrCat("open_tree(", source, ")"));
  uint64_t attrs = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
  if (readonly) attrs |= MOUNT_ATTR_RDONLY;
  absl::Status set = SetAttributes(tree.get(), source, attrs, userns.get(), ", MOUNT_ATTR_IDMAP");
  if (!set.ok() && absl::IsInvalidArgument(set)) {
    // EINVAL here is the filesystem's answer (or the source's mount is
    // idmapped already): say so rather than leave a bare errno.
    return absl::FailedPreconditionError(absl::StrCat(
        set.message(), ": its filesystem does not take idmapped mounts (or its mount is idmapped already)"));
  }
  CUBICLE_RETURN_IF_ERROR(set);
  return tree;
}

absl::StatusOr<UniqueFd> OpenWorkspaceTree(const std::string& workspace, const Identity& id) {
  char resolved[PATH_MAX];
  if (::realpath(workspace.c_str(), resolved) == nullptr) {
    return ErrnoStatus(errno, absl::StrCat("workspace ", workspace));
  }
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd tree, OpenIdmappedTree(resolved, id, /*readonly=*/false));
  if (tree) return tree;
  // No idmap needed (or possible): a plain detached clone.
  tree.reset(::open_tree(AT_FDCWD, resolved, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (!tree) return ErrnoStatus(errno, absl::StrCat("open_tree(", resolved, ")"));
  CUBICLE_RETURN_IF_ERROR(SetAttributes(tree.get(), resolved, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, -1, ""));
  return tree;
}

}  // namespace cubicle::runtime
