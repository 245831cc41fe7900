// One gateway process per policy revision (docs/egress.md). The gateway
// parses what sandboxes send, so it does not run in the launcher (`cubicle
// run`, or the daemon holding every pool): the launcher forks and execs
// `cubicle __egress-gateway`, which opens its log, gives up root (uid/gid
// kGatewayId, no capabilities), sets no_new_privs and the baseline seccomp
// filter, and only then starts the engine (gateway.h).
//
// The launcher keeps a SOCK_SEQPACKET control socket to it. Messages:
//   launcher → gateway  "P" policy JSON      once, first
//   gateway → launcher  "R" | "E" message    ready, or why it could not start
//   launcher → gateway  "A" sandbox + fd     serve this sandbox's channel (SCM_RIGHTS)
//   launcher → gateway  "D" sandbox          the sandbox is gone: close its connections
// EOF on the control socket (the last sandbox of the revision is gone, or
// the launcher died) ends the gateway; it also dies with the launcher
// (PR_SET_PDEATHSIG).
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"
#include "egress/gateway.h"
#include "egress/policy.h"

namespace cubicle::egress {

// The argv[1] that makes the cubicle binary a gateway process.
inline constexpr char kGatewayCommand[] = "__egress-gateway";

// The binary to exec as the gateway: /proc/self/exe unless set (a test
// binary that launches sandboxes in-process sets the cubicle binary).
void SetGatewayExecutable(std::string path);

class GatewayProcess : public std::enable_shared_from_this<GatewayProcess> {
 public:
  // Starts the gateway of `policy` and waits (bounded) until it is ready.
  static absl::StatusOr<std::shared_ptr<GatewayProcess>> Spawn(const Policy& policy);
  // Closes the control socket and reaps the process (SIGKILL if it has not
  // gone within 5 s).
  ~GatewayProcess();
  GatewayProcess(const GatewayProcess&) = delete;
  GatewayProcess& operator=(const GatewayProcess&) = delete;

  // Hands `channel` (the host end of the sandbox's socketpair) over.
  absl::StatusOr<Attachment> Attach(const std::string& sandbox, UniqueFd channel);

  // False once the process has exited (crashed, killed): the registry
  // then starts a new one for the next sandbox of the revision.
  bool alive() const;
  pid_t pid() const { return pid_; }
  const std::string& revision() const { return revision_; }

 private:
  GatewayProcess(pid_t pid, UniqueFd pidfd, UniqueFd control, std::string revision);
  void Detach(const std::string& sandbox);
  pid_t pid_;
  UniqueFd pidfd_;
  std::mutex mu_;  // one message at a time on the control socket
  UniqueFd control_;
  std::string revision_;
};

// Gateway processes by policy revision.
class GatewayRegistry {
 public:
  // The running gateway of `policy`'s revision, or a new one.
  absl::StatusOr<std::shared_ptr<GatewayProcess>> Acquire(const Policy& policy);
  // Gateways alive now.
  size_t live();

 private:
  std::mutex mu_;
  std::map<std::string, std::weak_ptr<GatewayProcess>> by_policy_;  // canonical text → gateway
};

// The registry the launcher uses: one per process, so the cold path and the
// pools of a daemon share gateways.
GatewayRegistry& SharedGateways();

// The gateway process's main(): `control_fd` is its end of the control
// socket. Returns the exit status.
int GatewayProcessMain(int control_fd);

}  // namespace cubicle::egress
