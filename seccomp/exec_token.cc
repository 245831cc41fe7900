// The strict policy's exec token: kStrict's compiled program tests
// execveat's sixth argument against a placeholder; each sandbox loads a
// copy that tests a random token of its own instead (policy.h).
#include <linux/filter.h>
#include <sys/random.h>

#include <cerrno>
#include <cstddef>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "seccomp/policy.h"

namespace cubicle::seccomp {
namespace {

// libseccomp tests an argument's word with "jump if A equals k".
constexpr uint16_t kJumpIfEqualK = BPF_JMP | BPF_JEQ | BPF_K;

// The one rule that tests the token: each of its halves appears once.
constexpr size_t kComparisonsPerHalf = 1;

}  // namespace

absl::StatusOr<BpfProgram> WithExecToken(const BpfProgram& program, uint64_t token) {
  // A zero token is what an execveat that passes nothing passes.
  if (token == 0) return absl::InvalidArgumentError("WithExecToken: a zero exec token");
  const auto high = static_cast<uint32_t>(token >> 32);
  const auto low = static_cast<uint32_t>(token);
  BpfProgram patched = program;
  size_t highs = 0, lows = 0;
  // Decided on each instruction's original constant, so a token whose
  // halves equal the placeholder's (swapped) is patched as well.
  for (sock_filter& insn : patched.instructions) {
    if (insn.code != kJumpIfEqualK) continue;
    if (insn.k == kExecTokenPlaceholderHigh) {
      insn.k = high;
      ++highs;
    } else if (insn.k == kExecTokenPlaceholderLow) {
      insn.k = low;
      ++lows;
    }
  }
  if (highs != kComparisonsPerHalf || lows != kComparisonsPerHalf) {
    return absl::FailedPreconditionError(
        absl::StrCat("WithExecToken: the program compares the placeholder's high word ", highs,
                     " times and its low word ", lows, " times, expected ", kComparisonsPerHalf,
                     " each (not the strict policy's program?)"));
  }
  return patched;
}

Policy NoExecVariant(Policy policy) { return policy == Policy::kStrict ? Policy::kStrictNoExec : policy; }

absl::StatusOr<uint64_t> NewExecToken() {
  for (;;) {
    uint64_t token = 0;
    const ssize_t n = ::getrandom(&token, sizeof(token), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "getrandom(exec token)");
    // 8 bytes never come short from the urandom pool once it is ready
    // (getrandom's contract for at most 256 bytes); a zero token would
    // match an execveat that passes nothing.
    if (n == static_cast<ssize_t>(sizeof(token)) && token != 0) return token;
  }
}

}  // namespace cubicle::seccomp
