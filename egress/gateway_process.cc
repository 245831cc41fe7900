#include "egress/gateway_process.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "base/fd_passing.h"
#include "base/status.h"
#include "base/json_reader.h"
#include "egress/control_messages.h"
#include "egress/policy_json.h"
#include "seccomp/policy.h"

namespace cubicle::egress {
namespace {

constexpr size_t kMaxMessage = 64 * 1024;
constexpr int kReadyTimeoutMs = 10'000;
constexpr int kExitTimeoutMs = 5'000;

std::mutex executable_mu;
std::string* executable = nullptr;

// Where a registry's gateways are forked: by a thread that lives as long
// as the process. PR_SET_PDEATHSIG is per thread, and a gateway is shared
// by sandboxes made on many threads — a pool's refill threads end with
// their pool, and a gateway forked by one would die with it under the
// sandboxes of the pool that replaced it. The main thread forks them
// itself (`cubicle run`, a fork server, which stays single-threaded);
// any other hands the fork to a thread of its own, started on first use
// and never joined (its state is never destroyed either).
class SpawnerThread {
 public:
  absl::StatusOr<std::shared_ptr<GatewayProcess>> Spawn(const Policy& policy, std::shared_ptr<CountsLedger> ledger) {
    if (::gettid() == ::getpid()) return GatewayProcess::Spawn(policy, std::move(ledger));
    std::promise<absl::StatusOr<std::shared_ptr<GatewayProcess>>> done;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!started_) {
        std::thread([this] { Loop(); }).detach();
        started_ = true;
      }
      jobs_.push_back([&] { done.set_value(GatewayProcess::Spawn(policy, ledger)); });
    }
    wake_.notify_one();
    return done.get_future().get();
  }

 private:
  void Loop() {
    ::prctl(PR_SET_NAME, "cubicle-gwspawn", 0, 0, 0);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      wake_.wait(lock, [this] { return !jobs_.empty(); });
      std::function<void()> job = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      job();
      lock.lock();
    }
  }
  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool started_ = false;
};

SpawnerThread& Spawner() {
  static SpawnerThread* spawner = new SpawnerThread();
  return *spawner;
}

uint64_t NextGatewayId() {
  static std::atomic<uint64_t> next{0};
  return ++next;
}

std::string GatewayExecutable() {
  std::lock_guard<std::mutex> lock(executable_mu);
  return executable != nullptr ? *executable : "/proc/self/exe";
}

absl::Status SendMessage(int fd, const std::string& message, int pass_fd = -1) {
  ssize_t n = SendWithFds(fd, message.data(), message.size(), &pass_fd, pass_fd >= 0 ? 1 : 0, MSG_NOSIGNAL);
  if (n == static_cast<ssize_t>(message.size())) return absl::OkStatus();
  return ErrnoStatus(n < 0 ? errno : EMSGSIZE, "sendmsg(egress gateway control)");
}

// One message and at most one passed fd (others are closed). Returns false
// at EOF or on error.
bool ReceiveMessage(int fd, std::string* message, UniqueFd* passed) {
  message->resize(kMaxMessage);
  int received = -1;
  size_t nfds = 0;
  int msg_flags = 0;
  ssize_t n = ReceiveWithFds(fd, message->data(), message->size(), &received, 1, &nfds, 0, &msg_flags);
  if (n <= 0) {
    if (nfds > 0) ::close(received);
    return false;
  }
  message->resize(static_cast<size_t>(n));
  if (nfds > 0) passed->reset(received);
  return true;
}

// Process-wide, before any thread exists: root goes (as root), then
// no_new_privs and the gateway's seccomp filter (the sandboxes' baseline,
// and no execve or new process), which every thread started later inherits.
absl::Status DropProcessPrivileges() {
  if (::geteuid() == 0) {
    if (::setgroups(0, nullptr) != 0) return ErrnoStatus(errno, "setgroups(egress gateway)");
    if (::setresgid(kGatewayId, kGatewayId, kGatewayId) != 0) {
      return ErrnoStatus(errno, absl::StrCat("setresgid(egress gateway, ", kGatewayId, ")"));
    }
    if (::setresuid(kGatewayId, kGatewayId, kGatewayId) != 0) {
      return ErrnoStatus(errno, absl::StrCat("setresuid(egress gateway, ", kGatewayId, ")"));
    }
  }
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return ErrnoStatus(errno, "prctl(PR_SET_NO_NEW_PRIVS)");
  CUBICLE_ASSIGN_OR_RETURN(const seccomp::BpfProgram* bpf, seccomp::Compiled(seccomp::Policy::kEgressGateway));
  if (int rc = seccomp::Load(bpf->AsFprog()); rc != 0) return ErrnoStatus(-rc, "seccomp(egress gateway)");
  return absl::OkStatus();
}

}  // namespace

void SetGatewayExecutable(std::string path) {
  std::lock_guard<std::mutex> lock(executable_mu);
  if (executable == nullptr) executable = new std::string();
  *executable = std::move(path);
}

std::string SandboxName(pid_t init_pid) {
  static std::atomic<uint64_t> sandboxes{0};
  return absl::StrCat(init_pid, "-", ++sandboxes);
}

GatewayProcess::GatewayProcess(pid_t pid, UniqueFd pidfd, UniqueFd control, std::string revision,
                               std::shared_ptr<CountsLedger> ledger)
    : pid_(pid),
      id_(NextGatewayId()),
      pidfd_(std::move(pidfd)),
      control_(std::move(control)),
      revision_(std::move(revision)),
      ledger_(std::move(ledger)) {}

absl::StatusOr<std::shared_ptr<GatewayProcess>> GatewayProcess::Spawn(const Policy& policy,
                                                                      std::shared_ptr<CountsLedger> ledger) {
  CUBICLE_RETURN_IF_ERROR(ValidatePolicy(policy));
  if (policy.mode != NetMode::kAllowlist) return absl::InvalidArgumentError("a gateway serves an allowlist only");
  const std::string message = absl::StrCat("P", boost::json::serialize(PolicyToJson(policy)));
  if (message.size() > kMaxMessage) {
    return absl::InvalidArgumentError(absl::StrCat("network policy: larger than ", kMaxMessage, " bytes as JSON"));
  }
  // Everything the child touches exists before fork: the launcher may have
  // other threads (a daemon), so the child only makes async-signal-safe
  // calls until execve.
  const std::string exe = GatewayExecutable();
  char arg0[] = "cubicle-egress";
  char arg1[sizeof(kGatewayCommand)];
  std::memcpy(arg1, kGatewayCommand, sizeof(kGatewayCommand));
  char* const argv[] = {arg0, arg1, nullptr};
  char* const envp[] = {nullptr};
  UniqueFd devnull(::open("/dev/null", O_RDWR | O_CLOEXEC));
  if (!devnull) return ErrnoStatus(errno, "open(/dev/null)");
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0) {
    return ErrnoStatus(errno, "socketpair(egress gateway control)");
  }
  UniqueFd control(sv[0]), child_end(sv[1]);
  // execve's failure comes back on a close-on-exec pipe (EOF: it worked).
  int ep[2];
  if (::pipe2(ep, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2(egress gateway exec)");
  UniqueFd exec_read(ep[0]), exec_write(ep[1]);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) return ErrnoStatus(errno, "fork(egress gateway)");
  if (pid == 0) {
    // Without the death signal the gateway could outlive its launcher: it
    // exits instead, and the launcher reports that it was never ready.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
    // stdin/stdout: /dev/null (a daemon's stdout is its protocol); stderr
    // stays (the default decision log); the control socket becomes fd 3.
    const int ctl = ::fcntl(child_end.get(), F_DUPFD_CLOEXEC, 10);
    const int report = ::fcntl(exec_write.get(), F_DUPFD_CLOEXEC, 10);
    if (ctl < 0 || report < 0 || ::dup2(devnull.get(), 0) < 0 || ::dup2(devnull.get(), 1) < 0 ||
        ::dup2(ctl, 3) < 0 || ::dup3(report, 4, O_CLOEXEC) < 0) {
      ::_exit(126);
    }
    ::syscall(SYS_close_range, 5, ~0U, 0);
    ::execve(exe.c_str(), argv, envp);
    const int err = errno;
    (void)!::write(4, &err, sizeof(err));
    ::_exit(127);
  }
  child_end.reset();
  exec_write.reset();
  UniqueFd pidfd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
  auto process = std::shared_ptr<GatewayProcess>(
      new GatewayProcess(pid, std::move(pidfd), std::move(control), Revision(policy), std::move(ledger)));
  // From here the destructor reaps it on every return.
  int exec_errno = 0;
  ssize_t got;
  do {
    got = ::read(exec_read.get(), &exec_errno, sizeof(exec_errno));
  } while (got < 0 && errno == EINTR);
  if (got == sizeof(exec_errno)) return ErrnoStatus(exec_errno, absl::StrCat("egress gateway: execve(", exe, ")"));
  CUBICLE_RETURN_IF_ERROR(SendMessage(process->control_.get(), message));
  pollfd p = {process->control_.get(), POLLIN, 0};
  int n;
  do {
    n = ::poll(&p, 1, kReadyTimeoutMs);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return ErrnoStatus(errno, "poll(egress gateway ready)");
  if (n == 0) return absl::DeadlineExceededError("egress gateway: not ready within 10 s");
  std::string reply;
  UniqueFd none;
  if (!ReceiveMessage(process->control_.get(), &reply, &none)) {
    return absl::InternalError(absl::StrCat("egress gateway: exited before it was ready (exec ", exe, ")"));
  }
  if (reply == "R") return process;
  return absl::InternalError(absl::StrCat("egress gateway: ", reply.empty() ? "" : reply.substr(1)));
}

GatewayProcess::~GatewayProcess() {
  // EOF for the gateway, which closes everything, answers with its final
  // counts and exits; the socket stays open to read them.
  const absl::Time deadline = absl::Now() + absl::Milliseconds(kExitTimeoutMs);
  ::shutdown(control_.get(), SHUT_WR);
  std::optional<Counts> last = FinalCountsBy(deadline);
  if (ledger_ != nullptr) {
    std::lock_guard<std::mutex> lock(ledger_->mu);
    Counts share = std::move(ledger_->standing[id_]);
    if (last.has_value()) share.Max(*last);
    ledger_->gone.Add(share);
    ledger_->standing.erase(id_);
  }
  control_.reset();
  if (pidfd_) {
    pollfd p = {pidfd_.get(), POLLIN, 0};
    int n;
    do {
      const int64_t left = std::max<int64_t>(0, absl::ToInt64Milliseconds(deadline - absl::Now()));
      n = ::poll(&p, 1, static_cast<int>(left));
    } while (n < 0 && errno == EINTR);
    if (n == 0) ::kill(pid_, SIGKILL);
  }
  int status;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
}

std::optional<Counts> GatewayProcess::FinalCountsBy(absl::Time deadline) {
  std::string message;
  for (;;) {
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) return std::nullopt;
    pollfd p = {control_.get(), POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    UniqueFd none;
    if (!ReceiveMessage(control_.get(), &message, &none)) return std::nullopt;  // EOF: gone without them
    uint64_t sequence = 0;
    bool final = false;
    absl::StatusOr<Counts> counts = ParseCountsMessage(message, &sequence, &final);
    if (counts.ok() && final) return *std::move(counts);
    // A late answer to an earlier "S": the final counts come after it.
  }
}

bool GatewayProcess::AskCounts(uint64_t sequence) {
  const std::string message = CountsRequest(sequence);
  std::lock_guard<std::mutex> lock(mu_);
  return ::send(control_.get(), message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL) ==
         static_cast<ssize_t>(message.size());
}

std::optional<Counts> GatewayProcess::TakeCounts(uint64_t sequence) {
  std::string message(kMaxMessage, '\0');
  for (;;) {
    const ssize_t n = ::recv(control_.get(), message.data(), message.size(), MSG_DONTWAIT);
    if (n <= 0) return std::nullopt;  // nothing more now, or gone
    uint64_t answered = 0;
    bool final = false;
    absl::StatusOr<Counts> counts =
        ParseCountsMessage(absl::string_view(message.data(), static_cast<size_t>(n)), &answered, &final);
    if (counts.ok() && answered == sequence) return *std::move(counts);
  }
}

bool GatewayProcess::alive() const {
  if (!pidfd_) return true;  // no pidfd (old kernel): assume so; Attach fails if not
  pollfd p = {pidfd_.get(), POLLIN, 0};
  return ::poll(&p, 1, 0) == 0;
}

absl::StatusOr<Attachment> GatewayProcess::Attach(const std::string& sandbox, UniqueFd channel) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    CUBICLE_RETURN_IF_ERROR(SendMessage(control_.get(), absl::StrCat("A", sandbox), channel.get()));
  }
  std::shared_ptr<GatewayProcess> self = shared_from_this();
  GatewayProcess* raw = self.get();
  return Attachment(
      std::move(self), [raw, sandbox] { raw->Detach(sandbox); },
      [raw, sandbox](const std::string& request_id) { raw->Tag(sandbox, request_id); });
}

void GatewayProcess::Detach(const std::string& sandbox) {
  std::lock_guard<std::mutex> lock(mu_);
  SendMessage(control_.get(), absl::StrCat("D", sandbox)).IgnoreError();  // a dead gateway has nothing to close
}

void GatewayProcess::Tag(const std::string& sandbox, const std::string& request_id) {
  if (!ValidRequestId(request_id)) return;
  const std::string message = TagMessage(sandbox, request_id);
  std::lock_guard<std::mutex> lock(mu_);
  // On the request's path: never waits for a gateway that does not read.
  (void)::send(control_.get(), message.data(), message.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

absl::StatusOr<std::shared_ptr<GatewayProcess>> GatewayRegistry::Acquire(const Policy& policy) {
  const std::string key = CanonicalText(policy);
  // One start at a time, so that a revision gets one gateway; the map is
  // not held meanwhile, so that a scrape (ReadCounts) never waits for one.
  std::lock_guard<std::mutex> starting(start_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::erase_if(by_policy_, [](const auto& entry) { return entry.second.expired(); });
    if (auto it = by_policy_.find(key); it != by_policy_.end()) {
      std::shared_ptr<GatewayProcess> running = it->second.lock();
      if (running != nullptr && running->alive()) return running;
      // A gateway that died leaves its sandboxes without egress (their
      // connections are reset); the next sandbox gets a new one.
    }
  }
  CUBICLE_ASSIGN_OR_RETURN(std::shared_ptr<GatewayProcess> gateway, Spawner().Spawn(policy, ledger_));
  std::lock_guard<std::mutex> lock(mu_);
  by_policy_[key] = gateway;
  return gateway;
}

size_t GatewayRegistry::live() {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(by_policy_, [](const auto& entry) { return entry.second.expired(); });
  return by_policy_.size();
}

Counts GatewayRegistry::ReadCounts(absl::Duration wait) {
  std::lock_guard<std::mutex> reading(read_mu_);
  const absl::Time deadline = absl::Now() + wait;
  const uint64_t sequence = ++sequence_;
  std::vector<std::shared_ptr<GatewayProcess>> asked;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [key, weak] : by_policy_) {
      std::shared_ptr<GatewayProcess> gateway = weak.lock();
      if (gateway != nullptr && gateway->alive()) asked.push_back(std::move(gateway));
    }
  }
  std::erase_if(asked, [&](const auto& gateway) { return !gateway->AskCounts(sequence); });
  std::map<uint64_t, Counts> answers;
  while (answers.size() < asked.size()) {
    std::vector<pollfd> fds;
    std::vector<GatewayProcess*> waiting;
    for (const auto& gateway : asked) {
      if (answers.count(gateway->id()) != 0) continue;
      fds.push_back({gateway->control_fd(), POLLIN, 0});
      waiting.push_back(gateway.get());
    }
    const int64_t left = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left <= 0) break;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(left));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      std::optional<Counts> counts = waiting[i]->TakeCounts(sequence);
      if (counts.has_value()) {
        answers[waiting[i]->id()] = *std::move(counts);
      } else if ((fds[i].revents & (POLLHUP | POLLERR)) != 0) {
        answers[waiting[i]->id()];  // gone: its last answer stands
      }
    }
  }
  Counts total;
  {
    std::lock_guard<std::mutex> lock(ledger_->mu);
    for (auto& [id, counts] : answers) ledger_->standing[id].Max(counts);
    total = ledger_->gone;
    for (const auto& [id, counts] : ledger_->standing) total.Add(counts);
  }
  // Dropped here, outside the locks: the last hold on a gateway whose
  // sandboxes have all gone stops it (and moves its counts to `gone`).
  asked.clear();
  return total;
}

GatewayRegistry& SharedGateways() {
  static GatewayRegistry* registry = new GatewayRegistry();
  return *registry;
}

int GatewayProcessMain(int control_fd) {
  ::prctl(PR_SET_NAME, "cubicle-egress", 0, 0, 0);
  auto fail = [&](const absl::Status& st) {
    SendMessage(control_fd, absl::StrCat("E", st.message())).IgnoreError();
    return 1;
  };
  std::string message;
  UniqueFd ignored;
  if (!ReceiveMessage(control_fd, &message, &ignored) || message.empty() || message[0] != 'P') {
    return fail(absl::InvalidArgumentError("expected the policy first"));
  }
  absl::StatusOr<boost::json::value> json = json_read::ParseDocument(absl::string_view(message).substr(1), false);
  if (!json.ok()) return fail(absl::InvalidArgumentError(absl::StrCat("policy: ", json.status().message())));
  absl::StatusOr<Policy> policy = PolicyFromJson(*json, "policy", Policy());
  if (!policy.ok()) return fail(policy.status());
  // The log is opened with the launcher's privileges, then they go. The
  // kernel clears the parent-death signal on that credential change: set
  // it again, and check the launcher did not die in between.
  absl::StatusOr<UniqueFd> log = OpenDecisionLog(policy->log_path);
  if (!log.ok()) return fail(log.status());
  const pid_t launcher = ::getppid();
  if (absl::Status st = DropProcessPrivileges(); !st.ok()) return fail(st);
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != launcher) return 1;
  absl::StatusOr<std::shared_ptr<Gateway>> gateway = Gateway::Start(*policy, *std::move(log));
  if (!gateway.ok()) return fail(gateway.status());
  if (!SendMessage(control_fd, "R").ok()) return 1;
  // Until EOF (the last sandbox is gone, or the launcher), on the engine's
  // thread.
  (*gateway)->ServeLauncher(UniqueFd(control_fd));
  gateway->reset();
  return 0;
}

}  // namespace cubicle::egress
