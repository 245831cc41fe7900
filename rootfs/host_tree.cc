#include "rootfs/host_tree.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "base/status.h"

namespace cubicle::rootfs {
namespace {

bool Searchable(const struct stat& st, uid_t uid, gid_t gid) {
  if (!S_ISDIR(st.st_mode)) return false;
  if (st.st_uid == uid) return (st.st_mode & S_IXUSR) != 0;
  if (st.st_gid == gid) return false;  // the group class may be an ACL's mask: not decided here
  return (st.st_mode & S_IXOTH) != 0;
}

}  // namespace

uint64_t BindMountAttrs(bool readonly, bool devices) {
  uint64_t attrs = MOUNT_ATTR_NOSUID;
  if (readonly) attrs |= MOUNT_ATTR_RDONLY;
  if (!devices) attrs |= MOUNT_ATTR_NODEV;
  return attrs;
}

bool MayLookUpAs(absl::string_view path, uid_t uid, gid_t gid) {
  if (path.empty() || path[0] != '/') return false;
  struct stat st;
  if (::stat("/", &st) != 0 || !Searchable(st, uid, gid)) return false;
  // Every directory above the last component; the last needs no search.
  std::string prefix;
  size_t pos = 1;
  while (true) {
    size_t slash = path.find('/', pos);
    if (slash == absl::string_view::npos) return true;
    prefix.assign(path.data(), slash);
    if (slash > pos && ::lstat(prefix.c_str(), &st) != 0) return false;
    // lstat: a symlink answers false, its target is not followed here.
    if (slash > pos && !Searchable(st, uid, gid)) return false;
    pos = slash + 1;
  }
}

absl::StatusOr<HostTree> CloneBindSource(const std::string& source, bool readonly, bool devices) {
  HostTree tree;
  tree.fd.reset(::open_tree(AT_FDCWD, source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
  if (!tree.fd) return ErrnoStatus(errno, absl::StrCat("open_tree(", source, ")"));
  struct mount_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.attr_set = BindMountAttrs(readonly, devices);
  attr.propagation = MS_PRIVATE;
  if (::mount_setattr(tree.fd.get(), "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
    return ErrnoStatus(errno, absl::StrCat("mount_setattr(", source, ")"));
  }
  struct stat st;
  if (::fstat(tree.fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", source, ")"));
  tree.is_dir = S_ISDIR(st.st_mode);
  return tree;
}

}  // namespace cubicle::rootfs
