// Applies a MountPlan inside a fresh mount namespace and enters the result.
//
// Parent side: Prepare() turns the plan into strings the child only reads.
// Child side: BuildRoot() runs between clone and execve; it allocates nothing
// and reports failures through a ChildError.
#pragma once

#include <string>
#include <vector>

#include "base/child_error.h"
#include "rootfs/mount_plan.h"

namespace cubicle::rootfs {

struct PreparedOp {
  MountKind kind;
  std::string host_source;    // kBind: "/oldroot" + source, as seen after the first pivot
  std::string dest;           // absolute sandbox path, for messages
  std::string dest_relative;  // dest without its leading '/'
  std::string parent_relative;
  std::string base_name;
  std::string tmpfs_options;  // kTmpfs, kDev: "mode=...,size=..."; kOverlay: mount(2)'s options
  std::string staging_path;   // kBindData: its file, in the staging root
  // kOverlay: its layers as the child reaches them (host paths under
  // /oldroot; a --tmp-overlay's upper and work directories on the staging
  // root), unescaped, the top lower layer first; for the new mount API,
  // where the options do not fit mount(2)'s page.
  std::vector<std::string> overlay_lower;
  std::string overlay_upper, overlay_work;
  const MountOp* op;          // points into the plan Prepare() was given
  int tree_fd = -1;           // kBind: a detached mount prepared on the host, attached as is
  // kBind: a detached clone of the source made by the launcher on the host,
  // with the bind's flags already set, for a source the sandbox's own ids
  // may not reach (a root-only directory on its path). Attached only when
  // the sandbox's own lookup of the source is refused with EACCES: a bind
  // the sandbox clones itself from its copy of the host's mounts keeps the
  // flags the host set locked (read-only stays read-only even for a holder
  // of CAP_SYS_ADMIN in the sandbox's user namespace); a clone made on the
  // host is not locked that way.
  int fallback_tree_fd = -1;
  bool tree_is_dir = true;    // tree_fd, fallback_tree_fd: a directory, else a file mountpoint
  // kBind, optional: the launcher found the source missing (where the
  // sandbox's own lookup may only see EACCES), so the op is skipped.
  bool source_missing = false;
};

struct PreparedPlan {
  std::vector<PreparedOp> ops;
  bool readonly_root = true;
  bool new_mount_api = true;     // open_tree/move_mount/mount_setattr (Linux 5.12+)
  bool openat2 = true;           // RESOLVE_BENEATH (Linux 5.6+); else walk, refusing symlinks
  bool allow_proc_fallback = true;
  std::string staging_options = "mode=0700,size=64k";  // grows with kBindData contents
};

// `plan` must outlive the result and must have passed ValidatePlan().
PreparedPlan Prepare(const MountPlan& plan, bool readonly_root, bool new_mount_api, bool openat2);

// A path as an overlayfs option value of mount(2): '\\', ',' and ':' (which
// split options and layers) each behind a backslash, as bwrap escapes them.
std::string EscapeOverlayPath(const std::string& path);

// The most mount(2) takes as options: one page, NUL included; the kernel
// cuts off what is longer.
inline constexpr size_t kMountOptionsMax = 4096;

struct BuildReport {
  bool proc_fallback = false;  // a host /proc was bound read-only instead of a new procfs
  int proc_errno = 0;          // why the new procfs was refused
};

// Child side. Precondition: the caller is in a new mount namespace with
// CAP_SYS_ADMIN over it. On success the caller's root and cwd are the new
// root, the old root is detached, and the function returns true.
bool BuildRoot(const PreparedPlan& plan, BuildReport* report, ChildError* error);

}  // namespace cubicle::rootfs
