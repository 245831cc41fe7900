#include "namespaces/capabilities.h"

#include <fcntl.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cubicle::namespaces {

bool KeepCapabilities(const KeptCapabilities& caps, ChildError* error) {
  for (int cap = 0; cap <= 63; ++cap) {
    if (caps.bounding & (uint64_t{1} << cap)) continue;
    if (::prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0) {
      if (errno == EINVAL) break;  // past the kernel's last capability
      char detail[32];
      child::FormatWithNumber(detail, sizeof(detail), "cap ", cap);
      return child::Fail(error, "prctl(PR_CAPBSET_DROP)", detail, errno);
    }
  }
  if (caps.exact) {
    // Root's execve would otherwise grant the whole bounding set; with
    // NOROOT only the ambient set survives, for every uid alike.
    unsigned long bits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED;
    if (::prctl(PR_SET_SECUREBITS, bits, 0, 0, 0) != 0) {
      return child::Fail(error, "prctl(PR_SET_SECUREBITS)", "", errno);
    }
  }
  if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    return child::Fail(error, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", "", errno);
  }
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  const uint64_t inheritable = caps.exact ? caps.keep : caps.inheritable;
  for (int i = 0; i < 2; ++i) {
    data[i].permitted = static_cast<uint32_t>(caps.keep >> (32 * i));
    data[i].effective = data[i].permitted;
    data[i].inheritable = static_cast<uint32_t>(inheritable >> (32 * i));
  }
  if (::syscall(SYS_capset, &header, data) != 0) return child::Fail(error, "capset", "kept set", errno);
  const uint64_t ambient = caps.exact ? caps.keep : caps.ambient;
  if (ambient != 0) {
    for (int cap = 0; cap <= 63; ++cap) {
      if (!(ambient & (uint64_t{1} << cap))) continue;
      if (::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) {
        if (errno == EINVAL) break;
        char detail[32];
        child::FormatWithNumber(detail, sizeof(detail), "cap ", cap);
        return child::Fail(error, "prctl(PR_CAP_AMBIENT_RAISE)", detail, errno);
      }
    }
  }
  return true;
}

namespace {

bool WriteProcFile(int proc_fd, const char* path, const char* text, ChildError* error) {
  int fd = ::openat(proc_fd, path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return child::Fail(error, "open", path, errno);
  const size_t len = std::strlen(text);
  ssize_t n = ::write(fd, text, len);
  int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(len)) return child::Fail(error, "write", path, n < 0 ? saved : EIO);
  return true;
}

// "INSIDE OUTSIDE 1\n" without allocating.
void OneIdMap(char* buf, size_t size, unsigned long inside, unsigned long outside) {
  char number[32];
  size_t n = child::CopyString(buf, size, child::FormatWithNumber(number, sizeof(number), "", static_cast<long>(inside)));
  n += child::CopyString(buf + n, size - n, " ");
  n += child::CopyString(buf + n, size - n, child::FormatWithNumber(number, sizeof(number), "", static_cast<long>(outside)));
  child::CopyString(buf + n, size - n, " 1\n");
}

}  // namespace

bool EnterNestedUserNamespace(int proc_fd, bool only_one, uid_t uid, gid_t gid, ChildError* error) {
  // /proc/sys/user/* are the values of the opener's own user namespace.
  if (only_one && !WriteProcFile(proc_fd, "sys/user/max_user_namespaces", "1\n", error)) return false;
  const unsigned long own_uid = static_cast<unsigned long>(::syscall(SYS_geteuid));
  const unsigned long own_gid = static_cast<unsigned long>(::syscall(SYS_getegid));
  if (::syscall(SYS_unshare, CLONE_NEWUSER) != 0) return child::Fail(error, "unshare", "CLONE_NEWUSER", errno);
  // One id each, mapped to the caller's own: what a process may write for
  // the namespace it is in, with setgroups "deny" before the gid map.
  char map[96];
  OneIdMap(map, sizeof(map), uid, own_uid);
  if (!WriteProcFile(proc_fd, "self/uid_map", map, error)) return false;
  if (!WriteProcFile(proc_fd, "self/setgroups", "deny\n", error)) return false;
  OneIdMap(map, sizeof(map), gid, own_gid);
  return WriteProcFile(proc_fd, "self/gid_map", map, error);
}

}  // namespace cubicle::namespaces
