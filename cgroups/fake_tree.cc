#include "cgroups/fake_tree.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cgroups/cgroupfs.h"

namespace cubicle::cgroups {
namespace {

// The interface files a group of each hierarchy has (those the backends
// touch). A new group gets empty copies of its parent's, as the kernel
// would give it its own.
// clang-format off
constexpr const char* kV2Files[] = {
    "cgroup.controllers", "cgroup.subtree_control", "cgroup.procs", "cgroup.kill",
    "cgroup.freeze", "cgroup.events", "memory.max", "memory.high", "memory.swap.max",
    "memory.peak", "memory.events", "pids.max", "pids.peak", "cpu.max", "cpu.weight",
    "cpu.stat", "io.max"};
constexpr const char* kV2CoreFiles[] = {
    "cgroup.controllers", "cgroup.subtree_control", "cgroup.procs", "cgroup.kill",
    "cgroup.freeze", "cgroup.events", "cpu.stat"};
constexpr const char* kMemoryFiles[] = {
    "cgroup.procs", "tasks", "cgroup.event_control", "memory.limit_in_bytes",
    "memory.memsw.limit_in_bytes", "memory.soft_limit_in_bytes", "memory.swappiness",
    "memory.max_usage_in_bytes", "memory.oom_control", "memory.failcnt"};
constexpr const char* kCpuFiles[] = {"cgroup.procs", "tasks", "cpu.cfs_period_us",
                                     "cpu.cfs_quota_us", "cpu.shares", "cpuacct.usage"};
constexpr const char* kPidsFiles[] = {"cgroup.procs", "tasks", "pids.max", "pids.peak"};
constexpr const char* kBlkioFiles[] = {
    "cgroup.procs", "tasks", "blkio.throttle.read_bps_device", "blkio.throttle.write_bps_device",
    "blkio.throttle.read_iops_device", "blkio.throttle.write_iops_device"};
constexpr const char* kFreezerFiles[] = {"cgroup.procs", "tasks", "freezer.state"};
// clang-format on

absl::Status MakeDirs(const std::string& path) {
  std::string sofar;
  for (absl::string_view part : absl::StrSplit(path, '/', absl::SkipEmpty())) {
    absl::StrAppend(&sofar, "/", part);
    if (::mkdir(sofar.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus(errno, absl::StrCat("mkdir(", sofar, ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFile(const std::string& path, const std::string& content) {
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  if (::write(fd.get(), content.data(), content.size()) != static_cast<ssize_t>(content.size())) {
    return ErrnoStatus(errno, absl::StrCat("write(", path, ")"));
  }
  return absl::OkStatus();
}

template <size_t N>
absl::Status MakeGroup(const std::string& dir, const char* const (&files)[N]) {
  CUBICLE_RETURN_IF_ERROR(MakeDirs(dir));
  for (const char* f : files) CUBICLE_RETURN_IF_ERROR(WriteFile(cgroupfs::Join(dir, f), ""));
  return absl::OkStatus();
}

std::string MountinfoPath(const std::string& path) {
  return absl::StrReplaceAll(path,
                             {{"\\", "\\134"}, {" ", "\\040"}, {"\t", "\\011"}, {"\n", "\\012"}});
}

int RemoveEntry(const char* path, const struct stat*, int, struct FTW*) {
  ::remove(path);
  return 0;
}

}  // namespace

absl::StatusOr<std::unique_ptr<FakeCgroupTree>> FakeCgroupTree::Make(Kind kind) {
  const char* tmp = ::getenv("TMPDIR");
  std::string pattern =
      absl::StrCat(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp", "/fakecg-XXXXXX");  // not "cubicle": leak checks look for that
  if (::mkdtemp(pattern.data()) == nullptr)
    return ErrnoStatus(errno, absl::StrCat("mkdtemp(", pattern, ")"));
  std::unique_ptr<FakeCgroupTree> tree(new FakeCgroupTree());
  tree->root_ = pattern;
  CUBICLE_RETURN_IF_ERROR(tree->Build(kind));
  return tree;
}

FakeCgroupTree::~FakeCgroupTree() {
  if (!root_.empty()) ::nftw(root_.c_str(), RemoveEntry, 16, FTW_DEPTH | FTW_PHYS);
}

absl::Status FakeCgroupTree::Build(Kind kind) {
  std::vector<std::string> lines = {
      absl::StrCat("23 1 0:21 / ", MountinfoPath(root_), " rw,relatime - tmpfs tmpfs rw"),
  };
  std::string cgroup_lines;
  int id = 30;
  auto v1 = [&](const std::string& name, const std::string& own, auto& files) -> absl::Status {
    std::string mount = Path(name);
    int hierarchy = id++;
    lines.push_back(absl::StrCat(hierarchy, " 23 0:", hierarchy, " / ", MountinfoPath(mount),
                                 " rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,",
                                 name));
    absl::StrAppend(&cgroup_lines, hierarchy, ":", name, ":", own, "\n");
    CUBICLE_RETURN_IF_ERROR(MakeGroup(mount, files));
    if (own != "/") CUBICLE_RETURN_IF_ERROR(MakeGroup(cgroupfs::Join(mount, own), files));
    return absl::OkStatus();
  };
  if (kind == Kind::kV1 || kind == Kind::kHybrid) {
    CUBICLE_RETURN_IF_ERROR(v1("memory", "/process_api/abc", kMemoryFiles));
    CUBICLE_RETURN_IF_ERROR(v1("cpu,cpuacct", "/", kCpuFiles));
    CUBICLE_RETURN_IF_ERROR(v1("pids", "/", kPidsFiles));
    CUBICLE_RETURN_IF_ERROR(v1("blkio", "/", kBlkioFiles));
    CUBICLE_RETURN_IF_ERROR(v1("freezer", "/", kFreezerFiles));
    // A named hierarchy without controllers, as systemd mounts on v1 hosts.
    CUBICLE_RETURN_IF_ERROR(MakeDirs(Path("systemd")));
    lines.push_back(absl::StrCat("29 23 0:29 / ", MountinfoPath(Path("systemd")),
                                 " rw,relatime - cgroup cgroup rw,xattr,name=systemd"));
    absl::StrAppend(&cgroup_lines, "1:name=systemd:/\n");
  }
  if (kind == Kind::kV2 || kind == Kind::kHybrid) {
    std::string mount = Path("unified");
    std::string own = kind == Kind::kV2 ? "/user.slice/cubicle.service" : "/";
    lines.push_back(
        absl::StrCat("28 23 0:28 / ", MountinfoPath(mount),
                     " rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate"));
    absl::StrAppend(&cgroup_lines, "0::", own, "\n");
    std::string own_dir = cgroupfs::Join(mount, own == "/" ? "" : own);
    if (kind == Kind::kV2) {
      CUBICLE_RETURN_IF_ERROR(MakeGroup(mount, kV2Files));
      CUBICLE_RETURN_IF_ERROR(MakeGroup(own_dir, kV2Files));
      CUBICLE_RETURN_IF_ERROR(WriteFile(cgroupfs::Join(own_dir, "cgroup.controllers"),
                                        "cpuset cpu io memory hugetlb pids rdma misc\n"));
    } else {
      CUBICLE_RETURN_IF_ERROR(MakeGroup(mount, kV2CoreFiles));
      CUBICLE_RETURN_IF_ERROR(
          WriteFile(cgroupfs::Join(own_dir, "cgroup.controllers"), "hugetlb\n"));
    }
  } else {
    absl::StrAppend(&cgroup_lines, "0::/\n");  // the v2 line is there even when nothing mounts it
  }
  mountinfo_ = absl::StrCat(absl::StrJoin(lines, "\n"), "\n");
  proc_self_cgroup_ = cgroup_lines;
  return absl::OkStatus();
}

absl::StatusOr<Layout> FakeCgroupTree::Discover(LayoutOptions options) const {
  options.emulated = true;
  return LayoutFromProc(mountinfo_, proc_self_cgroup_, options);
}

std::string FakeCgroupTree::Path(const std::string& relative) const {
  return relative.empty() ? root_ : cgroupfs::Join(root_, relative);
}

absl::Status FakeCgroupTree::Write(const std::string& relative, const std::string& content) const {
  return WriteFile(Path(relative), content);
}

absl::StatusOr<std::string> FakeCgroupTree::Read(const std::string& relative) const {
  return cgroupfs::Read(Path(relative));
}

}  // namespace cubicle::cgroups
