// One message with file descriptors attached (SCM_RIGHTS) over a Unix
// socket, both ways. Allocation-free and async-signal-safe, so the sandbox's
// side (init, the payload before execve, the egress bridge) uses the same
// code as the host's.
#pragma once

#include <sys/types.h>

#include <cstddef>

namespace cubicle {

// The most fds one message carries.
inline constexpr size_t kMaxPassedFds = 8;

// sendmsg of `len` bytes from `data` with `nfds` (at most kMaxPassedFds)
// fds attached; retried on EINTR. Returns sendmsg's result (errno set).
ssize_t SendWithFds(int sock, const void* data, size_t len, const int* fds, size_t nfds, int flags);

// recvmsg of one message into `buf` (`len` bytes) with MSG_CMSG_CLOEXEC;
// retried on EINTR. The first `max_fds` (at most kMaxPassedFds) fds that
// came with it land in `fds`, their count in `*nfds`; any beyond are closed
// at once. `*msg_flags` gets the message's flags (MSG_TRUNC, MSG_CTRUNC).
// Returns recvmsg's result (errno set).
ssize_t ReceiveWithFds(int sock, void* buf, size_t len, int* fds, size_t max_fds, size_t* nfds, int flags,
                       int* msg_flags);

}  // namespace cubicle
