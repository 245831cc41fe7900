#include "sessions/state_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status.h"

namespace cubicle::sessions {
namespace {

constexpr char kLockName[] = "lock";

absl::Status MakeIfMissing(const std::string& path) {
  if (::mkdir(path.c_str(), 0700) == 0 || errno == EEXIST) return absl::OkStatus();
  if (errno == ENOENT) {
    return absl::NotFoundError(
        absl::StrCat("state directory ", path, ": its parent does not exist; create the parent first"));
  }
  return ErrnoStatus(errno, absl::StrCat("mkdir(", path, ")"));
}

// Checked on the opened fd, so what is checked is what is then used.
absl::Status CheckSafe(const std::string& path, int fd) {
  struct stat st;
  if (::fstat(fd, &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", path, ")"));
  if (S_ISLNK(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat("state directory ", path, " is a symlink; name the directory itself"));
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat("state directory ", path, " is not a directory"));
  }
  if (st.st_uid != ::geteuid()) {
    return absl::PermissionDeniedError(absl::StrCat("state directory ", path, " is owned by uid ", st.st_uid,
                                                    ", not by this process's uid ", ::geteuid()));
  }
  if (st.st_mode & (S_IWGRP | S_IWOTH)) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "state directory %s is writable by group or others (mode %04o); chmod go-w it", path, st.st_mode & 07777));
  }
  return absl::OkStatus();
}

// The holder's pid as it wrote it; "unknown" while it has not yet written.
std::string HolderPid(int lock_fd) {
  char buf[32];
  ssize_t n = ::pread(lock_fd, buf, sizeof(buf) - 1, 0);
  int pid = 0;
  if (n > 0 && absl::SimpleAtoi(absl::StripAsciiWhitespace(absl::string_view(buf, n)), &pid) && pid > 0) {
    return absl::StrCat(pid);
  }
  return "unknown";
}

absl::StatusOr<UniqueFd> TakeLock(const std::string& path, int dir_fd) {
  std::string lock_path = absl::StrCat(path, "/", kLockName);
  UniqueFd lock(::openat(dir_fd, kLockName, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!lock) return ErrnoStatus(errno, absl::StrCat("open(", lock_path, ")"));
  int rc;
  do rc = ::flock(lock.get(), LOCK_EX | LOCK_NB);
  while (rc != 0 && errno == EINTR);
  if (rc != 0 && errno == EWOULDBLOCK) {
    return absl::FailedPreconditionError(absl::StrCat("state directory ", path, " is in use by cubicle pid ",
                                                      HolderPid(lock.get()), " (lock ", lock_path, ")"));
  }
  if (rc != 0) return ErrnoStatus(errno, absl::StrCat("flock(", lock_path, ")"));
  std::string pid = absl::StrCat(::getpid(), "\n");
  if (::ftruncate(lock.get(), 0) != 0) return ErrnoStatus(errno, absl::StrCat("truncate(", lock_path, ")"));
  if (::pwrite(lock.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
    return ErrnoStatus(errno, absl::StrCat("write(", lock_path, ")"));
  }
  return lock;
}

}  // namespace

absl::StatusOr<StateDir> StateDir::Open(const std::string& path) {
  if (path.empty()) return absl::InvalidArgumentError("state directory path is empty");
  CUBICLE_RETURN_IF_ERROR(MakeIfMissing(path));
  // O_PATH | O_NOFOLLOW opens a symlink itself, so CheckSafe can name it.
  UniqueFd dir(::open(path.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC));
  if (!dir) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  CUBICLE_RETURN_IF_ERROR(CheckSafe(path, dir.get()));
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd lock, TakeLock(path, dir.get()));
  return StateDir(path, std::move(dir), std::move(lock));
}

}  // namespace cubicle::sessions
