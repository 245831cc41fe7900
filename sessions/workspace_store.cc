#include "sessions/workspace_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "sessions/paths.h"

namespace cubicle::sessions {
namespace {

constexpr size_t kMaxKeyBytes = 128;

// Whether `path` is the root of a tmpfs mount: a workspace's own, not a
// directory on a tmpfs the state directory happens to be on (/run, a
// memory-backed volume), which statfs alone cannot tell apart.
bool IsTmpfsMount(const std::string& path) {
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0 || fs.f_type != TMPFS_MAGIC) return false;
  struct statx self;
  if (::statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, &self) != 0) return false;
  if ((self.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0) {
    return (self.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  }
  // Before Linux 5.8: every tmpfs mount is a device of its own.
  struct stat parent;
  return ::stat(absl::StrCat(path, "/..").c_str(), &parent) == 0 &&
         (self.stx_dev_major != major(parent.st_dev) || self.stx_dev_minor != minor(parent.st_dev));
}

// The directory must be a real directory (not a symlink an attacker with
// write access to the parent could have planted) owned by us.
absl::Status CheckOwnDirectory(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("lstat(", path, ")"));
  if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError(absl::StrCat(path, " is not a directory"));
  if (st.st_uid != ::geteuid()) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " belongs to uid ", st.st_uid, ", not to this daemon's uid ", ::geteuid()));
  }
  return absl::OkStatus();
}

absl::Status MountWorkspace(const std::string& path, const WorkspaceShape& shape) {
  // nosuid and nodev: a workspace holds data, never a way to gain
  // privilege; exec stays allowed (skills run scripts they wrote there).
  std::string options = absl::StrCat("size=", shape.size_bytes, ",mode=0755,uid=", shape.uid, ",gid=", shape.gid,
                                     ",nr_inodes=", std::max<uint64_t>(shape.size_bytes / 4096, 1024));
  if (::mount("cubicle-workspace", path.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, options.c_str()) != 0) {
    return ErrnoStatus(errno, absl::StrCat("mount(tmpfs ", path, ", ", options, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateSessionKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("session key must be 1 to ", kMaxKeyBytes, " bytes"));
  }
  if (key.front() == '.') return absl::InvalidArgumentError("session key must not start with '.'");
  for (char c : key) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrCat("session key '", absl::CHexEscape(key), "' holds a character outside [A-Za-z0-9._-]"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<WorkspaceStore> WorkspaceStore::Open(const std::string& dir, bool mount_tmpfs) {
  if (::mkdir(dir.c_str(), 0711) != 0 && errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("mkdir(", dir, ")"));
  CUBICLE_RETURN_IF_ERROR(CheckOwnDirectory(dir));
  if (::chmod(dir.c_str(), 0711) != 0) return ErrnoStatus(errno, absl::StrCat("chmod(", dir, ")"));
  return WorkspaceStore(dir, mount_tmpfs);
}

std::string WorkspaceStore::PathOf(absl::string_view key) const { return absl::StrCat(dir_, "/", key); }

absl::StatusOr<Workspace> WorkspaceStore::Attach(absl::string_view key, const WorkspaceShape& shape) const {
  CUBICLE_RETURN_IF_ERROR(ValidateSessionKey(key));
  Workspace ws;
  ws.path = PathOf(key);
  if (::mkdir(ws.path.c_str(), 0755) != 0 && errno != EEXIST) {
    return ErrnoStatus(errno, absl::StrCat("mkdir(", ws.path, ")"));
  }
  ws.capped = IsTmpfsMount(ws.path);
  if (!ws.capped) {
    CUBICLE_RETURN_IF_ERROR(CheckOwnDirectory(ws.path));
    if (mount_tmpfs_) {
      CUBICLE_RETURN_IF_ERROR(MountWorkspace(ws.path, shape));
      ws.capped = true;
    } else if (::geteuid() == 0 && ::chown(ws.path.c_str(), shape.uid, shape.gid) != 0) {
      return ErrnoStatus(errno, absl::StrCat("chown(", ws.path, ")"));
    }
  }
  ws.root.reset(::open(ws.path.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!ws.root) return ErrnoStatus(errno, absl::StrCat("open(", ws.path, ")"));
  return ws;
}

absl::Status WorkspaceStore::Remove(absl::string_view key) const {
  CUBICLE_RETURN_IF_ERROR(ValidateSessionKey(key));
  const std::string path = PathOf(key);
  // Every tmpfs stacked there (a crash between two mounts could leave more
  // than one), bounded; lazily, so an execution still holding a clone
  // keeps its view until it ends.
  for (int i = 0; i < 8 && IsTmpfsMount(path); ++i) {
    if (::umount2(path.c_str(), MNT_DETACH | UMOUNT_NOFOLLOW) != 0) {
      return ErrnoStatus(errno, absl::StrCat("umount(", path, ")"));
    }
  }
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) {
    if (errno == ENOENT) return absl::OkStatus();
    return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  }
  CUBICLE_RETURN_IF_ERROR(RemoveTreeContents(dir.get(), path));
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("rmdir(", path, ")"));
  return absl::OkStatus();
}

absl::StatusOr<WorkspaceUsage> WorkspaceStore::Usage(absl::string_view key) const {
  CUBICLE_RETURN_IF_ERROR(ValidateSessionKey(key));
  const std::string path = PathOf(key);
  struct statfs fs;
  if (::statfs(path.c_str(), &fs) != 0) return ErrnoStatus(errno, absl::StrCat("statfs(", path, ")"));
  WorkspaceUsage usage;
  if (fs.f_type == TMPFS_MAGIC) {
    usage.size_bytes = static_cast<uint64_t>(fs.f_blocks) * fs.f_bsize;
    usage.used_bytes = static_cast<uint64_t>(fs.f_blocks - fs.f_bfree) * fs.f_bsize;
    return usage;
  }
  UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  CUBICLE_ASSIGN_OR_RETURN(usage.used_bytes, TreeBytes(dir.get(), path));
  return usage;
}

absl::StatusOr<std::vector<std::string>> WorkspaceStore::Keys() const {
  std::unique_ptr<DIR, int (*)(DIR*)> d(::opendir(dir_.c_str()), &::closedir);
  if (!d) return ErrnoStatus(errno, absl::StrCat("opendir(", dir_, ")"));
  std::vector<std::string> keys;
  while (struct dirent* e = ::readdir(d.get())) {
    if (e->d_type == DT_DIR && ValidateSessionKey(e->d_name).ok()) keys.emplace_back(e->d_name);
  }
  std::sort(keys.begin(), keys.end());
  return keys;
}

}  // namespace cubicle::sessions
