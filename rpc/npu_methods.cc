#include "rpc/npu_methods.h"

#include <boost/json/array.hpp>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cubicle::rpc {

namespace json = boost::json;

json::object ChipToJson(const npu::Chip& c) {
  json::object o{{"vendor", std::string(npu::VendorName(c.vendor))},
                 {"logic_id", c.logic_id},
                 {"card_id", c.card_id},
                 {"chip_id", c.chip_id},
                 {"name", c.name},
                 {"health", c.health},
                 {"selectable", c.selectable},
                 {"reason", c.reason}};
  if (c.aicore_percent.has_value()) o["aicore_percent"] = *c.aicore_percent;
  if (c.hbm_used_mb.has_value()) o["hbm_used_mb"] = *c.hbm_used_mb;
  if (c.hbm_total_mb.has_value()) o["hbm_total_mb"] = *c.hbm_total_mb;
  if (!c.uuid.empty()) o["uuid"] = c.uuid;
  return o;
}

json::object MappingToJson(const std::vector<npu::Passthrough>& applied) {
  json::object out;
  for (const npu::Passthrough& p : applied) {
    json::array chips;
    for (const npu::ChipMapping& m : p.mapping) {
      chips.push_back(json::object{{"host", m.host_id},
                                   {"sandbox", m.sandbox_id},
                                   {"node", absl::StrCat("/dev/", npu::ChipNodeName(p.vendor, m.sandbox_id))}});
    }
    out[p.vendor == npu::Vendor::kAscend ? "npu" : "gpu"] = std::move(chips);
  }
  return out;
}

Expected<json::value> NpuList(npu::Inventory& inventory, const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"refresh"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<bool> refresh, GetBool(*params, "refresh", false));
  json::array chips, notes;
  json::object sources;
  for (npu::Vendor vendor : {npu::Vendor::kAscend, npu::Vendor::kNvidia}) {
    absl::StatusOr<npu::Listing> listing = inventory.List(vendor, refresh.value_or(false));
    if (!listing.ok()) return Error{kSetupFailed, std::string(listing.status().message()), nullptr};
    sources[std::string(npu::VendorName(vendor))] = listing->source;
    for (const std::string& n : listing->notes) notes.push_back(json::string(absl::StrCat(npu::VendorName(vendor), ": ", n)));
    for (const npu::Chip& c : listing->chips) chips.push_back(ChipToJson(c));
  }
  return json::value(json::object{{"chips", std::move(chips)}, {"sources", std::move(sources)}, {"notes", std::move(notes)}});
}

Expected<std::string> BrokerJobParam(const json::value& raw) {
  CUBICLE_RPC_ASSIGN_OR_RETURN(const json::object* params, ParamsObject(raw));
  if (auto bad = RejectUnknown(*params, {"job"})) return *bad;
  CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> requested, GetString(*params, "job", true));
  return requested.value_or("");  // required: GetString made sure it is there
}

Expected<json::value> NpuBrokerRun(const npu::BrokerConfig& broker, const std::string& job) {
  absl::StatusOr<npu::HostCommandResult> r = npu::RunBrokerJob(broker, job);
  if (!r.ok()) {
    int code = absl::IsNotFound(r.status()) ? kNotFound : kSetupFailed;
    return Error{code, std::string(r.status().message()), nullptr};
  }
  return json::value(json::object{{"job", job},
                                  {"outside_sandbox", true},
                                  {"exit_code", r->exit_code},
                                  {"signal", r->signal},
                                  {"timed_out", r->timed_out},
                                  {"stdout", r->out},
                                  {"stdout_truncated", r->out_truncated},
                                  {"stderr", r->err},
                                  {"stderr_truncated", r->err_truncated}});
}

Expected<RunChips> ChipsOfRun(const json::object& params, const Profile& profile) {
  RunChips chips{profile.npus, profile.gpus};
  for (auto [key, ids] : {std::pair{"npu", &chips.npus}, {"gpu", &chips.gpus}}) {
    CUBICLE_RPC_ASSIGN_OR_RETURN(std::optional<std::string> text, GetString(params, key, false));
    if (!text.has_value()) continue;
    absl::StatusOr<std::vector<int>> parsed = npu::ParseChipList(*text, absl::StrCat("params.", key));
    if (!parsed.ok()) return Error{kInvalidParams, std::string(parsed.status().message()), nullptr};
    *ids = *std::move(parsed);
  }
  return chips;
}

std::optional<Error> RefuseAccelerated(const Profile& profile, absl::string_view method) {
  if (profile.npus.empty() && profile.gpus.empty()) return std::nullopt;
  return Error{kInvalidParams,
               absl::StrCat("profile '", profile.name, "' passes accelerators through, which only sandbox.run supports; ",
                            method, " would run it without them"),
               nullptr};
}

absl::StatusOr<AcceleratedRun> RunWithAccelerators(npu::Inventory& inventory, const Profile& profile,
                                                   const RunChips& chips, const runtime::ExecRequest& request,
                                                   const std::string& stdin_data, uint64_t budget) {
  runtime::SandboxSpec spec = profile.spec;
  spec.argv = request.argv;
  spec.env = request.env;  // the profile's, with the request's on top: the passthrough extends it
  std::vector<npu::Passthrough> applied;
  for (auto [vendor, ids] : {std::pair{npu::Vendor::kAscend, &chips.npus}, {npu::Vendor::kNvidia, &chips.gpus}}) {
    if (ids->empty()) continue;
    if (absl::Status st = inventory.CheckSelection(vendor, *ids, spec); !st.ok()) return st;
  }
  for (auto [vendor, ids] : {std::pair{npu::Vendor::kAscend, &chips.npus}, {npu::Vendor::kNvidia, &chips.gpus}}) {
    if (ids->empty()) continue;
    absl::StatusOr<npu::Passthrough> p = npu::PlanPassthrough(inventory.host(), vendor, *ids);
    if (!p.ok()) return p.status();
    applied.push_back(*std::move(p));
  }
  for (const npu::Passthrough& p : applied) {
    if (absl::Status st = npu::ApplyPassthrough(p, &spec); !st.ok()) return st;
  }
  runtime::ExecRequest accelerated = request;
  accelerated.env = spec.env;  // the request's environment with the driver's restated
  absl::StatusOr<runtime::CapturedRun> run =
      runtime::RunCaptured(runtime::FreshSandboxRunner(std::move(spec)), accelerated, stdin_data, budget);
  if (!run.ok()) return run.status();
  return AcceleratedRun{*std::move(run), MappingToJson(applied)};
}

}  // namespace cubicle::rpc
