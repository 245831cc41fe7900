#include "base/unique_fd.h"

#include <unistd.h>

namespace cubicle {

void UniqueFd::reset(int fd) {
  // close() is not retried on EINTR: on Linux the fd is gone either way.
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

}  // namespace cubicle
