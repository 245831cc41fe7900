// Pure parsers of the Ascend driver's `npu-smi` tables and of
// `nvidia-smi -L`, and the extraction of the driver's own explanation from
// its error output. No I/O: the texts come from the caller.
//
// Both tables are read row by row: a row that cannot be read is skipped
// (and counted), never a reason to drop the table, and the process table
// that follows `npu-smi info`'s chip table is never read as chips.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "npu/chip.h"

namespace cubicle::npu {

// One compute row of `npu-smi info -m`: card, die, logic id, name. Rows
// whose logic id is "-" (the card's Mcu) are not compute devices and are
// left out.
struct ChipMapRow {
  int card_id = -1;
  int chip_id = -1;
  int logic_id = -1;
  std::string name;  // "Ascend 910B3"
  bool operator==(const ChipMapRow&) const = default;
};

struct ParseStats {
  int skipped = 0;  // rows that looked like data but could not be read
};

std::vector<ChipMapRow> ParseChipMap(absl::string_view text, ParseStats* stats = nullptr);

// One chip of `npu-smi info`: the card row gives the name and health, each
// chip row under it the die's bus id and usage.
struct ChipStatusRow {
  int card_id = -1;
  int chip_id = -1;
  std::string name;    // as the table prints it: "910B3"
  std::string health;  // "OK", "Warning", "Alarm", "Critical", ...
  std::string bus_id;
  std::optional<uint32_t> aicore_percent;
  std::optional<uint64_t> hbm_used_mb;
  std::optional<uint64_t> hbm_total_mb;
  bool operator==(const ChipStatusRow&) const = default;
};

std::vector<ChipStatusRow> ParseChipStatus(absl::string_view text, ParseStats* stats = nullptr);

// The chips of a host from both tables: every compute row of the map, with
// health and usage from the status table where (card, chip) matches, and
// health "unknown" where it does not. Sorted by logic id; a logic id seen
// twice keeps its first row.
std::vector<Chip> JoinTables(const std::vector<ChipMapRow>& map, const std::vector<ChipStatusRow>& status);

// The one line of a failed driver call that says why, without the log
// noise before it: the last line of stderr (then stdout) that does not look
// like a driver log line ("... failed. (ret=4)", "[INFO]"...), else the last
// non-empty line, else "".
std::string DriverExplanation(absl::string_view err, absl::string_view out);

// `nvidia-smi -L`: "GPU 0: NVIDIA H200 (UUID: GPU-...)". Other lines (MIG
// devices, warnings) are skipped.
std::vector<Chip> ParseNvidiaList(absl::string_view text, ParseStats* stats = nullptr);

}  // namespace cubicle::npu
