// The Ascend driver's DCMI library, loaded at run time: cubicle builds and
// runs on hosts without it. Only the few calls the inventory needs are
// declared (dcmi.cc), after Huawei's published DCMI API.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "npu/chip.h"

namespace cubicle::npu {

// Every compute chip DCMI reports: logic id, card, die, name ("Ascend " +
// chip_name), health (DCMI's 0..3 as "OK", "Warning", "Alarm",
// "Critical"), AI Core usage where the library offers it. A library that
// cannot be loaded, lacks a required symbol or fails dcmi_init is an error
// naming the library and the call; a die whose logic id or chip info cannot
// be read is skipped, as the table parsers skip unreadable rows.
absl::StatusOr<std::vector<Chip>> ReadChipsWithDcmi(const std::string& library_path);

}  // namespace cubicle::npu
