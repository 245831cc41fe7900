#include "cli/bwrap_args.h"

#include <linux/capability.h>

#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "cli/bwrap_options.h"

namespace cubicle::cli {
namespace {

using bwrap::Die;
using bwrap::Options;
using rootfs::MountKind;
using rootfs::MountOp;

// Which user namespace the sandbox gets: bwrap without setuid and not root
// always needs one, a new one or the one --userns names.
struct UserNamespace {
  bool unshare = false;
  bool join = false;
};

UserNamespace ChooseUserNamespace(const Options& o, const BwrapHost& host) {
  UserNamespace userns;
  userns.join = o.userns_fd.has_value();
  userns.unshare = o.unshare_user || (host.uid != 0 && !userns.join);
  if (o.unshare_user_try && host.user_namespaces_enabled) userns.unshare = true;
  return userns;
}

// The conflicts bwrap rejects, in bwrap's order, before anything is made.
absl::Status RejectConflicts(const Options& o, const BwrapInvocation& out, const BwrapHost& host,
                             const UserNamespace& userns) {
  if (out.userns_block_fd.has_value() && !o.unshare_user && !o.userns_fd.has_value()) {
    return Die("--userns-block-fd requires --unshare-user");
  }
  if (out.userns_block_fd.has_value() && !out.info_fd.has_value()) {
    return Die("--userns-block-fd requires --info-fd");
  }
  if (o.userns_fd.has_value() && o.unshare_user) return Die("--userns not compatible --unshare-user");
  if (o.userns_fd.has_value() && o.unshare_user_try) return Die("--userns not compatible --unshare-user-try");
  if (o.userns_fd.has_value() && o.disable_userns) return Die("--userns not compatible with --disable-userns");
  if (o.disable_userns && !o.unshare_user) return Die("--disable-userns requires --unshare-user");
  if (o.disable_userns && out.userns_block_fd.has_value()) {
    return Die("--disable-userns is not compatible with  --userns-block-fd");  // sic, bwrap's double space
  }
  if (!userns.unshare && !userns.join && o.uid.value_or(host.uid) != host.uid) {
    return Die("Specifying --uid requires --unshare-user or --userns");
  }
  if (!userns.unshare && !userns.join && o.gid.value_or(host.gid) != host.gid) {
    return Die("Specifying --gid requires --unshare-user or --userns");
  }
  if (!o.unshare_uts && o.hostname.has_value()) return Die("Specifying --hostname requires --unshare-uts");
  if (o.as_pid_1 && !o.unshare_pid) return Die("Specifying --as-pid-1 requires --unshare-pid");
  if (o.as_pid_1 && !o.lock_files.empty()) return Die("Specifying --as-pid-1 and --lock-file is not permitted");
  return absl::OkStatus();
}

// --pidns naming the pid namespace the launcher is in already: joining it
// changes nothing, and cubicle's own user namespace could not mount a
// procfs for it, so it is not joined at all (bwrap, with no user
// namespace as root, mounts one). With --userns the join itself is
// refused by the kernel, in bwrap's words: left to it.
bool NamesOwnPidNamespace(const Options& o, const BwrapHost& host) {
  return o.pidns_fd.has_value() && !o.userns_fd.has_value() && host.is_own_pid_namespace &&
         host.is_own_pid_namespace(*o.pidns_fd);
}

// A user namespace always: a new one, the one --userns names, or (root
// without --unshare-user) a new one mapping every host id to itself; with
// the opt-in, none there, as bwrap.
void SetNamespaces(const Options& o, const BwrapHost& host, const UserNamespace& userns,
                   std::optional<int> join_pidns, runtime::SandboxSpec* spec) {
  const bool host_root = host.host_root_opt_in && host.uid == 0 && !userns.unshare && !userns.join;
  spec->host_user_namespace = host_root;
  spec->namespaces.user = !userns.join && !host_root;
  spec->join_userns = o.userns_fd;
  spec->join_pidns = join_pidns;
  spec->join_userns_after_setup = o.userns2_fd;
  spec->namespaces.mount = true;
  spec->namespaces.pid = o.unshare_pid;
  spec->namespaces.net = o.unshare_net;
  spec->namespaces.ipc = o.unshare_ipc;
  spec->namespaces.uts = o.unshare_uts;
  spec->namespaces.cgroup = o.unshare_cgroup || o.unshare_cgroup_try;
  spec->uid = o.uid.value_or(host.uid);
  spec->gid = o.gid.value_or(host.gid);
  if (!userns.join && !host_root) {
    spec->host_uid = host.uid;
    spec->host_gid = host.gid;
    spec->map_all_host_ids = !userns.unshare;
  }
  spec->disable_userns = o.disable_userns;
  spec->assert_userns_disabled = o.assert_userns_disabled;
}

// Capabilities, as bwrap computes them: root starts from its own effective
// set, anyone else from nothing; --cap-add/--cap-drop edit it. In a new
// user namespace every capability is on offer and the bounding set becomes
// the request; without one (root) the host's set bounds it, and a request
// beyond it leaves the caps as they were (bwrap's capset fails with EPERM,
// which it ignores for root).
runtime::CapabilitySpec Capabilities(const Options& o, const BwrapHost& host, const UserNamespace& userns) {
  const uint64_t all_caps = (uint64_t{1} << bwrap::kKnownCapCount) - 1;
  const uint64_t requested = o.caps & all_caps;
  runtime::CapabilitySpec caps;
  if (userns.unshare || userns.join) {
    caps.keep = requested;
    caps.bounding = requested;
    caps.exact = o.caps_used;
  } else {
    caps.bounding = host.effective_caps;
    caps.exact = o.caps_used && (requested & ~host.effective_caps) == 0;
    caps.keep = caps.exact ? requested : host.effective_caps;
    if (!caps.exact) {
      // bwrap calls no capset then: the sets stay as the launcher got them.
      caps.inheritable = host.inheritable_caps & caps.keep;
      caps.ambient = host.ambient_caps & caps.inheritable;
    }
  }
  return caps;
}

void AddMounts(Options& o, bool own_pidns, std::optional<int> join_pidns, runtime::SandboxSpec* spec) {
  for (MountOp& op : o.mounts) {
    // --file-label: bwrap labels the tmpfs mounts it makes (--tmpfs, --dev).
    if (o.file_label.has_value() && (op.kind == MountKind::kTmpfs || op.kind == MountKind::kDev)) {
      op.selinux_context = *o.file_label;
    }
    // Without a new pid namespace bwrap binds the host's procfs (the pid
    // namespace is shared anyway) and covers it as it covers a new one.
    // A joined pid namespace gets a procfs of its own, as in bwrap.
    if (op.kind == MountKind::kProc && !o.unshare_pid && !join_pidns.has_value()) {
      op.source = "/proc";
      op.noexec = own_pidns;  // bwrap mounts a new procfs of it, noexec
    }
    spec->mounts.push_back(std::move(op));
  }
}

// bwrap calls setsid only for --new-session, in its first process in the
// sandbox, before that forks its PID 1 (with --unshare-pid, --lock-file or
// --sync-fd, unless --as-pid-1): then the command is in PID 1's session,
// not its leader. cubicle's init stands in for that PID 1.
void SetSession(const Options& o, const BwrapInvocation& out, runtime::SandboxSpec* spec) {
  const bool bwrap_has_init = !o.as_pid_1 && (o.unshare_pid || !o.lock_files.empty() || out.sync_fd.has_value());
  spec->new_session = o.new_session && !bwrap_has_init;
  spec->init_new_session = o.new_session && bwrap_has_init;
  spec->as_pid_1 = o.as_pid_1;
}

// The working directory: --chdir; else the caller's, if the sandbox has
// it; else $HOME; else /. PWD says which (the payload's view).
absl::Status SetWorkingDirectory(Options& o, const BwrapHost& host, runtime::SandboxSpec* spec) {
  std::vector<std::string>& env = o.env;
  if (o.chdir.has_value()) {
    CUBICLE_ASSIGN_OR_RETURN(spec->cwd, bwrap::SandboxPath(*o.chdir, "--chdir"));
    bwrap::SetEnv(&env, "PWD", spec->cwd);
  } else {
    absl::StatusOr<std::string> cwd = rootfs::NormalizeSandboxPath(host.cwd, "cwd");
    spec->cwd = cwd.ok() ? *cwd : "/";
    std::optional<std::string> home = bwrap::GetEnv(env, "HOME");
    if (home.has_value()) {
      absl::StatusOr<std::string> normal = rootfs::NormalizeSandboxPath(*home, "HOME");
      if (normal.ok() && *normal != spec->cwd) spec->cwd_fallbacks.push_back(*normal);
    }
    if (spec->cwd != "/") spec->cwd_fallbacks.push_back("/");
    bwrap::SetEnv(&env, "PWD", spec->cwd);
  }
  spec->env = std::move(env);
  return absl::OkStatus();
}

std::vector<std::string> InfoNamespaces(const runtime::SandboxSpec& spec) {
  std::vector<std::string> names;
  if (spec.namespaces.cgroup) names.push_back("cgroup");
  if (spec.namespaces.ipc) names.push_back("ipc");
  names.push_back("mnt");
  if (spec.namespaces.net) names.push_back("net");
  if (spec.namespaces.pid) names.push_back("pid");
  if (spec.namespaces.uts) names.push_back("uts");
  return names;
}

// The spec of a valid argv (RejectConflicts passed).
absl::Status BuildSpec(Options& o, const BwrapHost& host, const UserNamespace& userns, BwrapInvocation* out) {
  // bwrap's PID 1 holds --sync-fd and closes it for the command; with
  // --as-pid-1 there is no such process and the command keeps it.
  if (out->sync_fd.has_value() && !o.as_pid_1) out->option_fds.push_back(*out->sync_fd);
  const bool own_pidns = NamesOwnPidNamespace(o, host);
  const std::optional<int> join_pidns = own_pidns ? std::nullopt : o.pidns_fd;

  runtime::SandboxSpec& spec = out->spec;
  SetNamespaces(o, host, userns, join_pidns, &spec);
  spec.capabilities = Capabilities(o, host, userns);
  spec.readonly_root = false;  // bwrap's root tmpfs is writable
  AddMounts(o, own_pidns, join_pidns, &spec);
  spec.set_hostname = o.hostname.has_value();
  if (o.hostname.has_value()) spec.hostname = *o.hostname;
  SetSession(o, *out, &spec);
  for (const std::string& path : o.lock_files) {
    CUBICLE_ASSIGN_OR_RETURN(std::string lock, bwrap::SandboxPath(path, "--lock-file"));
    out->lock_files.push_back(std::move(lock));
  }
  spec.die_with_parent = o.die_with_parent;
  spec.seccomp = seccomp::Policy::kNone;
  spec.seccomp_programs = std::move(o.seccomp_programs);
  spec.argv = o.command;
  if (o.argv0.has_value()) spec.argv0 = *o.argv0;
  if (o.exec_label.has_value()) spec.exec_label = *o.exec_label;
  CUBICLE_RETURN_IF_ERROR(SetWorkingDirectory(o, host, &spec));
  out->info_namespaces = InfoNamespaces(spec);
  // The pid bwrap reports names its PID 1, dumpable: a caller opens its
  // namespaces (--userns, --pidns, nsenter). cubicle's init is not, and
  // only CAP_SYS_PTRACE opens a process that is not; so for a caller
  // without it, init stays dumpable (docs/security.md says what for).
  const uint64_t ptrace = uint64_t{1} << CAP_SYS_PTRACE;
  spec.inspectable_init = (out->info_fd.has_value() || out->json_status_fd.has_value()) &&
                          (host.effective_caps & ptrace) == 0;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BwrapInvocation> ParseBwrapArgs(const std::vector<std::string>& args, const BwrapHost& host) {
  BwrapInvocation out;
  if (args.empty()) {
    out.action = BwrapInvocation::Action::kUsage;
    return out;
  }
  Options o;
  CUBICLE_RETURN_IF_ERROR(bwrap::ReadOptions(args, host, &out, &o));
  if (out.action != BwrapInvocation::Action::kRun) return out;
  const UserNamespace userns = ChooseUserNamespace(o, host);
  CUBICLE_RETURN_IF_ERROR(RejectConflicts(o, out, host, userns));
  if (o.command.empty()) {
    out.action = BwrapInvocation::Action::kUsage;
    return out;
  }
  CUBICLE_RETURN_IF_ERROR(bwrap::ReadSetupFds(host, &out, &o));
  CUBICLE_RETURN_IF_ERROR(BuildSpec(o, host, userns, &out));
  return out;
}

bool IsBwrapCommandLine(const std::string& arg) {
  return arg != "--help" && arg != "--version" && bwrap::IsOption(arg);
}

std::string BwrapUsage(const std::string& argv0) {
  return absl::StrCat("usage: ", argv0, R"( [OPTIONS...] [--] COMMAND [ARGS...]

    --help                       Print this help
    --version                    Print version
    --args FD                    Parse NUL-separated args from FD
    --argv0 VALUE                Set argv[0] to the value VALUE before running the program
    --level-prefix               Prepend e.g. <3> to diagnostic messages
    --unshare-all                Unshare every namespace we support by default
    --share-net                  Retain the network namespace (can only combine with --unshare-all)
    --unshare-user               Create new user namespace (may be automatically implied if not setuid)
    --unshare-user-try           Create new user namespace if possible else continue by skipping it
    --unshare-ipc                Create new ipc namespace
    --unshare-pid                Create new pid namespace
    --unshare-net                Create new network namespace
    --unshare-uts                Create new uts namespace
    --unshare-cgroup             Create new cgroup namespace
    --unshare-cgroup-try         Create new cgroup namespace if possible else continue by skipping it
    --userns FD                  Use this user namespace (cannot combine with --unshare-user)
    --userns2 FD                 After setup switch to this user namespace, only useful with --userns
    --disable-userns             Disable further use of user namespaces inside sandbox
    --assert-userns-disabled     Fail unless further use of user namespace inside sandbox is disabled
    --pidns FD                   Use this pid namespace (as parent namespace if using --unshare-pid)
    --uid UID                    Custom uid in the sandbox (requires --unshare-user or --userns)
    --gid GID                    Custom gid in the sandbox (requires --unshare-user or --userns)
    --hostname NAME              Custom hostname in the sandbox (requires --unshare-uts)
    --chdir DIR                  Change directory to DIR
    --clearenv                   Unset all environment variables
    --setenv VAR VALUE           Set an environment variable
    --unsetenv VAR               Unset an environment variable
    --lock-file DEST             Take a lock on DEST while sandbox is running
    --sync-fd FD                 Keep this fd open while sandbox is running
    --bind SRC DEST              Bind mount the host path SRC on DEST
    --bind-try SRC DEST          Equal to --bind but ignores non-existent SRC
    --dev-bind SRC DEST          Bind mount the host path SRC on DEST, allowing device access
    --dev-bind-try SRC DEST      Equal to --dev-bind but ignores non-existent SRC
    --ro-bind SRC DEST           Bind mount the host path SRC readonly on DEST
    --ro-bind-try SRC DEST       Equal to --ro-bind but ignores non-existent SRC
    --bind-fd FD DEST            Bind open directory or path fd on DEST
    --ro-bind-fd FD DEST         Bind open directory or path fd read-only on DEST
    --remount-ro DEST            Remount DEST as readonly; does not recursively remount
    --overlay-src SRC            Read files from SRC in the following overlay
    --overlay RWSRC WORKDIR DEST Mount overlayfs on DEST, with RWSRC as the host path for writes and
                                 WORKDIR an empty directory on the same filesystem as RWSRC
    --tmp-overlay DEST           Mount overlayfs on DEST, with writes going to an invisible tmpfs
    --ro-overlay DEST            Mount overlayfs read-only on DEST
    --exec-label LABEL           Exec label for the sandbox
    --file-label LABEL           File label for temporary sandbox content
    --proc DEST                  Mount new procfs on DEST
    --dev DEST                   Mount new dev on DEST
    --tmpfs DEST                 Mount new tmpfs on DEST
    --mqueue DEST                Mount new mqueue on DEST
    --dir DEST                   Create dir at DEST
    --file FD DEST               Copy from FD to destination DEST
    --bind-data FD DEST          Copy from FD to file which is bind-mounted on DEST
    --ro-bind-data FD DEST       Copy from FD to file which is readonly bind-mounted on DEST
    --symlink SRC DEST           Create symlink at DEST with target SRC
    --seccomp FD                 Load and use seccomp rules from FD (not repeatable)
    --add-seccomp-fd FD          Load and use seccomp rules from FD (repeatable)
    --block-fd FD                Block on FD until some data to read is available
    --userns-block-fd FD         Block on FD until the user namespace is ready
    --info-fd FD                 Write information about the running container to FD
    --json-status-fd FD          Write container status to FD as multiple JSON documents
    --new-session                Create a new terminal session
    --die-with-parent            Kills with SIGKILL child process (COMMAND) when bwrap or bwrap's parent dies.
    --as-pid-1                   Do not install a reaper process with PID=1
    --cap-add CAP                Add cap CAP when running as privileged user
    --cap-drop CAP               Drop cap CAP when running as privileged user
    --perms OCTAL                Set permissions of next argument (--bind-data, --file, etc.)
    --size BYTES                 Set size of next argument (only for --tmpfs)
    --chmod OCTAL PATH           Change permissions of PATH (must already exist)
)");
}

}  // namespace cubicle::cli
