// The daemon under systemd (docs/operations.md, "systemd"): readiness and
// stopping told with sd_notify (Type=notify), and listening sockets taken
// from socket activation (sd_listen_fds). libsystemd is loaded (dlopen)
// only when systemd set the environment for it, so that no other start of
// the binary pays for it, and a host without it runs everything else.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace cubicle::rpc::systemd {

// sd_notify(0, state) when NOTIFY_SOCKET is set; false when it is not,
// libsystemd is missing, or the message could not be sent.
bool Notify(const std::string& state);

// Whether systemd waits for a notification (NOTIFY_SOCKET is set).
bool Notifying();

// Listening sockets socket activation passed, by kind.
struct ActivatedSockets {
  std::vector<int> unix_streams;  // JSON-RPC lines
  std::vector<int> tcp_streams;   // HTTP
};

// The sockets systemd passed (LISTEN_FDS for this pid; the variables are
// then unset, so no child inherits them); none without socket
// activation. FailedPrecondition naming the fd for one that is neither a
// listening Unix nor a listening TCP stream socket, and when LISTEN_FDS is
// set but libsystemd cannot be loaded.
absl::StatusOr<ActivatedSockets> TakeActivatedSockets();

}  // namespace cubicle::rpc::systemd
