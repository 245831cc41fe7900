#include "egress/bridge.h"

#include "base/fd_passing.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace cubicle::egress::bridge {

bool Listen(uint16_t port, int* listen_fd, ChildError* error) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return child::Fail(error, "socket(egress bridge)", "", errno);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    char detail[32];
    child::FormatWithNumber(detail, sizeof(detail), "127.0.0.1:", port);
    int err = errno;
    ::close(fd);
    return child::Fail(error, "bind(egress bridge)", detail, err);
  }
  if (::listen(fd, 128) != 0) {
    int err = errno;
    ::close(fd);
    return child::Fail(error, "listen(egress bridge)", "", err);
  }
  *listen_fd = fd;
  return true;
}

void PassPending(int listen_fd, int gateway_fd) {
  // Bounded: a flood of connections cannot keep init from its signals.
  for (int i = 0; i < 64; ++i) {
    int conn = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return;  // EAGAIN, or an aborted connection
    const char tag = 'c';
    SendWithFds(gateway_fd, &tag, 1, &conn, 1, MSG_DONTWAIT | MSG_NOSIGNAL);
    ::close(conn);  // the gateway holds its own reference now (or nobody does)
  }
}

}  // namespace cubicle::egress::bridge
