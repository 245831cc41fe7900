#include "cgroups/cgroupfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "base/unique_fd.h"

namespace cubicle::cgroups::cgroupfs {
namespace {

absl::StatusOr<std::string> ReadAll(int fd, const std::string& path) {
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    }
    if (n == 0) return out;
    out.append(buf, static_cast<size_t>(n));
  }
}

// The names of the regular files directly in `dir`.
absl::StatusOr<std::vector<std::string>> RegularFiles(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus(errno, absl::StrCat("opendir(", dir, ")"));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type == DT_REG) names.emplace_back(e->d_name);
  }
  ::closedir(d);
  return names;
}

}  // namespace

std::string Join(absl::string_view dir, absl::string_view name) {
  if (!dir.empty() && dir.back() == '/') dir.remove_suffix(1);
  if (!name.empty() && name.front() == '/') name.remove_prefix(1);
  return absl::StrCat(dir, "/", name);
}

int WriteRaw(int dirfd, const char* file, absl::string_view value, WriteMode mode) {
  int flags = O_WRONLY | O_CLOEXEC | (mode == WriteMode::kAppend ? O_APPEND : O_TRUNC);
  UniqueFd fd(::openat(dirfd, file, flags));
  if (!fd) return errno;
  ssize_t n;
  do {
    n = ::write(fd.get(), value.data(), value.size());
  } while (n < 0 && errno == EINTR);
  if (n < 0) return errno;
  return static_cast<size_t>(n) == value.size() ? 0 : EIO;  // cgroupfs takes a value whole
}

absl::Status Write(int dirfd, absl::string_view dir, const char* file, absl::string_view value,
                   WriteMode mode) {
  int err = WriteRaw(dirfd, file, value, mode);
  if (err == 0) return absl::OkStatus();
  return ErrnoStatus(err, absl::StrCat("write(", Join(dir, file), ", \"",
                                       absl::StripAsciiWhitespace(value), "\")"));
}

absl::StatusOr<std::string> Read(int dirfd, absl::string_view dir, const char* file) {
  UniqueFd fd(::openat(dirfd, file, O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", Join(dir, file), ")"));
  return ReadFromStart(fd.get(), Join(dir, file));  // a group's file: no final empty read
}

absl::StatusOr<std::string> Read(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", path, ")"));
  return ReadAll(fd.get(), path);
}

absl::StatusOr<std::string> ReadFromStart(int fd, const std::string& path) {
  std::string out;
  char buf[4096];
  for (off_t offset = 0;;) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, absl::StrCat("read(", path, ")"));
    }
    out.append(buf, static_cast<size_t>(n));
    if (static_cast<size_t>(n) < sizeof(buf)) return out;
    offset += n;
  }
}

bool Exists(int dirfd, const char* file) { return ::faccessat(dirfd, file, F_OK, 0) == 0; }

absl::StatusOr<int> OpenDir(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("open(", path, ", O_DIRECTORY)"));
  return fd;
}

absl::Status MakeGroupDir(const std::string& path, bool emulated) {
  if (::mkdir(path.c_str(), 0755) != 0)
    return ErrnoStatus(errno, absl::StrCat("mkdir(", path, ")"));
  if (!emulated) return absl::OkStatus();
  std::string parent = path.substr(0, path.find_last_of('/'));
  CUBICLE_ASSIGN_OR_RETURN(std::vector<std::string> files, RegularFiles(parent));
  for (const std::string& name : files) {
    std::string file = Join(path, name);
    UniqueFd fd(::open(file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
    if (!fd) return ErrnoStatus(errno, absl::StrCat("create(", file, ")"));
  }
  return absl::OkStatus();
}

bool HasSubdirectories(const std::string& path) {
  DIR* d = ::opendir(path.c_str());
  if (d == nullptr) return false;
  bool found = false;
  while (dirent* e = ::readdir(d)) {
    if (e->d_type == DT_DIR && std::string_view(e->d_name) != "." &&
        std::string_view(e->d_name) != "..") {
      found = true;
      break;
    }
  }
  ::closedir(d);
  return found;
}

int RemoveGroupDirRaw(const std::string& path, bool emulated) {
  if (emulated) {
    if (HasSubdirectories(path)) return ENOTEMPTY;
    auto files = RegularFiles(path);
    if (!files.ok()) return absl::IsNotFound(files.status()) ? 0 : EIO;
    for (const std::string& name : *files) ::unlink(Join(path, name).c_str());
  }
  if (::rmdir(path.c_str()) != 0 && errno != ENOENT) return errno;
  return 0;
}

absl::Status RemoveGroupDir(const std::string& path, bool emulated) {
  int err = RemoveGroupDirRaw(path, emulated);
  return err == 0 ? absl::OkStatus() : ErrnoStatus(err, absl::StrCat("rmdir(", path, ")"));
}

absl::StatusOr<std::vector<pid_t>> ParsePids(absl::string_view text) {
  std::vector<pid_t> pids;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipWhitespace())) {
    line = absl::StripAsciiWhitespace(line);
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), pid);
    if (ec != std::errc() || end != line.data() + line.size() || pid <= 0) {
      return absl::InvalidArgumentError(absl::StrCat("cgroup.procs: not a pid: '", line, "'"));
    }
    pids.push_back(pid);
  }
  return pids;
}

}  // namespace cubicle::cgroups::cgroupfs
