// One gateway process per policy revision (docs/egress.md). The gateway
// parses what sandboxes send, so it does not run in the launcher (`cubicle
// run`, or the daemon holding every pool): the launcher forks and execs
// `cubicle __egress-gateway`, which opens its log, gives up root (uid/gid
// kGatewayId, no capabilities), sets no_new_privs and the baseline seccomp
// filter, and only then starts the engine (gateway.h).
//
// The launcher keeps a SOCK_SEQPACKET control socket to it. Messages
// (egress/control_messages.h):
//   launcher → gateway  "P" policy JSON      once, first
//   gateway → launcher  "R" | "E" message    ready, or why it could not start
//   launcher → gateway  "A" sandbox + fd     serve this sandbox's channel (SCM_RIGHTS)
//   launcher → gateway  "D" sandbox          the sandbox is gone: close its connections
//   launcher → gateway  "T" sandbox NUL id   its connections from now on belong to request `id`
//   launcher → gateway  "S" n                the counts so far (metrics)...
//   gateway → launcher  "C" n " " counts     ...answered (a late answer to an earlier n is dropped)
//   gateway → launcher  "F" counts           the last counts, once the launcher has hung up
// Only "S" is answered: "A", "D" and "T" are sent and not waited for. EOF
// on the control socket (the launcher's shutdown(SHUT_WR) when the last
// sandbox of the revision is gone, or the launcher died) makes the gateway
// close every connection, send "F" and exit; it also dies with the
// launcher (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "egress/counts.h"
#include "egress/gateway.h"
#include "egress/policy.h"

namespace cubicle::egress {

// The argv[1] that makes the cubicle binary a gateway process.
inline constexpr char kGatewayCommand[] = "__egress-gateway";

// The binary to exec as the gateway: /proc/self/exe unless set (a test
// binary that launches sandboxes in-process sets the cubicle binary).
void SetGatewayExecutable(std::string path);

// A sandbox's name in its gateway's log: "<init pid>-<n>", n counting
// this launcher's sandboxes, so that it is unique for the gateway's life
// even if a pid is reused before an earlier sandbox's teardown is done.
std::string SandboxName(pid_t init_pid);

// What a registry knows of its gateways' counts: the last reading of each
// one standing, and the sum of those gone, each with its final counts. A
// gateway's share moves from one to the other at once, so the sum never
// goes down.
struct CountsLedger {
  std::mutex mu;
  Counts gone;
  std::map<uint64_t, Counts> standing;  // by GatewayProcess::id()
};

class GatewayProcess : public std::enable_shared_from_this<GatewayProcess> {
 public:
  // Starts the gateway of `policy` and waits (bounded) until it is ready.
  // Its counts go to `ledger` (none: not kept).
  static absl::StatusOr<std::shared_ptr<GatewayProcess>> Spawn(const Policy& policy,
                                                               std::shared_ptr<CountsLedger> ledger = nullptr);
  // Hangs up (shutdown), reads the gateway's final counts into the ledger,
  // and reaps the process: SIGKILL if it has not gone within 5 s.
  ~GatewayProcess();
  GatewayProcess(const GatewayProcess&) = delete;
  GatewayProcess& operator=(const GatewayProcess&) = delete;

  // Hands `channel` (the host end of the sandbox's socketpair) over. The
  // Attachment's Tag sends "T" without waiting (and drops it where the
  // socket is full: a gateway that does not read serves no one anyway).
  absl::StatusOr<Attachment> Attach(const std::string& sandbox, UniqueFd channel);

  // False once the process has exited (crashed, killed): the registry
  // then starts a new one for the next sandbox of the revision.
  bool alive() const;
  pid_t pid() const { return pid_; }
  uint64_t id() const { return id_; }
  const std::string& revision() const { return revision_; }

  // Asks for the counts so far ("S" `sequence`, not waiting), for
  // GatewayRegistry::ReadCounts, which reads the answers.
  bool AskCounts(uint64_t sequence);
  // Reads what has come on the control socket without waiting: the counts
  // answering `sequence`, if they are there.
  std::optional<Counts> TakeCounts(uint64_t sequence);
  int control_fd() const { return control_.get(); }

 private:
  GatewayProcess(pid_t pid, UniqueFd pidfd, UniqueFd control, std::string revision,
                 std::shared_ptr<CountsLedger> ledger);
  void Detach(const std::string& sandbox);
  void Tag(const std::string& sandbox, const std::string& request_id);
  // The "F" message, waited for until `deadline`.
  std::optional<Counts> FinalCountsBy(absl::Time deadline);
  pid_t pid_;
  uint64_t id_;
  UniqueFd pidfd_;
  std::mutex mu_;  // one message at a time on the control socket
  UniqueFd control_;
  std::string revision_;
  std::shared_ptr<CountsLedger> ledger_;
};

// Gateway processes by policy revision.
class GatewayRegistry {
 public:
  // The running gateway of `policy`'s revision, or a new one.
  absl::StatusOr<std::shared_ptr<GatewayProcess>> Acquire(const Policy& policy);
  // Gateways alive now.
  size_t live();

  // Every connection its gateways have ended, those gone included, by
  // decision and rule, and the bytes relayed: asked of each live gateway
  // at once and waited for at most `wait` in all; one that does not answer
  // in time (dead, wedged) counts as at its last answer. Never less than
  // an earlier call returned.
  Counts ReadCounts(absl::Duration wait);

 private:
  std::mutex start_mu_;  // held while a gateway starts (Acquire)
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<GatewayProcess>> by_policy_;  // canonical text → gateway
  std::shared_ptr<CountsLedger> ledger_ = std::make_shared<CountsLedger>();
  std::mutex read_mu_;  // one ReadCounts at a time: each reads the answers it asked for
  uint64_t sequence_ = 0;  // under read_mu_
};

// The registry the launcher uses: one per process, so the cold path and the
// pools of a daemon share gateways.
GatewayRegistry& SharedGateways();

// The gateway process's main(): `control_fd` is its end of the control
// socket. Returns the exit status.
int GatewayProcessMain(int control_fd);

}  // namespace cubicle::egress
