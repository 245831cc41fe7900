// `cubicle npu list [--json] [--refresh] [--npu-root DIR]`: every
// accelerator chip of this host, and whether a sandbox may be given it —
// each candidate probed in a real one-shot sandbox (npu/probe.h).
#include <cstdio>
#include <memory>
#include <string>

#include <boost/json/array.hpp>
#include <boost/json/object.hpp>
#include <boost/json/serialize.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cli/commands.h"
#include "npu/inventory.h"
#include "npu/passthrough.h"
#include "runtime/cgroup_host.h"
#include "rpc/npu_methods.h"
#include "runtime/defaults.h"

namespace cubicle::cli {
namespace {

struct NpuListFlags {
  bool json = false;
  bool refresh = false;
  std::string npu_root = "/";
};

int List(const NpuListFlags& f) {
  npu::InventoryOptions options;
  options.root = f.npu_root;
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec({});
  if (!spec.ok()) {
    std::fprintf(stderr, "cubicle npu list: %s\n", std::string(spec.status().message()).c_str());
    return kExitSetupFailed;
  }
  spec->limits = runtime::DefaultLimits();
  options.probe_spec = *spec;
  absl::StatusOr<std::unique_ptr<npu::Inventory>> inventory = npu::Inventory::Create(options);
  if (!inventory.ok()) {
    std::fprintf(stderr, "cubicle npu list: %s\n", std::string(inventory.status().message()).c_str());
    return absl::IsInvalidArgument(inventory.status()) ? kExitUsage : kExitSetupFailed;
  }
  boost::json::array chips;
  boost::json::object sources;
  std::vector<npu::Chip> all;
  for (npu::Vendor vendor : {npu::Vendor::kAscend, npu::Vendor::kNvidia}) {
    absl::StatusOr<npu::Listing> listing = (*inventory)->List(vendor, f.refresh);
    if (!listing.ok()) {
      std::fprintf(stderr, "cubicle npu list: %s\n", std::string(listing.status().message()).c_str());
      return kExitSetupFailed;
    }
    sources[std::string(npu::VendorName(vendor))] = listing->source;
    for (const std::string& note : listing->notes) {
      std::fprintf(stderr, "cubicle npu list: %s: %s\n", std::string(npu::VendorName(vendor)).c_str(), note.c_str());
    }
    for (const npu::Chip& c : listing->chips) {
      chips.push_back(rpc::ChipToJson(c));
      all.push_back(c);
    }
  }
  if (f.json) {
    std::printf("%s\n", boost::json::serialize(boost::json::object{{"chips", chips}, {"sources", sources}}).c_str());
    return 0;
  }
  std::printf("%-7s %-5s %-5s %-5s %-16s %-9s %-10s %s\n", "VENDOR", "LOGIC", "CARD", "CHIP", "NAME", "HEALTH",
              "SELECTABLE", "REASON");
  for (const npu::Chip& c : all) {
    std::printf("%-7s %-5d %-5d %-5d %-16s %-9s %-10s %s\n", std::string(npu::VendorName(c.vendor)).c_str(), c.logic_id,
                c.card_id, c.chip_id, c.name.c_str(), c.health.c_str(), c.selectable ? "yes" : "no", c.reason.c_str());
  }
  return 0;
}

}  // namespace

std::function<int()> AddNpuCommand(CLI::App& root) {
  auto flags = std::make_shared<NpuListFlags>();
  CLI::App* npu = root.add_subcommand("npu", "Accelerator chips (Ascend NPUs, NVIDIA GPUs) for passthrough");
  npu->require_subcommand(1);
  CLI::App* list = npu->add_subcommand("list", "Every chip, probed in a sandbox: selectable or why not");
  list->add_flag("--json", flags->json, "One JSON object: {\"chips\": [...], \"sources\": {...}}");
  list->add_flag("--refresh", flags->refresh, "Ignore cached listings and probes");
  list->add_option("--npu-root", flags->npu_root, "Directory that stands for / when looking for the driver");
  return [flags] { return List(*flags); };
}

}  // namespace cubicle::cli
