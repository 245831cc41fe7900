#include "runtime/sandbox_groups.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "runtime/cgroup_host.h"
#include "runtime/control_channel.h"

namespace cubicle::runtime {
namespace {

using Placement = cgroups::SandboxCgroup::Placement;

// The sandbox's cgroup, or nullptr when this host cannot give it one and
// the limits degrade to rlimits (rootless without a delegated subtree, no
// cgroup mount, a controller missing), with a warning in `result`.
absl::StatusOr<std::unique_ptr<cgroups::SandboxCgroup>> MakeCgroup(const cgroups::Limits& limits, bool v1_later,
                                                                   ExecResult* result) {
  const CgroupHost& host = SharedCgroupHost();
  auto degrade = [&](absl::string_view why) -> std::unique_ptr<cgroups::SandboxCgroup> {
    result->warnings.push_back(absl::StrCat(
        "no cgroup for this sandbox (", why,
        "): memory is bounded by RLIMIT_AS only; pids, CPU and IO limits are not enforced"));
    return nullptr;
  };
  if (host.misconfigured) return host.layout.status();  // the caller's mistake, not the host's
  if (!host.layout.ok()) return degrade(host.layout.status().message());
  const cgroups::Layout& layout = *host.layout;
  std::vector<std::string> missing;
  if ((limits.memory_max || limits.memory_high) && !layout.Has(cgroups::Controller::kMemory)) missing.push_back("memory");
  if (limits.pids_max && !layout.Has(cgroups::Controller::kPids)) missing.push_back("pids");
  if ((limits.cpus || limits.cpu_weight) && !layout.Has(cgroups::Controller::kCpu)) missing.push_back("cpu");
  if (!limits.io.empty() && !layout.Has(cgroups::Controller::kIo)) missing.push_back("io");
  if (!missing.empty()) return degrade(absl::StrCat("controllers not on this host: ", absl::StrJoin(missing, ", ")));
  absl::StatusOr<std::unique_ptr<cgroups::SandboxCgroup>> made =
      v1_later ? cgroups::SandboxCgroup::CreateV2First(layout, limits) : cgroups::SandboxCgroup::Create(layout, limits);
  if (!made.ok() && ::geteuid() != 0 && absl::IsPermissionDenied(made.status())) {
    return degrade(absl::StrCat("no writable delegated subtree: ", made.status().message()));
  }
  if (made.ok()) {
    for (const std::string& note : (*made)->notes()) result->warnings.push_back(note);
  }
  return made;
}

// v1 blkio accounts IO only for devices that have a throttle rule (its
// io_service_bytes stay 0 otherwise; v2 io.stat always counts). For the IO
// breaker, give every block device without a rule one that never throttles.
void AddIoAccountingRules(cgroups::Limits* limits) {
  const CgroupHost& host = SharedCgroupHost();
  if (!host.layout.ok()) return;
  const cgroups::Hierarchy* io = host.layout->Find(cgroups::Controller::kIo);
  if (io == nullptr || io->version != 1) return;
  constexpr uint64_t kNeverThrottles = uint64_t{1} << 50;  // 1 PiB/s
  DIR* dir = ::opendir("/sys/block");
  if (dir == nullptr) return;
  while (struct dirent* e = ::readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream dev(absl::StrCat("/sys/block/", e->d_name, "/dev"));
    uint32_t major = 0, minor = 0;
    char colon = 0;
    if (!(dev >> major >> colon >> minor) || colon != ':') continue;
    bool listed = std::any_of(limits->io.begin(), limits->io.end(), [&](const cgroups::IoLimit& l) {
      return l.major == major && l.minor == minor;
    });
    if (!listed) limits->io.push_back({.major = major, .minor = minor, .read_bps = kNeverThrottles, .write_bps = kNeverThrottles});
  }
  ::closedir(dir);
}

// What rlimits can stand in for cgroup limits: only memory, as RLIMIT_AS
// (address space, not resident memory: a looser bound). RLIMIT_NPROC is not
// used: it counts every process of the uid, across sandboxes.
void AddDegradedRlimits(const cgroups::Limits& limits, ChildPlan* plan) {
  if (limits.memory_max) plan->hygiene.rlimits.push_back({RLIMIT_AS, *limits.memory_max, *limits.memory_max});
}

}  // namespace

absl::Status SandboxGroups::Make(const SandboxSpec& spec, bool keep_stat_files, ChildPlan* plan,
                                 ExecResult* created) {
  keep_stat_files_ = keep_stat_files;
  // The v1 groups wait until after clone only as root (a rootless launcher
  // that cannot make them falls back to rlimits, which must be known
  // before clone), and not with devices passed through or a user namespace
  // joined before clone (whose launcher may lose its rights over the
  // host's cgroup tree).
  const bool v1_later = ::geteuid() == 0 && spec.devices.empty() && !spec.join_userns.has_value();
  if (!spec.limits.empty() || spec.breakers.any()) {
    cgroups::Limits limits = spec.limits;
    if (spec.breakers.io_bytes_per_sec.has_value()) AddIoAccountingRules(&limits);
    CUBICLE_ASSIGN_OR_RETURN(cgroup_, MakeCgroup(limits, v1_later, created));
    if (cgroup_ == nullptr) AddDegradedRlimits(spec.limits, plan);
  }
  deferred_ = cgroup_ != nullptr && cgroup_->v1_pending();
  plan->groups.join_later = deferred_;
  if (!deferred_) KeepStatFiles();
  CUBICLE_RETURN_IF_ERROR(MakeDeviceGroup(spec, created));
  OpenTaskFiles(plan);
  return absl::OkStatus();
}

// The device cgroup of a spec that passes devices through: only those and
// the minimal /dev's nodes may be opened. Where the host has no usable
// device controller the mount namespace alone decides what is visible (a
// user namespace cannot mknod), and the result says so.
absl::Status SandboxGroups::MakeDeviceGroup(const SandboxSpec& spec, ExecResult* created) {
  if (spec.devices.empty()) return absl::OkStatus();
  std::vector<cgroups::DeviceRule> allow = cgroups::MinimalDevRules();
  allow.insert(allow.end(), spec.devices.begin(), spec.devices.end());
  const int v2_dir_fd = cgroup_ != nullptr ? cgroup_->v2_dir_fd() : -1;  // v2: the program goes on the sandbox's group
  absl::StatusOr<std::unique_ptr<cgroups::DeviceCgroup>> made = cgroups::DeviceCgroup::Create(allow, v2_dir_fd);
  if (made.ok()) {
    devices_ = *std::move(made);
    return absl::OkStatus();
  }
  // Rootless, the devices hierarchy is usually not ours to write.
  if (absl::IsUnimplemented(made.status()) || absl::IsFailedPrecondition(made.status()) ||
      (::geteuid() != 0 && absl::IsPermissionDenied(made.status()))) {
    created->warnings.push_back(absl::StrCat(made.status().message(),
                                             "; only the sandbox's /dev limits which devices it can open"));
    return absl::OkStatus();
  }
  return made.status();
}

// The tasks files the child writes "0" to (SandboxCgroup::V1TaskFiles);
// where they cannot be opened, the launcher attaches instead. The v1
// devices group likewise, when the others are joined (or there are none).
void SandboxGroups::OpenTaskFiles(ChildPlan* plan) {
  if (cgroup_ != nullptr) {
    absl::StatusOr<std::vector<cgroups::SandboxCgroup::TaskFile>> opened = cgroup_->V1TaskFiles();
    if (opened.ok()) task_files_ = *std::move(opened);
  }
  if (devices_ != nullptr && !devices_->v2() && (cgroup_ == nullptr || !task_files_.empty())) {
    UniqueFd tasks(::open(absl::StrCat(devices_->path(), "/tasks").c_str(), O_WRONLY | O_CLOEXEC));
    if (tasks) {
      task_files_.push_back({std::move(tasks), devices_->path()});
      devices_joined_ = true;
    }
  }
  for (const cgroups::SandboxCgroup::TaskFile& f : task_files_) {
    plan->groups.task_fds.push_back(f.fd.get());
    plan->groups.task_paths.push_back(f.path.c_str());
  }
  child_joins_ = !task_files_.empty();
}

// The stats are read on the reply path: their files are opened now (the
// first read opens them) and kept.
void SandboxGroups::KeepStatFiles() {
  if (!keep_stat_files_ || cgroup_ == nullptr) return;
  cgroup_->KeepStatFilesOpen();
  (void)cgroup_->ReadStats();
}

absl::StatusOr<std::vector<UniqueFd>> SandboxGroups::JoinFiles() const {
  std::vector<UniqueFd> files;
  if (cgroup_ != nullptr && cgroup_->v2_dir_fd() >= 0) {
    UniqueFd procs(::openat(cgroup_->v2_dir_fd(), "cgroup.procs", O_WRONLY | O_CLOEXEC));
    if (!procs) return ErrnoStatus(errno, "open(cgroup.procs)");
    files.push_back(std::move(procs));
  }
  if (cgroup_ != nullptr) {
    CUBICLE_ASSIGN_OR_RETURN(std::vector<cgroups::SandboxCgroup::TaskFile> v1, cgroup_->V1TaskFiles());
    for (cgroups::SandboxCgroup::TaskFile& f : v1) files.push_back(std::move(f.fd));
  }
  if (devices_ != nullptr && !devices_->v2()) {
    UniqueFd tasks(::open(absl::StrCat(devices_->path(), "/tasks").c_str(), O_WRONLY | O_CLOEXEC));
    if (!tasks) return ErrnoStatus(errno, absl::StrCat("open(", devices_->path(), "/tasks)"));
    files.push_back(std::move(tasks));
  }
  return files;
}

int SandboxGroups::clone_into_fd() const { return cgroup_ != nullptr ? cgroup_->v2_dir_fd() : -1; }

void SandboxGroups::Cloned(bool placed_on_v2) {
  placed_on_v2_ = placed_on_v2;
  task_files_.clear();
}

absl::StatusOr<bool> SandboxGroups::AttachRest(pid_t pid) {
  if (cgroup_ == nullptr || deferred_) return false;
  const bool v2 = !placed_on_v2_, v1 = !child_joins_;
  if (!v2 && !v1) return false;
  CUBICLE_RETURN_IF_ERROR(cgroup_->Attach(pid, v2 && v1 ? Placement::kAll : v2 ? Placement::kV2Only
                                                                               : Placement::kV1Only));
  return true;
}

absl::Status SandboxGroups::AttachDevices(pid_t pid) {
  if (devices_ == nullptr || devices_joined_) return absl::OkStatus();
  return devices_->Attach(pid);
}

absl::Status SandboxGroups::CompleteDeferred(pid_t pid, int control, ExecResult* created) {
  const size_t notes = cgroup_->notes().size();
  CUBICLE_RETURN_IF_ERROR(cgroup_->CreateV1(*SharedCgroupHost().layout));
  for (size_t i = notes; i < cgroup_->notes().size(); ++i) created->warnings.push_back(cgroup_->notes()[i]);
  absl::StatusOr<std::vector<cgroups::SandboxCgroup::TaskFile>> opened = cgroup_->V1TaskFiles();
  if (opened.ok()) task_files_ = *std::move(opened);
  deferred_ = false;
  child_joins_ = !task_files_.empty();
  CUBICLE_RETURN_IF_ERROR(AttachRest(pid).status());
  CUBICLE_RETURN_IF_ERROR(SendGroups(control, task_files_));
  task_files_.clear();
  KeepStatFiles();
  return absl::OkStatus();
}

}  // namespace cubicle::runtime
