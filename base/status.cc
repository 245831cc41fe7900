#include "base/status.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace cubicle {

absl::string_view ErrnoName(int err) {
  switch (err) {
#define CUBICLE_ERRNO_CASE(e) \
  case e:                     \
    return #e;
    CUBICLE_ERRNO_CASE(EPERM) CUBICLE_ERRNO_CASE(ENOENT) CUBICLE_ERRNO_CASE(ESRCH)
    CUBICLE_ERRNO_CASE(EINTR) CUBICLE_ERRNO_CASE(EIO) CUBICLE_ERRNO_CASE(ENXIO)
    CUBICLE_ERRNO_CASE(E2BIG) CUBICLE_ERRNO_CASE(ENOEXEC) CUBICLE_ERRNO_CASE(EBADF)
    CUBICLE_ERRNO_CASE(ECHILD) CUBICLE_ERRNO_CASE(EAGAIN) CUBICLE_ERRNO_CASE(ENOMEM)
    CUBICLE_ERRNO_CASE(EACCES) CUBICLE_ERRNO_CASE(EFAULT) CUBICLE_ERRNO_CASE(EBUSY)
    CUBICLE_ERRNO_CASE(EEXIST) CUBICLE_ERRNO_CASE(EXDEV) CUBICLE_ERRNO_CASE(ENODEV)
    CUBICLE_ERRNO_CASE(ENOTDIR) CUBICLE_ERRNO_CASE(EISDIR) CUBICLE_ERRNO_CASE(EINVAL)
    CUBICLE_ERRNO_CASE(ENFILE) CUBICLE_ERRNO_CASE(EMFILE) CUBICLE_ERRNO_CASE(ENOTTY)
    CUBICLE_ERRNO_CASE(ETXTBSY) CUBICLE_ERRNO_CASE(EFBIG) CUBICLE_ERRNO_CASE(ENOSPC)
    CUBICLE_ERRNO_CASE(ESPIPE) CUBICLE_ERRNO_CASE(EROFS) CUBICLE_ERRNO_CASE(EMLINK)
    CUBICLE_ERRNO_CASE(EPIPE) CUBICLE_ERRNO_CASE(ERANGE) CUBICLE_ERRNO_CASE(ENAMETOOLONG)
    CUBICLE_ERRNO_CASE(ENOSYS) CUBICLE_ERRNO_CASE(ENOTEMPTY) CUBICLE_ERRNO_CASE(ELOOP)
    CUBICLE_ERRNO_CASE(EOVERFLOW) CUBICLE_ERRNO_CASE(EOPNOTSUPP) CUBICLE_ERRNO_CASE(EAFNOSUPPORT)
    CUBICLE_ERRNO_CASE(EADDRINUSE) CUBICLE_ERRNO_CASE(ECONNREFUSED) CUBICLE_ERRNO_CASE(ETIMEDOUT)
    CUBICLE_ERRNO_CASE(ECONNRESET) CUBICLE_ERRNO_CASE(ENOTSOCK) CUBICLE_ERRNO_CASE(EDQUOT)
    CUBICLE_ERRNO_CASE(EUSERS)
#undef CUBICLE_ERRNO_CASE
    default:
      return "errno";
  }
}

absl::Status ErrnoStatus(int err, absl::string_view step) {
  absl::string_view name = ErrnoName(err);
  std::string what = name == "errno" ? absl::StrCat("errno ", err) : std::string(name);
  std::string msg = absl::StrCat(step, ": ", what, ": ", std::strerror(err));
  switch (err) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EPERM:
    case EACCES:
    case EROFS:
      return absl::PermissionDeniedError(msg);
    case EINVAL:
    case ENAMETOOLONG:
    case ELOOP:
    case EXDEV:
      return absl::InvalidArgumentError(msg);
    case EEXIST:
      return absl::AlreadyExistsError(msg);
    case ENOSYS:
    case EOPNOTSUPP:
      return absl::UnimplementedError(msg);
    case ENOMEM:
    case ENOSPC:
    case EMFILE:
    case ENFILE:
    case EAGAIN:
    case EUSERS:
      return absl::ResourceExhaustedError(msg);
    case ETIMEDOUT:
      return absl::DeadlineExceededError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace cubicle
