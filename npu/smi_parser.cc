#include "npu/smi_parser.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cubicle::npu {
namespace {

std::vector<absl::string_view> Words(absl::string_view s) {
  return absl::StrSplit(s, absl::ByAnyChar(" \t"), absl::SkipEmpty());
}

bool ToInt(absl::string_view s, int* out) {
  return absl::SimpleAtoi(s, out) && *out >= 0;
}

void Skip(ParseStats* stats) {
  if (stats != nullptr) ++stats->skipped;
}

}  // namespace

absl::string_view VendorName(Vendor v) { return v == Vendor::kAscend ? "ascend" : "nvidia"; }

bool IsSupportedAscend(absl::string_view name) {
  absl::string_view n = absl::StripAsciiWhitespace(name);
  absl::ConsumePrefix(&n, "Ascend");
  n = absl::StripLeadingAsciiWhitespace(n);
  return absl::StartsWith(n, "910");
}

std::vector<ChipMapRow> ParseChipMap(absl::string_view text, ParseStats* stats) {
  std::vector<ChipMapRow> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    std::vector<absl::string_view> w = Words(line);
    if (w.empty()) continue;
    // The header ("NPU ID  Chip ID  Chip Logic ID  Chip Name") and any other
    // line that does not start with a card number is not a row.
    int card = -1, chip = -1;
    if (!ToInt(w[0], &card)) {
      if (w[0] != "NPU") Skip(stats);
      continue;
    }
    if (w.size() < 4 || !ToInt(w[1], &chip)) {
      Skip(stats);
      continue;
    }
    if (w[2] == "-") continue;  // the card's Mcu: not a compute device
    int logic = -1;
    if (!ToInt(w[2], &logic)) {
      Skip(stats);
      continue;
    }
    std::vector<absl::string_view> name(w.begin() + 3, w.end());
    rows.push_back({card, chip, logic, absl::StrJoin(name, " ")});
  }
  return rows;
}

std::vector<ChipStatusRow> ParseChipStatus(absl::string_view text, ParseStats* stats) {
  std::vector<ChipStatusRow> rows;
  // The card row being read: chip rows follow it until the next separator.
  struct Card {
    int id;
    std::string name, health;
  };
  std::optional<Card> card;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (line[0] == '+') {  // a separator ends a card's block
      card.reset();
      continue;
    }
    if (line[0] != '|') continue;
    std::vector<absl::string_view> cells = absl::StrSplit(line.substr(1), '|');
    if (!cells.empty() && absl::StripAsciiWhitespace(cells.back()).empty()) cells.pop_back();
    // The process table ("| NPU  Chip | Process id | ...") ends the chip
    // table: its rows look like chip rows and must never be read as chips.
    if (absl::StrContains(line, "Process id") || absl::StrContains(line, "Process name")) break;
    if (cells.size() < 3) continue;  // the title line ("| npu-smi 25.5.1  Version ... |")
    std::vector<absl::string_view> first = Words(cells[0]);
    if (first.empty()) {
      Skip(stats);
      continue;
    }
    int id = -1;
    if (!ToInt(first[0], &id)) {
      if (first[0] != "NPU" && first[0] != "Chip") Skip(stats);  // the header rows
      continue;
    }
    if (first.size() >= 2) {
      // A card row: "| 0  910B3 | OK | power temp hugepages |". A name that
      // is a number is a row of some other table.
      int number;
      if (ToInt(first[1], &number)) {
        Skip(stats);
        card.reset();
        continue;
      }
      std::vector<absl::string_view> name(first.begin() + 1, first.end());
      std::vector<absl::string_view> health = Words(cells[1]);
      card = Card{id, absl::StrJoin(name, " "), health.empty() ? "unknown" : std::string(health[0])};
      continue;
    }
    // A chip row: "| 0 | 0000:C1:00.0 | aicore  mem / total  hbm / total |".
    if (!card.has_value()) {
      Skip(stats);
      continue;
    }
    ChipStatusRow row{.card_id = card->id, .chip_id = id, .name = card->name, .health = card->health};
    std::vector<absl::string_view> bus = Words(cells[1]);
    if (!bus.empty()) row.bus_id = std::string(bus[0]);
    // "12  0 / 0  60156/ 65536": the numbers, however the slashes are spaced.
    std::vector<uint64_t> numbers;
    bool readable = true;
    for (absl::string_view w : absl::StrSplit(cells[2], absl::ByAnyChar(" \t/"), absl::SkipEmpty())) {
      uint64_t v;
      if (!absl::SimpleAtoi(w, &v)) {
        readable = false;
        break;
      }
      numbers.push_back(v);
    }
    if (readable && numbers.size() == 5) {
      row.aicore_percent = static_cast<uint32_t>(std::min<uint64_t>(numbers[0], 100));
      row.hbm_used_mb = numbers[3];
      row.hbm_total_mb = numbers[4];
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::vector<Chip> JoinTables(const std::vector<ChipMapRow>& map, const std::vector<ChipStatusRow>& status) {
  std::map<std::pair<int, int>, const ChipStatusRow*> by_die;
  for (const ChipStatusRow& s : status) by_die.emplace(std::make_pair(s.card_id, s.chip_id), &s);
  std::map<int, Chip> chips;
  for (const ChipMapRow& m : map) {
    if (chips.count(m.logic_id) != 0) continue;
    Chip c;
    c.vendor = Vendor::kAscend;
    c.logic_id = m.logic_id;
    c.card_id = m.card_id;
    c.chip_id = m.chip_id;
    c.name = m.name;
    c.health = "unknown";
    auto it = by_die.find({m.card_id, m.chip_id});
    if (it != by_die.end()) {
      c.health = it->second->health;
      c.aicore_percent = it->second->aicore_percent;
      c.hbm_used_mb = it->second->hbm_used_mb;
      c.hbm_total_mb = it->second->hbm_total_mb;
    }
    chips.emplace(m.logic_id, std::move(c));
  }
  std::vector<Chip> out;
  for (auto& [id, c] : chips) out.push_back(std::move(c));
  return out;
}

namespace {

// Driver log lines: "DrvMngGetConsoleLogLevel failed. (ret=4)", "[ERROR] ...".
bool IsLogNoise(absl::string_view line) {
  if (absl::StartsWith(line, "[")) return true;
  size_t ret = line.rfind("(ret=");
  if (ret != absl::string_view::npos && absl::EndsWith(line, ")")) return true;
  return false;
}

std::string Explain(absl::string_view text, bool skip_noise) {
  std::vector<absl::string_view> lines = absl::StrSplit(text, '\n');
  for (auto it = lines.rbegin(); it != lines.rend(); ++it) {
    absl::string_view l = absl::StripAsciiWhitespace(*it);
    if (l.empty() || (skip_noise && IsLogNoise(l))) continue;
    return std::string(l.substr(0, 512));
  }
  return "";
}

}  // namespace

std::string DriverExplanation(absl::string_view err, absl::string_view out) {
  for (bool skip_noise : {true, false}) {
    for (absl::string_view text : {err, out}) {
      std::string line = Explain(text, skip_noise);
      if (!line.empty()) return line;
    }
  }
  return "";
}

std::vector<Chip> ParseNvidiaList(absl::string_view text, ParseStats* stats) {
  std::vector<Chip> gpus;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (!absl::ConsumePrefix(&line, "GPU ")) continue;  // "  MIG 1g.10gb Device 0: ..." and notes
    size_t colon = line.find(':');
    int index = -1;
    if (colon == absl::string_view::npos || !ToInt(line.substr(0, colon), &index)) {
      Skip(stats);
      continue;
    }
    absl::string_view rest = absl::StripAsciiWhitespace(line.substr(colon + 1));
    Chip g;
    g.vendor = Vendor::kNvidia;
    g.logic_id = index;
    g.card_id = index;
    g.chip_id = 0;
    g.health = "unknown";
    size_t uuid = rest.rfind("(UUID:");
    if (uuid != absl::string_view::npos) {
      absl::string_view u = rest.substr(uuid + 6);
      absl::ConsumeSuffix(&u, ")");
      g.uuid = std::string(absl::StripAsciiWhitespace(u));
      rest = absl::StripAsciiWhitespace(rest.substr(0, uuid));
    }
    if (rest.empty()) {
      Skip(stats);
      continue;
    }
    g.name = std::string(rest);
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace cubicle::npu
