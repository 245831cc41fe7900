#include "runtime/warm_template.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "base/status.h"
#include "namespaces/control.h"
#include "seccomp/policy.h"

namespace cubicle::runtime {
namespace {

// The template interpreter's child reports with this layout
// (runtime/warm_bootstrap.py, _CONTROL): keep the two in step.
#if defined(__LP64__)
static_assert(sizeof(namespaces::ControlMessage) == 544, "warm_bootstrap.py's _CONTROL layout");
static_assert(offsetof(namespaces::ControlMessage, rusage) == 16, "warm_bootstrap.py's _CONTROL layout");
static_assert(offsetof(namespaces::ControlMessage, step_ns) == 160, "warm_bootstrap.py's _CONTROL layout");
static_assert(offsetof(namespaces::ControlMessage, error) == 216, "warm_bootstrap.py's _CONTROL layout");
#endif

// How long a spawn request may wait for the template to read it.
constexpr absl::Duration kSpawnTimeout = absl::Seconds(10);

// sendmsg of `data` with any number of fds (more than one message of
// base/fd_passing.h carries).
absl::Status SendWithManyFds(int sock, const std::string& data, const std::vector<int>& fds) {
  std::vector<char> control(CMSG_SPACE(sizeof(int) * fds.size()));
  struct iovec iov = {const_cast<char*>(data.data()), data.size()};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (!fds.empty()) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  if (n == static_cast<ssize_t>(data.size())) return absl::OkStatus();
  return ErrnoStatus(n < 0 ? errno : EMSGSIZE, "sendmsg(warm template)");
}

template <typename T>
void Append(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(value));
}

}  // namespace

absl::Status ValidateForTemplate(const SandboxSpec& spec) {
  const char* why = nullptr;
  if (!spec.namespaces.user || !spec.namespaces.pid || !spec.namespaces.mount) {
    why = "it needs new user, pid and mount namespaces";
  } else if (spec.capabilities.has_value() || !spec.seccomp_programs.empty() || !spec.exec_label.empty() ||
             !spec.argv0.empty() || spec.as_pid_1 || spec.join_userns.has_value() || spec.join_pidns.has_value() ||
             spec.join_userns_after_setup.has_value() || spec.disable_userns || !spec.inherited_fds.empty()) {
    why = "bubblewrap's options are not for warm templates";
  } else if (spec.map_all_host_ids || spec.host_user_namespace) {
    why = "it needs a user namespace of its own";
  } else if (!spec.devices.empty()) {
    why = "devices are passed to one sandbox, not to a template";
  }
  if (why == nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("a warm template cannot serve this profile: ", why));
}

absl::StatusOr<std::shared_ptr<WarmTemplate>> WarmTemplate::Start(const SandboxSpec& spec,
                                                                  const ZygoteOptions& options) {
  CUBICLE_RETURN_IF_ERROR(ValidateForTemplate(spec));
  if (!options.interpreter.has_value()) return absl::InvalidArgumentError("a warm template needs an interpreter");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair(warm template)");
  }
  std::shared_ptr<WarmTemplate> t(new WarmTemplate());
  t->owner_.reset(sv[0]);
  UniqueFd theirs(sv[1]);
  ZygoteOptions own = options;
  own.template_owner = theirs.get();
  own.warm_template.reset();
  own.egress_channel = -1;  // a zygote's, not the template's own sandbox's
  own.wait_until_ready = true;
  own.cold = false;
  own.accept_workspace = false;
  CUBICLE_ASSIGN_OR_RETURN(t->sandbox_, Zygote::Create(spec, own));
  theirs.reset();
  CUBICLE_RETURN_IF_ERROR(t->SendPlan(spec));
  t->started_ = absl::Now();
  return t;
}

WarmTemplate::~WarmTemplate() = default;  // sandbox_: killed and reaped, its groups removed

// The payload's hygiene the template's children do (warm_bootstrap.py,
// _template_plan): a new session, the rlimits, the profile's filter. A
// child runs its request in the interpreter it already is and never execs
// for a warm one, so it gets the policy's no-exec variant: the strict
// policy's exec token would sit in the template's memory, which each
// child (its payload) is a copy of. A strict profile's other requests go
// to a cold sandbox instead (Pool::Run).
absl::Status WarmTemplate::SendPlan(const SandboxSpec& spec) {
  CUBICLE_ASSIGN_OR_RETURN(const seccomp::BpfProgram* bpf, seccomp::Compiled(seccomp::NoExecVariant(spec.seccomp)));
  std::string plan = "P";
  Append<uint8_t>(&plan, spec.new_session ? 1 : 0);
  Append<uint32_t>(&plan, static_cast<uint32_t>(spec.rlimits.size()));
  for (const RlimitSpec& r : spec.rlimits) {
    Append<int32_t>(&plan, r.resource);
    Append<uint64_t>(&plan, r.soft);
    Append<uint64_t>(&plan, r.hard);
  }
  Append<uint32_t>(&plan, static_cast<uint32_t>(bpf->instructions.size()));
  plan.append(reinterpret_cast<const char*>(bpf->instructions.data()),
              bpf->instructions.size() * sizeof(bpf->instructions[0]));
  return SendWithManyFds(owner_.get(), plan, {});
}

absl::StatusOr<std::unique_ptr<Zygote>> WarmTemplate::Make(const SandboxSpec& spec, ZygoteOptions options) {
  options.warm_template = shared_from_this();
  options.template_owner = -1;
  options.wait_until_ready = true;
  options.cold = false;
  made_.fetch_add(1);
  return Zygote::Create(spec, options);
}

bool WarmTemplate::alive() const { return sandbox_ != nullptr && sandbox_->alive(); }

absl::Status WarmTemplate::Spawn(const std::vector<int>& namespaces, int interpreter_socket, int control,
                                 const std::vector<int>& group_files) {
  std::vector<int> fds = namespaces;  // in the order the bootstrap joins them (_JOINED)
  fds.push_back(interpreter_socket);
  fds.push_back(control);
  fds.insert(fds.end(), group_files.begin(), group_files.end());
  std::lock_guard<std::mutex> lock(spawn_mu_);
  // A template that died reads nothing: the send fails (EPIPE) or, with a
  // full socket, the wait for room does.
  struct pollfd p = {owner_.get(), POLLOUT, 0};
  if (::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(kSpawnTimeout))) != 1 || !(p.revents & POLLOUT)) {
    return absl::UnavailableError("the warm template does not take spawn requests");
  }
  return SendWithManyFds(owner_.get(), "S", fds);
}

}  // namespace cubicle::runtime
