// The policies, expressed with libseccomp and exported to classic BPF.
#include "seccomp/policy.h"

#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "seccomp/strict_allowlist.h"

namespace cubicle::seccomp {
namespace {

// Refused outright with EPERM (DESIGN §8): each either reaches past the sandbox
// (mounts, namespaces, other processes' memory, the host clock, modules, kexec)
// or is a large kernel attack surface a sandboxed program has no use for.
// Names this architecture lacks (iopl on aarch64, umount on both) are skipped.
constexpr const char* kRefusedSyscalls[] = {
    // The mount family: the sandbox's mount tree is fixed before execve.
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    // Other processes, and the kernel's own programmable surfaces.
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kcmp",
    "pidfd_getfd",
    "bpf",
    "perf_event_open",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "userfaultfd",
    "fanotify_init",
    // The kernel keyring is not namespaced.
    "keyctl",
    "add_key",
    "request_key",
    // Replacing or extending the kernel, or stopping the machine.
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "reboot",
    // Host-wide state: swap, accounting, quotas, the kernel log, the clock, the tty.
    "swapon",
    "swapoff",
    "acct",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "syslog",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "vhangup",
    "nfsservctl",
    "_sysctl",
    "uselib",
    // Raw I/O port access.
    "iopl",
    "ioperm",
    // Entering or making namespaces; clone(2) is filtered by flag below.
    "setns",
    "unshare",
    // File handles bypass the path walk, and so the mount tree (the "shocker" escape).
    "open_by_handle_at",
    "name_to_handle_at",
};

// clone(2) is needed for fork and threads, so only the flags that make a new
// namespace are refused. clone(2) cannot ask for CLONE_NEWTIME (only clone3 and
// unshare can): 0x80 lies in its exit-signal byte, so that rule only refuses
// exit "signals" of 128 and above, which no program has reason to use.
constexpr uint64_t kNamespaceFlags[] = {
    CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,    CLONE_NEWNET,
    CLONE_NEWUTS,  CLONE_NEWIPC, CLONE_NEWCGROUP, CLONE_NEWTIME,
};

// Pushing bytes into a terminal's input queue (TIOCSTI) or driving the console
// (TIOCLINUX) would let the sandbox type commands into the caller's terminal.
constexpr uint64_t kRefusedIoctls[] = {TIOCSTI, TIOCLINUX};

// The kernel reads ioctl's request and personality's persona as 32-bit
// values, so the filter must compare only the low half, or a caller could set
// high bits to slip past an equality test.
constexpr uint64_t kLow32 = 0xffffffff;

// The personas a program may ask for: the default, the 32-bit one that
// `linux32`/`setarch` use, and the "query only" value. Everything else (the
// ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, MMAP_PAGE_ZERO flags and the foreign
// execution domains) weakens the exec'd program or exists for old binaries.
constexpr uint64_t kPersonaLinux = 0;
constexpr uint64_t kPersonaLinux32 = 0x0008;
constexpr uint64_t kPersonaQuery = 0xffffffff;

constexpr scmp_arg_cmp Arg(unsigned int arg, scmp_compare op, uint64_t a, uint64_t b = 0) {
  return scmp_arg_cmp{.arg = arg, .op = op, .datum_a = a, .datum_b = b};
}

struct FilterReleaser {
  void operator()(void* ctx) const { seccomp_release(ctx); }
};
using FilterCtx = std::unique_ptr<void, FilterReleaser>;

// One libseccomp filter under construction; every failure names its step.
class FilterBuilder {
 public:
  // `arch`: the libseccomp token of the one architecture the filter is for.
  FilterBuilder(FilterCtx ctx, uint32_t arch) : ctx_(std::move(ctx)), arch_(arch) {}

  absl::Status SetAttr(scmp_filter_attr attr, uint32_t value, const char* name) {
    if (int rc = seccomp_attr_set(ctx_.get(), attr, value); rc < 0) {
      return ErrnoStatus(-rc, absl::StrCat("seccomp_attr_set(", name, ")"));
    }
    return absl::OkStatus();
  }

  // Makes `syscall` fail with `err` when all `conditions` hold (always, if none).
  absl::Status Refuse(const char* syscall, int err,
                      std::initializer_list<scmp_arg_cmp> conditions = {}) {
    return AddRule(SCMP_ACT_ERRNO(err), syscall, conditions);
  }

  // Lets `syscall` through when all `conditions` hold (always, if none).
  absl::Status Allow(const char* syscall, std::initializer_list<scmp_arg_cmp> conditions = {}) {
    return AddRule(SCMP_ACT_ALLOW, syscall, conditions);
  }

  // seccomp_export_bpf_mem arrived after libseccomp 2.5.4, so the program goes
  // through a memfd and is read back.
  absl::StatusOr<BpfProgram> Export() {
    UniqueFd memfd(memfd_create("cubicle-seccomp", MFD_CLOEXEC));
    if (!memfd) return ErrnoStatus(errno, "memfd_create(cubicle-seccomp)");
    if (int rc = seccomp_export_bpf(ctx_.get(), memfd.get()); rc < 0) {
      return ErrnoStatus(-rc, "seccomp_export_bpf");
    }
    struct stat st {};
    if (fstat(memfd.get(), &st) != 0) return ErrnoStatus(errno, "fstat(cubicle-seccomp)");
    auto size = static_cast<size_t>(st.st_size);
    if (size == 0 || size % sizeof(sock_filter) != 0 || size / sizeof(sock_filter) > BPF_MAXINSNS) {
      return absl::InternalError(
          absl::StrCat("seccomp_export_bpf: unusable program of ", size, " bytes"));
    }
    BpfProgram program;
    program.instructions.resize(size / sizeof(sock_filter));
    auto* bytes = reinterpret_cast<char*>(program.instructions.data());
    for (size_t done = 0; done < size;) {
      ssize_t n = pread(memfd.get(), bytes + done, size - done, static_cast<off_t>(done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return ErrnoStatus(errno, "pread(cubicle-seccomp)");
      if (n == 0) return ErrnoStatus(EIO, "pread(cubicle-seccomp): short read");
      done += static_cast<size_t>(n);
    }
    return program;
  }

 private:
  absl::Status AddRule(uint32_t action, const char* syscall, std::initializer_list<scmp_arg_cmp> conditions) {
    // __NR_SCMP_ERROR: libseccomp does not know the name. Other negative
    // numbers are libseccomp's stand-ins for syscalls the architecture lacks;
    // adding them would only compare against a number no syscall has.
    if (seccomp_syscall_resolve_name_arch(arch_, syscall) < 0) return absl::OkStatus();
    // Rules take the native number (or libseccomp's stand-in for a name
    // the native architecture lacks); libseccomp translates it by name.
    int nr = seccomp_syscall_resolve_name(syscall);
    int rc = seccomp_rule_add_array(ctx_.get(), action, nr, static_cast<unsigned int>(conditions.size()),
                                    conditions.begin());
    if (rc < 0) return ErrnoStatus(-rc, absl::StrCat("seccomp_rule_add(", syscall, ")"));
    return absl::OkStatus();
  }

  FilterCtx ctx_;
  uint32_t arch_;
};

// A filter for `arch` (a libseccomp token; 0 for the native one) whose
// syscalls not named by a rule get `default_action`.
absl::StatusOr<FilterBuilder> NewFilter(uint32_t default_action, uint32_t arch) {
  FilterCtx ctx(seccomp_init(default_action));
  // seccomp_init reports no reason; allocation is its only failure.
  if (ctx == nullptr) return ErrnoStatus(ENOMEM, "seccomp_init");
  const uint32_t native = seccomp_arch_native();
  if (arch != 0 && arch != native) {
    if (int rc = seccomp_arch_add(ctx.get(), arch); rc < 0) return ErrnoStatus(-rc, "seccomp_arch_add");
    if (int rc = seccomp_arch_remove(ctx.get(), native); rc < 0) {
      return ErrnoStatus(-rc, "seccomp_arch_remove(native)");
    }
  }
  FilterBuilder filter(std::move(ctx), arch == 0 ? native : arch);
  // Ask for raw -errno from system failures instead of a blanket ECANCELED, so
  // our messages can name them; older versions lack the attribute, which is harmless.
  (void)filter.SetAttr(SCMP_FLTATR_API_SYSRAWRC, 1, "API_SYSRAWRC");
  // Only the native architecture is in the filter, so i386 syscalls made with
  // `int 0x80` on x86_64 hit this action. libseccomp's x86_64 filter also sends
  // x32 syscalls (nr >= __X32_SYSCALL_BIT) here, so the x32 ABI needs no rule.
  CUBICLE_RETURN_IF_ERROR(
      filter.SetAttr(SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS, "ACT_BADARCH"));
  // The launcher sets no_new_privs itself, in the child, and loads the program
  // with Load(); libseccomp must not try to do either.
  CUBICLE_RETURN_IF_ERROR(filter.SetAttr(SCMP_FLTATR_CTL_NNP, 0, "CTL_NNP"));
  // A binary search over syscall numbers instead of a linear chain. Only an
  // optimisation: a version without it still yields a correct program.
  (void)filter.SetAttr(SCMP_FLTATR_CTL_OPTIMIZE, 2, "CTL_OPTIMIZE");
  return filter;
}

// personality(2) refused for every persona but kPersonaLinux, kPersonaLinux32
// and kPersonaQuery. libseccomp allows one comparison per argument in a rule
// and no rule whose action is the default (ALLOW), so "x not in {a, b, c}"
// must be a union of single masked comparisons over the low 32 bits, all the
// kernel reads. Let B be those bits but bit 3 (kPersonaLinux32). The values
// whose B bits are all equal are 0, 0x8, 0xfffffff7 and 0xffffffff. Any other
// value, its B bits read as a ring, has somewhere a 0 followed by a 1: one rule
// per neighbouring pair of B catches those, and one more 0xfffffff7.
absl::Status RefuseUnusualPersonas(FilterBuilder& filter) {
  std::array<unsigned int, 31> ring{};
  for (unsigned int bit = 0, i = 0; bit < 32; ++bit) {
    if ((uint64_t{1} << bit) != kPersonaLinux32) ring[i++] = bit;
  }
  for (size_t i = 0; i < ring.size(); ++i) {
    uint64_t zero = uint64_t{1} << ring[i];
    uint64_t one = uint64_t{1} << ring[(i + 1) % ring.size()];
    CUBICLE_RETURN_IF_ERROR(
        filter.Refuse("personality", EPERM, {Arg(0, SCMP_CMP_MASKED_EQ, zero | one, one)}));
  }
  static_assert(kPersonaLinux == 0 && kPersonaQuery == kLow32);
  return filter.Refuse("personality", EPERM,
                       {Arg(0, SCMP_CMP_MASKED_EQ, kLow32, kLow32 & ~kPersonaLinux32)});
}

absl::Status AddBaseline(FilterBuilder& filter) {
  for (const char* syscall : kRefusedSyscalls) {
    CUBICLE_RETURN_IF_ERROR(filter.Refuse(syscall, EPERM));
  }
  CUBICLE_RETURN_IF_ERROR(RefuseUnusualPersonas(filter));
  // Flags are clone's first argument on x86_64 and aarch64 (s390 swaps them).
  for (uint64_t flag : kNamespaceFlags) {
    CUBICLE_RETURN_IF_ERROR(
        filter.Refuse("clone", EPERM, {Arg(0, SCMP_CMP_MASKED_EQ, flag, flag)}));
  }
  // clone3 passes its flags in memory, out of the filter's sight. ENOSYS makes
  // glibc fall back to clone, whose flags the rules above can read.
  CUBICLE_RETURN_IF_ERROR(filter.Refuse("clone3", ENOSYS));
  for (uint64_t request : kRefusedIoctls) {
    CUBICLE_RETURN_IF_ERROR(
        filter.Refuse("ioctl", EPERM, {Arg(1, SCMP_CMP_MASKED_EQ, kLow32, request)}));
  }
  return absl::OkStatus();
}

// An empty network namespace already leaves nothing to reach; refusing the
// sockets too shrinks the kernel surface (netlink, packet, every protocol
// module) to unix sockets, which pipes-and-files programs still need.
absl::Status AddNoNetwork(FilterBuilder& filter) {
  // The whole 64-bit argument is compared: a family with high bits set is
  // refused even when its low half is AF_UNIX, which only errs towards refusal.
  CUBICLE_RETURN_IF_ERROR(filter.Refuse("socket", EPERM, {Arg(0, SCMP_CMP_NE, AF_UNIX)}));
  return filter.Refuse("socketpair", EPERM, {Arg(0, SCMP_CMP_NE, AF_UNIX)});
}

// The egress gateway runs no program and makes no process after its
// start; its threads are clone(2) with CLONE_THREAD (clone3 already answers
// ENOSYS, so libc falls back to clone, whose flags these rules read).
absl::Status AddNoNewProcesses(FilterBuilder& filter) {
  for (const char* syscall : {"execve", "execveat", "fork", "vfork"}) {
    CUBICLE_RETURN_IF_ERROR(filter.Refuse(syscall, EPERM));
  }
  return filter.Refuse("clone", EPERM, {Arg(0, SCMP_CMP_MASKED_EQ, CLONE_THREAD, 0)});
}

// The terminal and fd-flag requests Python makes of the fds it has:
// isatty() at start (TCGETS), the terminal's size, close-on-exec and
// non-blocking flags, bytes waiting. No other ioctl reaches a driver.
constexpr uint64_t kStrictIoctls[] = {TCGETS, TIOCGWINSZ, FIOCLEX, FIONCLEX, FIONBIO, FIONREAD};

// The prctl options a strict payload may use: another seccomp program
// (one only narrows; bwrap's --seccomp programs come after the policy's)
// and a thread's name.
constexpr uint64_t kStrictPrctls[] = {PR_SET_SECCOMP, PR_SET_NAME, PR_GET_NAME};

// Policy::kStrict and kStrictNoExec: every syscall fails with EPERM but
// strict_allowlist.cc's, and these, filtered by argument. execve is not
// among them: seccomp cannot read the path a program is exec'd from, so
// the one exec a sandbox's payload makes after its filter is marked
// instead, sandbox2's way — a value in execveat's sixth argument, which
// the kernel ignores — but a random value per sandbox, so that the payload
// cannot forge it (WithExecToken patches the placeholder compiled here).
absl::Status AddStrictAllowlist(FilterBuilder& filter, bool exec_token) {
  for (const char* syscall : StrictAllowedSyscalls()) CUBICLE_RETURN_IF_ERROR(filter.Allow(syscall));
  if (exec_token) {
    // The full 64 bits are compared (the high word, then the low word).
    CUBICLE_RETURN_IF_ERROR(filter.Allow("execveat", {Arg(5, SCMP_CMP_EQ, kExecTokenPlaceholder)}));
  }
  // Threads only: CLONE_THREAD set and no namespace flag. fork() (glibc's
  // is clone without CLONE_THREAD), vfork and fork(2) get EPERM.
  uint64_t mask = CLONE_THREAD;
  for (uint64_t flag : kNamespaceFlags) mask |= flag;
  CUBICLE_RETURN_IF_ERROR(filter.Allow("clone", {Arg(0, SCMP_CMP_MASKED_EQ, mask, CLONE_THREAD)}));
  // As in the baseline: ENOSYS makes glibc's pthread_create fall back to
  // clone, whose flags the rule above reads.
  CUBICLE_RETURN_IF_ERROR(filter.Refuse("clone3", ENOSYS));
  for (uint64_t request : kStrictIoctls) {
    CUBICLE_RETURN_IF_ERROR(filter.Allow("ioctl", {Arg(1, SCMP_CMP_MASKED_EQ, kLow32, request)}));
  }
  for (uint64_t option : kStrictPrctls) {
    CUBICLE_RETURN_IF_ERROR(filter.Allow("prctl", {Arg(0, SCMP_CMP_MASKED_EQ, kLow32, option)}));
  }
  // Reading one's own limits (resource.getrlimit): pid 0, no new limit.
  return filter.Allow("prlimit64", {Arg(0, SCMP_CMP_EQ, 0), Arg(2, SCMP_CMP_EQ, 0)});
}

absl::StatusOr<BpfProgram> Compile(Policy policy, uint32_t arch) {
  if (policy == Policy::kNone) return BpfProgram{};
  if (policy == Policy::kStrict || policy == Policy::kStrictNoExec) {
    CUBICLE_ASSIGN_OR_RETURN(FilterBuilder filter, NewFilter(SCMP_ACT_ERRNO(EPERM), arch));
    CUBICLE_RETURN_IF_ERROR(AddStrictAllowlist(filter, /*exec_token=*/policy == Policy::kStrict));
    return filter.Export();
  }
  CUBICLE_ASSIGN_OR_RETURN(FilterBuilder filter, NewFilter(SCMP_ACT_ALLOW, arch));
  CUBICLE_RETURN_IF_ERROR(AddBaseline(filter));
  if (policy == Policy::kNoNetwork) CUBICLE_RETURN_IF_ERROR(AddNoNetwork(filter));
  if (policy == Policy::kEgressGateway) CUBICLE_RETURN_IF_ERROR(AddNoNewProcesses(filter));
  return filter.Export();
}

}  // namespace

absl::StatusOr<BpfProgram> CompileWithLibseccomp(Policy policy) { return Compile(policy, 0); }

absl::StatusOr<BpfProgram> CompileForArch(Policy policy, uint32_t scmp_arch) {
  if (scmp_arch == 0) return absl::InvalidArgumentError("CompileForArch: no architecture");
  return Compile(policy, scmp_arch);
}

std::vector<std::string_view> StrictAllowlist() {
  const std::span<const char* const> allowed = StrictAllowedSyscalls();
  std::vector<std::string_view> names(allowed.begin(), allowed.end());
  for (const char* filtered : {"clone", "ioctl", "prctl", "prlimit64", "execveat"}) names.emplace_back(filtered);
  return names;
}


absl::StatusOr<Policy> ParsePolicy(std::string_view name) {
  for (Policy policy : {Policy::kNone, Policy::kDefault, Policy::kNoNetwork, Policy::kStrict}) {
    if (name == PolicyName(policy)) return policy;
  }
  // Debian's Abseil keeps its own string_view, which std::string_view does not convert to.
  return absl::InvalidArgumentError(absl::StrCat("unknown seccomp policy '", std::string(name),
                                                 "' (expected none, default, no-network or strict)"));
}

std::string_view PolicyName(Policy policy) {
  switch (policy) {
    case Policy::kNone:
      return "none";
    case Policy::kDefault:
      return "default";
    case Policy::kNoNetwork:
      return "no-network";
    case Policy::kEgressGateway:
      return "egress-gateway";
    case Policy::kStrict:
      return "strict";
    case Policy::kStrictNoExec:
      return "strict-no-exec";
  }
  return "unknown";
}

}  // namespace cubicle::seccomp
