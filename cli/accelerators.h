// `--npu`, `--gpu` and `--npu-root` for `cubicle run`: parse them (usage
// errors, found before anything is created), then, just before the launch,
// probe exactly the chips named and add their passthrough to the spec.
#pragma once

#include <string>
#include <vector>

#include <boost/json/object.hpp>

#include "absl/status/statusor.h"
#include "npu/passthrough.h"
#include "runtime/spec.h"

namespace cubicle::cli {

struct AcceleratorFlags {
  std::string npu;       // "6,4"
  std::string gpu;       // "0,1"
  bool npu_given = false;  // the flag was there, even with an empty value
  bool gpu_given = false;
  std::string npu_root;  // "/" when empty
};

struct AcceleratorPlan {
  std::string root = "/";
  std::vector<int> npus;  // ascending, distinct
  std::vector<int> gpus;
  bool empty() const { return npus.empty() && gpus.empty(); }
};

// InvalidArgument naming the flag: a bad chip list, a --npu-root that is
// not a directory.
absl::StatusOr<AcceleratorPlan> ParseAcceleratorFlags(const AcceleratorFlags& flags);

// Probes the chips of `plan` (and no others) in `spec` as it will run, and
// on success adds their passthrough. Any chip that is gone or unusable
// fails the whole execution, naming the chip and why: never a run on fewer
// chips.
absl::StatusOr<std::vector<npu::Passthrough>> AttachAccelerators(const AcceleratorPlan& plan,
                                                                 runtime::SandboxSpec* spec);

// {"npu": [{"host": 4, "sandbox": 0, "node": "/dev/davinci0"}, ...], "gpu": [...]}
boost::json::object MappingJson(const std::vector<npu::Passthrough>& applied);

}  // namespace cubicle::cli
