// A zygote made in one process and run in another (runtime/fork_server.h):
// the maker's HandOver and the taker's TakeOver.
#include <fcntl.h>
#include <poll.h>

#include <cerrno>
#include <memory>
#include <utility>

#include "base/status.h"
#include "runtime/cgroup_host.h"
#include "runtime/identity.h"
#include "runtime/zygote.h"
#include "runtime/zygote_state.h"

namespace cubicle::runtime {

absl::StatusOr<ZygoteHandover> Zygote::HandOver() {
  ZygoteState& z = *state_;
  if (!z.ready || z.used || !z.control) {
    return absl::FailedPreconditionError("only a zygote built ahead of its request, unused, can be handed over");
  }
  if (!z.init.has_value() || z.init->pidfd() < 0) {
    return absl::FailedPreconditionError("a zygote without a pidfd for its init cannot be handed over");
  }
  ZygoteHandover out;
  out.init_pid = z.init->pid();
  out.init_pidfd.reset(::fcntl(z.init->pidfd(), F_DUPFD_CLOEXEC, 3));
  if (!out.init_pidfd) return ErrnoStatus(errno, "dup(init pidfd)");
  out.control = std::move(z.control);
  out.direct = std::move(z.direct);
  out.exec_stamp = std::move(z.exec_stamp);
  if (z.cgroup != nullptr) {
    out.cgroup_name = z.cgroup->name();
    z.cgroup->Disown();
    z.cgroup.reset();
  }
  out.ready = z.last;
  out.created = created_;
  out.build_cpu = build_cpu_;
  z.used = true;
  return out;
}

absl::StatusOr<std::unique_ptr<Zygote>> Zygote::TakeOver(ZygoteHandover handover, const SandboxSpec& spec,
                                                         const ZygoteOptions& options) {
  if (handover.init_pid <= 0 || !handover.init_pidfd || !handover.control) {
    return absl::InvalidArgumentError("a handed-over zygote needs its init's pid and pidfd and its control socket");
  }
  auto state = std::make_unique<ZygoteState>();
  // Until init is owned, a failure here must still end it.
  state->init.emplace(handover.init_pid, handover.init_pidfd.release(), /*child=*/false);
  state->spec = spec;
  state->interpreter = options.interpreter;
  state->start = absl::Now();
  CUBICLE_ASSIGN_OR_RETURN(state->identity, ResolveIdentity(spec));
  if (!handover.cgroup_name.empty()) {
    const CgroupHost& host = SharedCgroupHost();
    if (!host.layout.ok()) return host.layout.status();
    CUBICLE_ASSIGN_OR_RETURN(state->cgroup, cgroups::SandboxCgroup::Adopt(*host.layout, handover.cgroup_name));
    // The stats are read on the reply path: their files are opened now.
    state->cgroup->KeepStatFilesOpen();
    (void)state->cgroup->ReadStats();
  }
  state->control = std::move(handover.control);
  state->egress = std::move(handover.egress);
  state->direct = std::move(handover.direct);
  state->exec_stamp = std::move(handover.exec_stamp);
  state->last = handover.ready;
  state->ready = true;
  auto zygote = std::unique_ptr<Zygote>(new Zygote(std::move(state), std::move(handover.created)));
  zygote->build_cpu_ = handover.build_cpu;
  return zygote;
}

bool Zygote::alive() const {
  const ZygoteState& z = *state_;
  if (!z.init.has_value() || z.init->reaped()) return false;
  if (z.init->pidfd() < 0) return true;
  struct pollfd p = {z.init->pidfd(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

int Zygote::namespace_fd(const std::string& name) const {
  auto it = state_->namespaces.find(name);
  return it != state_->namespaces.end() ? it->second.get() : -1;
}

int Zygote::init_pidfd() const {
  const ZygoteState& z = *state_;
  return z.init.has_value() && !z.init->reaped() ? z.init->pidfd() : -1;
}

}  // namespace cubicle::runtime
