#include "base/fd_passing.h"

#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cubicle {

ssize_t SendWithFds(int sock, const void* data, size_t len, const int* fds, size_t nfds, int flags) {
  if (nfds > kMaxPassedFds) {
    errno = EINVAL;
    return -1;
  }
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds)];
  std::memset(control, 0, sizeof(control));
  struct iovec iov = {const_cast<void*>(data), len};
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  if (nfds > 0) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    struct cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = ::sendmsg(sock, &msg, flags);
  } while (n < 0 && errno == EINTR);
  return n;
}

ssize_t ReceiveWithFds(int sock, void* buf, size_t len, int* fds, size_t max_fds, size_t* nfds, int flags,
                       int* msg_flags) {
  // Room for more than kept, so that extra fds arrive (and are closed)
  // rather than being cut off unseen.
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxPassedFds * 2)];
  struct iovec iov = {buf, len};
  struct msghdr msg;
  std::memset(&msg, 0, sizeof(msg));
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof(control);
  ssize_t n;
  do {
    n = ::recvmsg(sock, &msg, flags | MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  *nfds = 0;
  *msg_flags = n >= 0 ? msg.msg_flags : 0;
  if (n < 0) return n;
  if (max_fds > kMaxPassedFds) max_fds = kMaxPassedFds;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
      if (*nfds < max_fds) {
        fds[(*nfds)++] = fd;
      } else {
        ::close(fd);
      }
    }
  }
  return n;
}

}  // namespace cubicle
