#include "rootfs/builder.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "rootfs/host_tree.h"

namespace cubicle::rootfs {
namespace {

// The staging area. bubblewrap's trick: mount a tmpfs over /tmp, pivot into
// it, and the old root appears at /oldroot with its own /tmp uncovered again
// (pivot_root moves the staging mount away from /tmp), so bind sources under
// the host's /tmp stay reachable as /oldroot/tmp/...
constexpr char kStagingBase[] = "/tmp";
constexpr char kOldRoot[] = "/oldroot";
constexpr char kNewRoot[] = "/newroot";
constexpr char kFdPrefix[] = "/oldroot/proc/self/fd/";

// Files and directories of procfs that leak host state or accept writes.
constexpr const char* kProcReadOnly[] = {"sys", "sysrq-trigger", "irq", "bus", "fs"};
constexpr const char* kProcMaskFiles[] = {"kcore", "keys", "timer_list", "sched_debug",
                                          "latency_stats", "kpagecount", "kpageflags"};
constexpr const char* kProcMaskDirs[] = {"acpi", "scsi", "firmware"};

// The device nodes of a minimal /dev, bound from the host's: a user namespace
// cannot mknod.
constexpr const char* kDevNodes[] = {"null", "zero", "full", "random", "urandom", "tty"};
struct DevLink {
  const char* name;
  const char* target;
};
constexpr DevLink kDevLinks[] = {{"fd", "/proc/self/fd"},        {"stdin", "/proc/self/fd/0"},
                                 {"stdout", "/proc/self/fd/1"},  {"stderr", "/proc/self/fd/2"},
                                 {"ptmx", "pts/ptmx"},           {"core", "/proc/kcore"}};

// Closes on scope exit; the child may not use UniqueFd's out-of-line code
// paths freely, but this one is trivial and allocation-free.
struct ScopedFd {
  int fd = -1;
  explicit ScopedFd(int f) : fd(f) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd >= 0) ::close(fd);
  }
};

struct FdPath {
  char buf[64];
  explicit FdPath(int fd) { child::FormatWithNumber(buf, sizeof(buf), kFdPrefix, fd); }
  const char* c_str() const { return buf; }
};

// Set by BuildRoot() in the child (single-threaded there) from the plan;
// false forces the component-by-component walk (old kernels, and tests).
bool use_openat2 = true;

// Opens `rel` beneath `root_fd`, refusing any resolution that leaves it (a
// "..", an absolute symlink or a relative one that climbs out). Returns the
// fd or -errno. On kernels without openat2, symlinks are refused outright.
int OpenBeneath(int root_fd, const char* rel, int flags) {
  if (rel[0] == '\0') {
    int fd = ::fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
    return fd >= 0 ? fd : -errno;
  }
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = static_cast<unsigned long long>(flags | O_CLOEXEC);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  long fd = use_openat2 ? ::syscall(SYS_openat2, root_fd, rel, &how, sizeof(how)) : -1;
  if (fd >= 0) return static_cast<int>(fd);
  if (use_openat2 && errno != ENOSYS) return -errno;

  // Fallback walk: one component at a time, never following a symlink.
  // Callers only ask for O_PATH (optionally O_DIRECTORY) opens.
  char part[PATH_MAX];
  int cur = ::fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
  if (cur < 0) return -errno;
  const char* p = rel;
  while (*p != '\0') {
    size_t n = 0;
    while (p[n] != '\0' && p[n] != '/') ++n;
    if (n >= sizeof(part)) {
      ::close(cur);
      return -ENAMETOOLONG;
    }
    std::memcpy(part, p, n);
    part[n] = '\0';
    p += n;
    while (*p == '/') ++p;
    bool last = *p == '\0';
    // O_PATH|O_NOFOLLOW opens a symlink itself, so it can be told apart.
    int next = ::openat(cur, part, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    int saved = errno;
    ::close(cur);
    if (next < 0) return -saved;
    struct stat st;
    int err = ::fstat(next, &st) != 0 ? errno
              : S_ISLNK(st.st_mode)   ? EXDEV
              : (!last || (flags & O_DIRECTORY)) && !S_ISDIR(st.st_mode) ? ENOTDIR
                                                                         : 0;
    if (err != 0) {
      ::close(next);
      return -err;
    }
    cur = next;
  }
  return cur;
}

bool FailPath(ChildError* error, const char* step, const char* dest, int err) {
  if (err == EXDEV) {
    return child::Fail(error, "resolve destination (it leaves the sandbox root via a symlink)",
                       dest, EXDEV);
  }
  return child::Fail(error, step, dest, err);
}

// mkdir -p of `rel` beneath root; the last component gets `mode`, the ones
// before it `parent_mode`. Returns an O_PATH fd of the directory, or -1
// with `error` filled (a failed mkdir named `step`).
int MakeDirsModes(int root_fd, const char* rel, mode_t mode, mode_t parent_mode, const char* dest,
                  const char* step, ChildError* error) {
  char prefix[PATH_MAX];
  size_t len = std::strlen(rel);
  if (len >= sizeof(prefix)) {
    child::Fail(error, step, dest, ENAMETOOLONG);
    return -1;
  }
  int parent = ::fcntl(root_fd, F_DUPFD_CLOEXEC, 3);
  if (parent < 0) {
    child::Fail(error, "dup", dest, errno);
    return -1;
  }
  size_t pos = 0;
  while (pos < len) {
    size_t start = pos;
    while (pos < len && rel[pos] != '/') ++pos;
    std::memcpy(prefix, rel, pos);
    prefix[pos] = '\0';
    const char* name = prefix + start;
    bool last = pos >= len;
    // Open first: most components exist (and may sit in a read-only or
    // foreign-owned bind where mkdir would fail for the wrong reason).
    int next = OpenBeneath(root_fd, prefix, O_PATH | O_DIRECTORY);
    if (next == -ENOENT) {
      if (::mkdirat(parent, name, last ? mode : parent_mode) != 0 && errno != EEXIST) {
        int saved = errno;
        ::close(parent);
        child::Fail(error, step, dest, saved);
        return -1;
      }
      next = OpenBeneath(root_fd, prefix, O_PATH | O_DIRECTORY);
    }
    ::close(parent);
    if (next < 0) {
      FailPath(error, "open directory", dest, -next);
      return -1;
    }
    parent = next;
    ++pos;
  }
  return parent;
}

int MakeDirs(int root_fd, const char* rel, mode_t mode, const char* dest, ChildError* error) {
  return MakeDirsModes(root_fd, rel, mode, 0755, dest, "mkdir", error);
}

// bubblewrap makes the missing parents of an op's destination before the op
// itself, with the op's parent mode (MountOp::parent_mode: 0700 for its ops
// without a mode of their own); the op's own MakeDirs then finds them. An
// optional bind whose source is missing makes nothing, as in bwrap, and
// --chmod creates nothing at all.
bool MakeParents(int root_fd, const PreparedOp& op, ChildError* error) {
  if (op.op->parent_mode == 0755 || op.parent_relative.empty() || op.kind == MountKind::kChmod) return true;
  if (op.kind == MountKind::kBind && op.op->optional && op.tree_fd < 0) {
    struct stat st;
    if (::stat(op.host_source.c_str(), &st) != 0 && errno == ENOENT) return true;
  }
  ScopedFd parent(MakeDirsModes(root_fd, op.parent_relative.c_str(), op.op->parent_mode, op.op->parent_mode,
                                op.dest.c_str(), "mkdir parents", error));
  return parent.fd >= 0;
}

// Makes (or finds) a regular file at the op's destination for a file bind.
int MakeFileMountpoint(int root_fd, const PreparedOp& op, ChildError* error) {
  int existing = OpenBeneath(root_fd, op.dest_relative.c_str(), O_PATH);
  if (existing >= 0) return existing;
  if (existing != -ENOENT) {
    FailPath(error, "open destination", op.dest.c_str(), -existing);
    return -1;
  }
  ScopedFd parent(MakeDirs(root_fd, op.parent_relative.c_str(), 0755, op.dest.c_str(), error));
  if (parent.fd < 0) return -1;
  int fd = ::openat(parent.fd, op.base_name.c_str(), O_CREAT | O_EXCL | O_RDONLY | O_NOFOLLOW | O_CLOEXEC,
                    0444);
  if (fd < 0 && errno != EEXIST) {
    child::Fail(error, "create mountpoint", op.dest.c_str(), errno);
    return -1;
  }
  if (fd >= 0) ::close(fd);
  fd = OpenBeneath(root_fd, op.dest_relative.c_str(), O_PATH);
  if (fd < 0) FailPath(error, "open destination", op.dest.c_str(), -fd);
  return fd;
}

// Read-only remount for kernels without mount_setattr: per-mount flags that
// the kernel locked (nosuid, nodev, noexec, atime) must be repeated or the
// remount is refused in a user namespace. Covers the top mount only.
int ClassicRemount(const char* path, bool readonly, bool devices) {
  struct statvfs sv;
  if (::statvfs(path, &sv) != 0) return -errno;
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID;
  if (readonly) flags |= MS_RDONLY;
  if (!devices || (sv.f_flag & ST_NODEV)) flags |= MS_NODEV;
  if (sv.f_flag & ST_NOEXEC) flags |= MS_NOEXEC;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  return ::mount(nullptr, path, nullptr, flags, nullptr) == 0 ? 0 : -errno;
}

// Binds `src_path` (relative to src_dirfd) onto the object open as `dest_fd`,
// which is `reopen_rel` beneath `reopen_dirfd` (the classic path needs to
// find the new mount again by a real lookup: a /proc/self/fd jump lands on
// the directory under it, where a remount fails with EINVAL).
bool BindOnto(const PreparedPlan& plan, int src_dirfd, const char* src_path, int dest_fd,
              int reopen_dirfd, const char* reopen_rel, bool readonly, bool devices,
              const char* dest, ChildError* error) {
  if (plan.new_mount_api) {
    // Clone the tree detached, fix its flags, then attach: the mount is never
    // visible writable, and no path is resolved twice.
    ScopedFd tree(::open_tree(src_dirfd, src_path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (tree.fd < 0) return child::Fail(error, "open_tree", dest, errno);
    struct mount_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.attr_set = BindMountAttrs(readonly, devices);
    if (::mount_setattr(tree.fd, "", AT_EMPTY_PATH | AT_RECURSIVE, &attr, sizeof(attr)) != 0) {
      return child::Fail(error, "mount_setattr", dest, errno);
    }
    if (::move_mount(tree.fd, "", dest_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
      return child::Fail(error, "move_mount", dest, errno);
    }
    return true;
  }
  char src[PATH_MAX];
  if (src_dirfd == AT_FDCWD) {
    child::CopyString(src, sizeof(src), src_path);
  } else {
    FdPath dir(src_dirfd);
    size_t n = child::CopyString(src, sizeof(src), dir.c_str());
    if (src_path[0] != '\0') {
      n += child::CopyString(src + n, sizeof(src) - n, "/");
      child::CopyString(src + n, sizeof(src) - n, src_path);
    }
  }
  FdPath target(dest_fd);
  if (::mount(src, target.c_str(), nullptr, MS_BIND | MS_REC, nullptr) != 0) {
    return child::Fail(error, "mount(bind)", dest, errno);
  }
  // dest_fd still names the directory under the new mount; the remount
  // must target the mount itself, reached by resolving the same fd again.
  ScopedFd mounted(OpenBeneath(reopen_dirfd, reopen_rel, O_PATH));
  if (mounted.fd < 0) return child::Fail(error, "open(bind)", dest, -mounted.fd);
  FdPath mounted_path(mounted.fd);
  int rc = ClassicRemount(mounted_path.c_str(), readonly, devices);
  if (rc != 0) return child::Fail(error, "mount(remount)", dest, -rc);
  return true;
}

bool MountFs(const char* fstype, int dest_fd, unsigned long flags, const char* options,
             const char* dest, ChildError* error) {
  FdPath target(dest_fd);
  if (::mount(fstype, target.c_str(), fstype, flags, options) != 0) {
    char step[32];
    size_t n = child::CopyString(step, sizeof(step), "mount(");
    n += child::CopyString(step + n, sizeof(step) - n, fstype);
    child::CopyString(step + n, sizeof(step) - n, ")");
    return child::Fail(error, step, dest, errno);
  }
  return true;
}

// Attaches a detached mount prepared on the host (its flags are set
// already) at the op's destination.
bool AttachTree(int root_fd, const PreparedOp& op, int tree_fd, ChildError* error) {
  int dest_fd = op.tree_is_dir ? MakeDirs(root_fd, op.dest_relative.c_str(), 0755, op.dest.c_str(), error)
                               : MakeFileMountpoint(root_fd, op, error);
  if (dest_fd < 0) return false;
  ScopedFd dest(dest_fd);
  if (::move_mount(tree_fd, "", dest.fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    return child::Fail(error, "move_mount", op.dest.c_str(), errno);
  }
  return true;
}

bool ApplyBind(const PreparedPlan& plan, int root_fd, const PreparedOp& op, ChildError* error) {
  if (op.tree_fd >= 0) return AttachTree(root_fd, op, op.tree_fd, error);
  if (op.source_missing) return true;
  struct stat st;
  if (::stat(op.host_source.c_str(), &st) != 0) {
    if (op.op->optional && errno == ENOENT) return true;
    // A directory on the way that only the launcher's ids may search.
    if (errno == EACCES && op.fallback_tree_fd >= 0) return AttachTree(root_fd, op, op.fallback_tree_fd, error);
    return child::Fail(error, "stat bind source", op.op->source.c_str(), errno);
  }
  int dest_fd = S_ISDIR(st.st_mode)
                    ? MakeDirs(root_fd, op.dest_relative.c_str(), 0755, op.dest.c_str(), error)
                    : MakeFileMountpoint(root_fd, op, error);
  if (dest_fd < 0) return false;
  ScopedFd dest(dest_fd);
  return BindOnto(plan, AT_FDCWD, op.host_source.c_str(), dest.fd, root_fd, op.dest_relative.c_str(),
                  op.op->readonly, op.op->devices, op.dest.c_str(), error);
}

// Adds noexec to the mount open as `mount_fd` (its top mount only), keeping
// the flags the kernel locked.
bool SetNoexec(const PreparedPlan& plan, int mount_fd, const char* dest, ChildError* error) {
  if (plan.new_mount_api) {
    struct mount_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.attr_set = MOUNT_ATTR_NOEXEC;
    if (::mount_setattr(mount_fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
      return child::Fail(error, "mount_setattr(noexec)", dest, errno);
    }
    return true;
  }
  FdPath path(mount_fd);
  struct statvfs sv;
  if (::statvfs(path.c_str(), &sv) != 0) return child::Fail(error, "statvfs", dest, errno);
  unsigned long flags = MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC;
  if (sv.f_flag & ST_RDONLY) flags |= MS_RDONLY;
  if (sv.f_flag & ST_NOATIME) flags |= MS_NOATIME;
  if (sv.f_flag & ST_NODIRATIME) flags |= MS_NODIRATIME;
  if (sv.f_flag & ST_RELATIME) flags |= MS_RELATIME;
  if (::mount(nullptr, path.c_str(), nullptr, flags, nullptr) != 0) {
    return child::Fail(error, "mount(remount noexec)", dest, errno);
  }
  return true;
}

// bubblewrap's covers of a new procfs: read-only where they are writable.
constexpr const char* kBwrapProcCovers[] = {"sys", "sysrq-trigger", "irq", "bus"};

bool ApplyProc(const PreparedPlan& plan, int root_fd, const PreparedOp& op, BuildReport* report,
               ChildError* error) {
  {
    ScopedFd dir(MakeDirs(root_fd, op.dest_relative.c_str(), 0555, op.dest.c_str(), error));
    if (dir.fd < 0) return false;
    FdPath target(dir.fd);
    if (op.op->bwrap_style && op.op->source == "/proc") {
      // bubblewrap without a new pid namespace: the host's procfs, bound
      // read-write (the pid namespace is shared anyway); covers below.
      if (!BindOnto(plan, AT_FDCWD, "/oldroot/proc", dir.fd, root_fd, op.dest_relative.c_str(), false, false,
                    op.dest.c_str(), error)) {
        return false;
      }
    } else if (::mount("proc", target.c_str(), "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
      // A fresh procfs is refused where the host's /proc is partly covered
      // (the kernel's mnt_too_revealing check). Fall back to the host's,
      // read-only, and mask it below; the probe warns that host processes
      // are then visible.
      int saved = errno;
      if (!plan.allow_proc_fallback || (saved != EPERM && saved != EINVAL)) {
        return child::Fail(error, "mount(proc)", op.dest.c_str(), saved);
      }
      report->proc_fallback = true;
      report->proc_errno = saved;
      if (!BindOnto(plan, AT_FDCWD, "/oldroot/proc", dir.fd, root_fd, op.dest_relative.c_str(), true,
                    false, op.dest.c_str(), error)) {
        return false;
      }
    }
  }
  // Reopen: the fd above names the directory under the new mount.
  ScopedFd proc(OpenBeneath(root_fd, op.dest_relative.c_str(), O_PATH | O_DIRECTORY));
  if (proc.fd < 0) return FailPath(error, "open proc", op.dest.c_str(), -proc.fd);
  if (op.op->noexec && !SetNoexec(plan, proc.fd, op.dest.c_str(), error)) return false;
  if (op.op->bwrap_style) {
    for (const char* name : kBwrapProcCovers) {
      ScopedFd sub(::openat(proc.fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
      if (sub.fd < 0) continue;
      FdPath path(sub.fd);
      if (::access(path.c_str(), W_OK) != 0) continue;  // already read-only
      if (!BindOnto(plan, proc.fd, name, sub.fd, proc.fd, name, true, false, name, error)) return false;
    }
    return true;
  }
  for (const char* name : kProcReadOnly) {
    ScopedFd sub(::openat(proc.fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (sub.fd < 0) continue;
    if (!BindOnto(plan, proc.fd, name, sub.fd, proc.fd, name, true, false, name, error)) return false;
  }
  for (const char* name : kProcMaskFiles) {
    ScopedFd sub(::openat(proc.fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (sub.fd < 0) continue;
    if (!BindOnto(plan, AT_FDCWD, "/oldroot/dev/null", sub.fd, proc.fd, name, true, true, name, error)) {
      return false;
    }
  }
  for (const char* name : kProcMaskDirs) {
    ScopedFd sub(::openat(proc.fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (sub.fd < 0) continue;
    if (!MountFs("tmpfs", sub.fd, MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=0555",
                 name, error)) {
      return false;
    }
  }
  return true;
}

bool ApplyDev(const PreparedPlan& plan, int root_fd, const PreparedOp& op, ChildError* error) {
  {
    ScopedFd dir(MakeDirs(root_fd, op.dest_relative.c_str(), 0755, op.dest.c_str(), error));
    if (dir.fd < 0) return false;
    // bubblewrap's /dev is a plain tmpfs (nosuid, nodev); cubicle's adds noexec.
    unsigned long flags = op.op->bwrap_style ? MS_NOSUID | MS_NODEV : MS_NOSUID | MS_NOEXEC;
    if (!MountFs("tmpfs", dir.fd, flags, op.tmpfs_options.c_str(), op.dest.c_str(), error)) {
      return false;
    }
  }
  ScopedFd dev(OpenBeneath(root_fd, op.dest_relative.c_str(), O_PATH | O_DIRECTORY));
  if (dev.fd < 0) return FailPath(error, "open dev", op.dest.c_str(), -dev.fd);
  char host[64];
  for (const char* node : kDevNodes) {
    size_t n = child::CopyString(host, sizeof(host), "/oldroot/dev/");
    child::CopyString(host + n, sizeof(host) - n, node);
    struct stat st;
    if (::stat(host, &st) != 0) {
      if (std::strcmp(node, "tty") == 0) continue;  // hosts without a tty node exist
      return child::Fail(error, "stat host device", host + 8, errno);
    }
    int made = ::openat(dev.fd, node, O_CREAT | O_EXCL | O_RDONLY | O_CLOEXEC, 0666);
    if (made < 0) return child::Fail(error, "create device mountpoint", node, errno);
    ::close(made);
    ScopedFd target(::openat(dev.fd, node, O_PATH | O_NOFOLLOW | O_CLOEXEC));
    if (target.fd < 0) return child::Fail(error, "open device mountpoint", node, errno);
    if (!BindOnto(plan, AT_FDCWD, host, target.fd, dev.fd, node, false, true, node, error)) return false;
  }
  if (::mkdirat(dev.fd, "shm", op.op->bwrap_style ? 0755 : 01777) != 0) {
    return child::Fail(error, "mkdir", "/dev/shm", errno);
  }
  if (!op.op->bwrap_style) {
    ScopedFd shm(::openat(dev.fd, "shm", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (shm.fd < 0) return child::Fail(error, "open", "/dev/shm", errno);
    if (!MountFs("tmpfs", shm.fd, MS_NOSUID | MS_NODEV, "mode=1777,size=64m", "/dev/shm", error)) {
      return false;
    }
  }
  if (::mkdirat(dev.fd, "pts", 0755) != 0) return child::Fail(error, "mkdir", "/dev/pts", errno);
  {
    ScopedFd pts(::openat(dev.fd, "pts", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (pts.fd < 0) return child::Fail(error, "open", "/dev/pts", errno);
    // No gid= option: group 5 (tty) is not mapped in the user namespace.
    if (!MountFs("devpts", pts.fd, MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620",
                 "/dev/pts", error)) {
      return false;
    }
  }
  for (const DevLink& link : kDevLinks) {
    // No /proc/kcore link where cubicle masks it (bubblewrap has one).
    if (std::strcmp(link.name, "core") == 0 && !op.op->bwrap_style) continue;
    if (::symlinkat(link.target, dev.fd, link.name) != 0) {
      return child::Fail(error, "symlink", link.name, errno);
    }
  }
  return true;
}

bool ApplySymlink(int root_fd, const PreparedOp& op, ChildError* error) {
  ScopedFd parent(MakeDirs(root_fd, op.parent_relative.c_str(), 0755, op.dest.c_str(), error));
  if (parent.fd < 0) return false;
  if (::symlinkat(op.op->source.c_str(), parent.fd, op.base_name.c_str()) == 0) return true;
  int saved = errno;
  if (saved == EEXIST) {
    // bubblewrap accepts an existing link with the same target.
    char existing[PATH_MAX];
    ssize_t n = ::readlinkat(parent.fd, op.base_name.c_str(), existing, sizeof(existing) - 1);
    if (n >= 0) {
      existing[n] = '\0';
      if (std::strcmp(existing, op.op->source.c_str()) == 0) return true;
    }
  }
  return child::Fail(error, "symlink", op.dest.c_str(), saved);
}

// Writes the op's data to `fd` whole, then gives it the op's mode (the
// umask may have narrowed it at creation).
bool WriteContents(int fd, const PreparedOp& op, const char* step, ChildError* error) {
  const char* data = op.op->data.data();
  size_t left = op.op->data.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return child::Fail(error, step, op.dest.c_str(), errno);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
  if (::fchmod(fd, op.op->mode) != 0) return child::Fail(error, "chmod", op.dest.c_str(), errno);
  return true;
}

bool ApplyFile(int root_fd, const PreparedOp& op, ChildError* error) {
  ScopedFd parent(MakeDirs(root_fd, op.parent_relative.c_str(), 0755, op.dest.c_str(), error));
  if (parent.fd < 0) return false;
  ScopedFd file(::openat(parent.fd, op.base_name.c_str(),
                         O_CREAT | O_TRUNC | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, op.op->mode));
  if (file.fd < 0) return child::Fail(error, "create file", op.dest.c_str(), errno);
  return WriteContents(file.fd, op, "write file", error);
}

bool RemountReadOnly(const PreparedPlan& plan, int fd, const char* dest, bool recursive, ChildError* error) {
  if (plan.new_mount_api) {
    struct mount_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.attr_set = MOUNT_ATTR_RDONLY;
    if (::mount_setattr(fd, "", AT_EMPTY_PATH | (recursive ? AT_RECURSIVE : 0), &attr, sizeof(attr)) != 0) {
      return child::Fail(error, "mount_setattr(read-only)", dest, errno);
    }
    return true;
  }
  FdPath target(fd);
  int rc = ClassicRemount(target.c_str(), true, false);
  return rc == 0 ? true : child::Fail(error, "mount(remount read-only)", dest, -rc);
}

// The data goes to a file in the staging root (gone with it, once the
// bind holds the file), which is then bound at the destination.
bool ApplyBindData(const PreparedPlan& plan, int root_fd, const PreparedOp& op, ChildError* error) {
  {
    ScopedFd file(::open(op.staging_path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW | O_CLOEXEC, op.op->mode));
    if (file.fd < 0) return child::Fail(error, "create data file", op.dest.c_str(), errno);
    if (!WriteContents(file.fd, op, "write data file", error)) return false;
  }
  int dest_fd = MakeFileMountpoint(root_fd, op, error);
  if (dest_fd < 0) return false;
  ScopedFd dest(dest_fd);
  bool ok = BindOnto(plan, AT_FDCWD, op.staging_path.c_str(), dest.fd, root_fd, op.dest_relative.c_str(),
                     op.op->readonly, false, op.dest.c_str(), error);
  ::unlink(op.staging_path.c_str());
  return ok;
}

// overlayfs with more layers than mount(2)'s page of options holds: the
// new mount API takes them one by one (lowerdir+, Linux 6.8), unescaped.
bool MountOverlayLayerByLayer(const PreparedPlan& plan, int dest_fd, const PreparedOp& op, unsigned int attrs,
                              ChildError* error) {
  const char* dest = op.dest.c_str();
  if (!plan.new_mount_api) return child::Fail(error, "mount(overlay)", dest, E2BIG);
  ScopedFd fs(::fsopen("overlay", FSOPEN_CLOEXEC));
  if (fs.fd < 0) return child::Fail(error, "mount(overlay)", dest, errno);
  auto set = [&](const char* key, const char* value) {
    return ::fsconfig(fs.fd, FSCONFIG_SET_STRING, key, value, 0) == 0;
  };
  if (!set("source", "overlay")) return child::Fail(error, "mount(overlay)", dest, errno);
  for (const std::string& layer : op.overlay_lower) {
    if (set("lowerdir+", layer.c_str())) continue;
    // A kernel before 6.8 knows no lowerdir+: the layers are too many for it.
    const int err = errno == EINVAL && &layer == &op.overlay_lower.front() ? E2BIG : errno;
    return child::Fail(error, "mount(overlay)", dest, err);
  }
  const bool ok = (op.overlay_upper.empty() ||
                   (set("upperdir", op.overlay_upper.c_str()) && set("workdir", op.overlay_work.c_str()))) &&
                  ::fsconfig(fs.fd, FSCONFIG_SET_FLAG, "userxattr", nullptr, 0) == 0 &&
                  ::fsconfig(fs.fd, FSCONFIG_CMD_CREATE, nullptr, nullptr, 0) == 0;
  if (!ok) return child::Fail(error, "mount(overlay)", dest, errno);
  ScopedFd mnt(::fsmount(fs.fd, FSMOUNT_CLOEXEC, attrs));
  if (mnt.fd < 0) return child::Fail(error, "mount(overlay)", dest, errno);
  if (::move_mount(mnt.fd, "", dest_fd, "", MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH) != 0) {
    return child::Fail(error, "move_mount", dest, errno);
  }
  return true;
}

// overlayfs as bwrap 0.11 mounts it: mount(2), its layers named by host
// paths (under /oldroot) in escaped options, and for bwrap's own ops no
// flags at all (a --ro-overlay is read-only for want of an upper layer).
// A --tmp-overlay's upper and work directories are on the staging root,
// where bwrap has them, by the same names.
bool ApplyOverlay(const PreparedPlan& plan, int root_fd, const PreparedOp& op, ChildError* error) {
  if (op.op->upper.empty() && !op.op->readonly) {
    for (const std::string* dir : {&op.overlay_upper, &op.overlay_work}) {
      if (::mkdir(dir->c_str(), 0755) != 0) return child::Fail(error, "mkdir", dir->c_str(), errno);
    }
  }
  ScopedFd dir(MakeDirs(root_fd, op.dest_relative.c_str(), 0755, op.dest.c_str(), error));
  if (dir.fd < 0) return false;
  const bool bwrap = op.op->bwrap_style, readonly = op.op->readonly;
  if (op.tmpfs_options.size() < kMountOptionsMax) {
    const unsigned long flags = bwrap ? 0 : MS_NOSUID | MS_NODEV | (readonly ? MS_RDONLY : 0);
    return MountFs("overlay", dir.fd, flags, op.tmpfs_options.c_str(), op.dest.c_str(), error);
  }
  const unsigned int attrs = bwrap ? 0 : MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | (readonly ? MOUNT_ATTR_RDONLY : 0);
  return MountOverlayLayerByLayer(plan, dir.fd, op, attrs, error);
}

bool ApplyOp(const PreparedPlan& plan, int root_fd, const PreparedOp& op, BuildReport* report,
             ChildError* error) {
  switch (op.kind) {
    case MountKind::kBind:
      return ApplyBind(plan, root_fd, op, error);
    case MountKind::kTmpfs: {
      ScopedFd dir(MakeDirs(root_fd, op.dest_relative.c_str(), 0755, op.dest.c_str(), error));
      if (dir.fd < 0) return false;
      return MountFs("tmpfs", dir.fd, MS_NOSUID | MS_NODEV, op.tmpfs_options.c_str(), op.dest.c_str(),
                     error);
    }
    case MountKind::kProc:
      return ApplyProc(plan, root_fd, op, report, error);
    case MountKind::kDev:
      return ApplyDev(plan, root_fd, op, error);
    case MountKind::kDir: {
      ScopedFd dir(MakeDirs(root_fd, op.dest_relative.c_str(), op.op->mode, op.dest.c_str(), error));
      return dir.fd >= 0;
    }
    case MountKind::kSymlink:
      return ApplySymlink(root_fd, op, error);
    case MountKind::kFile:
      return ApplyFile(root_fd, op, error);
    case MountKind::kRemountRo: {
      ScopedFd target(OpenBeneath(root_fd, op.dest_relative.c_str(), O_PATH));
      if (target.fd < 0) return FailPath(error, "open remount target", op.dest.c_str(), -target.fd);
      // bubblewrap's --remount-ro is not recursive.
      return RemountReadOnly(plan, target.fd, op.dest.c_str(), !op.op->bwrap_style, error);
    }
    case MountKind::kMqueue: {
      ScopedFd dir(MakeDirs(root_fd, op.dest_relative.c_str(), 0755, op.dest.c_str(), error));
      if (dir.fd < 0) return false;
      return MountFs("mqueue", dir.fd, op.op->bwrap_style ? 0 : MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr,
                     op.dest.c_str(), error);
    }
    case MountKind::kChmod: {
      ScopedFd target(OpenBeneath(root_fd, op.dest_relative.c_str(), O_PATH));
      if (target.fd < 0) return FailPath(error, "open chmod target", op.dest.c_str(), -target.fd);
      FdPath path(target.fd);
      if (::chmod(path.c_str(), op.op->mode) != 0) return child::Fail(error, "chmod", op.dest.c_str(), errno);
      return true;
    }
    case MountKind::kBindData:
      return ApplyBindData(plan, root_fd, op, error);
    case MountKind::kOverlay:
      return ApplyOverlay(plan, root_fd, op, error);
  }
  return child::Fail(error, "mount plan", "unknown operation", EINVAL);
}

// overlayfs stacks its lower layers top first; bwrap's --overlay-src
// order is bottom first. mount(2)'s options in bwrap's order and
// escaping; fsconfig's layers (where those do not fit a page): lowerdir+
// as is, upperdir and workdir escaped (the kernel unescapes those). A
// --tmp-overlay's directories are named as bwrap names them (with no
// character to escape).
void PrepareOverlay(const MountOp& op, int tmp_index, PreparedOp* p) {
  if (!op.upper.empty()) {
    p->overlay_upper = EscapeOverlayPath(absl::StrCat(kOldRoot, op.upper));
    p->overlay_work = EscapeOverlayPath(absl::StrCat(kOldRoot, op.work));
  } else if (!op.readonly) {
    p->overlay_upper = absl::StrCat("/tmp-overlay-upper-", tmp_index);
    p->overlay_work = absl::StrCat("/tmp-overlay-work-", tmp_index);
  }
  std::vector<std::string> escaped;
  for (auto layer = op.lower.rbegin(); layer != op.lower.rend(); ++layer) {
    p->overlay_lower.push_back(absl::StrCat(kOldRoot, *layer));
    escaped.push_back(EscapeOverlayPath(p->overlay_lower.back()));
  }
  p->tmpfs_options.clear();
  if (!p->overlay_upper.empty()) {
    absl::StrAppend(&p->tmpfs_options, "upperdir=", p->overlay_upper, ",workdir=", p->overlay_work, ",");
  }
  absl::StrAppend(&p->tmpfs_options, "lowerdir=", absl::StrJoin(escaped, ":"), ",userxattr");
}

}  // namespace

PreparedPlan Prepare(const MountPlan& plan, bool readonly_root, bool new_mount_api, bool openat2) {
  PreparedPlan out;
  out.openat2 = openat2;
  out.readonly_root = readonly_root;
  out.new_mount_api = new_mount_api;
  out.ops.reserve(plan.size());
  uint64_t staging_bytes = 64 * 1024;
  int tmp_overlays = 0;
  for (const MountOp& op : plan) {
    PreparedOp p{.kind = op.kind, .op = &op};
    p.dest = op.dest;
    p.dest_relative = op.dest.substr(1);
    size_t slash = p.dest_relative.rfind('/');
    if (slash == std::string::npos) {
      p.base_name = p.dest_relative;
    } else {
      p.parent_relative = p.dest_relative.substr(0, slash);
      p.base_name = p.dest_relative.substr(slash + 1);
    }
    if (op.kind == MountKind::kBind) p.host_source = absl::StrCat(kOldRoot, op.source);
    if (op.kind == MountKind::kBindData) {
      p.staging_path = absl::StrCat("/bind-data-", out.ops.size());
      staging_bytes += op.data.size() + 4096;
    }
    if (op.kind == MountKind::kOverlay) {
      PrepareOverlay(op, tmp_overlays, &p);
      if (op.upper.empty() && !op.readonly) ++tmp_overlays;
    }
    if (op.kind == MountKind::kTmpfs) {
      char octal[16];  // tmpfs wants mode= in octal
      std::snprintf(octal, sizeof(octal), "%o", op.mode);
      p.tmpfs_options = absl::StrCat("mode=0", octal);
      if (op.size_bytes > 0) absl::StrAppend(&p.tmpfs_options, ",size=", op.size_bytes);
    }
    if (op.kind == MountKind::kDev) p.tmpfs_options = "mode=0755,size=64k";
    if ((op.kind == MountKind::kTmpfs || op.kind == MountKind::kDev) && !op.selinux_context.empty()) {
      // Quoted: an MCS context has commas ("s0:c1,c2"), as bwrap's label_mount quotes it.
      absl::StrAppend(&p.tmpfs_options, ",context=\"", op.selinux_context, "\"");
    }
    out.ops.push_back(std::move(p));
  }
  // A --tmp-overlay's writes go to the staging root, unbounded there as
  // on bwrap's.
  out.staging_options = tmp_overlays > 0 ? "mode=0700" : absl::StrCat("mode=0700,size=", staging_bytes);
  return out;
}

std::string EscapeOverlayPath(const std::string& path) {
  std::string out;
  out.reserve(path.size());
  for (char c : path) {
    if (c == '\\' || c == ',' || c == ':') out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

bool BuildRoot(const PreparedPlan& plan, BuildReport* report, ChildError* error) {
  use_openat2 = plan.openat2;
  ::umask(0);  // modes in the plan are exact; the payload gets 022 back
  // Nothing we mount may propagate back to the host, nor host changes in.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) {
    return child::Fail(error, "mount(make-rprivate)", "/", errno);
  }
  if (::mount("tmpfs", kStagingBase, "tmpfs", MS_NOSUID | MS_NODEV, plan.staging_options.c_str()) != 0) {
    return child::Fail(error, "mount(staging tmpfs)", kStagingBase, errno);
  }
  if (::chdir(kStagingBase) != 0) return child::Fail(error, "chdir", kStagingBase, errno);
  if (::mkdir("newroot", 0755) != 0) return child::Fail(error, "mkdir", kNewRoot, errno);
  if (::mkdir("oldroot", 0755) != 0) return child::Fail(error, "mkdir", kOldRoot, errno);
  if (::mount("tmpfs", "newroot", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=4m") != 0) {
    return child::Fail(error, "mount(root tmpfs)", kNewRoot, errno);
  }
  if (::syscall(SYS_pivot_root, ".", "oldroot") != 0) {
    return child::Fail(error, "pivot_root", kStagingBase, errno);
  }
  if (::chdir("/") != 0) return child::Fail(error, "chdir", "/", errno);

  ScopedFd root(::open(kNewRoot, O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root.fd < 0) return child::Fail(error, "open", kNewRoot, errno);
  for (const PreparedOp& op : plan.ops) {
    if (!MakeParents(root.fd, op, error) || !ApplyOp(plan, root.fd, op, report, error)) return false;
    if (op.dest_relative.empty() && op.kind == MountKind::kBind) {
      // A bind over the root itself (bubblewrap's --bind / /): the later
      // operations and the final pivot go to the new top mount.
      int top = ::open(kNewRoot, O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (top < 0) return child::Fail(error, "open", kNewRoot, errno);
      ::close(root.fd);
      root.fd = top;
    }
  }
  if (plan.readonly_root) {
    // Only the root tmpfs itself: binds and tmpfs mounts keep their own mode.
    if (plan.new_mount_api) {
      struct mount_attr attr;
      std::memset(&attr, 0, sizeof(attr));
      attr.attr_set = MOUNT_ATTR_RDONLY;
      if (::mount_setattr(root.fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
        return child::Fail(error, "mount_setattr(read-only root)", "/", errno);
      }
    } else if (::mount(nullptr, kNewRoot, nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
                       nullptr) != 0) {
      return child::Fail(error, "mount(read-only root)", "/", errno);
    }
  }
  // Enter the new root. pivot_root(".", ".") stacks the staging root on top
  // of the new one; detaching it drops the staging tmpfs and the whole host
  // tree in one step, leaving no path back to /oldroot.
  if (::fchdir(root.fd) != 0) return child::Fail(error, "fchdir", kNewRoot, errno);
  if (::syscall(SYS_pivot_root, ".", ".") != 0) return child::Fail(error, "pivot_root", kNewRoot, errno);
  if (::umount2(".", MNT_DETACH) != 0) return child::Fail(error, "umount2(old root)", "/", errno);
  if (::chdir("/") != 0) return child::Fail(error, "chdir", "/", errno);
  return true;
}

}  // namespace cubicle::rootfs
