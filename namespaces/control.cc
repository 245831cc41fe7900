#include "namespaces/control.h"

#include <sys/socket.h>
#include <time.h>

#include <cerrno>

namespace cubicle::namespaces {

int64_t MonotonicNanos() {
  struct timespec ts;
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

int SendControl(int fd, const ControlMessage& message) {
  for (;;) {
    ssize_t n = ::send(fd, &message, sizeof(message), MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(sizeof(message))) return 0;
    if (n < 0 && errno == EINTR) continue;
    return n < 0 ? -errno : -EMSGSIZE;
  }
}

}  // namespace cubicle::namespaces
