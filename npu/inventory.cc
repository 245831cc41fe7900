#include "npu/inventory.h"

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "npu/dcmi.h"
#include "npu/host_command.h"
#include "npu/passthrough.h"
#include "npu/probe.h"
#include "npu/smi_parser.h"

namespace cubicle::npu {
namespace {

bool HealthAllowsUse(const std::string& health) {
  return health == "OK" || health == "Warning" || health == "unknown";
}

}  // namespace

absl::StatusOr<std::unique_ptr<Inventory>> Inventory::Create(InventoryOptions options) {
  absl::StatusOr<HostLayout> host = HostLayout::Open(options.root);
  if (!host.ok()) return host.status();
  if (options.cache_window < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("npu cache window must not be negative");
  }
  return std::unique_ptr<Inventory>(new Inventory(std::move(options), *std::move(host)));
}

absl::StatusOr<Listing> Inventory::ReadHost(Vendor vendor) {
  Listing listing;
  listing.vendor = vendor;
  const std::string root = host_.root().empty() ? "/" : host_.root();
  HostCommandOptions cmd;
  cmd.timeout = options_.tool_timeout;
  cmd.output_budget = 1 << 20;
  cmd.env = {"PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/bin",
             absl::StrCat("LD_LIBRARY_PATH=", host_.Host(kAscendDriverLib64), "/common:",
                          host_.Host(kAscendDriverLib64), "/driver")};
  if (vendor == Vendor::kNvidia) {
    std::optional<std::string> smi = host_.FindTool(vendor);
    if (!smi.has_value()) {
      listing.source = "none";
      listing.notes.push_back(absl::StrCat("no nvidia-smi under ", root));
      return listing;
    }
    absl::StatusOr<HostCommandResult> r = RunHostCommand({*smi, "-L"}, cmd);
    if (!r.ok()) return r.status();
    if (!r->ok()) {
      return absl::UnavailableError(absl::StrCat(*smi, " -L failed: ", DriverExplanation(r->err, r->out)));
    }
    ParseStats stats;
    listing.source = "nvidia-smi";
    listing.chips = ParseNvidiaList(r->out, &stats);
    if (stats.skipped > 0) listing.notes.push_back(absl::StrCat("nvidia-smi -L: ", stats.skipped, " rows skipped"));
    return listing;
  }

  if (options_.use_dcmi) {
    if (std::optional<std::string> lib = host_.FindDcmi()) {
      absl::StatusOr<std::vector<Chip>> chips = ReadChipsWithDcmi(*lib);
      if (chips.ok()) {
        listing.source = "dcmi";
        listing.chips = *std::move(chips);
        return listing;
      }
      listing.notes.push_back(absl::StrCat("DCMI unusable (", chips.status().message(), "); npu-smi instead"));
    }
  }
  std::optional<std::string> smi = host_.FindTool(vendor);
  if (!smi.has_value()) {
    listing.source = "none";
    listing.notes.push_back(absl::StrCat("no libdcmi.so and no npu-smi under ", root));
    return listing;
  }
  absl::StatusOr<HostCommandResult> map = RunHostCommand({*smi, "info", "-m"}, cmd);
  if (!map.ok()) return map.status();
  if (!map->ok()) {
    return absl::UnavailableError(absl::StrCat(*smi, " info -m failed: ", DriverExplanation(map->err, map->out)));
  }
  ParseStats map_stats, status_stats;
  std::vector<ChipMapRow> rows = ParseChipMap(map->out, &map_stats);
  std::vector<ChipStatusRow> status;
  absl::StatusOr<HostCommandResult> info = RunHostCommand({*smi, "info"}, cmd);
  if (info.ok() && info->ok()) {
    status = ParseChipStatus(info->out, &status_stats);
  } else {
    listing.notes.push_back(absl::StrCat(
        *smi, " info failed (", info.ok() ? DriverExplanation(info->err, info->out) : info.status().message(),
        "): health and usage unknown"));
  }
  listing.source = "npu-smi";
  listing.chips = JoinTables(rows, status);
  if (map_stats.skipped + status_stats.skipped > 0) {
    listing.notes.push_back(absl::StrCat("npu-smi: ", map_stats.skipped + status_stats.skipped, " unreadable rows skipped"));
  }
  return listing;
}

absl::StatusOr<Listing> Inventory::HostListing(Vendor vendor, bool refresh) {
  std::lock_guard<std::mutex> lock(mu_);
  return HostListingLocked(vendor, refresh);
}

absl::StatusOr<Listing> Inventory::HostListingLocked(Vendor vendor, bool refresh) {
  const absl::Time now = absl::Now();
  auto it = listings_.find(vendor);
  if (!refresh && it != listings_.end() && now - it->second.first < options_.cache_window) return it->second.second;
  absl::StatusOr<Listing> listing = ReadHost(vendor);
  if (!listing.ok()) return listing.status();
  listings_[vendor] = {now, *listing};
  return listing;
}

std::string Inventory::Refusal(const Chip& chip) const {
  const std::string who = absl::StrCat(ChipWord(chip.vendor), " ", chip.logic_id);
  if (chip.vendor == Vendor::kAscend && !IsSupportedAscend(chip.name)) {
    return absl::StrCat(who, " is an ", chip.name, ": only the Ascend 910 family can be passed through");
  }
  if (!HealthAllowsUse(chip.health)) return absl::StrCat(who, " reports health ", chip.health);
  const std::string node_name = ChipNodeName(chip.vendor, chip.logic_id);
  absl::StatusOr<DeviceNode> node = host_.Node(node_name, node_name);
  if (!node.ok()) return absl::StrCat(who, ": ", node.status().message());
  return "";
}

std::vector<absl::Status> Inventory::ProbeAll(Vendor vendor, const std::vector<int>& ids,
                                              const runtime::SandboxSpec& base, bool refresh) {
  std::vector<absl::Status> results(ids.size());
  std::vector<size_t> todo;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = probed_ok_.find({vendor, ids[i]});
    if (refresh || it == probed_ok_.end() || absl::Now() - it->second >= options_.cache_window) todo.push_back(i);
  }
  ProbeOptions probe;
  probe.base = base;
  probe.timeout = options_.probe_timeout;
  // Each probe is a sandbox that mostly waits for the driver's tool: run a
  // few at once. Every thread is joined before the next batch.
  constexpr size_t kParallel = 4;
  for (size_t start = 0; start < todo.size(); start += kParallel) {
    std::vector<std::thread> batch;
    for (size_t k = start; k < std::min(todo.size(), start + kParallel); ++k) {
      const size_t i = todo[k];
      batch.emplace_back([&, i] { results[i] = ProbeChip(host_, vendor, ids[i], probe); });
    }
    for (std::thread& t : batch) t.join();
  }
  for (size_t i : todo) {
    if (results[i].ok()) {
      probed_ok_[{vendor, ids[i]}] = absl::Now();
    } else {
      probed_ok_.erase({vendor, ids[i]});  // a failure is never cached
    }
  }
  return results;
}

absl::StatusOr<Listing> Inventory::List(Vendor vendor, bool refresh) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Listing> listing = HostListingLocked(vendor, refresh);
  if (!listing.ok()) return listing.status();
  std::vector<int> candidates;
  std::vector<Chip*> probed;
  for (Chip& chip : listing->chips) {
    chip.reason = Refusal(chip);
    if (chip.reason.empty()) {
      candidates.push_back(chip.logic_id);
      probed.push_back(&chip);
    }
  }
  std::vector<absl::Status> results = ProbeAll(vendor, candidates, options_.probe_spec, refresh);
  for (size_t i = 0; i < probed.size(); ++i) {
    probed[i]->selectable = results[i].ok();
    if (!results[i].ok()) probed[i]->reason = std::string(results[i].message());
  }
  return listing;
}

absl::Status Inventory::CheckSelection(Vendor vendor, const std::vector<int>& ids,
                                       const runtime::SandboxSpec& execution) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<Listing> listing = HostListingLocked(vendor, /*refresh=*/false);
  if (!listing.ok()) return listing.status();
  std::vector<std::string> problems;
  std::vector<int> to_probe;
  bool missing = false;
  for (int id : ids) {
    auto chip = std::find_if(listing->chips.begin(), listing->chips.end(),
                             [id](const Chip& c) { return c.logic_id == id; });
    if (chip == listing->chips.end()) {
      std::vector<int> known;
      for (const Chip& c : listing->chips) known.push_back(c.logic_id);
      problems.push_back(absl::StrCat(ChipWord(vendor), " ", id, " is not on this host (",
                                      known.empty() ? absl::StrCat("no chips: ", absl::StrJoin(listing->notes, "; "))
                                                    : absl::StrCat("the driver lists ", absl::StrJoin(known, ", ")),
                                      ")"));
      missing = true;
      continue;
    }
    std::string refusal = Refusal(*chip);
    if (!refusal.empty()) {
      problems.push_back(refusal);
      continue;
    }
    to_probe.push_back(id);
  }
  // Always afresh: a chip another session took since the last look must
  // stop this execution before it starts, not fail inside it.
  for (const absl::Status& st : ProbeAll(vendor, to_probe, execution, /*refresh=*/true)) {
    if (!st.ok()) problems.push_back(std::string(st.message()));
  }
  if (problems.empty()) return absl::OkStatus();
  std::string message = absl::StrJoin(problems, "; ");
  return missing ? absl::NotFoundError(message) : absl::FailedPreconditionError(message);
}

}  // namespace cubicle::npu
