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
  // only), no ptrace, and no new program: execve fails with EPERM, and
  // execveat too unless its sixth argument (which the kernel ignores for
  // execveat) is the sandbox's exec token. The filter is loaded before the
  // payload's own exec; that one exec passes the token, which the program
  // it starts never holds. Compiled() gives this program with a placeholder
  // token: load only a copy from WithExecToken().
  kStrict,
  // Not for sandboxes (ParsePolicy does not know it): kStrict for a process
  // that never execs after loading it (a warm template's child, which runs
  // its request in the interpreter it already is). Both execve and
  // execveat fail with EPERM whatever their arguments: a token in its
  // memory would be readable by the payload it becomes.
  kStrictNoExec,
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

// kStrict's placeholder exec token, in the two 32-bit halves the filter
// compares (libseccomp tests a 64-bit argument as its high word, then its
// low word). Values no other comparison in the program uses, so that
// WithExecToken finds exactly the instructions that test the token.
inline constexpr uint32_t kExecTokenPlaceholderHigh = 0xC0B1C1E5;
inline constexpr uint32_t kExecTokenPlaceholderLow = 0xE7EC70CE;
inline constexpr uint64_t kExecTokenPlaceholder =
    (uint64_t{kExecTokenPlaceholderHigh} << 32) | kExecTokenPlaceholderLow;

// A copy of `program` (kStrict's, from Compiled or CompileForArch) whose
// exec-token comparisons test `token` instead of the placeholder: each
// "jump if equal" of the program whose constant is one of the placeholder's
// halves gets the token's half. FailedPrecondition when the program does
// not compare each half exactly once (another policy's program, or a
// libseccomp that laid the rule out otherwise), InvalidArgument for a zero
// token (the value a plain execveat passes).
absl::StatusOr<BpfProgram> WithExecToken(const BpfProgram& program, uint64_t token);

// The policy a process that will never exec after loading it gets instead
// of `policy`: kStrictNoExec for kStrict, any other policy itself (their
// programs let exec through, and such a process may still exec a program
// that a request names).
Policy NoExecVariant(Policy policy);

// A fresh random exec token from getrandom(2), never zero.
absl::StatusOr<uint64_t> NewExecToken();

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
