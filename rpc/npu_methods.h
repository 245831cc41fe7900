// The daemon's accelerator methods and the JSON of chips: `npu.list`, the
// `npu`/`gpu` params of sandbox.run (and keys of a profile), and
// `npu.broker.run` — which runs OUTSIDE the sandbox (npu/broker.h).
#pragma once

#include <string>
#include <vector>

#include <boost/json/object.hpp>
#include <boost/json/value.hpp>

#include "absl/status/statusor.h"
#include "npu/broker.h"
#include "npu/chip.h"
#include "npu/inventory.h"
#include "npu/passthrough.h"
#include "rpc/config.h"
#include "rpc/jsonrpc.h"
#include "runtime/capture.h"
#include "runtime/zygote.h"

namespace cubicle::rpc {

// {"vendor", "logic_id", "card_id", "chip_id", "name", "health",
//  "selectable", "reason"} plus usage and uuid where known.
boost::json::object ChipToJson(const npu::Chip& chip);

// {"npu": [{"host": 4, "sandbox": 0, "node": "/dev/davinci0"}, ...], "gpu": [...]}
boost::json::object MappingToJson(const std::vector<npu::Passthrough>& applied);

// npu.list {"refresh"?: bool} -> {"chips": [...], "sources": {...}, "notes": [...]}.
Expected<boost::json::value> NpuList(npu::Inventory& inventory, const boost::json::value& params);

// npu.broker.run {"job": ID}: the params read (the job's id), then the
// job run -> exit_code, signal, timed_out, stdout, stderr (+ _truncated),
// "outside_sandbox": true. kNotFound for an unknown job, kSetupFailed
// when the broker is disabled.
Expected<std::string> BrokerJobParam(const boost::json::value& params);
Expected<boost::json::value> NpuBrokerRun(const npu::BrokerConfig& broker, const std::string& job);

struct RunChips {
  std::vector<int> npus;
  std::vector<int> gpus;
  bool empty() const { return npus.empty() && gpus.empty(); }
};

// The chips of one sandbox.run: its "npu"/"gpu" params ("6,4") when given,
// else the profile's.
Expected<RunChips> ChipsOfRun(const boost::json::object& params, const Profile& profile);

// A profile with chips runs only through sandbox.run (which probes them);
// any other method refuses it rather than run it without its chips.
std::optional<Error> RefuseAccelerated(const Profile& profile, absl::string_view method);

struct AcceleratedRun {
  runtime::CapturedRun captured;
  boost::json::object mapping;
};

// Probes exactly `chips` in the profile's spec, then runs `request` on the
// cold path with their passthrough. A chip that cannot be used is a
// FailedPrecondition / NotFound naming it; nothing has run then.
absl::StatusOr<AcceleratedRun> RunWithAccelerators(npu::Inventory& inventory, const Profile& profile,
                                                   const RunChips& chips, const runtime::ExecRequest& request,
                                                   const std::string& stdin_data, uint64_t budget);

}  // namespace cubicle::rpc
