// A warm template (DESIGN §5a): per warm profile, one interpreter that has
// imported the profile's preloads, from which each zygote's interpreter is
// forked, so that a warm zygote costs a fork of an interpreter, not a start.
//
// The template's own sandbox (Start) is built as a warm zygote's, in a user
// and a pid namespace of its own, but its interpreter keeps its
// capabilities in that user namespace, loads no seccomp filter, and takes
// spawn requests from its owner instead of a request. Each zygote (Make)
// is then built as any other — its root, hostname, `lo`, its cgroup, its
// own mount, pid, net, ipc, uts and cgroup namespaces, its init — but
// inside the template's user and pid namespaces and without an interpreter
// of its own. Once built, its init says "adopt"; the template joins the
// zygote's pid namespace for its children (setns, nsfs fds) and forks the
// interpreter, which joins the zygote's groups and its other namespaces
// and does the payload's hygiene (no capabilities, no_new_privs, the
// profile's seccomp filter, rlimits, a new session, fresh random state)
// and says "R" to the zygote's init with its kernel-vouched pid. The
// template stays the interpreter's parent, outside the zygote's pid
// namespace, and reports its end on the zygote's control socket (only a
// parent learns a process's status).
//
// A zygote keeps its template alive: the template's sandbox is the
// ancestor of every zygote's pid namespace, and its end ends them all.
// What siblings of one template share, and what not: docs/security.md.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "runtime/spec.h"
#include "runtime/zygote.h"

namespace cubicle::runtime {

class WarmTemplate : public std::enable_shared_from_this<WarmTemplate> {
 public:
  // Builds the template's sandbox from `spec` (a warm profile's) and starts
  // `options.interpreter` in it. InvalidArgument for a spec a template
  // cannot serve (bubblewrap's options, namespaces it does not make).
  static absl::StatusOr<std::shared_ptr<WarmTemplate>> Start(const SandboxSpec& spec,
                                                             const ZygoteOptions& options);
  WarmTemplate(const WarmTemplate&) = delete;
  WarmTemplate& operator=(const WarmTemplate&) = delete;
  // Kills the template's sandbox (every zygote still made from it dies
  // with it; each holds it alive, so none is by then).
  ~WarmTemplate();

  // A zygote of `spec` built ahead of its request, whose interpreter is a
  // fork of this template's. `spec` is the template's own, its limits may
  // differ.
  absl::StatusOr<std::unique_ptr<Zygote>> Make(const SandboxSpec& spec, ZygoteOptions options);

  bool alive() const;
  uint64_t made() const { return made_.load(); }
  absl::Time started() const { return started_; }

  // For Zygote::Create (runtime/zygote.cc): the namespaces a zygote of this
  // template is made in, and the request for its interpreter once its init
  // has said "adopt": the zygote's namespaces, in kJoined's order (nsfs
  // fds: setns through a pidfd would need ptrace access to an init that is
  // not dumpable), the other end of init's interpreter socket, a copy of
  // the control socket's child end (the interpreter's parent reports on
  // it), and the files that join the zygote's groups.
  static constexpr const char* kJoined[] = {"mnt", "uts", "ipc", "net", "cgroup", "pid"};
  int userns_fd() const { return sandbox_->namespace_fd("user"); }
  int pidns_fd() const { return sandbox_->namespace_fd("pid"); }
  absl::Status Spawn(const std::vector<int>& namespaces, int interpreter_socket, int control,
                     const std::vector<int>& group_files);

 private:
  WarmTemplate() = default;
  absl::Status SendPlan(const SandboxSpec& spec);

  std::unique_ptr<Zygote> sandbox_;  // never run: its interpreter is the template
  UniqueFd owner_;                   // to the template interpreter
  std::mutex spawn_mu_;  // one spawn request at a time on owner_
  std::atomic<uint64_t> made_{0};
  absl::Time started_;
};

// When a fork server replaces a profile's template (runtime/fork_server.h):
// what siblings share that cannot be made new in each is bounded by how
// long, and how many, share it.
inline constexpr absl::Duration kTemplateMaxAge = absl::Minutes(10);
inline constexpr uint64_t kTemplateMaxChildren = 1000;

// The creation step a fork server adds to a zygote for which it started a
// template — the profile's first, or a replacement for age or use
// (kTemplateStartStep), or one for a template found dead
// (kTemplateRestartStep) — timing that start. The pool counts them
// (runtime/pool.h PoolStats::template_starts).
inline constexpr char kTemplateStartStep[] = "template_start";
inline constexpr char kTemplateRestartStep[] = "template_restart";

// Whether `spec` can be served by a warm template (OK) or why not.
absl::Status ValidateForTemplate(const SandboxSpec& spec);

}  // namespace cubicle::runtime
