#include "runtime/host_features.h"

#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

namespace cubicle::runtime {
namespace {

// A syscall exists when calling it with an invalid argument fails with
// anything but ENOSYS.
bool SyscallExists(long rc) { return rc == 0 || errno != ENOSYS; }

HostFeatures Detect() {
  HostFeatures f;
  f.clone3 = SyscallExists(::syscall(SYS_clone3, nullptr, 0));
  bool open_tree = SyscallExists(::syscall(SYS_open_tree, -1, "", 0));
  bool move_mount = SyscallExists(::syscall(SYS_move_mount, -1, "", -1, "", 0));
  bool setattr = SyscallExists(::syscall(SYS_mount_setattr, -1, "", 0, nullptr, 0));
  f.new_mount_api = open_tree && move_mount && setattr;
  f.openat2 = SyscallExists(::syscall(SYS_openat2, -1, "", nullptr, 0));
  return f;
}

const HostFeatures& Detected() {
  static const HostFeatures features = Detect();
  return features;
}

std::atomic<bool> procfs_fallback{false};

}  // namespace

HostFeatures Features() {
  HostFeatures f = Detected();
  f.fresh_procfs = !procfs_fallback.load(std::memory_order_relaxed);
  return f;
}

void NoteProcfsFallback() { procfs_fallback.store(true, std::memory_order_relaxed); }

}  // namespace cubicle::runtime
