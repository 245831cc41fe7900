// The syscalls Policy::kStrict allows (seccomp/strict_allowlist.cc), for
// seccomp/compiler.cc and the docs' table. Internal to cubicle_seccomp.
#pragma once

#include <span>

namespace cubicle::seccomp {

// Allowed whatever their arguments. Some are filtered by argument in
// compiler.cc instead (clone, ioctl, prctl, prlimit64) and are not here.
std::span<const char* const> StrictAllowedSyscalls();

}  // namespace cubicle::seccomp
