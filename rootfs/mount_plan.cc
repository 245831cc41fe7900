#include "rootfs/mount_plan.h"

#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"

namespace cubicle::rootfs {

absl::string_view MountKindName(MountKind kind) {
  switch (kind) {
    case MountKind::kBind: return "bind";
    case MountKind::kTmpfs: return "tmpfs";
    case MountKind::kProc: return "proc";
    case MountKind::kDev: return "dev";
    case MountKind::kDir: return "dir";
    case MountKind::kSymlink: return "symlink";
    case MountKind::kFile: return "file";
    case MountKind::kRemountRo: return "remount-ro";
    case MountKind::kMqueue: return "mqueue";
    case MountKind::kChmod: return "chmod";
    case MountKind::kBindData: return "bind-data";
    case MountKind::kOverlay: return "overlay";
  }
  return "unknown";
}

absl::StatusOr<std::string> NormalizeSandboxPath(absl::string_view path, absl::string_view what) {
  if (path.empty()) return absl::InvalidArgumentError(absl::StrCat(what, ": empty path"));
  if (path.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": path contains a NUL byte"));
  }
  if (path.front() != '/') {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "': must be an absolute path"));
  }
  std::string out;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    if (part == ".") continue;
    if (part == "..") {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", path, "': '..' is not allowed in sandbox paths"));
    }
    absl::StrAppend(&out, "/", part);
  }
  if (out.size() >= 4096) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "': path too long"));
  }
  return out.empty() ? std::string("/") : out;
}

absl::Status ValidatePlan(const MountPlan& plan) {
  for (const MountOp& op : plan) {
    std::string what = absl::StrCat(MountKindName(op.kind), " destination");
    auto normal = NormalizeSandboxPath(op.dest, what);
    if (!normal.ok()) return normal.status();
    if (*normal != op.dest) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '", op.dest, "' is not normalised (expected '", *normal, "')"));
    }
    // bubblewrap's --bind / / replaces the root; cubicle's own plans may not.
    const bool root_allowed = op.kind == MountKind::kRemountRo || op.kind == MountKind::kChmod ||
                              (op.kind == MountKind::kBind && op.bwrap_style);
    if (op.dest == "/" && !root_allowed) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " '/': the sandbox root itself cannot be replaced"));
    }
    if (op.mode > 07777 || op.parent_mode > 07777) {
      return absl::InvalidArgumentError(absl::StrCat(what, " '", op.dest, "': mode ",
                                                     op.mode > 07777 ? op.mode : op.parent_mode,
                                                     " is not a permission mode"));
    }
    switch (op.kind) {
      case MountKind::kBind: {
        if (op.source.empty() || op.source.front() != '/') {
          return absl::InvalidArgumentError(
              absl::StrCat("bind source '", op.source, "': must be an absolute host path"));
        }
        struct stat st;
        if (::stat(op.source.c_str(), &st) != 0 && !op.optional) {
          return ErrnoStatus(errno, absl::StrCat("bind source ", op.source));
        }
        break;
      }
      case MountKind::kSymlink:
        if (op.source.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("symlink '", op.dest, "': empty link target"));
        }
        break;
      case MountKind::kOverlay: {
        if (op.lower.empty()) {
          return absl::InvalidArgumentError(absl::StrCat("overlay at '", op.dest, "': no lower layer"));
        }
        if (op.upper.empty() != op.work.empty()) {
          return absl::InvalidArgumentError(
              absl::StrCat("overlay at '", op.dest, "': an upper layer needs a work directory, and only it"));
        }
        std::vector<std::string> paths = op.lower;
        if (!op.upper.empty()) {
          paths.push_back(op.upper);
          paths.push_back(op.work);
        }
        for (const std::string& path : paths) {
          if (path.empty() || path.front() != '/' || path.find('\0') != std::string::npos) {
            return absl::InvalidArgumentError(
                absl::StrCat("overlay layer '", path, "': must be an absolute host path"));
          }
          struct stat st;
          if (::stat(path.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("overlay layer ", path));
        }
        break;
      }
      default:
        break;
    }
  }
  return absl::OkStatus();
}

}  // namespace cubicle::rootfs
