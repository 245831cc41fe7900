// Making a sandbox (DESIGN §4, host side): Zygote::Create is the launch
// sequence up to the payload, one named step each; Run() (zygote_run.cc)
// hands the request over and supervises it.
#include "runtime/zygote.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "egress/gateway_process.h"
#include "namespaces/clone.h"
#include "namespaces/idmap.h"
#include "namespaces/process.h"
#include "rootfs/host_tree.h"
#include "runtime/cgroup_host.h"
#include "runtime/child_plan.h"
#include "runtime/control_channel.h"
#include "runtime/defaults.h"
#include "runtime/identity.h"
#include "runtime/sandbox_groups.h"
#include "runtime/warm_template.h"
#include "runtime/zygote_state.h"

namespace cubicle::runtime {
namespace {

using namespaces::ControlMessage;
using namespaces::ControlType;

absl::Duration ThreadCpuTime() {
  struct timespec ts;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return absl::DurationFromTimespec(ts);
}

absl::Status ReadyTimeoutError(absl::Duration timeout) {
  return absl::DeadlineExceededError(
      absl::StrCat("the sandbox was not ready within ", absl::FormatDuration(timeout)));
}

// A socketpair of SOCK_SEQPACKET, close-on-exec, as two owned fds.
absl::Status SocketPair(const char* what, UniqueFd* ours, UniqueFd* theirs) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, absl::StrCat("socketpair(", what, ")"));
  }
  ours->reset(sv[0]);
  theirs->reset(sv[1]);
  return absl::OkStatus();
}

absl::Status CloneError(const SandboxSpec& spec, const namespaces::CloneResult& cloned) {
  // A joined pid namespace whose init is gone takes no new process (ENOMEM).
  absl::Status st = ErrnoStatus(-cloned.pid, spec.join_pidns.has_value() ? "clone into the joined pid namespace"
                                             : cloned.used_clone3               ? "clone3"
                                                                                : "clone");
  if (-cloned.pid == EPERM || -cloned.pid == ENOSPC || -cloned.pid == EUSERS) {
    st = absl::Status(st.code(), absl::StrCat(st.message(),
                                              " (are user namespaces disabled? see "
                                              "user.max_user_namespaces and "
                                              "kernel.unprivileged_userns_clone)"));
  }
  return st;
}

// Zygote::Create's steps, in order. Every resource made on the way is an
// RAII member: an early return leaves nothing behind. `state_` is declared
// last, so it goes first: init is killed and reaped before the groups
// `groups_` still holds are removed.
class SandboxBuilder {
 public:
  SandboxBuilder(const SandboxSpec& spec, const ZygoteOptions& options)
      : options_(options), clock_(&created_), state_(std::make_unique<ZygoteState>()) {
    state_->start = absl::Now();
    state_->spec = spec;
    state_->cold = options.cold;
  }

  absl::Status Validate();
  absl::Status Plan();
  absl::Status OpenHostTrees();
  absl::Status MakeGroups();
  absl::Status OpenChannels();
  absl::Status JoinNamespaces();
  absl::Status Clone();
  absl::Status PlaceAndRelease();
  absl::Status AdoptInterpreter();
  absl::Status WaitUntilReady();
  std::unique_ptr<ZygoteState> Finish(ExecResult* created, absl::Duration* build_cpu);

 private:
  absl::Status AttachRest();
  absl::Status OpenNamespaces();
  absl::Status OpenFallbackTrees();
  void MakeExecStampPage();
  void MakeDirectChannel();
  absl::Status MakeLateReportPage();

  const SandboxSpec& spec() const { return state_->spec; }
  pid_t pid() const { return state_->init->pid(); }

  const ZygoteOptions& options_;
  const absl::Duration thread_cpu_at_start_ = ThreadCpuTime();
  ExecResult created_;
  StepClock clock_;
  HostFeatures features_;
  // A zygote built ahead of its request (a pool's): what the request path
  // will touch is prepared while it waits (stat files, prefaulted pages).
  bool ahead_of_request_ = false;
  ChildPlan plan_;
  SandboxGroups groups_;
  std::vector<UniqueFd> trees_;  // host-side mount trees, until the child has its copies
  std::shared_ptr<egress::GatewayProcess> gateway_;
  UniqueFd egress_host_, egress_child_, child_control_, direct_child_;
  // kAdopted: the interpreter's end of its socket with init, and a copy of
  // the control socket's child end, for the template (its reports).
  UniqueFd interpreter_socket_, warm_child_, control_for_parent_;
  std::unique_ptr<ZygoteState> state_;
};

// 0. Everything is checked before the first syscall that makes something.
//    argv/env/cwd belong to the request: the rest is checked with a
//    stand-in.
absl::Status SandboxBuilder::Validate() {
  if (!spec().argv.empty()) {
    CUBICLE_RETURN_IF_ERROR(ValidateSpec(spec()));
  } else {
    SandboxSpec check = spec();
    check.argv = {"/bin/true"};
    CUBICLE_RETURN_IF_ERROR(ValidateSpec(check));
  }
  if (options_.interpreter.has_value()) {
    CUBICLE_RETURN_IF_ERROR(ValidateWarmInterpreter(*options_.interpreter));
    if (spec().as_pid_1) return absl::InvalidArgumentError("a warm interpreter cannot be the sandbox's PID 1");
  }
  if (options_.warm_template != nullptr || options_.template_owner >= 0) {
    CUBICLE_RETURN_IF_ERROR(ValidateForTemplate(spec()));
    if (!options_.interpreter.has_value()) {
      return absl::InvalidArgumentError("a sandbox of a warm template needs the template's interpreter");
    }
  }
  CUBICLE_ASSIGN_OR_RETURN(state_->identity, ResolveIdentity(spec()));
  clock_.Mark("validate");
  return absl::OkStatus();
}

// 1. What the child will read: the route, the mount plan, ids, hygiene.
absl::Status SandboxBuilder::Plan() {
  features_ = Features();
  if (options_.features.has_value()) {
    features_.clone3 &= options_.features->clone3;
    features_.new_mount_api &= options_.features->new_mount_api;
    features_.openat2 &= options_.features->openat2;
  }
  rootfs::MountPlan& mounts = state_->spec.mounts;
  if (options_.accept_workspace &&
      std::none_of(mounts.begin(), mounts.end(), [](const rootfs::MountOp& op) { return op.dest == kWorkspaceDir; })) {
    rootfs::MountOp dir;
    dir.kind = rootfs::MountKind::kDir;
    dir.dest = kWorkspaceDir;
    mounts.push_back(dir);
  }
  ahead_of_request_ = options_.wait_until_ready && !options_.cold;
  state_->interpreter = options_.interpreter;
  return BuildChildPlan(spec(), options_, features_, ahead_of_request_, &plan_);
}

// The host-side mount trees: an idmapped tree for each bind that shows its
// source's owner as the sandbox user (read-only or not), and, as root, a
// clone of each bind source the sandbox's ids may not look up. A bind
// whose owner cannot be shown so fails here, naming it, before anything
// exists: the operator asked for that ownership, and a plain bind in its
// place would show other permissions than the ones asked for.
absl::Status SandboxBuilder::OpenHostTrees() {
  for (rootfs::PreparedOp& op : plan_.rootfs.ops) {
    if (op.kind != rootfs::MountKind::kBind || !op.op->idmap_owner) continue;
    struct stat st;
    if (op.op->optional && ::stat(op.op->source.c_str(), &st) != 0 && errno == ENOENT) {
      op.source_missing = true;
      continue;
    }
    absl::StatusOr<UniqueFd> tree =
        OpenIdmappedTree(op.op->source, state_->identity, op.op->readonly, features_.new_mount_api);
    if (!tree.ok()) {
      return absl::Status(tree.status().code(), absl::StrCat("bind ", op.op->source, " at ", op.dest,
                                                             " owned by the sandbox user: ", tree.status().message()));
    }
    if (!*tree) continue;  // its owner is the sandbox's host user already: a plain bind
    if (::fstat(tree->get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", op.op->source, ")"));
    op.tree_is_dir = S_ISDIR(st.st_mode);
    op.tree_fd = tree->get();
    trees_.push_back(*std::move(tree));
  }
  return OpenFallbackTrees();
}

// As root, a bind source the sandbox's ids may not look up (a root-only
// directory on its path, a mktemp -d) is cloned here, with the launcher's
// privileges: what root can name, root can bind. The sandbox attaches the
// clone only if its own lookup is refused (rootfs/builder.h says why its
// own is preferred). Rootless, the sandbox's ids are the caller's: it
// reaches what the caller does. Every host id mapped (bwrap as root
// without --unshare-user): the sandbox's capabilities cover every host
// file already.
absl::Status SandboxBuilder::OpenFallbackTrees() {
  if (!features_.new_mount_api || ::geteuid() != 0 || spec().join_userns.has_value() || spec().map_all_host_ids) {
    return absl::OkStatus();
  }
  for (rootfs::PreparedOp& op : plan_.rootfs.ops) {
    if (op.kind != rootfs::MountKind::kBind || op.tree_fd >= 0) continue;
    if (rootfs::MayLookUpAs(op.op->source, state_->identity.host_uid, state_->identity.host_gid)) continue;
    absl::StatusOr<rootfs::HostTree> tree = rootfs::CloneBindSource(op.op->source, op.op->readonly, op.op->devices);
    if (!tree.ok()) {
      // A missing --bind-try source is skipped; any other problem is not
      // fatal here: the sandbox's own attempt names it, as without a clone.
      op.source_missing = op.op->optional && absl::IsNotFound(tree.status());
      continue;
    }
    op.fallback_tree_fd = tree->fd.get();
    op.tree_is_dir = tree->is_dir;
    trees_.push_back(std::move(tree->fd));
  }
  return absl::OkStatus();
}

// The cgroups exist before the child does (runtime/sandbox_groups.h).
absl::Status SandboxBuilder::MakeGroups() {
  CUBICLE_RETURN_IF_ERROR(groups_.Make(spec(), ahead_of_request_, &plan_, &created_));
  clock_.Mark("cgroup");
  return absl::OkStatus();
}

// The exec stamp page: an armed payload says "executing" by writing its
// stamp into a memfd page init maps (init adds its hand-off's), instead of
// a message that would wake this process while the payload execs. This
// process reads it with pread when the execution ends, however it ends.
// Only init maps it: zygotes forked later get no mapping of it. Without a
// memfd (or the map), "executing" is a message.
void SandboxBuilder::MakeExecStampPage() {
  UniqueFd page(::memfd_create("cubicle-exec-stamp", MFD_CLOEXEC));
  if (page && ::ftruncate(page.get(), kStampBytes) == 0) {
    plan_.fds.exec_stamp = page.get();
    state_->exec_stamp = std::move(page);
  }
}

// The payload's LateReport, for a sandbox with supplied seccomp programs:
// shared memory the sandbox inherits at clone.
absl::Status SandboxBuilder::MakeLateReportPage() {
  void* page = ::mmap(nullptr, sizeof(LateReport), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return ErrnoStatus(errno, "mmap(late report)");
  state_->late_report.reset(static_cast<LateReport*>(page));
  plan_.hygiene.late_report = state_->late_report.get();
  return absl::OkStatus();
}

// The direct channel: a request without a workspace goes from here to the
// armed payload itself, one wake-up and init's forwarding fewer. Without
// the pair, every request goes through init.
void SandboxBuilder::MakeDirectChannel() {
  UniqueFd ours, theirs;
  if (!SocketPair("direct", &ours, &theirs).ok()) return;
  state_->direct = std::move(ours);
  direct_child_ = std::move(theirs);
  plan_.fds.direct = direct_child_.get();
}

// The sockets the child finds open: egress (the gateway of this policy,
// made on first use, and the sandbox's private channel to it), control,
// an armed payload's stamp page and direct channel, and the page of a late
// report.
absl::Status SandboxBuilder::OpenChannels() {
  if (spec().egress.mode == egress::NetMode::kAllowlist && options_.egress_channel >= 0) {
    plan_.fds.egress = options_.egress_channel;  // the caller's gateway: it attaches the other end
    plan_.fds.bridge_port = spec().egress.bridge_port;
  } else if (spec().egress.mode == egress::NetMode::kAllowlist) {
    CUBICLE_ASSIGN_OR_RETURN(gateway_, egress::SharedGateways().Acquire(spec().egress));
    CUBICLE_RETURN_IF_ERROR(SocketPair("egress", &egress_host_, &egress_child_));
    plan_.fds.egress = egress_child_.get();
    plan_.fds.bridge_port = spec().egress.bridge_port;
  }
  CUBICLE_RETURN_IF_ERROR(SocketPair("control", &state_->control, &child_control_));
  plan_.fds.control = child_control_.get();
  plan_.fds.launcher_control = state_->control.get();
  if (plan_.route == PayloadRoute::kArmed) {
    MakeExecStampPage();
    MakeDirectChannel();
  }
  if (!spec().seccomp_programs.empty()) CUBICLE_RETURN_IF_ERROR(MakeLateReportPage());
  if (plan_.route == PayloadRoute::kTemplate) plan_.fds.template_owner = options_.template_owner;
  if (plan_.route == PayloadRoute::kAdopted) {
    CUBICLE_RETURN_IF_ERROR(SocketPair("warm interpreter", &interpreter_socket_, &warm_child_));
    plan_.fds.warm = warm_child_.get();
    control_for_parent_.reset(::fcntl(child_control_.get(), F_DUPFD_CLOEXEC, 3));
    if (!control_for_parent_) return ErrnoStatus(errno, "dup(control)");
  }
  clock_.Mark("prepare");
  return absl::OkStatus();
}

// Namespaces to join: the user namespace first (it gives the privilege
// over the pid namespace it owns), both just before clone. There is no way
// back to the host's user namespace; ValidateSpec made sure the launcher
// needs nothing of it from here on.
absl::Status SandboxBuilder::JoinNamespaces() {
  const std::optional<int>& userns = spec().join_userns;
  if (userns.has_value() && ::setns(*userns, CLONE_NEWUSER) != 0) {
    const int err = errno;
    absl::Status st = ErrnoStatus(err, absl::StrCat("join user namespace(fd ", *userns, ")"));
    if (err == EINVAL) {
      st = absl::Status(st.code(), absl::StrCat(st.message(), " (it might not be a descendant of the current "
                                                              "user namespace, or the launcher has threads)"));
    }
    return st;
  }
  const std::optional<int>& pidns = spec().join_pidns;
  if (pidns.has_value() && ::setns(*pidns, CLONE_NEWPID) != 0) {
    return ErrnoStatus(errno, absl::StrCat("join pid namespace(fd ", *pidns, ")"));
  }
  if (userns.has_value() || pidns.has_value()) clock_.Mark("join");
  return absl::OkStatus();
}

// 2. clone into the new namespaces (and, on v2, straight into the cgroup:
//    CLONE_INTO_CGROUP needs no migration). The child runs ChildMain.
absl::Status SandboxBuilder::Clone() {
  const int cgroup_fd = features_.clone3 ? groups_.clone_into_fd() : -1;
  // A new pid namespace under a joined one is made by a process inside it;
  // a warm template's zygotes, by one inside the template's user and pid
  // namespaces (this process keeps its own).
  const WarmTemplate* from = options_.warm_template.get();
  auto clone_sandbox = [&](uint64_t flags, int cgroup, bool try_clone3) {
    if (from != nullptr) {
      return namespaces::CloneViaIntermediate(flags, cgroup, try_clone3, from->userns_fd(), from->pidns_fd());
    }
    if (spec().join_pidns.has_value() && spec().namespaces.pid) {
      return namespaces::CloneViaIntermediate(flags, cgroup, try_clone3);
    }
    return namespaces::CloneInto(flags, cgroup, try_clone3);
  };
  const uint64_t flags = spec().namespaces.CloneFlags() & (from != nullptr ? ~uint64_t{CLONE_NEWUSER} : ~uint64_t{0});
  namespaces::ThreadGroupsCleared thread_groups;
  if (state_->identity.clear_groups) CUBICLE_RETURN_IF_ERROR(thread_groups.Clear());
  namespaces::CloneResult cloned = clone_sandbox(flags, cgroup_fd, features_.clone3);
  const bool placed_on_v2 = cgroup_fd >= 0 && cloned.pid >= 0;
  if (cloned.pid < 0 && cgroup_fd >= 0) {
    // A v2 group the kernel will not clone into (a threaded or domain-
    // invalid parent): place the child by writing cgroup.procs instead.
    created_.warnings.push_back(absl::StrCat("clone3(CLONE_INTO_CGROUP): ", ErrnoName(-cloned.pid),
                                             "; the sandbox is attached after clone instead"));
    cloned = clone_sandbox(flags, -1, features_.clone3);
  }
  if (cloned.pid == 0) ChildMain(plan_);
  if (absl::Status restored = thread_groups.Restore(); !restored.ok()) {
    // Only this thread is affected, and it has fewer privileges, not more.
    created_.warnings.push_back(
        absl::StrCat("the launching thread keeps no supplementary groups: ", restored.message()));
  }
  if (cloned.pid < 0) return CloneError(spec(), cloned);
  state_->init.emplace(cloned.pid, cloned.pidfd);
  child_control_.reset();
  egress_child_.reset();
  if (gateway_ != nullptr) {
    CUBICLE_ASSIGN_OR_RETURN(state_->egress,
                             gateway_->Attach(egress::SandboxName(cloned.pid), std::move(egress_host_)));
  }
  trees_.clear();  // the child holds its own copies
  groups_.Cloned(placed_on_v2);
  direct_child_.reset();
  warm_child_.reset();
  state_->keep_alive = options_.warm_template;
  if (plan_.route == PayloadRoute::kTemplate || plan_.route == PayloadRoute::kAdopted) {
    CUBICLE_RETURN_IF_ERROR(OpenNamespaces());
  }
  clock_.Mark("clone");
  return absl::OkStatus();
}

// Init's namespaces, while it waits for "go" and is still dumpable.
absl::Status SandboxBuilder::OpenNamespaces() {
  for (const char* name : {"user", "mnt", "uts", "ipc", "net", "cgroup", "pid"}) {
    const std::string path = absl::StrCat("/proc/", pid(), "/ns/", name);
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
    state_->namespaces[name] = std::move(fd);
  }
  return absl::OkStatus();
}

absl::Status SandboxBuilder::AttachRest() {
  CUBICLE_ASSIGN_OR_RETURN(bool attached, groups_.AttachRest(pid()));
  if (attached) clock_.Mark("cgroup_attach");
  return absl::OkStatus();
}

// 3. Groups, id maps, "go". Every process of the sandbox starts in its
//    groups: init makes none before its request but a warm interpreter's
//    or an armed payload's, which it starts once the sandbox is built.
//    With one, what the launcher attaches is attached before "go", while
//    init is still blocked before its first step; without, while init
//    builds its root (a v1 attach can wait for an RCU grace period), and
//    Create returns only once it is attached, before any request.
absl::Status SandboxBuilder::PlaceAndRelease() {
  const bool attach_before_release = plan_.route == PayloadRoute::kWarm || plan_.route == PayloadRoute::kArmed;
  if (attach_before_release) CUBICLE_RETURN_IF_ERROR(AttachRest());
  CUBICLE_RETURN_IF_ERROR(groups_.AttachDevices(pid()));
  // A warm template's zygote lives in the template's user namespace,
  // whose maps are written already.
  if (!spec().join_userns.has_value() && !spec().host_user_namespace && plan_.route != PayloadRoute::kAdopted) {
    CUBICLE_RETURN_IF_ERROR(namespaces::WriteIdMaps(pid(), state_->identity.mapping));
  }
  const char go = 'g';
  if (::send(state_->control.get(), &go, 1, MSG_NOSIGNAL) != 1) return ErrnoStatus(errno, "send(control, go)");
  clock_.Mark("id_maps");
  if (!attach_before_release) {
    if (absl::Status attached = AttachRest(); !attached.ok()) {
      // A child that failed its setup meanwhile is gone: its report of why
      // is the error to give.
      CUBICLE_RETURN_IF_ERROR(PendingSetupError(state_->control.get()));
      return attached;
    }
  }
  if (groups_.deferred()) {
    // The v1 groups, made while the child builds its root; it waits for
    // their tasks files before it makes any process (JoinGroupsSentLater).
    CUBICLE_RETURN_IF_ERROR(groups_.CompleteDeferred(pid(), state_->control.get(), &created_));
    clock_.Mark("cgroup_v1");
  }
  // The cold path sends its request at once: the sandbox joins its groups
  // before it reads it, and its 'A' is skipped in Run().
  if (groups_.child_joins() && !options_.cold) {
    CUBICLE_RETURN_IF_ERROR(WaitUntilJoined(state_->control.get(), options_.ready_timeout));
    clock_.Mark("cgroup_join");
  }
  return absl::OkStatus();
}

// 4. A warm template's zygote: once its init says "adopt" (built, waiting
//    for its interpreter), the template forks one into it.
absl::Status SandboxBuilder::AdoptInterpreter() {
  if (plan_.route != PayloadRoute::kAdopted) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  const std::string late = std::string(ReadyTimeoutError(options_.ready_timeout).message());
  for (;;) {
    ControlMessage msg;
    CUBICLE_ASSIGN_OR_RETURN(ssize_t got, ReceiveBy(state_->control.get(), deadline, &msg, "adopt", late));
    if (got != static_cast<ssize_t>(sizeof(msg))) return absl::InternalError("sandbox init ended before it was built");
    if (msg.type == ControlType::kSetupError) return ChildErrorStatus(msg.error);
    if (msg.type == ControlType::kAdopt) {
      state_->last = msg;
      break;
    }
  }
  CUBICLE_ASSIGN_OR_RETURN(std::vector<UniqueFd> files, groups_.JoinFiles());
  std::vector<int> raw;
  for (const UniqueFd& f : files) raw.push_back(f.get());
  std::vector<int> namespaces;
  for (const char* name : WarmTemplate::kJoined) namespaces.push_back(state_->namespaces.at(name).get());
  CUBICLE_RETURN_IF_ERROR(
      options_.warm_template->Spawn(namespaces, interpreter_socket_.get(), control_for_parent_.get(), raw));
  interpreter_socket_.reset();
  control_for_parent_.reset();
  clock_.Mark("adopt");
  return absl::OkStatus();
}

// 5. A pool waits until the sandbox says it is built (or failed).
absl::Status SandboxBuilder::WaitUntilReady() {
  if (!options_.wait_until_ready) return absl::OkStatus();
  const absl::Time deadline = absl::Now() + options_.ready_timeout;
  const std::string late = std::string(ReadyTimeoutError(options_.ready_timeout).message());
  while (!state_->ready) {
    ControlMessage msg;
    CUBICLE_ASSIGN_OR_RETURN(ssize_t got, ReceiveBy(state_->control.get(), deadline, &msg, "ready", late));
    if (got != static_cast<ssize_t>(sizeof(msg))) return absl::InternalError("sandbox init ended before it was ready");
    if (msg.type == ControlType::kSetupError) return ChildErrorStatus(msg.error);
    if (msg.type == ControlType::kReady) {
      state_->ready = true;
      state_->last = msg;
    }
  }
  clock_.Mark("ready");
  return absl::OkStatus();
}

std::unique_ptr<ZygoteState> SandboxBuilder::Finish(ExecResult* created, absl::Duration* build_cpu) {
  state_->cgroup = groups_.TakeCgroup();
  state_->devices = groups_.TakeDevices();
  *build_cpu = ThreadCpuTime() - thread_cpu_at_start_;
  if (state_->cgroup != nullptr) {
    absl::StatusOr<std::optional<uint64_t>> sandbox = state_->cgroup->CpuUsageNs();
    if (sandbox.ok() && sandbox->has_value()) *build_cpu += absl::Nanoseconds(**sandbox);
  }
  *created = std::move(created_);
  return std::move(state_);
}

}  // namespace

Zygote::Zygote(std::unique_ptr<ZygoteState> state, ExecResult created)
    : state_(std::move(state)), created_(std::move(created)) {}
Zygote::~Zygote() = default;

absl::StatusOr<std::unique_ptr<Zygote>> Zygote::Create(const SandboxSpec& spec, const ZygoteOptions& options) {
  SandboxBuilder sandbox(spec, options);
  CUBICLE_RETURN_IF_ERROR(sandbox.Validate());
  CUBICLE_RETURN_IF_ERROR(sandbox.Plan());
  CUBICLE_RETURN_IF_ERROR(sandbox.OpenHostTrees());
  CUBICLE_RETURN_IF_ERROR(sandbox.MakeGroups());
  CUBICLE_RETURN_IF_ERROR(sandbox.OpenChannels());
  CUBICLE_RETURN_IF_ERROR(sandbox.JoinNamespaces());
  CUBICLE_RETURN_IF_ERROR(sandbox.Clone());
  CUBICLE_RETURN_IF_ERROR(sandbox.PlaceAndRelease());
  CUBICLE_RETURN_IF_ERROR(sandbox.AdoptInterpreter());
  CUBICLE_RETURN_IF_ERROR(sandbox.WaitUntilReady());
  ExecResult created;
  absl::Duration build_cpu;
  std::unique_ptr<ZygoteState> state = sandbox.Finish(&created, &build_cpu);
  auto zygote = std::unique_ptr<Zygote>(new Zygote(std::move(state), std::move(created)));
  zygote->build_cpu_ = build_cpu;
  return zygote;
}

pid_t Zygote::init_pid() const { return state_->init.has_value() ? state_->init->pid() : -1; }

absl::StatusOr<SandboxRemains> Zygote::TakeRemains() {
  ZygoteState& z = *state_;
  if (!z.used || !z.init.has_value() || z.init->reaped()) {
    return absl::FailedPreconditionError("no execution has left this sandbox standing");
  }
  // Its gateway's connections are closed by the Zygote's own teardown.
  if (z.spec.egress.mode == egress::NetMode::kAllowlist) {
    return absl::FailedPreconditionError("a sandbox with an egress allowlist is torn down by its Zygote");
  }
  const pid_t pid = z.init->pid();
  UniqueFd pidfd = z.init->Release();
  z.init.reset();
  return SandboxRemains(pid, std::move(pidfd), std::move(z.cgroup), std::move(z.devices));
}

bool Zygote::CanApplyLimits(const cgroups::Limits& limits) const {
  if (limits.empty()) return true;
  const CgroupHost& host = SharedCgroupHost();
  return state_->cgroup != nullptr && host.layout.ok() && state_->cgroup->CanRewrite(*host.layout, limits);
}

absl::Status ValidateRequest(const ExecRequest& request) {
  CUBICLE_RETURN_IF_ERROR(ValidateExecution(request.argv, request.env, request.cwd, request.timeout));
  if (!request.workspace.has_value()) return absl::OkStatus();
  // Cloning a host mount needs CAP_SYS_ADMIN over the host's mount
  // namespace, and the kernel refuses binds from another namespace into a
  // built sandbox: rootless, a workspace must be in the spec (cold path).
  if (::geteuid() != 0) {
    return absl::UnimplementedError(
        "a rootless zygote cannot attach a workspace at hand-off; give the workspace in the "
        "sandbox spec instead");
  }
  struct stat st;
  if (::stat(request.workspace->c_str(), &st) != 0) {
    return ErrnoStatus(errno, absl::StrCat("workspace ", *request.workspace));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("workspace ", *request.workspace, ": not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace cubicle::runtime
