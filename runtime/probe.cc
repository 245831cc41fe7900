#include "runtime/probe.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/openat2.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "runtime/cgroup_host.h"
#include "runtime/defaults.h"
#include "runtime/host_features.h"
#include "runtime/launcher.h"
#include "seccomp/policy.h"

namespace cubicle::runtime {
namespace {

// Runs `body` in a forked child with `clone_flags` and returns its exit
// code, which by convention is 0 for success or an errno.
template <typename Body>
int InChild(unsigned long clone_flags, Body body) {
  long pid = ::syscall(SYS_clone, clone_flags | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid < 0) return errno;
  if (pid == 0) ::_exit(body());
  int status = 0;
  while (::waitpid(static_cast<pid_t>(pid), &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 255;
}

std::string ErrnoText(int err) {
  if (err == 255) return "the probe process was killed";
  return absl::StrCat(ErrnoName(err), " (", std::strerror(err), ")");
}

ProbeCheck Check(std::string name, int err, std::string impact) {
  ProbeCheck c;
  c.name = std::move(name);
  c.ok = err == 0;
  c.detail = c.ok ? "ok" : ErrnoText(err);
  if (!c.ok) c.impact = std::move(impact);
  return c;
}

// Launches `spec` with its stdio on /dev/null: a probe shows no output.
absl::StatusOr<ExecResult> LaunchQuietly(const SandboxSpec& spec, bool allow_proc_fallback) {
  UniqueFd null(::open("/dev/null", O_RDWR | O_CLOEXEC));
  LaunchOptions options;
  options.stdin_fd = options.stdout_fd = options.stderr_fd = null.get();
  options.allow_proc_fallback = allow_proc_fallback;
  return Launch(spec, options);
}

ProbeCheck LaunchCheck(std::string name, const SandboxSpec& spec, bool allow_proc_fallback,
                       std::string impact) {
  ProbeCheck c;
  c.name = std::move(name);
  absl::StatusOr<ExecResult> r = LaunchQuietly(spec, allow_proc_fallback);
  if (!r.ok()) {
    c.detail = std::string(r.status().message());
  } else if (r->reason != ExitReason::kExited || r->exit_code != 0) {
    c.detail = r->reason == ExitReason::kSetupFailed
                   ? std::string(r->setup_error.message())
                   : absl::StrCat("payload ended with ", ExitReasonName(r->reason), " ", r->ShellStatus());
  } else {
    c.ok = true;
    c.detail = absl::StrCat("ok, ", absl::FormatDuration(r->wall));
  }
  if (!c.ok) c.impact = std::move(impact);
  return c;
}

std::string KernelRelease() {
  struct utsname uts;
  if (::uname(&uts) != 0) return "";
  return absl::StrCat(uts.release, " ", uts.machine);
}

ProbeCheck ProbeUserNamespaces() {
  return Check("user_namespaces", InChild(CLONE_NEWUSER, [] { return 0; }),
               "no sandbox can be created: enable user namespaces "
               "(user.max_user_namespaces > 0)");
}

// Rootless mode as an unprivileged user would meet it: as root, the child
// first becomes nobody.
ProbeCheck ProbeUnprivilegedUserNamespaces() {
  int err = InChild(0, [] {
    if (::geteuid() == 0) {
      if (::setgroups(0, nullptr) != 0 || ::setresgid(65534, 65534, 65534) != 0 ||
          ::setresuid(65534, 65534, 65534) != 0) {
        return errno;
      }
    }
    return ::unshare(CLONE_NEWUSER) == 0 ? 0 : errno;
  });
  return Check("user_namespaces_unprivileged", err,
               "rootless mode is unavailable: unprivileged users cannot create "
               "user namespaces (kernel.unprivileged_userns_clone, AppArmor's "
               "apparmor_restrict_unprivileged_userns)");
}

ProbeCheck ProbeClone3() {
  return Check("clone3", Features().clone3 ? 0 : ENOSYS,
               "falls back to clone(2): no CLONE_INTO_CGROUP, no race-free pidfd");
}

// A recursive read-only clone of "/" is what a read-only bind needs from
// the new mount API.
ProbeCheck ProbeNewMountApi() {
  int err = InChild(CLONE_NEWUSER | CLONE_NEWNS, [] {
    int tree = ::open_tree(AT_FDCWD, "/", OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (tree < 0) return errno;
    struct mount_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.attr_set = MOUNT_ATTR_RDONLY;
    return ::mount_setattr(tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) == 0 ? 0 : errno;
  });
  return Check("new_mount_api", err,
               "binds use mount(2): read-only applies to the top mount only, and idmapped workspaces "
               "are unavailable");
}

ProbeCheck ProbeOpenat2() {
  struct open_how how;
  std::memset(&how, 0, sizeof(how));
  how.flags = O_PATH | O_CLOEXEC;
  how.resolve = RESOLVE_BENEATH;
  long fd = ::syscall(SYS_openat2, AT_FDCWD, ".", &how, sizeof(how));
  int err = fd >= 0 ? 0 : errno;
  if (fd >= 0) ::close(static_cast<int>(fd));
  return Check("openat2", err,
               "destinations are resolved one component at a time and every "
               "symlink in a destination path is refused");
}

// Loads the default policy in a child and expects a nested user namespace
// to be refused with EPERM.
ProbeCheck ProbeSeccompBlocksNestedUserns() {
  int err = InChild(0, [] {
    absl::StatusOr<const seccomp::BpfProgram*> bpf = seccomp::Compiled(seccomp::Policy::kDefault);
    if (!bpf.ok()) return EINVAL;
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return errno;
    int rc = seccomp::Load((*bpf)->AsFprog());
    if (rc != 0) return -rc;
    if (::unshare(CLONE_NEWUSER) == 0) return EEXIST;  // not blocked
    return errno == EPERM ? 0 : errno;
  });
  return Check("seccomp_blocks_nested_userns", err,
               "the seccomp baseline cannot be enforced: sandboxes would run without it");
}

// The default sandbox, running `true`.
absl::StatusOr<SandboxSpec> ProbeSpec() {
  absl::StatusOr<SandboxSpec> spec = DefaultSpec({});
  if (spec.ok()) {
    spec->argv = {"true"};
    spec->seccomp = seccomp::Policy::kNoNetwork;
  }
  return spec;
}

// Limits, measured: a sandbox with memory and pids limits must come back
// with its cgroup's accounting.
ProbeCheck ProbeCgroupLimits(const absl::StatusOr<SandboxSpec>& spec) {
  ProbeCheck c;
  c.name = "cgroup_limits";
  absl::Status usable = CgroupsUsable();
  if (!usable.ok()) {
    c.detail = std::string(usable.message());
  } else if (spec.ok()) {
    SandboxSpec limited = *spec;
    limited.limits.memory_max = 64ull << 20;
    limited.limits.pids_max = 64;
    absl::StatusOr<ExecResult> r = LaunchQuietly(limited, /*allow_proc_fallback=*/true);
    if (!r.ok()) {
      c.detail = std::string(r.status().message());
    } else if (r->reason != ExitReason::kExited || !r->cgroup.has_value()) {
      c.detail = r->reason == ExitReason::kSetupFailed ? std::string(r->setup_error.message())
                                                        : "the sandbox ran without a cgroup";
    } else {
      c.ok = true;
      const CgroupHost& host = SharedCgroupHost();
      c.detail = absl::StrCat("ok (", host.layout->source, host.layout_cached ? ", from the host cache" : "",
                              "), ", absl::FormatDuration(r->wall));
    }
  }
  if (!c.ok) {
    c.impact = "sandboxes get rlimits only: memory is bounded by RLIMIT_AS; pids, CPU and IO "
               "are not limited, and out-of-memory kills are not reported";
  }
  return c;
}

ProbeCheck CgroupHierarchyCheck(const CgroupInfo& cgroups) {
  ProbeCheck c;
  c.name = "cgroups";
  c.ok = cgroups.version != "none";
  c.detail = absl::StrCat(cgroups.version, "; v2 controllers [", absl::StrJoin(cgroups.v2_controllers, " "),
                          "]; v1 controllers [", absl::StrJoin(cgroups.v1_controllers, " "), "]");
  if (!c.ok) c.impact = "no cgroup hierarchy: only rlimits bound a sandbox";
  return c;
}

// The checks in report order: kernel features first, then real sandboxes.
ProbeReport RunAll() {
  ProbeReport report;
  report.root = ::geteuid() == 0;
  report.kernel = KernelRelease();
  report.checks.push_back(ProbeUserNamespaces());
  report.checks.push_back(ProbeUnprivilegedUserNamespaces());
  report.checks.push_back(ProbeClone3());
  report.checks.push_back(ProbeNewMountApi());
  report.checks.push_back(ProbeOpenat2());
  report.checks.push_back(ProbeSeccompBlocksNestedUserns());
  absl::StatusOr<SandboxSpec> spec = ProbeSpec();
  if (spec.ok()) {
    report.checks.push_back(LaunchCheck("sandbox", *spec, true, "the default sandbox cannot be created here"));
    report.checks.push_back(LaunchCheck(
        "fresh_procfs", *spec, false,
        "sandboxes get a read-only bind of the host's /proc with sensitive files masked; host "
        "processes are visible inside"));
  }
  report.checks.push_back(ProbeCgroupLimits(spec));
  report.cgroups = DetectCgroups();
  report.checks.push_back(CgroupHierarchyCheck(report.cgroups));
  for (const ProbeCheck& c : report.checks) {
    if (!c.ok) report.warnings.push_back(absl::StrCat(c.name, ": ", c.detail, " — ", c.impact));
  }
  return report;
}

}  // namespace

CgroupInfo DetectCgroups() {
  CgroupInfo info;
  std::ifstream in("/proc/self/mountinfo");
  std::string line;
  while (std::getline(in, line)) {
    // "... mountpoint opts - fstype source superopts"
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    size_t dash = 0;
    while (dash < f.size() && f[dash] != "-") ++dash;
    if (dash + 3 >= f.size() + 1 || dash < 5) continue;
    const std::string& fstype = f[dash + 1];
    if (fstype == "cgroup2" && info.v2_mount.empty()) {
      info.v2_mount = f[4];
    } else if (fstype == "cgroup" && dash + 3 < f.size()) {
      for (absl::string_view opt : absl::StrSplit(f[dash + 3], ',')) {
        for (const char* c : {"memory", "cpu", "cpuacct", "pids", "blkio", "io", "cpuset", "freezer", "devices"}) {
          if (opt == c) info.v1_controllers.emplace_back(opt);
        }
      }
    }
  }
  if (!info.v2_mount.empty()) {
    std::ifstream controllers(info.v2_mount + "/cgroup.controllers");
    std::string all;
    std::getline(controllers, all);
    for (absl::string_view c : absl::StrSplit(all, ' ', absl::SkipEmpty())) info.v2_controllers.emplace_back(c);
  }
  bool v1 = !info.v1_controllers.empty();
  bool v2 = !info.v2_mount.empty();
  info.version = v1 && v2 ? "hybrid" : v2 ? "v2" : v1 ? "v1" : "none";
  return info;
}

ProbeReport Probe(bool refresh) {
  static std::mutex mu;
  static std::optional<ProbeReport> cached;
  std::lock_guard<std::mutex> lock(mu);
  if (!cached.has_value() || refresh) {
    cached = RunAll();
    for (const ProbeCheck& c : cached->checks) {
      if (c.name == "fresh_procfs" && !c.ok) NoteProcfsFallback();
    }
  }
  return *cached;
}

}  // namespace cubicle::runtime
