// A zygote (DESIGN §5): a sandbox made ahead of time — cgroup, namespaces,
// root filesystem, init — blocked on its control socket until one execution
// request hands it argv, env, cwd and stdio (and optionally a workspace).
// Single use: one zygote, one execution, then it and its cgroup are gone.
//
// The cold path is the same code: Launch() is Create() + Run() back to back,
// so a pooled and a cold execution cannot drift apart.
#pragma once

#include <sys/types.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "cgroups/cgroup.h"
#include "egress/gateway.h"
#include "namespaces/control.h"
#include "runtime/host_features.h"
#include "runtime/launcher.h"
#include "runtime/result.h"
#include "runtime/spec.h"
#include "runtime/warm.h"

namespace cubicle::runtime {

struct ZygoteState;   // runtime/zygote_state.h
class WarmTemplate;   // runtime/warm_template.h

struct ZygoteOptions {
  // Allow the read-only host /proc fallback when a new procfs is refused.
  bool allow_proc_fallback = true;
  // Replaces what the host offers (to exercise old-kernel fallbacks).
  std::optional<HostFeatures> features;
  // Create() returns only once the sandbox reports it is built (a pool wants
  // that); the cold path skips the wait and sends its request at once.
  bool wait_until_ready = true;
  // The cold path (Launch, a pool's miss): Run() is called at once, and its
  // times, steps and deadline count from Create(). Create() then does not
  // wait for the sandbox to join its v1 groups: it does so before it reads
  // the request.
  bool cold = false;
  // How long Create() waits for "ready".
  absl::Duration ready_timeout = absl::Seconds(30);
  // Make /workspace a mountpoint, so a request may attach a workspace.
  bool accept_workspace = false;
  // Start this interpreter ahead of the request (runtime/warm.h): with the
  // spec's env, cwd "/", stdio on /dev/null, under the spec's seccomp policy.
  std::optional<WarmInterpreter> interpreter;
  // The interpreter comes from this template instead: a fork of its
  // interpreter joins the sandbox's namespaces and cgroup, then does the
  // payload's hygiene (runtime/warm_template.h). The sandbox lives in the
  // template's user and pid namespaces, and keeps the template alive.
  std::shared_ptr<WarmTemplate> warm_template;
  // Set only by WarmTemplate::Start: this sandbox is the template's own,
  // and `interpreter` its template interpreter, which keeps its
  // capabilities in the sandbox's user namespace and takes its spawn
  // requests on this fd (the child's end of its owner's socket).
  int template_owner = -1;
  // For an egress allowlist: the sandbox's end of its egress channel, whose
  // other end the caller attaches to its own gateway once init's pid is
  // known (a fork server's zygote: the daemon holds the gateways, so that
  // it can tag their connections and read their counts). -1: Create
  // acquires this process's gateway of the policy and makes the pair.
  int egress_channel = -1;
};

// One execution in a zygote.
struct ExecRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "NAME=value"
  std::string cwd = "/";
  // A host directory attached read-write at /workspace at hand-off (an
  // idmapped detached mount, moved in by init): never a directory fd from
  // outside the sandbox's root.
  std::optional<std::string> workspace;
  absl::Duration timeout = absl::InfiniteDuration();
  // This execution's cgroup limits, written over the sandbox's at hand-off.
  // The caller has checked they are no looser than the spec's
  // (rpc::TightenLimits); CanApplyLimits() says whether this zygote's
  // groups can take them.
  std::optional<cgroups::Limits> limits;
  // This execution's breakers, watched instead of the spec's. The caller
  // has checked they are no looser (rpc: a request's "breakers").
  std::optional<BreakerSpec> breakers;
  int stdin_fd = 0;
  int stdout_fd = 1;
  int stderr_fd = 2;
  int signal_fd = -1;  // signals read from it are forwarded to the payload
  // When readable (an eventfd, a pipe), the sandbox is killed at once and
  // the result says reason `killed`: a caller that has what it needed.
  int cancel_fd = -1;
  // Pipes Run() reads in its own wait, so that capturing output needs no
  // thread of its own (runtime/capture.h): when output_fds[i] (-1: none)
  // is readable or at EOF, on_output(i) reads once and returns false at
  // EOF, and Run() stops watching that fd.
  int output_fds[2] = {-1, -1};
  std::function<bool(int index)> on_output;
  // Return the moment init reports the payload's exit, leaving the
  // teardown (init's exit, the namespaces, the cgroup) to ~Zygote — which a
  // pool runs off the request path. Init then stays until ~Zygote kills it
  // (namespaces::AfterExit::linger; the rest of its pid namespace is killed
  // at the report). Off: Run() returns with it all done.
  bool return_at_exit = false;
  // Read the groups' counters into ExecResult::cgroup. Off, they are read
  // only when the payload dies of SIGKILL (the OOM verdict needs them): a
  // caller that reports none of them saves a cold run six file reads.
  bool read_stats = true;
  // Watched while the execution runs (-1: not): the first time it is
  // readable or hung up, on_watch() is called, on Run()'s thread, and the
  // fd is watched no more. The daemon's stdio reader, running a request
  // itself, learns so that another line has come and hands the reading on
  // (rpc/transports.h, StdioTransport).
  int watch_fd = -1;
  std::function<void()> on_watch;
  // The daemon's id of the request this execution serves: the egress
  // gateway's decision lines of the sandbox's connections carry it from the
  // hand-off on (docs/egress.md). Empty: none.
  std::string request_id;
};

// A zygote made by another process (the fork server, runtime/fork_server.h)
// and handed to this one: what Run() needs, as fds and values. The maker
// keeps the init process (its child, which it reaps) and the egress and
// device groups; the taker kills init through its pidfd and removes the
// sandbox's groups, which it takes over by name.
struct ZygoteHandover {
  pid_t init_pid = -1;
  UniqueFd init_pidfd;
  UniqueFd control;
  UniqueFd direct;      // an armed payload's direct channel, or none
  UniqueFd exec_stamp;  // an armed payload's stamp page, or none
  std::string cgroup_name;  // empty: no cgroup
  namespaces::ControlMessage ready{};  // init's "ready": step stamps and flags
  ExecResult created;                  // Create()'s steps and warnings
  absl::Duration build_cpu;            // Zygote::build_cpu()
  // Not sent: the taker's own hold on its gateway, for a sandbox made with
  // ZygoteOptions::egress_channel (TakeOver keeps it with the sandbox).
  egress::Attachment egress;
};

class Zygote {
 public:
  // Validates `spec` (InvalidArgument on bad input; nothing is created) and
  // builds the sandbox. `spec.argv`, `env` and `cwd` are not used: they come
  // with the request. Other failures are returned as a Status naming the
  // step; nothing is left behind.
  static absl::StatusOr<std::unique_ptr<Zygote>> Create(const SandboxSpec& spec,
                                                        const ZygoteOptions& options = {});

  Zygote(const Zygote&) = delete;
  Zygote& operator=(const Zygote&) = delete;
  // Kills and reaps the sandbox and removes its cgroup if Run() has not.
  ~Zygote();

  // Hands the request over and waits for the execution to end. Once only:
  // a second call is FailedPrecondition. Bad input (empty argv, a relative
  // cwd, a workspace that is not a directory) is InvalidArgument and leaves
  // the zygote unused; anything failing after the hand-off is an ExecResult
  // with reason setup_failed. When it returns, the sandbox is gone.
  absl::StatusOr<ExecResult> Run(const ExecRequest& request);

  // After a Run() that returned at the exit report (return_at_exit), what
  // is left of the sandbox — init, lingering, and the groups — to be torn
  // down by the caller (runtime/teardown.h). FailedPrecondition when Run()
  // left nothing standing, or for a sandbox with an egress allowlist, whose
  // teardown stays with the Zygote.
  absl::StatusOr<SandboxRemains> TakeRemains();

  pid_t init_pid() const;
  // Whether a request's `limits` can be written over this zygote's cgroup
  // (it has a group in every hierarchy they need).
  bool CanApplyLimits(const cgroups::Limits& limits) const;
  // The steps and warnings of Create().
  const ExecResult& creation() const { return created_; }

  // Maker's side: moves out what a taker needs (fds duplicated where this
  // Zygote keeps its own: init's pidfd) and lets go of the groups, which
  // the taker removes. This Zygote then only waits for init's end: its
  // destruction kills and reaps init and releases the egress attachment
  // and the device group. FailedPrecondition for a zygote not built ahead
  // of its request (ready), already used or handed over, or without a
  // pidfd for its init.
  absl::StatusOr<ZygoteHandover> HandOver();
  // Taker's side: a Zygote of `spec` made elsewhere with `options`, ready
  // for Run(). Its groups are taken over by name; its init is not this
  // process's child (destruction kills it and waits for its pidfd).
  static absl::StatusOr<std::unique_ptr<Zygote>> TakeOver(ZygoteHandover handover, const SandboxSpec& spec,
                                                         const ZygoteOptions& options);
  // The CPU time its making took: the making thread's (the launcher side
  // of Create) and the sandbox's own until "ready", where its groups count
  // it (zero without them).
  absl::Duration build_cpu() const { return build_cpu_; }
  // Whether init is still alive (a pidfd poll; true without a pidfd).
  bool alive() const;
  // Init's pidfd, or -1: readable once init has exited.
  int init_pidfd() const;
  // One of init's namespaces ("user", "mnt", "uts", "ipc", "net",
  // "cgroup", "pid") for a warm template's sandbox or its zygote's, else
  // -1 (runtime/warm_template.h).
  int namespace_fd(const std::string& name) const;

 private:
  Zygote(std::unique_ptr<ZygoteState> state, ExecResult created);
  std::unique_ptr<ZygoteState> state_;
  ExecResult created_;
  absl::Duration build_cpu_;
};

// Checks a request before anything is sent.
absl::Status ValidateRequest(const ExecRequest& request);

}  // namespace cubicle::runtime
