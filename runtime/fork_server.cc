#include "runtime/fork_server.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/fd_passing.h"
#include "base/status.h"
#include "egress/gateway_process.h"
#include "runtime/cgroup_host.h"
#include "runtime/warm_template.h"

extern char** environ;

namespace cubicle::runtime {
namespace {

// Messages, one per SOCK_SEQPACKET datagram, the first byte their kind:
//   client: 'S' setup (a memfd holding the text), 'M' + profile name and
//           limits (+ the sandbox's end of its egress channel, for an allowlist)
//   server: 'R' setup accepted, 'Z' + handover (+ fds), 'E' + code + text
constexpr size_t kMaxMessage = 64 * 1024;
// How long a hung-up server may take to clean up before it is killed.
constexpr absl::Duration kStopTimeout = absl::Seconds(10);

// A flat encoding of the handover's values (the fds travel beside it).
class Writer {
 public:
  explicit Writer(char kind) { out_.push_back(kind); }
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void I64(int64_t v) { Raw(&v, sizeof(v)); }
  void Str(absl::string_view s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s.data(), s.size());
  }
  void Raw(const void* p, size_t n) { out_.append(static_cast<const char*>(p), n); }
  const std::string& out() const { return out_; }

 private:
  std::string out_;
};

class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  bool U32(uint32_t* v) { return Raw(v, sizeof(*v)); }
  bool I64(int64_t* v) { return Raw(v, sizeof(*v)); }
  bool Str(std::string* s) {
    uint32_t n;
    if (!U32(&n) || n > in_.size()) return false;
    s->assign(in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool Raw(void* p, size_t n) {
    if (n > in_.size()) return false;
    std::memcpy(p, in_.data(), n);
    in_.remove_prefix(n);
    return true;
  }
  bool done() const { return in_.empty(); }

 private:
  absl::string_view in_;
};

constexpr uint32_t kHasDirect = 1, kHasExecStamp = 2;

// A make request: the profile, and the limits its sandbox gets (a
// request's own, where the profile's zygotes cannot take them).
void PutOptional(Writer& w, const std::optional<uint64_t>& v) {
  const uint64_t value = v.value_or(0);
  w.U32(v.has_value() ? 1 : 0);
  w.Raw(&value, sizeof(value));
}
bool GetOptional(Reader& r, std::optional<uint64_t>* v) {
  uint32_t has = 0;
  uint64_t value = 0;
  if (!r.U32(&has) || !r.Raw(&value, sizeof(value))) return false;
  *v = has ? std::optional<uint64_t>(value) : std::nullopt;
  return true;
}

std::string EncodeMake(const std::string& profile, const cgroups::Limits& limits) {
  Writer w('M');
  w.Str(profile);
  PutOptional(w, limits.memory_max);
  PutOptional(w, limits.memory_high);
  PutOptional(w, limits.pids_max);
  const double cpus = limits.cpus.value_or(0);
  w.U32(limits.cpus.has_value() ? 1 : 0);
  w.Raw(&cpus, sizeof(cpus));
  w.I64(static_cast<int64_t>(limits.cpu_period_us));
  PutOptional(w, limits.cpu_weight.has_value() ? std::optional<uint64_t>(*limits.cpu_weight) : std::nullopt);
  w.U32(static_cast<uint32_t>(limits.io.size()));
  for (const cgroups::IoLimit& io : limits.io) {
    w.U32(io.major);
    w.U32(io.minor);
    for (const std::optional<uint64_t>* v : {&io.read_bps, &io.write_bps, &io.read_iops, &io.write_iops}) {
      PutOptional(w, *v);
    }
  }
  return w.out();
}

bool DecodeMake(absl::string_view message, std::string* profile, cgroups::Limits* limits) {
  Reader r(message.substr(1));
  uint32_t has_cpus = 0, ios = 0;
  double cpus = 0;
  int64_t period = 0;
  std::optional<uint64_t> weight;
  bool ok = r.Str(profile) && GetOptional(r, &limits->memory_max) && GetOptional(r, &limits->memory_high) &&
            GetOptional(r, &limits->pids_max) && r.U32(&has_cpus) && r.Raw(&cpus, sizeof(cpus)) && r.I64(&period) &&
            GetOptional(r, &weight) && r.U32(&ios) && ios <= 1024;
  if (!ok) return false;
  if (has_cpus) limits->cpus = cpus;
  limits->cpu_period_us = static_cast<uint64_t>(period);
  if (weight.has_value()) limits->cpu_weight = static_cast<uint32_t>(*weight);
  for (uint32_t i = 0; i < ios; ++i) {
    cgroups::IoLimit io;
    ok = r.U32(&io.major) && r.U32(&io.minor) && GetOptional(r, &io.read_bps) && GetOptional(r, &io.write_bps) &&
         GetOptional(r, &io.read_iops) && GetOptional(r, &io.write_iops);
    if (!ok) return false;
    limits->io.push_back(io);
  }
  return r.done();
}

std::string EncodeError(const absl::Status& st) {
  Writer w('E');
  w.U32(static_cast<uint32_t>(st.code()));
  w.Str(st.message());
  return w.out();
}

absl::Status DecodeError(absl::string_view message) {
  Reader r(message.substr(1));
  uint32_t code;
  std::string text;
  if (!r.U32(&code) || !r.Str(&text) || code == 0 || code > 16) {
    return absl::InternalError("fork server: a malformed error message");
  }
  return absl::Status(static_cast<absl::StatusCode>(code), text);
}

// The handover's values; its fds in order: pidfd, control, [direct], [stamp].
std::string EncodeHandover(const ZygoteHandover& h, std::vector<int>* fds) {
  Writer w('Z');
  w.U32(static_cast<uint32_t>(h.init_pid));
  w.U32((h.direct ? kHasDirect : 0) | (h.exec_stamp ? kHasExecStamp : 0));
  w.Str(h.cgroup_name);
  w.I64(absl::ToInt64Nanoseconds(h.build_cpu));
  w.Raw(&h.ready, sizeof(h.ready));
  w.U32(static_cast<uint32_t>(h.created.steps.size()));
  for (const auto& [name, took] : h.created.steps) {
    w.Str(name);
    w.I64(absl::ToInt64Nanoseconds(took));
  }
  w.U32(static_cast<uint32_t>(h.created.warnings.size()));
  for (const std::string& warning : h.created.warnings) w.Str(warning);
  *fds = {h.init_pidfd.get(), h.control.get()};
  if (h.direct) fds->push_back(h.direct.get());
  if (h.exec_stamp) fds->push_back(h.exec_stamp.get());
  return w.out();
}

absl::StatusOr<ZygoteHandover> DecodeHandover(absl::string_view message, std::vector<UniqueFd> fds) {
  ZygoteHandover h;
  Reader r(message.substr(1));
  uint32_t pid = 0, has = 0, steps = 0, warnings = 0;
  int64_t build_cpu_ns = 0;
  bool ok = r.U32(&pid) && r.U32(&has) && r.Str(&h.cgroup_name) && r.I64(&build_cpu_ns) &&
            r.Raw(&h.ready, sizeof(h.ready)) && r.U32(&steps);
  h.build_cpu = absl::Nanoseconds(build_cpu_ns);
  for (uint32_t i = 0; ok && i < steps; ++i) {
    std::string name;
    int64_t ns;
    ok = r.Str(&name) && r.I64(&ns);
    if (ok) h.created.steps.emplace_back(std::move(name), absl::Nanoseconds(ns));
  }
  ok = ok && r.U32(&warnings);
  for (uint32_t i = 0; ok && i < warnings; ++i) {
    std::string warning;
    ok = r.Str(&warning);
    if (ok) h.created.warnings.push_back(std::move(warning));
  }
  const size_t want = 2 + ((has & kHasDirect) ? 1 : 0) + ((has & kHasExecStamp) ? 1 : 0);
  if (!ok || !r.done() || fds.size() != want) return absl::InternalError("fork server: a malformed handover");
  h.init_pid = static_cast<pid_t>(pid);
  size_t next = 0;
  h.init_pidfd = std::move(fds[next++]);
  h.control = std::move(fds[next++]);
  if (has & kHasDirect) h.direct = std::move(fds[next++]);
  if (has & kHasExecStamp) h.exec_stamp = std::move(fds[next++]);
  return h;
}

absl::Status Send(int sock, const std::string& message, const std::vector<int>& fds = {}) {
  if (SendWithFds(sock, message.data(), message.size(), fds.data(), fds.size(), MSG_NOSIGNAL) ==
      static_cast<ssize_t>(message.size())) {
    return absl::OkStatus();
  }
  return ErrnoStatus(errno, "sendmsg(fork server)");
}

// One message, and the fds that came with it; an empty message at EOF.
absl::StatusOr<std::string> Receive(int sock, std::vector<UniqueFd>* fds) {
  std::string buf(kMaxMessage, '\0');
  int raw[kMaxPassedFds];
  size_t nfds = 0;
  int flags = 0;
  const ssize_t n = ReceiveWithFds(sock, buf.data(), buf.size(), raw, kMaxPassedFds, &nfds, 0, &flags);
  if (n < 0) return ErrnoStatus(errno, "recvmsg(fork server)");
  for (size_t i = 0; i < nfds; ++i) fds->emplace_back(raw[i]);
  if (flags & (MSG_TRUNC | MSG_CTRUNC)) return absl::InternalError("fork server: a message was cut short");
  buf.resize(static_cast<size_t>(n));
  return buf;
}

// Waits until `fd` is readable, or the deadline; DeadlineExceeded then.
absl::Status WaitReadable(int fd, absl::Time deadline, const char* what) {
  for (;;) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) return absl::DeadlineExceededError(absl::StrCat("fork server: no ", what, " in time"));
    struct pollfd p = {fd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (n > 0) return absl::OkStatus();
    if (n < 0 && errno != EINTR) return ErrnoStatus(errno, absl::StrCat("poll(fork server ", what, ")"));
  }
}

// ---- The server ----------------------------------------------------------

// What the server keeps of a zygote it handed over: the Zygote itself,
// which reaps init and releases its egress attachment and device group
// when destroyed, and its groups' name, removed at shutdown if the daemon
// has not.
struct Made {
  std::unique_ptr<Zygote> zygote;
  std::string cgroup_name;
};

class Server {
 public:
  Server(int sock, ZygoteRecipes recipes) : sock_(sock), recipes_(std::move(recipes)) {}
  // Until the client hangs up or SIGTERM; then the cleanup.
  int Serve(int signal_fd);

 private:
  void HandleMake(const std::string& request, std::vector<UniqueFd> fds);
  absl::StatusOr<std::unique_ptr<Zygote>> MakeZygote(const std::string& profile, const ZygoteRecipe& recipe,
                                                     const cgroups::Limits& limits, int egress_channel,
                                                     std::vector<std::pair<std::string, absl::Duration>>* steps);
  void ForgetExited(const std::vector<struct pollfd>& fds);
  void Shutdown();

  int sock_;
  ZygoteRecipes recipes_;
  std::vector<Made> made_;
  // The warm template of each warm profile, started at its first zygote
  // and replaced once too old or too prolific (its zygotes keep a replaced
  // one alive); none where a profile cannot have one.
  std::map<std::string, std::shared_ptr<WarmTemplate>> templates_;
};

// A warm profile's zygote is a fork of its template's interpreter; the
// template is replaced after kTemplateMaxAge or kTemplateMaxChildren
// (what its children share that cannot be reseeded: docs/security.md).
// A profile no template can serve, or whose interpreter says not to use
// one, starts its interpreter in each zygote.
absl::StatusOr<std::unique_ptr<Zygote>> Server::MakeZygote(
    const std::string& profile, const ZygoteRecipe& recipe, const cgroups::Limits& limits, int egress_channel,
    std::vector<std::pair<std::string, absl::Duration>>* steps) {
  ZygoteOptions options = recipe.options;
  options.wait_until_ready = true;  // only a built zygote is handed over
  options.cold = false;
  options.egress_channel = egress_channel;
  SandboxSpec spec = recipe.spec;
  spec.limits = limits;
  if (!options.interpreter.has_value() || !options.interpreter->from_template || !ValidateForTemplate(spec).ok()) {
    return Zygote::Create(spec, options);
  }
  std::shared_ptr<WarmTemplate>& current = templates_[profile];
  if (current == nullptr || !current->alive() || current->made() >= kTemplateMaxChildren ||
      absl::Now() - current->started() >= kTemplateMaxAge) {
    const char* step = current != nullptr && !current->alive() ? kTemplateRestartStep : kTemplateStartStep;
    current.reset();
    const absl::Time start = absl::Now();
    // The template's own sandbox has the profile's limits, not a request's.
    CUBICLE_ASSIGN_OR_RETURN(current, WarmTemplate::Start(recipe.spec, options));
    steps->emplace_back(step, absl::Now() - start);
  }
  return current->Make(spec, options);
}

void Server::HandleMake(const std::string& request, std::vector<UniqueFd> passed) {
  std::string profile;
  cgroups::Limits limits;
  // Closed here once the sandbox holds its copy.
  UniqueFd egress_channel = passed.size() == 1 ? std::move(passed[0]) : UniqueFd();
  if (!DecodeMake(request, &profile, &limits) || passed.size() > 1) {
    (void)Send(sock_, EncodeError(absl::InvalidArgumentError("fork server: a malformed make request")));
    return;
  }
  auto it = recipes_.find(profile);
  std::vector<std::pair<std::string, absl::Duration>> template_steps;
  absl::StatusOr<std::unique_ptr<Zygote>> zygote =
      it == recipes_.end() ? absl::NotFoundError(absl::StrCat("fork server: no profile named '", profile, "'"))
                           : MakeZygote(profile, it->second, limits, egress_channel.get(), &template_steps);
  absl::StatusOr<ZygoteHandover> handover = zygote.ok() ? (*zygote)->HandOver() : zygote.status();
  if (!handover.ok()) {
    (void)Send(sock_, EncodeError(handover.status()));
    return;
  }
  for (auto& step : template_steps) handover->created.steps.push_back(std::move(step));
  std::vector<int> fds;
  const std::string message = EncodeHandover(*handover, &fds);
  // Sent or not, the zygote is kept until its init exits: a client that
  // is gone will not kill it, the shutdown will.
  (void)Send(sock_, message, fds);
  made_.push_back({*std::move(zygote), handover->cgroup_name});
}

// Zygotes whose init has exited: destroying them reaps it.
void Server::ForgetExited(const std::vector<struct pollfd>& fds) {
  std::vector<Made> alive;
  alive.reserve(made_.size());
  for (size_t i = 0; i < made_.size(); ++i) {
    if (fds[2 + i].revents == 0) alive.push_back(std::move(made_[i]));
  }
  made_ = std::move(alive);  // the rest are destroyed here
}

// The client is gone (or the daemon died): every zygote still alive is
// killed and reaped, and its groups removed unless the client removed
// them already.
void Server::Shutdown() {
  std::vector<std::string> names;
  for (Made& m : made_) {
    if (!m.cgroup_name.empty()) names.push_back(m.cgroup_name);
  }
  made_.clear();
  templates_.clear();
  const CgroupHost& host = SharedCgroupHost();
  if (!host.layout.ok()) return;
  for (const std::string& name : names) {
    absl::StatusOr<std::unique_ptr<cgroups::SandboxCgroup>> cg = cgroups::SandboxCgroup::Adopt(*host.layout, name);
    if (cg.ok()) (void)(*cg)->RemoveOrKill();
  }
}

int Server::Serve(int signal_fd) {
  for (;;) {
    std::vector<struct pollfd> fds = {{sock_, POLLIN, 0}, {signal_fd, POLLIN, 0}};
    for (const Made& m : made_) fds.push_back({m.zygote->init_pidfd(), POLLIN, 0});
    if (::poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents != 0) break;  // SIGTERM: the daemon is gone
    ForgetExited(fds);
    if (fds[0].revents == 0) continue;
    std::vector<UniqueFd> passed;
    absl::StatusOr<std::string> message = Receive(sock_, &passed);
    if (!message.ok() || message->empty()) break;  // hung up
    if ((*message)[0] == 'M') HandleMake(*message, std::move(passed));
  }
  Shutdown();
  return 0;
}

absl::StatusOr<std::string> ReadSetup(int sock) {
  std::vector<UniqueFd> fds;
  CUBICLE_ASSIGN_OR_RETURN(std::string message, Receive(sock, &fds));
  if (message != "S" || fds.size() != 1) return absl::InvalidArgumentError("fork server: expected the setup first");
  std::string text;
  char buf[65536];
  for (off_t at = 0;;) {
    const ssize_t n = ::pread(fds[0].get(), buf, sizeof(buf), at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "read(fork server setup)");
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
    at += n;
  }
}

}  // namespace

int ServeForkServer(int socket_fd, RecipeParser recipes_of) {
  ::prctl(PR_SET_NAME, "cubicle-forksrv", 0, 0, 0);
  // Signals are read from a signalfd: SIGTERM (the parent-death signal) and
  // SIGINT end the server; a client that hangs up mid-send is no signal.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  ::sigprocmask(SIG_BLOCK, &mask, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  UniqueFd signals(::signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!signals) return 1;
  absl::StatusOr<std::string> setup = ReadSetup(socket_fd);
  absl::StatusOr<ZygoteRecipes> recipes = setup.ok() ? recipes_of(*setup) : setup.status();
  if (!recipes.ok()) {
    (void)Send(socket_fd, EncodeError(recipes.status()));
    return 1;
  }
  if (!Send(socket_fd, "R").ok()) return 1;
  Server server(socket_fd, *std::move(recipes));
  return server.Serve(signals.get());
}

// ---- The client ----------------------------------------------------------

absl::StatusOr<std::unique_ptr<ForkServer>> ForkServer::Start(const std::string& executable, const std::string& setup,
                                                              absl::Duration timeout) {
  UniqueFd text(::memfd_create("cubicle-fork-server-setup", MFD_CLOEXEC));
  if (!text) return ErrnoStatus(errno, "memfd_create(fork server setup)");
  for (size_t at = 0; at < setup.size();) {
    const ssize_t n = ::write(text.get(), setup.data() + at, setup.size() - at);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, "write(fork server setup)");
    at += static_cast<size_t>(n);
  }
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair(fork server)");
  }
  UniqueFd ours(sv[0]), theirs(sv[1]);
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return ErrnoStatus(errno, "open(/dev/null)");
  // Everything the child touches exists before the fork: this process has
  // other threads, so the child makes only async-signal-safe calls until
  // execve.
  std::vector<char> path(executable.begin(), executable.end());
  path.push_back('\0');
  char command[sizeof(kForkServerCommand)];
  std::memcpy(command, kForkServerCommand, sizeof(kForkServerCommand));
  char name[] = "cubicle-forksrv";
  char* const argv[] = {name, command, nullptr};
  const pid_t parent = ::getpid();
  int pidfd = -1;
  // CLONE_PIDFD: a pidfd for a process that cannot be another one by the
  // time it is opened.
  const long pid = ::syscall(SYS_clone, CLONE_PIDFD | SIGCHLD, nullptr, &pidfd, nullptr, nullptr);
  if (pid < 0) return ErrnoStatus(errno, "clone(fork server)");
  if (pid == 0) {
    // Dies with the thread that started it; SIGTERM, so that it cleans up.
    if (::prctl(PR_SET_PDEATHSIG, SIGTERM) != 0 || ::getppid() != parent) ::_exit(1);
    // stdin and stdout may be the daemon's protocol: /dev/null; stderr stays.
    const int sock = ::fcntl(theirs.get(), F_DUPFD, 10);
    if (sock < 0 || ::dup2(devnull.get(), 0) < 0 || ::dup2(devnull.get(), 1) < 0 ||
        ::dup2(sock, kForkServerFd) != kForkServerFd) {
      ::_exit(1);
    }
    ::syscall(SYS_close_range, kForkServerFd + 1, ~0U, 0);
    ::execve(path.data(), argv, environ);
    ::_exit(127);
  }
  theirs.reset();
  std::unique_ptr<ForkServer> server(new ForkServer(static_cast<pid_t>(pid), UniqueFd(pidfd), std::move(ours)));
  const int fd = text.get();
  CUBICLE_RETURN_IF_ERROR(Send(server->socket_.get(), "S", {fd}));
  CUBICLE_RETURN_IF_ERROR(WaitReadable(server->socket_.get(), absl::Now() + timeout, "setup answer"));
  std::vector<UniqueFd> fds;
  absl::StatusOr<std::string> answer = Receive(server->socket_.get(), &fds);
  if (answer.ok() && answer->size() == 1 && (*answer)[0] == 'R') return server;
  if (answer.ok() && !answer->empty() && (*answer)[0] == 'E') return DecodeError(*answer);
  return absl::UnavailableError(absl::StrCat("fork server (", executable, ") exited before it was ready",
                                             answer.ok() ? "" : absl::StrCat(": ", answer.status().message())));
}

ForkServer::~ForkServer() {
  socket_.reset();  // the server cleans up and exits
  // A server in the middle of a build finishes it first; one that does not
  // end in time is killed (what it made dies with it: PR_SET_PDEATHSIG).
  (void)WaitReadable(pidfd_.get(), absl::Now() + kStopTimeout, "exit");
  if (alive()) ::syscall(SYS_pidfd_send_signal, pidfd_.get(), SIGKILL, nullptr, 0);
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

bool ForkServer::alive() const {
  struct pollfd p = {pidfd_.get(), POLLIN, 0};
  return pidfd_ && ::poll(&p, 1, 0) == 0;
}

absl::StatusOr<ZygoteHandover> ForkServer::Make(const std::string& profile, const cgroups::Limits& limits,
                                                absl::Duration timeout, int egress_channel) {
  if (!alive()) return absl::UnavailableError(absl::StrCat("fork server ", pid_, " has exited"));
  std::vector<int> egress;
  if (egress_channel >= 0) egress.push_back(egress_channel);
  CUBICLE_RETURN_IF_ERROR(Send(socket_.get(), EncodeMake(profile, limits), egress));
  CUBICLE_RETURN_IF_ERROR(WaitReadable(socket_.get(), absl::Now() + timeout, "zygote"));
  std::vector<UniqueFd> fds;
  absl::StatusOr<std::string> answer = Receive(socket_.get(), &fds);
  if (!answer.ok() || answer->empty()) {
    return absl::UnavailableError(absl::StrCat("fork server ", pid_, " has exited",
                                               answer.ok() ? "" : absl::StrCat(": ", answer.status().message())));
  }
  if ((*answer)[0] == 'E') return DecodeError(*answer);
  if ((*answer)[0] != 'Z') return absl::InternalError("fork server: an unexpected answer");
  return DecodeHandover(*answer, std::move(fds));
}

namespace {

// How long a server may take to build a zygote beyond the zygote's own
// ready timeout.
constexpr absl::Duration kMakeMargin = absl::Seconds(5);
constexpr absl::Duration kStartTimeout = absl::Seconds(30);

class ForkServerMaker : public ZygoteMaker {
 public:
  ForkServerMaker(std::unique_ptr<ForkServer> server, std::string profile)
      : server_(std::move(server)), profile_(std::move(profile)) {}
  absl::StatusOr<std::unique_ptr<Zygote>> Make(const SandboxSpec& spec, const ZygoteOptions& options) override {
    std::shared_ptr<egress::GatewayProcess> gateway;
    UniqueFd ours, theirs;
    if (spec.egress.mode == egress::NetMode::kAllowlist) {
      CUBICLE_ASSIGN_OR_RETURN(gateway, egress::SharedGateways().Acquire(spec.egress));
      int sv[2];
      if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
        return ErrnoStatus(errno, "socketpair(egress)");
      }
      ours.reset(sv[0]);
      theirs.reset(sv[1]);
    }
    CUBICLE_ASSIGN_OR_RETURN(ZygoteHandover handover,
                             server_->Make(profile_, spec.limits, options.ready_timeout + kMakeMargin, theirs.get()));
    theirs.reset();
    if (gateway != nullptr) {
      absl::StatusOr<egress::Attachment> attached =
          gateway->Attach(egress::SandboxName(handover.init_pid), std::move(ours));
      if (!attached.ok()) {
        (void)Zygote::TakeOver(std::move(handover), spec, options);  // and destroyed: init is killed
        return attached.status();
      }
      handover.egress = *std::move(attached);
    }
    return Zygote::TakeOver(std::move(handover), spec, options);
  }
  bool alive() const override { return server_->alive(); }

 private:
  std::unique_ptr<ForkServer> server_;
  std::string profile_;
};

}  // namespace

ZygoteMakerFactory ForkServerMakers(std::string executable, std::string setup, std::string profile) {
  return [executable = std::move(executable), setup = std::move(setup),
          profile = std::move(profile)]() -> absl::StatusOr<std::unique_ptr<ZygoteMaker>> {
    CUBICLE_ASSIGN_OR_RETURN(std::unique_ptr<ForkServer> server, ForkServer::Start(executable, setup, kStartTimeout));
    return std::unique_ptr<ZygoteMaker>(new ForkServerMaker(std::move(server), profile));
  };
}

}  // namespace cubicle::runtime
