#include "namespaces/idmap.h"

#include "namespaces/process.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace cubicle::namespaces {
namespace {

absl::Status WriteProcFile(pid_t pid, const char* name, const std::string& content) {
  std::string path = absl::StrCat("/proc/", pid, "/", name);
  UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  // Each map must arrive in a single write(2).
  ssize_t n = ::write(fd.get(), content.data(), content.size());
  if (n < 0) return ErrnoStatus(errno, absl::StrCat("write(", path, ", \"", content, "\")"));
  if (static_cast<size_t>(n) != content.size()) {
    return absl::InternalError(absl::StrCat("write(", path, "): short write"));
  }
  return absl::OkStatus();
}

std::string Format(const std::vector<IdMap>& maps) {
  std::string out;
  for (const IdMap& m : maps) absl::StrAppend(&out, m.inside, " ", m.outside, " ", m.count, "\n");
  return out;
}

absl::StatusOr<std::string> ReadOwnFile(const char* path) {
  UniqueFd fd(::open(path, O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  std::string text;
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    if (n == 0) return text;
    text.append(buf, static_cast<size_t>(n));
  }
}

// "inside outside count" lines: each inside range mapped to itself.
absl::StatusOr<std::vector<IdMap>> IdentityOf(const char* path) {
  CUBICLE_ASSIGN_OR_RETURN(std::string text, ReadOwnFile(path));
  std::vector<IdMap> maps;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    std::vector<absl::string_view> fields = absl::StrSplit(line, ' ', absl::SkipEmpty());
    IdMap map;
    if (fields.size() != 3 || !absl::SimpleAtoi(fields[0], &map.inside) || !absl::SimpleAtoi(fields[2], &map.count)) {
      return absl::InternalError(absl::StrCat(path, ": unexpected line \"", line, "\""));
    }
    map.outside = map.inside;
    maps.push_back(map);
  }
  if (maps.empty()) return absl::FailedPreconditionError(absl::StrCat(path, ": no ids are mapped"));
  return maps;
}

}  // namespace

absl::StatusOr<IdMapping> IdentityOfOwnNamespace() {
  IdMapping mapping;
  CUBICLE_ASSIGN_OR_RETURN(mapping.uids, IdentityOf("/proc/self/uid_map"));
  CUBICLE_ASSIGN_OR_RETURN(mapping.gids, IdentityOf("/proc/self/gid_map"));
  CUBICLE_ASSIGN_OR_RETURN(std::string setgroups, ReadOwnFile("/proc/self/setgroups"));
  mapping.deny_setgroups = absl::StripAsciiWhitespace(setgroups) == "deny";
  return mapping;
}

absl::Status WriteIdMaps(pid_t pid, const IdMapping& mapping) {
  CUBICLE_RETURN_IF_ERROR(WriteProcFile(pid, "uid_map", Format(mapping.uids)));
  CUBICLE_RETURN_IF_ERROR(
      WriteProcFile(pid, "setgroups", mapping.deny_setgroups ? "deny" : "allow"));
  return WriteProcFile(pid, "gid_map", Format(mapping.gids));
}

}  // namespace cubicle::namespaces

#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>

namespace cubicle::namespaces {

absl::StatusOr<int> MakeUserNamespaceFd(const IdMapping& mapping) {
  int pipefd[2];
  if (::pipe2(pipefd, O_CLOEXEC) != 0) return ErrnoStatus(errno, "pipe2");
  UniqueFd read_end(pipefd[0]), write_end(pipefd[1]);
  long pid = ::syscall(SYS_clone, CLONE_NEWUSER | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (pid < 0) return ErrnoStatus(errno, "clone(CLONE_NEWUSER)");
  if (pid == 0) {
    // Hold the namespace alive until the parent has opened it. Every other
    // fd goes first: this is a fork of a threaded launcher, and a copy of
    // another thread's pipe (another of these helpers' write end) kept
    // here would hold that helper, and so its thread, forever.
    const int keep = read_end.get();
    ChildError ignored;
    CloseAllFdsExcept(&keep, 1, &ignored);
    char c;
    while (::read(keep, &c, 1) < 0 && errno == EINTR) {
    }
    ::_exit(0);
  }
  read_end.reset();
  absl::Status status = WriteIdMaps(static_cast<pid_t>(pid), mapping);
  int ns_fd = -1;
  if (status.ok()) {
    std::string path = absl::StrCat("/proc/", pid, "/ns/user");
    ns_fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (ns_fd < 0) status = ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  }
  write_end.reset();  // releases the child
  int wstatus;
  while (::waitpid(static_cast<pid_t>(pid), &wstatus, 0) < 0 && errno == EINTR) {
  }
  if (!status.ok()) return status;
  return ns_fd;
}

}  // namespace cubicle::namespaces
