// One execution request, launcher -> the sandbox's init: the payload's argv,
// environment, cwd and PATH as one packed message on the control socket, with
// its stdio (and optionally a detached workspace mount) as SCM_RIGHTS fds.
// This is the hand-off of DESIGN §5: a zygote is a sandbox blocked in
// ReceiveExecRequest; the cold path sends its request at once.
//
// Wire format (one SOCK_SEQPACKET message):
//   ExecRequestHeader, then argc + envc + 2 NUL-terminated strings:
//   argv..., env..., cwd, search path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/child_error.h"

namespace cubicle::namespaces {

inline constexpr size_t kMaxExecRequestBytes = 128 * 1024;
inline constexpr size_t kMaxExecStrings = 8192;  // argv + env entries

struct ExecRequestHeader {
  uint32_t magic;
  uint32_t argc;
  uint32_t envc;
  uint32_t flags;  // kRequestHasWorkspace, kRequestLinger
  // For a warm interpreter (runtime/warm.h): how to run argv without
  // exec'ing it — WarmMode in the low byte, the index of the script, code
  // or module argument above it. 0: exec argv as usual.
  uint32_t warm;
};
inline constexpr uint32_t kExecRequestMagic = 0x63756231;  // "cub1"
inline constexpr uint32_t kRequestHasWorkspace = 1u << 0;
// Init stays after reporting the payload's exit until the launcher hangs up
// (namespaces/init.h, AfterExit::linger).
inline constexpr uint32_t kRequestLinger = 1u << 1;

// Parent side: packs and sends. `stdio` are the payload's 0, 1, 2;
// `workspace_fd` (or -1) a detached mount (open_tree) to attach at
// /workspace. Errors name the step; a request too large is InvalidArgument.
// `peer_gone` is set when the sandbox had already exited (EPIPE): its own
// report of why is then waiting on the socket. `linger`: kRequestLinger.
absl::Status SendExecRequest(int control_fd, const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, const std::string& cwd,
                             const std::string& search_path, const int (&stdio)[3], int workspace_fd,
                             bool* peer_gone, uint32_t warm = 0, bool linger = false);

// Child side: the parsed request, pointing into caller-provided storage.
struct ExecRequestView {
  char** argv = nullptr;  // NULL-terminated
  char** envp = nullptr;  // NULL-terminated
  const char* cwd = nullptr;
  const char* search_path = nullptr;
  int stdio[3] = {-1, -1, -1};
  int workspace_fd = -1;
  uint32_t warm = 0;   // ExecRequestHeader::warm
  bool linger = false;  // kRequestLinger
  size_t bytes = 0;    // the whole message, still intact in `buffer`
};

// Blocks for one request (EOF: the launcher is gone). `buffer` holds
// kMaxExecRequestBytes + 1, `pointers` kMaxExecStrings + 2 entries; both
// are allocated by the parent before clone, so the child allocates nothing.
bool ReceiveExecRequest(int control_fd, char* buffer, char** pointers, ExecRequestView* out,
                        ChildError* error);

// Init's side of the hand-off: passes the request message received
// (`view.bytes` of `buffer`; only its workspace flag is cleared, the
// workspace having been attached by init) and its three stdio fds on to the
// payload process (runtime/zygote.cc) or a warm interpreter's bootstrap
// over `socket_fd`, then closes init's copies of the stdio fds.
// Allocation-free.
bool ForwardExecRequest(int socket_fd, char* buffer, const ExecRequestView& view, ChildError* error);

}  // namespace cubicle::namespaces
