// The daemon's state directory (DESIGN §6a): where `cubicle serve` keeps its
// records and session archives, owned by one daemon at a time. Two daemons
// sharing it would hand out each other's sessions and mark each other's
// running executions lost, so the second refuses to start, naming the first.
#pragma once

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "base/unique_fd.h"

namespace cubicle::sessions {

class StateDir {
 public:
  // Opens `path`, creating it (mode 0700) if missing; its parent must exist.
  // Refuses, before touching anything inside it: a symlink, a non-directory,
  // a directory not owned by our effective uid, or one writable by group or
  // others (another user could swap the records or the lock under us).
  // Then takes flock(LOCK_EX | LOCK_NB) on `path`/lock and writes our pid
  // there; if another open file description holds it (another daemon, or
  // another StateDir in this process), FailedPrecondition "state directory
  // X is in use by cubicle pid N (lock X/lock)".
  //
  // The lock is held until this object is destroyed. It belongs to the
  // lock file's open file description, which a process forked without exec
  // inherits (O_CLOEXEC only helps at exec): such a child keeps the
  // directory locked for as long as it lives unless it closes the fd.
  // cubicle's zygotes close every fd they do not need.
  static absl::StatusOr<StateDir> Open(const std::string& path);

  StateDir(StateDir&&) = default;
  StateDir& operator=(StateDir&&) = default;
  StateDir(const StateDir&) = delete;
  StateDir& operator=(const StateDir&) = delete;

  const std::string& path() const { return path_; }
  // The directory itself (O_PATH, checked to be a directory): for *at()
  // calls, which must not follow a path that could have been swapped since.
  int fd() const { return dir_.get(); }

 private:
  StateDir(std::string path, UniqueFd dir, UniqueFd lock)
      : path_(std::move(path)), dir_(std::move(dir)), lock_(std::move(lock)) {}

  std::string path_;
  UniqueFd dir_;
  UniqueFd lock_;
};

}  // namespace cubicle::sessions
