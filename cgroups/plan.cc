#include "cgroups/plan.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cubicle::cgroups {
namespace {

using cgroupfs::WriteMode;

std::string Line(uint64_t value) { return absl::StrCat(value, "\n"); }

class Planner {
 public:
  Planner(const Layout& layout, GroupPlan* plan) : layout_(layout), plan_(plan) {}

  // The hierarchy of `c` for a limit named `field`; -1 with a problem noted
  // when the host has no such controller.
  int Require(Controller c, absl::string_view field) {
    int h = layout_.placement[static_cast<int>(c)];
    if (h < 0) {
      missing_.push_back(absl::StrCat(field, ": needs the ",
                                      V2Name(c) == "io" ? "io/blkio" : V2Name(c),
                                      " controller, which this host (cgroups ",
                                      VersionName(layout_.version), ") does not offer"));
      return -1;
    }
    Use(h);
    return h;
  }

  // A hierarchy the sandbox gets a group in if the host has it.
  void Want(Controller c) {
    int h = layout_.placement[static_cast<int>(c)];
    if (h >= 0) Use(h);
  }

  void Use(int h) {
    if (std::find(plan_->hierarchies.begin(), plan_->hierarchies.end(), h) ==
        plan_->hierarchies.end()) {
      plan_->hierarchies.push_back(h);
    }
  }

  bool IsV2(int h) const { return layout_.hierarchies[h].version == 2; }

  void Write(int h, std::string file, std::string value, WriteMode mode = WriteMode::kReplace,
             std::string if_missing = "") {
    plan_->writes.push_back(
        LimitWrite{h, std::move(file), std::move(value), mode, std::move(if_missing)});
  }

  absl::Status Problems() const {
    if (missing_.empty()) return absl::OkStatus();
    std::string msg;
    for (const std::string& m : missing_) absl::StrAppend(&msg, msg.empty() ? "" : "; ", m);
    return absl::InvalidArgumentError(msg);
  }

 private:
  const Layout& layout_;
  GroupPlan* plan_;
  std::vector<std::string> missing_;
};

void PlanMemory(const Layout& layout, const Limits& l, Planner* p, GroupPlan* plan) {
  if (!l.memory_max && !l.memory_high) return;
  int h = p->Require(Controller::kMemory, l.memory_max ? "memory_max" : "memory_high");
  if (h < 0) return;
  if (p->IsV2(h)) {
    if (l.memory_max) {
      p->Write(h, "memory.max", Line(*l.memory_max));
      p->Write(h, "memory.swap.max", "0\n", WriteMode::kReplace,
               "memory.swap.max is missing (no swap accounting): the sandbox may swap beyond "
               "memory_max");
    }
    if (l.memory_high) p->Write(h, "memory.high", Line(*l.memory_high));
    return;
  }
  if (l.memory_max) {
    // memsw (memory + swap) must stay >= limit_in_bytes, so it goes second.
    p->Write(h, "memory.limit_in_bytes", Line(*l.memory_max));
    if (layout.v1_swap_accounting) {
      p->Write(h, "memory.memsw.limit_in_bytes", Line(*l.memory_max));
    } else {
      p->Write(h, "memory.swappiness", "0\n");
      plan->notes.push_back(
          "memory.memsw.limit_in_bytes is missing (swap accounting is off): memory.swappiness=0 "
          "keeps the sandbox from swapping, but swap is not strictly held at 0");
    }
  }
  // v1 has no throttling mark; the soft limit reclaims the group first when
  // the host is short of memory.
  if (l.memory_high) p->Write(h, "memory.soft_limit_in_bytes", Line(*l.memory_high));
}

void PlanCpu(const Limits& l, Planner* p) {
  if (l.cpus) {
    int h = p->Require(Controller::kCpu, "cpus");
    if (h >= 0 && p->IsV2(h)) {
      p->Write(h, "cpu.max", absl::StrCat(CpuQuotaUs(l), " ", l.cpu_period_us, "\n"));
    } else if (h >= 0) {
      p->Write(h, "cpu.cfs_period_us", Line(l.cpu_period_us));
      p->Write(h, "cpu.cfs_quota_us", Line(CpuQuotaUs(l)));
    }
  }
  if (l.cpu_weight) {
    int h = p->Require(Controller::kCpu, "cpu_weight");
    if (h >= 0 && p->IsV2(h)) {
      p->Write(h, "cpu.weight", Line(*l.cpu_weight));
    } else if (h >= 0) {
      p->Write(h, "cpu.shares", Line(CpuWeightToShares(*l.cpu_weight)));
    }
  }
}

void PlanIo(const Limits& l, Planner* p) {
  if (l.io.empty()) return;
  int h = p->Require(Controller::kIo, "io");
  if (h < 0) return;
  for (const IoLimit& io : l.io) {
    std::string device = absl::StrCat(io.major, ":", io.minor);
    if (p->IsV2(h)) {
      // One line per device; keys left out stay as they were ("max").
      std::string line = device;
      if (io.read_bps) absl::StrAppend(&line, " rbps=", *io.read_bps);
      if (io.write_bps) absl::StrAppend(&line, " wbps=", *io.write_bps);
      if (io.read_iops) absl::StrAppend(&line, " riops=", *io.read_iops);
      if (io.write_iops) absl::StrAppend(&line, " wiops=", *io.write_iops);
      p->Write(h, "io.max", line + "\n", WriteMode::kAppend);
      continue;
    }
    auto v1 = [&](const std::optional<uint64_t>& value, const char* file) {
      if (value) p->Write(h, file, absl::StrCat(device, " ", *value, "\n"), WriteMode::kAppend);
    };
    v1(io.read_bps, "blkio.throttle.read_bps_device");
    v1(io.write_bps, "blkio.throttle.write_bps_device");
    v1(io.read_iops, "blkio.throttle.read_iops_device");
    v1(io.write_iops, "blkio.throttle.write_iops_device");
  }
}

}  // namespace

absl::StatusOr<GroupPlan> PlanGroups(const Layout& layout, const Limits& limits) {
  GroupPlan plan;
  Planner p(layout, &plan);
  if (layout.unified >= 0) p.Use(layout.unified);
  PlanMemory(layout, limits, &p, &plan);
  if (limits.pids_max) {
    int h = p.Require(Controller::kPids, "pids_max");
    if (h >= 0) p.Write(h, "pids.max", Line(*limits.pids_max));
  }
  PlanCpu(limits, &p);
  PlanIo(limits, &p);
  if (absl::Status st = p.Problems(); !st.ok()) return st;
  // Outcomes and kill, wherever the host offers them.
  p.Want(Controller::kMemory);
  p.Want(Controller::kPids);
  p.Want(Controller::kCpuacct);
  // Not kIo: v1 blkio counts IO only for devices with a throttle rule, so
  // a group there without one costs a mkdir, an attach and an rmdir and
  // says nothing. The IO breaker adds never-throttling rules, which
  // PlanIo then requires; on v2, io.stat is in the unified group anyway.
  p.Want(Controller::kFreezer);
  if (plan.hierarchies.empty()) {
    return absl::FailedPreconditionError("no cgroup hierarchy is usable on this host");
  }
  return plan;
}

}  // namespace cubicle::cgroups
