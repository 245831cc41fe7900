// Compiled programs: embedded at build time where available, else built
// with libseccomp once per process; and the one-syscall loaders.
#include "seccomp/policy.h"

#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/status.h"

namespace cubicle::seccomp {
namespace {

// Generated at build time by cubicle_seccomp_gen from CompileWithLibseccomp:
// kEmbeddedDefault, kEmbeddedNoNetwork, kEmbeddedEgressGateway,
// kEmbeddedStrict, kEmbeddedStrictNoExec (sock_filter arrays).
#include "seccomp/embedded_programs.inc"

const BpfProgram* Embedded(Policy policy) {
#if CUBICLE_SECCOMP_EMBEDDED
  static const BpfProgram* const programs[] = {
      nullptr,
      new BpfProgram{{std::begin(kEmbeddedDefault), std::end(kEmbeddedDefault)}},
      new BpfProgram{{std::begin(kEmbeddedNoNetwork), std::end(kEmbeddedNoNetwork)}},
      new BpfProgram{{std::begin(kEmbeddedEgressGateway), std::end(kEmbeddedEgressGateway)}},
      new BpfProgram{{std::begin(kEmbeddedStrict), std::end(kEmbeddedStrict)}},
      new BpfProgram{{std::begin(kEmbeddedStrictNoExec), std::end(kEmbeddedStrictNoExec)}},
  };
  return programs[static_cast<size_t>(policy)];
#else
  (void)policy;
  return nullptr;
#endif
}

struct CachedProgram {
  absl::Mutex mu;
  std::optional<BpfProgram> program ABSL_GUARDED_BY(mu);
};

constexpr size_t kPolicyCount = 6;

// The one process-wide cache. Never destroyed: a thread or a forked child may
// still be reading a program while the process exits.
CachedProgram& CacheFor(Policy policy) {
  static auto* const cache = new std::array<CachedProgram, kPolicyCount>();
  return (*cache)[static_cast<size_t>(policy)];
}

}  // namespace

absl::StatusOr<const BpfProgram*> Compiled(Policy policy) {
  if (static_cast<size_t>(policy) >= kPolicyCount) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown seccomp policy ", static_cast<int>(policy)));
  }
  // A new process (every `cubicle run`) would otherwise compile it first.
  if (const BpfProgram* embedded = Embedded(policy); embedded != nullptr) return embedded;
  CachedProgram& cached = CacheFor(policy);
  absl::MutexLock lock(&cached.mu);
  // Failures are not cached: a transient one (EMFILE from memfd_create) must
  // not leave a long-lived daemon unable to sandbox anything.
  if (!cached.program.has_value()) {
    CUBICLE_ASSIGN_OR_RETURN(BpfProgram program, CompileWithLibseccomp(policy));
    cached.program = std::move(program);
  }
  return &*cached.program;
}

bool ProgramsEmbedded() { return Embedded(Policy::kDefault) != nullptr; }

int Load(const sock_fprog& prog) {
  // kNone: nothing to install. The kernel would reject an empty program anyway.
  if (prog.len == 0) return 0;
  if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0) return -errno;
  return 0;
}

int LoadWithPrctl(const sock_fprog& prog) {
  if (::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) != 0) return -errno;
  return 0;
}

}  // namespace cubicle::seccomp
