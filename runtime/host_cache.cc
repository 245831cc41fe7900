#include "runtime/host_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/status.h"
#include "base/unique_fd.h"
#include "cgroups/cgroupfs.h"
#include "cgroups/layout_cache.h"

namespace cubicle::runtime {
namespace {

constexpr char kFileName[] = "host-cache";
// 2: cpuacct and the freezer placed on the unified group where it offers
// cpu.stat and cgroup.kill; a layout cached by version 1 is rediscovered.
constexpr char kMagic[] = "cubicle host cache 2";
constexpr size_t kMaxBytes = 256 * 1024;

// FNV-1a, 64 bits: a cheap fingerprint, not a defence (the key's other
// parts and RevalidateLayout guard the rest).
uint64_t Fnv1a(absl::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// Owned by the caller and writable by no one else: what a root cubicle
// may trust.
bool Private(const struct stat& st) { return st.st_uid == ::geteuid() && (st.st_mode & (S_IWGRP | S_IWOTH)) == 0; }

absl::StatusOr<UniqueFd> OpenPrivateDir(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("open(", dir, ")"));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0) return ErrnoStatus(errno, absl::StrCat("fstat(", dir, ")"));
  if (!Private(st)) {
    return absl::PermissionDeniedError(absl::StrCat(dir, ": not owned by uid ", ::geteuid(), " or writable by others"));
  }
  return fd;
}

}  // namespace

std::string HostCacheDir() {
  if (const char* env = std::getenv("CUBICLE_HOST_CACHE"); env != nullptr) {
    return absl::string_view(env) == "off" || env[0] != '/' ? std::string() : std::string(env);
  }
  if (::geteuid() == 0) return "/run/cubicle";
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg == nullptr || xdg[0] != '/') return "";
  struct stat st;
  if (::stat(xdg, &st) != 0 || !S_ISDIR(st.st_mode) || !Private(st)) return "";
  return absl::StrCat(xdg, "/cubicle");
}

absl::StatusOr<std::string> HostCacheKey(const cgroups::LayoutOptions& options) {
  struct stat ns;
  if (::stat("/proc/self/ns/mnt", &ns) != 0) return ErrnoStatus(errno, "stat(/proc/self/ns/mnt)");
  CUBICLE_ASSIGN_OR_RETURN(std::string own, cgroups::cgroupfs::Read("/proc/self/cgroup"));
  CUBICLE_ASSIGN_OR_RETURN(std::string mountinfo, cgroups::cgroupfs::Read("/proc/self/mountinfo"));
  uint64_t mounts = Fnv1a("");
  for (absl::string_view line : absl::StrSplit(mountinfo, '\n', absl::SkipEmpty())) {
    size_t dash = line.find(" - ");
    if (dash == absl::string_view::npos) continue;
    absl::string_view fstype = line.substr(dash + 3);
    fstype = fstype.substr(0, fstype.find(' '));
    if (fstype == "cgroup" || fstype == "cgroup2") mounts = Fnv1a(line, Fnv1a("\n", mounts));
  }
  return absl::StrCat("euid=", ::geteuid(), " mntns=", ns.st_dev, ":", ns.st_ino, " parent=", options.parent,
                      " libcgroup=", options.use_libcgroup ? 1 : 0, " mounts=", absl::Hex(mounts),
                      " cgroup=", absl::CEscape(own));
}

std::optional<cgroups::Layout> LoadCachedLayout(const std::string& dir, const std::string& key) {
  if (dir.empty()) return std::nullopt;
  absl::StatusOr<UniqueFd> dfd = OpenPrivateDir(dir);
  if (!dfd.ok()) return std::nullopt;
  UniqueFd fd(::openat(dfd->get(), kFileName, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  struct stat st;
  if (!fd || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || !Private(st) ||
      static_cast<size_t>(st.st_size) > kMaxBytes) {
    return std::nullopt;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    ssize_t n = ::read(fd.get(), text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    got += static_cast<size_t>(n);
  }
  // "MAGIC\nkey\tKEY\n" then the layout.
  const std::string head = absl::StrCat(kMagic, "\nkey\t", absl::CEscape(key), "\n");
  if (!absl::StartsWith(text, head)) return std::nullopt;
  absl::StatusOr<cgroups::Layout> layout = cgroups::ParseLayout(absl::string_view(text).substr(head.size()));
  if (!layout.ok() || !cgroups::RevalidateLayout(*layout).ok()) return std::nullopt;
  return std::move(layout).value();
}

absl::Status StoreCachedLayout(const std::string& dir, const std::string& key, const cgroups::Layout& layout) {
  if (dir.empty()) return absl::FailedPreconditionError("no directory for the host cache");
  if (layout.emulated) return absl::InvalidArgumentError("an emulated layout is not a host's");
  const mode_t dir_mode = ::geteuid() == 0 ? 0755 : 0700;
  const bool created = ::mkdir(dir.c_str(), dir_mode) == 0;
  if (!created && errno != EEXIST) return ErrnoStatus(errno, absl::StrCat("mkdir(", dir, ")"));
  CUBICLE_ASSIGN_OR_RETURN(UniqueFd dfd, OpenPrivateDir(dir));
  if (created && ::fchmod(dfd.get(), dir_mode) != 0) return ErrnoStatus(errno, absl::StrCat("fchmod(", dir, ")"));
  const std::string text =
      absl::StrCat(kMagic, "\nkey\t", absl::CEscape(key), "\n", cgroups::SerializeLayout(layout));
  const std::string tmp = absl::StrCat(".", kFileName, ".", ::getpid(), ".", ::gettid());
  UniqueFd fd(::openat(dfd.get(), tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644));
  if (!fd) return ErrnoStatus(errno, absl::StrCat("create(", dir, "/", tmp, ")"));
  // The mode is the cache's, not the umask's: 0644 under any umask, so that
  // what a run leaves is the same on every host (nothing in it is secret).
  if (::fchmod(fd.get(), 0644) != 0) {
    absl::Status st = ErrnoStatus(errno, absl::StrCat("fchmod(", dir, "/", tmp, ")"));
    ::unlinkat(dfd.get(), tmp.c_str(), 0);
    return st;
  }
  size_t put = 0;
  while (put < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + put, text.size() - put);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      absl::Status st = ErrnoStatus(n < 0 ? errno : EIO, absl::StrCat("write(", dir, "/", tmp, ")"));
      ::unlinkat(dfd.get(), tmp.c_str(), 0);
      return st;
    }
    put += static_cast<size_t>(n);
  }
  fd.reset();
  if (::renameat(dfd.get(), tmp.c_str(), dfd.get(), kFileName) != 0) {
    absl::Status st = ErrnoStatus(errno, absl::StrCat("rename(", dir, "/", tmp, ")"));
    ::unlinkat(dfd.get(), tmp.c_str(), 0);
    return st;
  }
  return absl::OkStatus();
}

absl::Status RemoveHostCache(const std::string& dir) {
  if (dir.empty()) return absl::OkStatus();
  const std::string path = absl::StrCat(dir, "/", kFileName);
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoStatus(errno, absl::StrCat("unlink(", path, ")"));
  return absl::OkStatus();
}

}  // namespace cubicle::runtime
