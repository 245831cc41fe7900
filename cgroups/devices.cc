#include "cgroups/devices.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "base/status.h"
#include "cgroups/layout.h"

namespace cubicle::cgroups {
namespace {

std::atomic<uint64_t> next_sequence{0};

absl::StatusOr<std::string> ReadText(const char* path) {
  std::ifstream in(path);
  if (!in) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::Status WriteFile(const std::string& path, absl::string_view text) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  ssize_t n = ::write(fd, text.data(), text.size());
  int saved = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(text.size())) {
    return ErrnoStatus(n < 0 ? saved : EIO, absl::StrCat("write(", path, ", \"", text, "\")"));
  }
  return absl::OkStatus();
}

// <devices mount>/<our own devices cgroup>/cubicle: where groups go.
absl::StatusOr<std::string> DevicesParent() {
  CUBICLE_ASSIGN_OR_RETURN(std::string mountinfo, ReadText("/proc/self/mountinfo"));
  CUBICLE_ASSIGN_OR_RETURN(std::vector<CgroupMount> mounts, ParseMountinfo(mountinfo));
  const CgroupMount* devices = nullptr;
  bool any_v2 = false;
  for (const CgroupMount& m : mounts) {
    if (m.version == 2) any_v2 = true;
    if (m.version == 1 && devices == nullptr &&
        std::find(m.controllers.begin(), m.controllers.end(), "devices") != m.controllers.end()) {
      devices = &m;
    }
  }
  if (devices == nullptr) {
    if (any_v2) {
      return absl::UnimplementedError(
          "device cgroup: this host has no v1 devices controller, and the cgroup v2 device program "
          "(BPF_PROG_TYPE_CGROUP_DEVICE) is not implemented yet");
    }
    return absl::FailedPreconditionError("device cgroup: no devices controller is mounted");
  }
  CUBICLE_ASSIGN_OR_RETURN(std::string self, ReadText("/proc/self/cgroup"));
  std::string own;
  bool found = false;
  for (absl::string_view line : absl::StrSplit(self, '\n', absl::SkipEmpty())) {
    std::vector<absl::string_view> f = absl::StrSplit(line, absl::MaxSplits(':', 2));
    if (f.size() != 3) continue;
    for (absl::string_view c : absl::StrSplit(f[1], ',')) {
      if (c == "devices") {
        own = std::string(f[2]);
        found = true;
      }
    }
  }
  if (!found) return absl::FailedPreconditionError("device cgroup: /proc/self/cgroup names no devices group");
  // The mount shows the hierarchy from `root`; our group is below it.
  absl::string_view rel = own;
  if (devices->root != "/" && !absl::ConsumePrefix(&rel, devices->root)) {
    return absl::FailedPreconditionError(
        absl::StrCat("device cgroup: our group ", own, " is outside the mounted ", devices->root));
  }
  std::string dir = devices->mount_point;
  for (absl::string_view part : absl::StrSplit(rel, '/', absl::SkipEmpty())) absl::StrAppend(&dir, "/", part);
  return absl::StrCat(dir, "/cubicle");
}

}  // namespace

std::string DeviceRuleLine(const DeviceRule& rule) {
  return absl::StrCat(std::string(1, rule.type), " ", rule.major, ":",
                      rule.minor < 0 ? std::string("*") : absl::StrCat(rule.minor), " ", rule.access);
}

absl::Status ValidateDeviceRules(const std::vector<DeviceRule>& rules) {
  for (const DeviceRule& r : rules) {
    if (r.type != 'c' && r.type != 'b') {
      return absl::InvalidArgumentError(absl::StrCat("device rule: type must be 'c' or 'b', got '",
                                                     std::string(1, r.type), "'"));
    }
    if (r.access.empty() || r.access.size() > 3 ||
        r.access.find_first_not_of("rwm") != std::string::npos ||
        std::count(r.access.begin(), r.access.end(), 'r') > 1 ||
        std::count(r.access.begin(), r.access.end(), 'w') > 1 ||
        std::count(r.access.begin(), r.access.end(), 'm') > 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("device rule ", DeviceRuleLine(r), ": access must be a subset of \"rwm\""));
    }
    if (r.minor < -1 || r.minor > 0xfffff || r.major > 0xfff) {
      return absl::InvalidArgumentError(absl::StrCat("device rule ", DeviceRuleLine(r), ": number out of range"));
    }
  }
  return absl::OkStatus();
}

std::vector<DeviceRule> MinimalDevRules() {
  return {
      {'c', 1, 3, "rwm"},    // null
      {'c', 1, 5, "rwm"},    // zero
      {'c', 1, 7, "rwm"},    // full
      {'c', 1, 8, "rwm"},    // random
      {'c', 1, 9, "rwm"},    // urandom
      {'c', 5, 0, "rwm"},    // tty
      {'c', 5, 2, "rwm"},    // ptmx (the devpts instance's, through /dev/ptmx -> pts/ptmx)
      {'c', 136, -1, "rwm"}, // the pts of the sandbox's own devpts
  };
}

absl::StatusOr<std::unique_ptr<DeviceCgroup>> DeviceCgroup::Create(const std::vector<DeviceRule>& allow) {
  CUBICLE_RETURN_IF_ERROR(ValidateDeviceRules(allow));
  CUBICLE_ASSIGN_OR_RETURN(std::string parent, DevicesParent());
  auto cg = std::unique_ptr<DeviceCgroup>(new DeviceCgroup());
  cg->path_ = absl::StrCat(parent, "/cubicle-", ::getpid(), "-dev-", next_sequence.fetch_add(1));
  // Another sandbox's Remove() may take the (empty) parent away between the
  // two mkdirs: one retry makes it again.
  for (int attempt = 0;; ++attempt) {
    if (::mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("mkdir(", parent, ")"));
    if (::mkdir(cg->path_.c_str(), 0755) == 0) break;
    if (errno != ENOENT || attempt >= 1) {
      cg->removed_ = true;
      return ErrnoStatus(errno, absl::StrCat("mkdir(", cg->path_, ")"));
    }
  }
  CUBICLE_RETURN_IF_ERROR(WriteFile(absl::StrCat(cg->path_, "/devices.deny"), "a"));
  for (const DeviceRule& r : allow) {
    CUBICLE_RETURN_IF_ERROR(WriteFile(absl::StrCat(cg->path_, "/devices.allow"), DeviceRuleLine(r)));
  }
  return cg;
}

DeviceCgroup::~DeviceCgroup() { Remove().IgnoreError(); }

absl::Status DeviceCgroup::Attach(pid_t pid) {
  return WriteFile(absl::StrCat(path_, "/cgroup.procs"), absl::StrCat(pid));
}

absl::Status DeviceCgroup::Remove() {
  if (removed_) return absl::OkStatus();
  // The sandbox's processes are gone by now (its init was reaped), but the
  // kernel may take a moment to let go of the group: bounded retries.
  const absl::Time deadline = absl::Now() + absl::Seconds(2);
  while (::rmdir(path_.c_str()) != 0) {
    if (errno == ENOENT) break;
    if (errno != EBUSY || absl::Now() >= deadline) return ErrnoStatus(errno, absl::StrCat("rmdir(", path_, ")"));
    ::usleep(2000);
  }
  removed_ = true;
  // The shared parent goes when it is empty; another sandbox's group keeps it.
  std::string parent = path_.substr(0, path_.rfind('/'));
  ::rmdir(parent.c_str());
  return absl::OkStatus();
}

}  // namespace cubicle::cgroups
