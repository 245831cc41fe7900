// `cubicle bwrap ARGS...` and cubicle invoked as `bwrap`: bubblewrap's
// command line, run by cubicle's one launcher (runtime::Zygote). The argv
// is parsed by cli/bwrap_args (never by CLI11); this file does what bwrap
// does outside its sandbox: reads fds, resolves bind sources, writes the
// --info-fd/--json-status-fd JSON, waits on --block-fd, and exits with the
// payload's status or 1 with a "bwrap: ..." message.
#include <dirent.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cli/bwrap_args.h"
#include "cli/bwrap_command.h"
#include "cli/forwarded_signals.h"
#include "cli/parent_death.h"
#include "namespaces/selinux.h"
#include "rootfs/builder.h"
#include "runtime/launcher.h"
#include "runtime/zygote.h"

extern char** environ;

namespace cubicle::cli {
namespace {

constexpr int kBwrapFailure = 1;  // bwrap's exit status for its own errors

class Reporter {
 public:
  void set_level_prefix(bool on) { prefix_ = on; }
  void Warn(absl::string_view message) const {
    std::fprintf(stderr, "%sbwrap: %.*s\n", prefix_ ? "<4>" : "", static_cast<int>(message.size()), message.data());
  }
  int Fail(absl::string_view message) const {
    std::fprintf(stderr, "%sbwrap: %.*s\n", prefix_ ? "<3>" : "", static_cast<int>(message.size()),
                 message.data());
    return kBwrapFailure;
  }

 private:
  bool prefix_ = false;
};

absl::StatusOr<std::string> ReadAll(int fd) {
  std::string data;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InvalidArgumentError(std::strerror(errno));
    }
    if (n == 0) return data;
    data.append(buf, static_cast<size_t>(n));
  }
}

void ReadCaps(BwrapHost* host) {
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return;
  host->effective_caps = uint64_t{data[0].effective} | (uint64_t{data[1].effective} << 32);
  host->inheritable_caps = uint64_t{data[0].inheritable} | (uint64_t{data[1].inheritable} << 32);
  for (int cap = 0; cap < 64; ++cap) {
    const int set = ::prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_IS_SET, cap, 0, 0);
    if (set < 0) break;  // past the kernel's last capability
    if (set == 1) host->ambient_caps |= uint64_t{1} << cap;
  }
}

bool UserNamespacesEnabled() {
  std::ifstream in("/proc/sys/user/max_user_namespaces");
  long max = 1;
  return !(in >> max) || max != 0;
}

// bwrap passes every fd it inherited without close-on-exec to the
// command (those its options name aside): the same set, found at start.
std::vector<int> InheritableFds() {
  std::vector<int> fds;
  DIR* dir = ::opendir("/proc/self/fd");
  if (dir == nullptr) return fds;
  const int own = ::dirfd(dir);
  while (struct dirent* e = ::readdir(dir)) {
    int fd = 0;
    if (e->d_name[0] == '.' || !absl::SimpleAtoi(e->d_name, &fd) || fd < 3 || fd == own) continue;
    int flags = ::fcntl(fd, F_GETFD);
    if (flags >= 0 && !(flags & FD_CLOEXEC)) fds.push_back(fd);
  }
  ::closedir(dir);
  std::sort(fds.begin(), fds.end());
  return fds;
}

BwrapHost CurrentHost() {
  BwrapHost host;
  host.uid = ::getuid();
  host.gid = ::getgid();
  ReadCaps(&host);
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) host.environ.emplace_back(*e);
  char cwd[4096];
  if (::getcwd(cwd, sizeof(cwd)) != nullptr) host.cwd = cwd;
  host.user_namespaces_enabled = UserNamespacesEnabled();
  const char* host_root = std::getenv(kHostRootEnv);
  host.host_root_opt_in = host_root != nullptr && std::string(host_root) == "1";
  host.read_fd = ReadAll;
  host.is_own_pid_namespace = [](int fd) {
    struct stat given, own;
    return ::fstat(fd, &given) == 0 && ::stat("/proc/self/ns/pid", &own) == 0 && given.st_dev == own.st_dev &&
           given.st_ino == own.st_ino;
  };
  if (std::string selinuxfs = namespaces::SelinuxFsMountPoint(); !selinuxfs.empty()) {
    host.check_selinux_label = [selinuxfs](const std::string& label) {
      return namespaces::CheckSelinuxContext(selinuxfs, label);
    };
  }
  return host;
}

// bwrap's realpath of a host source: relative to the caller's working
// directory, symlinks followed; a missing one is an error naming it as
// given. False for a missing path that `may_be_missing` (--bind-try).
absl::StatusOr<bool> ResolveHostPath(std::string* path, bool may_be_missing = false) {
  char real[PATH_MAX];
  if (::realpath(path->c_str(), real) == nullptr) {
    const int err = errno;
    if (may_be_missing && err == ENOENT) return false;
    return absl::NotFoundError(absl::StrCat("Can't find source path ", *path, ": ", std::strerror(err)));
  }
  *path = real;
  return true;
}

// bwrap resolves bind and overlay sources on the host before it makes
// anything, so a missing one is an error naming it, and a symlinked one
// mounts its target.
absl::Status ResolveHostSources(runtime::SandboxSpec* spec) {
  rootfs::MountPlan resolved;
  for (rootfs::MountOp& op : spec->mounts) {
    // A --bind-fd source (/proc/self/fd/N) resolves to the fd's path, as in
    // bwrap: a mount of the caller's namespace cannot be cloned from the
    // sandbox's, and a rootless caller cannot clone it on the host.
    if (op.kind == rootfs::MountKind::kBind && op.bwrap_style) {
      CUBICLE_ASSIGN_OR_RETURN(bool found, ResolveHostPath(&op.source, op.optional));
      if (!found) continue;
    }
    if (op.kind == rootfs::MountKind::kOverlay && op.bwrap_style) {
      // In bwrap's order: RWSRC, WORKDIR, then the sources top down.
      for (std::string* path : {&op.upper, &op.work}) {
        if (!path->empty()) CUBICLE_RETURN_IF_ERROR(ResolveHostPath(path).status());
      }
      for (auto layer = op.lower.rbegin(); layer != op.lower.rend(); ++layer) {
        CUBICLE_RETURN_IF_ERROR(ResolveHostPath(&*layer).status());
      }
    }
    resolved.push_back(std::move(op));
  }
  spec->mounts = std::move(resolved);
  return absl::OkStatus();
}

std::string NamespaceJson(pid_t pid, const std::vector<std::string>& names, bool pretty) {
  std::vector<std::string> fields = {absl::StrCat("\"child-pid\": ", pid)};
  for (const std::string& ns : names) {
    struct stat st;
    std::string path = absl::StrCat("/proc/", pid, "/ns/", ns);
    if (::stat(path.c_str(), &st) != 0) continue;
    fields.push_back(absl::StrCat("\"", ns, "-namespace\": ", st.st_ino));
  }
  if (pretty) return absl::StrCat("{\n    ", absl::StrJoin(fields, ",\n    "), "\n}\n");
  return absl::StrCat("{ ", absl::StrJoin(fields, ", "), " }\n");
}

bool WriteAll(int fd, const std::string& text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

void WaitForByte(int fd) {
  char b;
  while (::read(fd, &b, 1) < 0 && errno == EINTR) {
  }
}

// bwrap's --lock-file: a read lock on a path inside the sandbox, held while
// it runs. bwrap's own PID 1 holds it; here the launcher does, through the
// sandbox's root (/proc/PID/root, resolved with RESOLVE_IN_ROOT so that no
// symlink inside can lead to a host path). Returns the fds to keep open.
absl::StatusOr<std::vector<UniqueFd>> TakeLocks(pid_t pid, const std::vector<std::string>& paths) {
  std::vector<UniqueFd> held;
  if (paths.empty()) return held;
  std::string root_path = absl::StrCat("/proc/", pid, "/root");
  UniqueFd root(::open(root_path.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (!root) return absl::FailedPreconditionError(absl::StrCat("Can't open ", root_path, ": ", std::strerror(errno)));
  for (const std::string& path : paths) {
    struct open_how how;
    std::memset(&how, 0, sizeof(how));
    how.flags = O_RDONLY | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    UniqueFd fd(static_cast<int>(::syscall(SYS_openat2, root.get(), path.c_str() + 1, &how, sizeof(how))));
    if (!fd) return absl::FailedPreconditionError(absl::StrCat("Unable to open lock file ", path, ": ", std::strerror(errno)));
    struct flock lock = {};
    lock.l_type = F_RDLCK;
    lock.l_whence = SEEK_SET;
    if (::fcntl(fd.get(), F_SETLK, &lock) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("Unable to lock file ", path, ": ", std::strerror(errno)));
    }
    held.push_back(std::move(fd));
  }
  return held;
}

int StatusOf(const runtime::ExecResult& result) {
  switch (result.reason) {
    case runtime::ExitReason::kExited: return result.exit_code;
    case runtime::ExitReason::kSignaled: return 128 + result.signal;
    default: return result.ShellStatus();
  }
}

// Found before the parse, so that parse errors get the prefix too.
Reporter ReporterFor(const std::vector<std::string>& args) {
  Reporter report;
  for (const std::string& a : args) {
    if (a == "--") break;
    if (a == "--level-prefix") report.set_level_prefix(true);
  }
  return report;
}

// --help, --version and usage errors print what bwrap prints and end the
// run with its status; nullopt for a run.
std::optional<int> RunInfoAction(BwrapInvocation::Action action, const std::string& argv0) {
  switch (action) {
    case BwrapInvocation::Action::kHelp:
      std::fputs(BwrapUsage(argv0).c_str(), stdout);
      return 0;
    case BwrapInvocation::Action::kVersion:
      std::printf("%s\n", kBwrapVersion);
      return 0;
    case BwrapInvocation::Action::kUsage:
      std::fputs(BwrapUsage(argv0).c_str(), stderr);
      return kBwrapFailure;
    case BwrapInvocation::Action::kRun:
      break;
  }
  return std::nullopt;
}

// The command keeps every fd cubicle inherited except those the options
// name; the fds the options consumed are closed here.
void PassOnInheritedFds(const std::vector<int>& inheritable, BwrapInvocation* inv) {
  for (int fd : inheritable) {
    if (std::find(inv->option_fds.begin(), inv->option_fds.end(), fd) == inv->option_fds.end()) {
      inv->spec.inherited_fds.push_back(fd);
    }
  }
  for (int fd : inv->consumed_fds) ::close(fd);
}

// --info-fd and --json-status-fd get the pid and namespaces as soon as the
// sandbox exists; --info-fd is closed after.
absl::Status WriteNamespaceInfo(const BwrapInvocation& inv, pid_t pid) {
  if (inv.info_fd) {
    if (!WriteAll(*inv.info_fd, NamespaceJson(pid, inv.info_namespaces, true))) {
      return absl::InternalError(absl::StrCat("Write to info_fd: ", std::strerror(errno)));
    }
    ::close(*inv.info_fd);
  }
  if (inv.json_status_fd && !WriteAll(*inv.json_status_fd, NamespaceJson(pid, inv.info_namespaces, false))) {
    return absl::InternalError(absl::StrCat("Write to json_status_fd: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

// Runs the command in the sandbox `zygote` made, returning as soon as it
// exits. bwrap's monitor exits with the command's status as soon as its
// PID 1 reports it, without waiting for the namespaces' teardown; so does
// this. The sandbox's init exits by itself right after its report
// (killing what is left in its pid namespace) and has no cgroup to remove,
// so a Zygote that ran the command is released to the kernel instead of
// being reaped; on a failure the caller still owns it.
absl::StatusOr<runtime::ExecResult> RunCommand(std::unique_ptr<runtime::Zygote>& zygote,
                                               const runtime::SandboxSpec& spec, int signal_fd) {
  runtime::ExecRequest request;
  request.argv = spec.argv;
  request.env = spec.env;
  request.cwd = spec.cwd;
  request.signal_fd = signal_fd;
  request.return_at_exit = true;
  absl::StatusOr<runtime::ExecResult> result = zygote->Run(request);
  if (result.ok() && result->reason != runtime::ExitReason::kSetupFailed) (void)zygote.release();
  return result;
}

// bwrap 0.11's words for a failed overlay mount: its options (rebuilt from
// the spec, as the sandbox made them) and, for ELOOP, what it means. None
// when `dest` is not one overlay's alone.
std::optional<std::string> OverlayMountMessage(const runtime::SandboxSpec& spec, const std::string& dest,
                                               const std::string& errno_name, const std::string& reason) {
  const rootfs::PreparedPlan prepared = rootfs::Prepare(spec.mounts, false, true, true);
  const rootfs::PreparedOp* overlay = nullptr;
  for (const rootfs::PreparedOp& op : prepared.ops) {
    if (op.kind != rootfs::MountKind::kOverlay || op.dest != dest) continue;
    if (overlay != nullptr) return std::nullopt;
    overlay = &op;
  }
  if (overlay == nullptr) return std::nullopt;
  return absl::StrCat("Can't make overlay mount on /newroot", dest, " with options ", overlay->tmpfs_options, ": ",
                      errno_name == "ELOOP" ? "Overlay directories may not overlap" : reason);
}

}  // namespace

// A launcher setup error in bwrap's words: "execvp foo: No such file or
// directory", "Can't chdir to /x: ...". The launcher's own message is
// "step(detail): ENAME: strerror".
std::string BwrapMessage(const absl::Status& status, const runtime::SandboxSpec* spec) {
  std::string message(status.message());
  size_t last = message.rfind(": ");
  if (last == std::string::npos) return message;
  size_t name = message.rfind(": ", last - 1);
  if (name == std::string::npos || message.compare(name + 2, 1, "E") != 0) return message;
  std::string step_text = message.substr(0, name);
  std::string errno_name = message.substr(name + 2, last - name - 2);
  std::string reason = message.substr(last + 2);
  // "step(detail)", or "mount(fs)(detail)" for a filesystem mount.
  size_t open = step_text.find('(');
  std::string step = step_text.substr(0, open);
  size_t last_open = step_text.rfind('(');
  std::string detail = open != std::string::npos && step_text.back() == ')'
                           ? step_text.substr(last_open + 1, step_text.size() - last_open - 2)
                           : "";
  if (step_text.rfind("mount(overlay)(", 0) == 0 && spec != nullptr) {
    if (std::optional<std::string> text = OverlayMountMessage(*spec, detail, errno_name, reason)) return *text;
  }
  if (step == "mount" && last_open != open) {
    // bwrap names the filesystem and the path under its staging root
    // ("Can't mount proc on /newroot/proc").
    std::string fs = step_text.substr(open + 1, step_text.find(')') - open - 1);
    std::string where = absl::StrCat("/newroot", detail == "/" ? "" : detail);
    if (fs == "bind") return absl::StrCat("Can't bind mount on ", where, ": ", reason);
    if (fs.rfind("remount", 0) == 0) return absl::StrCat("Can't remount readonly on ", where, ": ", reason);
    if (fs.size() > 6 && fs.compare(fs.size() - 6, 6, " tmpfs") == 0) fs = "tmpfs";
    return absl::StrCat("Can't mount ", fs, " on ", where, ": ", reason);
  }
  struct Phrase {
    const char* step;
    const char* text;
  };
  static constexpr Phrase kPhrases[] = {
      {"execve", "execvp "},
      {"chdir", "Can't chdir to "},
      {"symlink", "Can't make symlink at "},
      {"create mountpoint", "Can't create file at "},
      {"create file", "Can't create file "},
      {"create data file", "Can't create file at "},
      {"mkdir", "Can't mkdir "},
      {"mkdir parents", "Can't mkdir parents for "},
      {"open directory", "Can't mkdir "},
      {"stat bind source", "Can't find source path "},
      {"open_tree", "Can't bind mount on "},
      {"move_mount", "Can't bind mount on "},
      {"mount_setattr", "Can't bind mount on "},
      {"mount", "Can't mount on "},
      {"chmod", "Can't chmod "},
      {"open chmod target", "Can't chmod "},
      {"open remount target", "Can't remount readonly on "},
      {"switch to uid", "unable to switch to uid "},
      {"switch to gid", "unable to switch to gid "},
      {"label_exec", "label_exec "},
  };
  // The joined namespaces (--userns, --pidns, --userns2): bwrap's texts
  // name no fd.
  if (step == "join user namespace") {
    if (errno_name == "EINVAL") {
      return "Joining the specified user namespace failed, it might not be a descendant of the current user "
             "namespace.";
    }
    return absl::StrCat("Joining specified user namespace failed: ", reason);
  }
  if (step == "join pid namespace") return absl::StrCat("Setting pidns failed: ", reason);
  // A supplied seccomp program the kernel refused: bwrap's words, whose
  // hint names the kernel's configuration.
  if (step_text == "prctl(PR_SET_SECCOMP)" && errno_name == "EINVAL") return kBwrapSeccompEinval;
  if (step == "clone into the joined pid namespace") return absl::StrCat("Can't fork for --pidns: ", reason);
  if (step == "join user namespace after setup") return absl::StrCat("Setting userns2 failed: ", reason);
  for (const Phrase& p : kPhrases) {
    if (step == p.step) return absl::StrCat(p.text, detail, ": ", reason);
  }
  return absl::StrCat(step_text, ": ", reason);
}

int RunBwrap(const std::vector<std::string>& args, const std::string& argv0) {
  const std::vector<int> inheritable = InheritableFds();
  const Reporter report = ReporterFor(args);
  absl::StatusOr<BwrapInvocation> parsed = ParseBwrapArgs(args, CurrentHost());
  if (!parsed.ok()) return report.Fail(parsed.status().message());
  BwrapInvocation& inv = *parsed;
  for (const std::string& w : inv.warnings) report.Warn(w);
  if (std::optional<int> done = RunInfoAction(inv.action, argv0)) return *done;
  PassOnInheritedFds(inheritable, &inv);
  // bwrap's --die-with-parent covers bwrap itself too: the launcher's
  // death kills cubicle, whose death kills the sandbox (its init, and the
  // payload with init).
  if (inv.spec.die_with_parent) {
    absl::Status st = DieWithParent();
    if (absl::IsFailedPrecondition(st)) return kBwrapFailure;  // nobody is left to tell
    if (!st.ok()) return report.Fail(BwrapMessage(st));
  }
  runtime::SandboxSpec& spec = inv.spec;
  if (absl::Status st = ResolveHostSources(&spec); !st.ok()) return report.Fail(st.message());
  if (absl::Status st = runtime::ValidateSpec(spec); !st.ok()) return report.Fail(st.message());

  // Termination signals go to the sandbox (bwrap's monitor dies with them
  // and its die-with-parent child follows; forwarding ends the same way).
  ForwardedSignals signals;

  // The launcher's two halves, so that the pid and namespaces can be
  // reported and the fds waited on between them. As in bwrap, the info is
  // written right after clone, while the sandbox builds itself; only
  // --lock-file needs the built root first.
  runtime::ZygoteOptions options;
  options.wait_until_ready = !inv.lock_files.empty();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> zygote = runtime::Zygote::Create(spec, options);
  if (!zygote.ok()) return report.Fail(BwrapMessage(zygote.status(), &spec));
  const pid_t pid = (*zygote)->init_pid();
  if (absl::Status st = WriteNamespaceInfo(inv, pid); !st.ok()) return report.Fail(st.message());
  // With --as-pid-1 the command alone holds --sync-fd (it has its copy
  // since clone), so that it ends when the command closes it, as in bwrap.
  if (inv.sync_fd && spec.as_pid_1) ::close(*inv.sync_fd);
  absl::StatusOr<std::vector<UniqueFd>> locks = TakeLocks(pid, inv.lock_files);
  if (!locks.ok()) return report.Fail(locks.status().message());
  if (inv.userns_block_fd) WaitForByte(*inv.userns_block_fd);
  if (inv.block_fd) WaitForByte(*inv.block_fd);
  absl::StatusOr<runtime::ExecResult> result = RunCommand(*zygote, spec, signals.fd());
  if (!result.ok()) return report.Fail(BwrapMessage(result.status()));
  if (result->reason == runtime::ExitReason::kSetupFailed) {
    return report.Fail(BwrapMessage(result->setup_error, &spec));
  }
  const int status = StatusOf(*result);
  if (inv.json_status_fd) {
    WriteAll(*inv.json_status_fd, absl::StrCat("{ \"exit-code\": ", status, " }\n"));
  }
  return status;
}

}  // namespace cubicle::cli
