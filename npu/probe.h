// The per-chip probe: the host's own listing reports chips as healthy that
// a sandbox cannot open (another tenant holds them, and the driver refuses
// every chip of a sandbox that sees one held chip). Only a sandbox tells
// the truth, so a chip is usable only if a one-shot sandbox with the same
// isolation as a real execution, holding that one chip, runs the driver's
// tool (`npu-smi info`, `nvidia-smi -L`) successfully.
#pragma once

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "npu/chip.h"
#include "npu/host_layout.h"
#include "runtime/spec.h"

namespace cubicle::npu {

struct ProbeOptions {
  // The sandbox to probe in: the execution's own spec (argv is replaced),
  // so the probe has exactly its isolation. Needs a kDev op at /dev.
  runtime::SandboxSpec base;
  absl::Duration timeout = absl::Seconds(30);
};

// OK, or FailedPrecondition "NPU 4 cannot be opened inside the sandbox:
// <the driver's own line>" (a setup failure of the sandbox itself is named
// as such, and a chip without a node is NotFound).
absl::Status ProbeChip(const HostLayout& host, Vendor vendor, int id, const ProbeOptions& options);

}  // namespace cubicle::npu
