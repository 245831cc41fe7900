// What this host offers that some tests need and a CI machine may lack.
// Each probe tries the thing itself, outside cubicle's code, never reading
// a version number or a kernel config; a test that needs it skips, naming
// the reason, when the host lacks it:
//
//   REQUIRE_HOST(test_support::I386Syscalls());
#pragma once

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

}  // namespace cubicle::test_support
