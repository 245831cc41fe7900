// The sandbox's end of egress, run by cubicle's init (namespaces/init.h):
// a listening socket on 127.0.0.1:PORT inside the sandbox's own network
// namespace, whose accepted connections init hands — the socket itself, with
// SCM_RIGHTS — to the host gateway over the sandbox's private socketpair.
// Init relays no byte and parses nothing: the hostile input is read by the
// gateway. Everything here is async-signal-safe and allocation-free.
#pragma once

#include <cstdint>

#include "base/child_error.h"

namespace cubicle::egress::bridge {

// Child side, after `lo` is up: binds 127.0.0.1:`port` (non-blocking). The
// payload never inherits it: it closes every fd but stdio before execve.
bool Listen(uint16_t port, int* listen_fd, ChildError* error);

// Init, when `listen_fd` is readable: accepts what is pending and passes
// each connection to the gateway. Never blocks: a gateway that is gone or
// not keeping up gets the connection closed (the client sees a reset), not
// a stuck init.
void PassPending(int listen_fd, int gateway_fd);

}  // namespace cubicle::egress::bridge
