// Seccomp policies, built with libseccomp and exported to classic BPF once per
// process. Loading a compiled program is a single seccomp(2) call, safe to make
// between clone and execve (no allocation, no libseccomp).
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace cubicle::seccomp {

enum class Policy {
  kNone,       // no filter at all (only on explicit request)
  kDefault,    // the baseline: refuses the high-risk syscalls of DESIGN §8
  kNoNetwork,  // the baseline, and socket(2) for every family but AF_UNIX
  // Not for sandboxes (ParsePolicy does not know it): the egress gateway's
  // own process. The baseline, and no new program or process: execve,
  // execveat, fork, vfork and clone(2) without CLONE_THREAD are refused
  // (threads still work). The gateway parses what sandboxes send it; if
  // that ever goes wrong, nothing can be started from there.
  kEgressGateway,
  // An allowlist (docs/security.md, "The strict policy"): what a
  // pure-compute Python program needs, measured, and nothing more. Every
  // other syscall fails with EPERM; no socket, no new process (threads
  // only), no ptrace. execve stays allowed: the filter is loaded before
  // the payload's own exec, and seccomp cannot read the path exec'd.
  kStrict,
};

// "none" | "default" | "no-network" | "strict". Unknown names are InvalidArgument naming them.
absl::StatusOr<Policy> ParsePolicy(std::string_view name);
std::string_view PolicyName(Policy policy);

// A compiled, immutable BPF program.
struct BpfProgram {
  std::vector<sock_filter> instructions;
  sock_fprog AsFprog() const {
    return sock_fprog{static_cast<unsigned short>(instructions.size()),
                      const_cast<sock_filter*>(instructions.data())};
  }
};

// The compiled program for `policy`, built on first use and cached for the
// life of the process (thread-safe). kNone yields an empty program.
absl::StatusOr<const BpfProgram*> Compiled(Policy policy);

// Builds `policy` with libseccomp now, for the native architecture. The
// build embeds its output (cubicle_seccomp_gen); tests check they agree.
absl::StatusOr<BpfProgram> CompileWithLibseccomp(Policy policy);

// Builds `policy` for the libseccomp architecture token `scmp_arch`
// (SCMP_ARCH_X86_64, SCMP_ARCH_AARCH64, ...): how the tests check that each
// policy's syscalls resolve and compile on an architecture not this one.
absl::StatusOr<BpfProgram> CompileForArch(Policy policy, uint32_t scmp_arch);

// The syscall names kStrict allows, whether or not this architecture has
// them all (documentation and tests).
std::vector<std::string_view> StrictAllowlist();

// Whether Compiled() serves programs embedded at build time.
bool ProgramsEmbedded();

// Installs `prog` on the calling thread with SECCOMP_SET_MODE_FILTER.
// Requires no_new_privs (or CAP_SYS_ADMIN). Returns 0, or -errno.
// Async-signal-safe: meant for the child between clone and execve.
int Load(const sock_fprog& prog);

// Installs `prog` as bubblewrap installs each of its --seccomp and
// --add-seccomp-fd programs: prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER).
// bwrap's manual asks each program but the last to allow prctl for that;
// one that allows prctl but not seccomp(2) lets the next load only this
// way. Same contract as Load(), but an empty program is the kernel's to
// refuse (EINVAL).
int LoadWithPrctl(const sock_fprog& prog);

}  // namespace cubicle::seccomp
