#include "cli/accelerators.h"

#include <boost/json/array.hpp>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "npu/host_layout.h"
#include "npu/inventory.h"
#include "rpc/npu_methods.h"

namespace cubicle::cli {

absl::StatusOr<AcceleratorPlan> ParseAcceleratorFlags(const AcceleratorFlags& flags) {
  AcceleratorPlan plan;
  if (!flags.npu_root.empty()) plan.root = flags.npu_root;
  if (flags.npu_given || !flags.npu.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(plan.npus, npu::ParseChipList(flags.npu, "--npu"));
  }
  if (flags.gpu_given || !flags.gpu.empty()) {
    CUBICLE_ASSIGN_OR_RETURN(plan.gpus, npu::ParseChipList(flags.gpu, "--gpu"));
  }
  absl::StatusOr<npu::HostLayout> host = npu::HostLayout::Open(plan.root);
  if (!host.ok()) return absl::InvalidArgumentError(host.status().message());
  return plan;
}

absl::StatusOr<std::vector<npu::Passthrough>> AttachAccelerators(const AcceleratorPlan& plan,
                                                                 runtime::SandboxSpec* spec) {
  std::vector<npu::Passthrough> applied;
  if (plan.empty()) return applied;
  npu::InventoryOptions options;
  options.root = plan.root;
  CUBICLE_ASSIGN_OR_RETURN(std::unique_ptr<npu::Inventory> inventory, npu::Inventory::Create(options));
  // Probe everything first, attach after: a run never starts with part of
  // its chips.
  for (auto [vendor, ids] : {std::pair{npu::Vendor::kAscend, &plan.npus}, {npu::Vendor::kNvidia, &plan.gpus}}) {
    if (ids->empty()) continue;
    CUBICLE_RETURN_IF_ERROR(inventory->CheckSelection(vendor, *ids, *spec));
  }
  for (auto [vendor, ids] : {std::pair{npu::Vendor::kAscend, &plan.npus}, {npu::Vendor::kNvidia, &plan.gpus}}) {
    if (ids->empty()) continue;
    CUBICLE_ASSIGN_OR_RETURN(npu::Passthrough p, npu::PlanPassthrough(inventory->host(), vendor, *ids));
    applied.push_back(std::move(p));
  }
  for (const npu::Passthrough& p : applied) CUBICLE_RETURN_IF_ERROR(npu::ApplyPassthrough(p, spec));
  return applied;
}

boost::json::object MappingJson(const std::vector<npu::Passthrough>& applied) { return rpc::MappingToJson(applied); }

}  // namespace cubicle::cli
