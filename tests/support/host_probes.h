// What this host offers that some tests need and a CI machine may lack.
// Each probe tries the thing itself, outside cubicle's code, never reading
// a version number or a kernel config; a test that needs it skips, naming
// the reason, when the host lacks it:
//
//   REQUIRE_HOST(test_support::I386Syscalls());
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <string>
#include <utility>

#include <gtest/gtest.h>

namespace cubicle::test_support {

// Whether the host has a property, and if not, why not (the skip message).
struct HostProperty {
  bool present = false;
  std::string absent_reason;

  static HostProperty Present() { return {true, ""}; }
  static HostProperty Absent(std::string why) { return {false, std::move(why)}; }
};

// Skips the current test, with the reason, unless `property` is present.
#define REQUIRE_HOST(property)                                              \
  do {                                                                      \
    const ::cubicle::test_support::HostProperty& host_property_ = (property); \
    if (!host_property_.present) GTEST_SKIP() << host_property_.absent_reason; \
  } while (0)

// ---- Foreign syscall ABIs (x86_64) -----------------------------------------
// A child with no seccomp filter calls getpid through the ABI and exits with
// kProbeReturnedPid when it got its pid, with the errno when it got -errno,
// else with kProbeReturnedOther; its wait status is then judged here.

inline constexpr int kProbeReturnedPid = 0;
inline constexpr int kProbeReturnedOther = 255;

// int $0x80 must return the pid: a host without ia32 emulation (disabled at
// build or boot, or by the hypervisor) kills the caller with SIGSEGV, and a
// seccomp filter of its own may refuse it before the kernel runs it.
HostProperty I386SyscallsFromWaitStatus(int wait_status);
// An x32 syscall must not kill its caller unfiltered. A kernel with x32
// runs it, one without answers ENOSYS, a seccomp filter of the host's may
// answer an errno: then a SIGSYS under cubicle's filter (which acts before
// the kernel looks the number up) is that filter's. Dying unfiltered (a
// host filter that kills) leaves a SIGSYS nobody's in particular.
HostProperty X32SyscallsFromWaitStatus(int wait_status);

// The probes themselves, run once per process (x86_64 only; elsewhere
// absent, saying so).
const HostProperty& I386Syscalls();
const HostProperty& UnfilteredX32Syscalls();

// ---- Programs, networking, limits -------------------------------------------

// `path` is an executable file here ("/usr/bin/openssl is not installed").
HostProperty Executable(const std::string& path);
// The host's /usr/bin/python3, which sandboxes see through their /usr bind.
HostProperty Python3();

// A TCP connection over 127.0.0.1 on the host (listen, connect, accept).
const HostProperty& Loopback();

// Raises this process's soft RLIMIT_NOFILE to `needed` when it is lower;
// absent when the hard limit does not allow it.
HostProperty OpenFiles(rlim_t needed);

// ---- Mounts and device nodes (as root) --------------------------------------

// A detached clone of `dir` (open_tree) can be idmapped (mount_setattr
// with MOUNT_ATTR_IDMAP and a user namespace made here): what a root
// launcher does to a workspace whose owner is not the sandbox user's host
// id. Absent without the new mount API or when `dir`'s filesystem (ramfs,
// tmpfs before 6.3, ...) does not support idmapped mounts.
HostProperty IdmappedMounts(const std::string& dir);

// A character node of `major` (a number no driver registered) can be made
// with mknod in `dir`: not refused by a device cgroup or the lack of
// CAP_MKNOD (a container).
HostProperty DeviceNodes(const std::string& dir, uint32_t major);
// ... and opened as far as the driver lookup (ENXIO): `dir` is not on a
// nodev mount, so nodes bound from it work inside a sandbox too.
HostProperty OpenableDeviceNodes(const std::string& dir, uint32_t major);

// overlayfs mounted in a user namespace made here (Linux 5.11; a host
// may not build or allow it), with an upper layer and userxattr, as a
// sandbox mounts one.
const HostProperty& OverlayfsInUserNamespace();

// A file in `dir` takes an O_DIRECT write (tmpfs before 6.6 and ramfs
// refuse O_DIRECT): writes that reach the block layer at once.
HostProperty DirectWrites(const std::string& dir);

}  // namespace cubicle::test_support
