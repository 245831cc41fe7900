// What cubicle knows about one accelerator chip on this host, as a plain
// value: what the inventory reads, what `cubicle npu list` prints, what a
// passthrough selects from. No syscalls here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cubicle::npu {

enum class Vendor { kAscend, kNvidia };
absl::string_view VendorName(Vendor v);  // "ascend" | "nvidia"

struct Chip {
  Vendor vendor = Vendor::kAscend;
  // The chip's identity: the N of /dev/davinciN (Ascend) or /dev/nvidiaN
  // (NVIDIA). Not the card number: a 910C card carries two dies, two ids.
  int logic_id = -1;
  int card_id = -1;
  int chip_id = -1;             // the die on its card
  std::string name;             // "Ascend 910B3", "NVIDIA H200"
  std::string health;           // the driver's word ("OK", "Warning", ...); "unknown" if not reported
  std::optional<uint32_t> aicore_percent;  // usage, where reported
  std::optional<uint64_t> hbm_used_mb;
  std::optional<uint64_t> hbm_total_mb;
  std::string uuid;             // NVIDIA
  // Filled by the inventory: whether a sandbox may be given this chip, and
  // if not, why (naming the chip).
  bool selectable = false;
  std::string reason;

  bool operator==(const Chip&) const = default;
};

// "Ascend 910B3" and "910B3" are both the 910 family; 310P3 is not.
bool IsSupportedAscend(absl::string_view name);

}  // namespace cubicle::npu
