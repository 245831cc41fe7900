// The accelerator inventory: which chips this host has, and which of them a
// sandbox may be given.
//
// The host listing comes from the driver's DCMI library (dlopen'd; absent
// on most hosts) or, failing that, from `npu-smi info -m` plus `npu-smi
// info` (NVIDIA: `nvidia-smi -L`). A chip is selectable only when it is of
// a supported family, healthy, has its node, and passes the per-chip probe
// (probe.h). Listings and successful probes are cached for a window; a
// refresh can be forced; a failed probe is never cached, so a chip that a
// tenant releases becomes selectable at the next look.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "npu/chip.h"
#include "npu/host_layout.h"
#include "runtime/spec.h"

namespace cubicle::npu {

struct InventoryOptions {
  std::string root = "/";                            // --npu-root
  absl::Duration cache_window = absl::Seconds(30);   // 0: no cache
  absl::Duration tool_timeout = absl::Seconds(15);   // npu-smi / nvidia-smi on the host
  absl::Duration probe_timeout = absl::Seconds(30);
  bool use_dcmi = true;                              // false: the npu-smi fallback only
  // The sandbox `List` probes in (DefaultSpec with default limits, usually).
  runtime::SandboxSpec probe_spec;
};

struct Listing {
  Vendor vendor = Vendor::kAscend;
  std::string source;              // "dcmi", "npu-smi", "nvidia-smi", or "none"
  std::vector<Chip> chips;         // ascending logic id
  std::vector<std::string> notes;  // fallbacks taken, rows skipped
};

class Inventory {
 public:
  static absl::StatusOr<std::unique_ptr<Inventory>> Create(InventoryOptions options);

  // The host's chips without any probe: what the driver reports, each with
  // `selectable` false and `reason` empty. Cached. Thread-safe.
  absl::StatusOr<Listing> HostListing(Vendor vendor, bool refresh);

  // Every chip, each probed (unless refused before that: unsupported,
  // unhealthy, no node), with `selectable` and `reason`. Thread-safe.
  absl::StatusOr<Listing> List(Vendor vendor, bool refresh);

  // Before a launch: checks and probes exactly `ids` — never another chip,
  // which may belong to another session — in `execution` (the spec that
  // will run, before its passthrough). The host listing may come from the
  // cache; the probes never do. FailedPrecondition or NotFound naming each
  // chip that cannot be used, and why.
  absl::Status CheckSelection(Vendor vendor, const std::vector<int>& ids, const runtime::SandboxSpec& execution);

  const HostLayout& host() const { return host_; }

 private:
  Inventory(InventoryOptions options, HostLayout host) : options_(std::move(options)), host_(std::move(host)) {}
  absl::StatusOr<Listing> ReadHost(Vendor vendor);
  absl::StatusOr<Listing> HostListingLocked(Vendor vendor, bool refresh);  // mu_ held
  // The reason a listed chip cannot be given before any probe, or "".
  std::string Refusal(const Chip& chip) const;
  // Probes `ids` (each in its own sandbox, several at once), using and
  // updating the cache; one status per id, in order.
  std::vector<absl::Status> ProbeAll(Vendor vendor, const std::vector<int>& ids, const runtime::SandboxSpec& base,
                                     bool refresh);

  InventoryOptions options_;
  HostLayout host_;
  std::mutex mu_;
  std::map<Vendor, std::pair<absl::Time, Listing>> listings_;
  std::map<std::pair<Vendor, int>, absl::Time> probed_ok_;
};

}  // namespace cubicle::npu
