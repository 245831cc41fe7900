// The control channel between the launcher and the sandbox's init: one
// SOCK_SEQPACKET socketpair, fixed-size messages, so neither side allocates
// or parses. The launcher sends one byte ("go") once the id maps are written,
// later one execution request (exec_request.h); the sandbox answers with the
// messages below.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <cstdint>

#include "base/child_error.h"

namespace cubicle::namespaces {

enum class ControlType : uint32_t {
  kSetupError = 1,     // a step before execve failed; `error` says which
  kExecuting = 2,      // the payload is about to execve
  kPayloadExited = 3,  // the payload ended; `wait_status` and `rusage` are set
  kReady = 4,          // the sandbox is built and waits for its execution request
  kAdopt = 5,          // built but for its payload, which is to come from outside (a warm template)
};

// CLOCK_MONOTONIC stamps of the sandbox-side steps, for per-step timings.
enum ChildStep : int {
  kStepChildStart = 0,  // first instruction after clone
  kStepIdsReady,        // maps written, ids switched
  kStepRootfsReady,     // pivoted into the new root
  kStepInitReady,       // hostname and loopback set: ready for a request (a zygote)
  kStepRequestReceived, // the execution request arrived
  kStepPayloadForked,   // payload process exists
  kStepExecReady,       // payload hygiene done, about to execve
  kChildStepCount,
};

struct ControlMessage {
  ControlType type;
  int32_t payload_pid;  // in the sandbox's pid namespace
  int32_t wait_status;
  uint32_t flags;       // kFlag* below
  struct rusage rusage;
  int64_t step_ns[kChildStepCount];
  ChildError error;
};

inline constexpr uint32_t kFlagProcFallback = 1u << 0;

// Monotonic nanoseconds; async-signal-safe.
int64_t MonotonicNanos();

// Sends one message, retrying on EINTR. Returns 0 or -errno.
int SendControl(int fd, const ControlMessage& message);

}  // namespace cubicle::namespaces
