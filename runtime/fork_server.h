// The fork server (DESIGN §5a): a small, single-threaded process that makes
// zygotes, so that the daemon — many threads, a large address space —
// never forks itself for them. Every zygote used to be a fork of the
// daemon: each fork copied its page tables and made every page it shares
// with the daemon copy-on-write for both, on the CPUs requests need.
//
// The daemon starts one server per refill thread, by fork and execve of its
// own executable (`cubicle __fork-server`): a fresh address space, safely
// started from a threaded process, dying with the thread that started it
// (PR_SET_PDEATHSIG, as a zygote's init dies with its server). The server
// is given the recipes of the profiles it serves once (a setup text the
// server's main turns into ZygoteRecipes: rpc/fork_server_main.cc), then
// makes a zygote on each request with Zygote::Create and hands it over
// (Zygote::HandOver: fds and values on a SOCK_SEQPACKET socket). It keeps
// each zygote's init, its child, and reaps it when it exits; the daemon
// kills it through its pidfd and removes its groups. When the daemon hangs
// up or dies, the server kills every zygote it made that is still alive,
// removes their groups and exits.
#pragma once

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "cgroups/limits.h"
#include "runtime/pool.h"
#include "runtime/spec.h"
#include "runtime/zygote.h"

namespace cubicle::runtime {

// What a server makes for one profile.
struct ZygoteRecipe {
  SandboxSpec spec;
  ZygoteOptions options;
};
using ZygoteRecipes = std::map<std::string, ZygoteRecipe>;

// The server subcommand: argv[1] of the executable a ForkServer starts.
inline constexpr char kForkServerCommand[] = "__fork-server";
// The fd the server finds its socket on.
inline constexpr int kForkServerFd = 3;

// Server side, in the server process: reads the setup text (the first
// message), says whether `recipes_of(text)` accepted it, then serves make
// requests until the client hangs up or SIGTERM (its parent died); then
// kills every zygote it made that is still alive and removes its groups.
// Returns the process's exit status.
using RecipeParser = absl::StatusOr<ZygoteRecipes> (*)(const std::string& setup);
int ServeForkServer(int socket_fd, RecipeParser recipes_of);

// Client side: one server process, driven by one thread at a time.
class ForkServer {
 public:
  // Starts `executable` as a server and gives it `setup`; returns once it
  // has parsed it (InvalidArgument with the server's error if it refused
  // it) or `timeout` passed. The server dies with the calling thread.
  static absl::StatusOr<std::unique_ptr<ForkServer>> Start(const std::string& executable, const std::string& setup,
                                                           absl::Duration timeout);
  ForkServer(const ForkServer&) = delete;
  ForkServer& operator=(const ForkServer&) = delete;
  // Hangs up and reaps the server (which kills what it made and is still
  // alive first).
  ~ForkServer();

  // A zygote of `profile` with `limits` (the profile's own, or a
  // request's), made by the server and handed over. The server's errors
  // come back as they were (a profile it does not know is NotFound); a
  // server that died is Unavailable. `egress_channel` (or -1): the
  // sandbox's end of its egress channel, for a profile with an allowlist
  // (ZygoteOptions::egress_channel).
  absl::StatusOr<ZygoteHandover> Make(const std::string& profile, const cgroups::Limits& limits,
                                      absl::Duration timeout, int egress_channel = -1);

  pid_t pid() const { return pid_; }
  // Whether the server process is still alive.
  bool alive() const;

 private:
  ForkServer(pid_t pid, UniqueFd pidfd, UniqueFd socket) : pid_(pid), pidfd_(std::move(pidfd)), socket_(std::move(socket)) {}
  pid_t pid_;
  UniqueFd pidfd_;
  UniqueFd socket_;
};

// A pool's makers through fork servers: each call starts a server of
// `executable`, given `setup`, that makes zygotes of `profile`. The
// gateways of a profile's egress allowlist are this process's, as for the
// zygotes it makes itself: it makes each sandbox's egress channel, sends
// the server the sandbox's end, and attaches its own end once the zygote is
// handed over.
ZygoteMakerFactory ForkServerMakers(std::string executable, std::string setup, std::string profile);

}  // namespace cubicle::runtime
