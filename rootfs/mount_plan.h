// The mount plan: an ordered list of operations that build the sandbox's root
// filesystem, applied in order (later operations may mount over earlier ones,
// as in bubblewrap). This header is pure data and validation; no syscalls.
#pragma once

#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cubicle::rootfs {

enum class MountKind {
  kBind,       // bind `source` (host path) at `dest`; `readonly`, `devices`, `optional` apply
  kTmpfs,      // a fresh tmpfs of `size_bytes` (0: the kernel default) and `mode`
  kProc,       // a new procfs (falls back to a read-only bind of the host's, masked)
  kDev,        // a minimal /dev: null zero full random urandom tty, shm, pts, fd links
  kDir,        // a directory with `mode`
  kSymlink,    // a symlink at `dest` whose target is `source`
  kFile,       // a regular file at `dest` whose contents are `data`, with `mode`
  kRemountRo,  // make the mount at `dest` (and those under it) read-only
  kMqueue,     // a new POSIX message-queue filesystem
  kChmod,      // set `mode` on the existing `dest` (bwrap --chmod)
  kBindData,   // a file holding `data` with `mode`, bind-mounted at `dest`; `readonly` applies
  kOverlay,    // overlayfs at `dest` of the `lower` host dirs; `upper`/`work` host dirs, or both
               // empty with `readonly` unset: an upper on the staging tmpfs, which no one sees
};

absl::string_view MountKindName(MountKind kind);

struct MountOp {
  MountKind kind = MountKind::kDir;
  std::string source;  // kBind: host path; kSymlink: link target
  std::string dest;    // absolute, normalised path inside the sandbox
  std::string data;    // kFile: contents
  uint64_t size_bytes = 0;
  uint32_t mode = 0755;
  // The mode of the missing parent directories of `dest` this op creates
  // (bwrap: 0755 less the group and other bits its mode lacks, so 0700 for
  // an op with no mode of its own; cubicle's own plans: 0755).
  uint32_t parent_mode = 0755;
  bool readonly = false;
  bool devices = false;   // kBind: keep device nodes usable (bwrap --dev-bind)
  bool optional = false;  // kBind: a missing source skips the op (bwrap --bind-try)
  // kProc with source "/proc" (bwrap_style): the host's procfs is bound
  // noexec too, as a new procfs is mounted (bwrap --pidns naming the
  // caller's own pid namespace, where bwrap mounts one).
  bool noexec = false;
  // kBind: show the source's host owner as the sandbox user (an idmapped
  // mount made on the host, read-only or not), so a source owned by any
  // host user is usable inside and what the payload writes there belongs
  // to that owner (the workspace; --bind-owner, a profile's "owner").
  bool idmap_owner = false;
  // Set on every op of bubblewrap's parser. It changes what is made for
  // kProc, kDev (exactly bubblewrap's: its /proc covers, and with source
  // "/proc" the host's procfs bound read-write; its /dev, where /dev/shm is
  // a plain directory; not cubicle's stricter masks), kMqueue, kOverlay
  // and kRemountRo (bwrap's flags), and lets a kBind replace "/". Other
  // kinds are made the same either way.
  bool bwrap_style = false;
  // kOverlay: absolute host paths, any bytes but NUL (the builder escapes
  // what overlayfs's options would split on). The bottom layer first, as
  // bwrap's --overlay-src order has them.
  std::vector<std::string> lower;
  std::string upper;
  std::string work;
  // kTmpfs, kDev: the SELinux context of every file on the tmpfs (bwrap
  // --file-label: a `context=` mount option). Empty: none.
  std::string selinux_context;

  bool operator==(const MountOp&) const = default;
};

using MountPlan = std::vector<MountOp>;

// Lexically normalises an absolute sandbox path: collapses "//" and "/./",
// drops a trailing "/". A relative path, a ".." component, a NUL byte or an
// empty path is an error naming `what` and the path. Touches no filesystem.
absl::StatusOr<std::string> NormalizeSandboxPath(absl::string_view path, absl::string_view what);

// Checks a plan before any syscall that changes state: every destination is a
// normalised absolute path other than "/", bind sources exist on the host
// (unless optional), modes fit in 07777. Returns the first problem found.
absl::Status ValidatePlan(const MountPlan& plan);

}  // namespace cubicle::rootfs
