#include "tests/support/host_probes.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"

namespace cubicle::test_support {
namespace {

std::string ErrnoName(int err) {
  const char* name = strerrorname_np(err);
  return name != nullptr ? name : absl::StrCat("errno ", err);
}

// How a probe child ended, in words: "returned ENOSYS", "died of SIGSEGV".
std::string Ending(int wait_status) {
  if (WIFEXITED(wait_status)) {
    const int code = WEXITSTATUS(wait_status);
    if (code == kProbeReturnedPid) return "returned the pid";
    if (code == kProbeReturnedOther) return "returned something other than the pid";
    return absl::StrCat("returned ", ErrnoName(code));
  }
  if (WIFSIGNALED(wait_status)) {
    const char* name = sigabbrev_np(WTERMSIG(wait_status));
    return absl::StrCat("died of SIG", name != nullptr ? name : absl::StrCat(WTERMSIG(wait_status)));
  }
  return absl::StrCat("ended with wait status ", wait_status);
}

bool DiedOf(int wait_status, int sig) { return WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == sig; }

// The exit code of a probe child whose syscall returned `rc`.
int ProbeExitCode(long rc) {
  if (rc == ::getpid()) return kProbeReturnedPid;
  if (rc < 0 && rc > -kProbeReturnedOther) return static_cast<int>(-rc);
  return kProbeReturnedOther;
}

// Runs `probe` in a forked child (no filter, no core file) and returns its
// wait status, or -1 when it could not be forked.
template <typename Probe>
int RunUnfiltered(Probe probe) {
  pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(5);
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    ::_exit(ProbeExitCode(probe()));
  }
  if (pid < 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

}  // namespace

HostProperty I386SyscallsFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == kProbeReturnedPid) return HostProperty::Present();
  std::string why = absl::StrCat(
      "this host does not execute i386 syscalls via int 0x80: unfiltered getpid ", Ending(wait_status));
  if (DiedOf(wait_status, SIGSYS)) absl::StrAppend(&why, " (a seccomp filter of the host's own refuses them)");
  return HostProperty::Absent(std::move(why));
}

HostProperty X32SyscallsFromWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return HostProperty::Present();
  return HostProperty::Absent(absl::StrCat(
      "this host kills x32 syscalls by itself: unfiltered x32 getpid ", Ending(wait_status),
      ", so a SIGSYS under cubicle's filter would not show the filter refused it"));
}

const HostProperty& I386Syscalls() {
  static const HostProperty property = [] {
#if defined(__x86_64__)
    int status = RunUnfiltered([] {
      long rc;
      // 20 is getpid in the i386 table; int 0x80 clobbers r8-r11 on x86_64.
      asm volatile("int $0x80" : "=a"(rc) : "a"(20L) : "r8", "r9", "r10", "r11", "memory");
      return rc;
    });
    if (status == -1) return HostProperty::Absent(absl::StrCat("fork: ", ErrnoName(errno)));
    return I386SyscallsFromWaitStatus(status);
#else
    return HostProperty::Absent("int 0x80 is an x86_64 probe");
#endif
  }();
  return property;
}

const HostProperty& UnfilteredX32Syscalls() {
  static const HostProperty property = [] {
#if defined(__x86_64__)
    int status = RunUnfiltered([] {
      long rc = ::syscall(__X32_SYSCALL_BIT | __NR_getpid);
      return rc == -1 ? -static_cast<long>(errno) : rc;
    });
    if (status == -1) return HostProperty::Absent(absl::StrCat("fork: ", ErrnoName(errno)));
    return X32SyscallsFromWaitStatus(status);
#else
    return HostProperty::Absent("x32 is an x86_64 ABI");
#endif
  }();
  return property;
}

HostProperty Executable(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(path.c_str(), X_OK) != 0) {
    return HostProperty::Absent(absl::StrCat(path, " is not installed"));
  }
  return HostProperty::Present();
}

HostProperty Python3() { return Executable("/usr/bin/python3"); }

const HostProperty& Loopback() {
  static const HostProperty property = [] {
    auto absent = [](const char* step) {
      return HostProperty::Absent(
          absl::StrCat("no loopback networking on this host: ", step, "(127.0.0.1): ", ErrnoName(errno)));
    };
    int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener < 0) return absent("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    HostProperty result = HostProperty::Present();
    int client = -1, served = -1;
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      result = absent("bind");
    } else if (::listen(listener, 1) != 0 ||
               ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      result = absent("listen");
    } else if ((client = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
               ::connect(client, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      result = absent("connect");
    } else if ((served = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC)) < 0) {
      result = absent("accept");
    }
    for (int fd : {served, client, listener}) {
      if (fd >= 0) ::close(fd);
    }
    return result;
  }();
  return property;
}

HostProperty OpenFiles(rlim_t needed) {
  rlimit limit;
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return HostProperty::Absent(absl::StrCat("getrlimit(RLIMIT_NOFILE): ", ErrnoName(errno)));
  }
  if (limit.rlim_cur >= needed) return HostProperty::Present();
  if (limit.rlim_max < needed) {
    return HostProperty::Absent(absl::StrCat("this test holds up to ", needed,
                                             " file descriptors; RLIMIT_NOFILE's hard limit here is ",
                                             limit.rlim_max));
  }
  limit.rlim_cur = needed;
  if (::setrlimit(RLIMIT_NOFILE, &limit) != 0) {
    return HostProperty::Absent(absl::StrCat("setrlimit(RLIMIT_NOFILE, ", needed, "): ", ErrnoName(errno)));
  }
  return HostProperty::Present();
}

HostProperty IdmappedMounts(const std::string& dir) {
  auto absent = [&](const std::string& step, int err) {
    return HostProperty::Absent(absl::StrCat("no idmapped mount of ", dir, " on this host: ", step, ": ",
                                             ErrnoName(err)));
  };
  // A user namespace to idmap with: a child's, whose maps we write.
  int ready[2], done[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) return absent("pipe2", errno);
  if (::pipe2(done, O_CLOEXEC) != 0) {
    const int err = errno;
    ::close(ready[0]);
    ::close(ready[1]);
    return absent("pipe2", err);
  }
  pid_t child = ::fork();
  if (child == 0) {
    ::close(ready[0]);
    ::close(done[1]);
    char c = ::unshare(CLONE_NEWUSER) == 0 ? 'u' : 'e';
    (void)!::write(ready[1], &c, 1);
    (void)!::read(done[0], &c, 1);  // EOF: the parent is done with our namespace
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(done[0]);
  HostProperty result = HostProperty::Present();
  char c = 0;
  int userns = -1;
  if (child < 0) {
    result = absent("fork", errno);
  } else if (::read(ready[0], &c, 1) != 1 || c != 'u') {
    result = HostProperty::Absent("no idmapped mounts on this host: a user namespace cannot be made");
  } else {
    const std::string proc = absl::StrCat("/proc/", child, "/");
    auto write = [&](const char* file, const char* text) {
      int fd = ::open((proc + file).c_str(), O_WRONLY | O_CLOEXEC);
      bool ok = fd >= 0 && ::write(fd, text, std::strlen(text)) == static_cast<ssize_t>(std::strlen(text));
      int err = errno;
      if (fd >= 0) ::close(fd);
      errno = err;
      return ok;
    };
    // Any one id will do: the probe only asks whether the mount takes a map.
    if (!write("uid_map", "0 65534 1\n") || !write("setgroups", "deny") || !write("gid_map", "0 65534 1\n")) {
      result = absent("writing the user namespace's maps", errno);
    } else if ((userns = ::open((proc + "ns/user").c_str(), O_RDONLY | O_CLOEXEC)) < 0) {
      result = absent("open(ns/user)", errno);
    }
  }
  ::close(ready[0]);
  ::close(done[1]);
  if (child > 0) ::waitpid(child, nullptr, 0);
  if (!result.present) return result;

  int tree = static_cast<int>(::syscall(SYS_open_tree, AT_FDCWD, dir.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC));
  if (tree < 0) {
    result = absent("open_tree(OPEN_TREE_CLONE)", errno);
  } else {
    mount_attr attr;
    std::memset(&attr, 0, sizeof(attr));
    attr.attr_set = MOUNT_ATTR_IDMAP;
    attr.userns_fd = static_cast<uint64_t>(userns);
    if (::syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof(attr)) != 0) {
      result = absent("mount_setattr(MOUNT_ATTR_IDMAP)", errno);
    }
    ::close(tree);  // detached and never attached: gone with its fd
  }
  ::close(userns);
  return result;
}

namespace {

int RemoveProbeEntry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }

}  // namespace

const HostProperty& OverlayfsInUserNamespace() {
  static const HostProperty property = [] {
    char base[] = "/tmp/cubicle-overlay-probe-XXXXXX";
    if (::mkdtemp(base) == nullptr) return HostProperty::Absent(absl::StrCat("mkdtemp: ", ErrnoName(errno)));
    const std::string lower = absl::StrCat(base, "/lower"), upper = absl::StrCat(base, "/upper"),
                      work = absl::StrCat(base, "/work"), merged = absl::StrCat(base, "/merged");
    for (const std::string* dir : {&lower, &upper, &work, &merged}) ::mkdir(dir->c_str(), 0755);
    const std::string options = absl::StrCat("upperdir=", upper, ",workdir=", work, ",lowerdir=", lower, ",userxattr");
    const std::string uid_map = absl::StrCat("0 ", ::getuid(), " 1\n");
    const std::string gid_map = absl::StrCat("0 ", ::getgid(), " 1\n");
    constexpr int kNoUserNamespace = 200;
    pid_t pid = ::fork();
    if (pid == 0) {
      auto write = [](const char* file, const std::string& text) {
        int fd = ::open(file, O_WRONLY | O_CLOEXEC);
        return fd >= 0 && ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      };
      if (::unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0 || !write("/proc/self/uid_map", uid_map) ||
          !write("/proc/self/setgroups", "deny") || !write("/proc/self/gid_map", gid_map)) {
        ::_exit(kNoUserNamespace);
      }
      ::_exit(::mount("overlay", merged.c_str(), "overlay", 0, options.c_str()) == 0 ? 0 : errno & 0x7f);
    }
    int status = -1;
    if (pid > 0) ::waitpid(pid, &status, 0);
    ::nftw(base, RemoveProbeEntry, 16, FTW_DEPTH | FTW_PHYS);
    if (pid < 0) return HostProperty::Absent(absl::StrCat("fork: ", ErrnoName(errno)));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return HostProperty::Present();
    if (WIFEXITED(status) && WEXITSTATUS(status) == kNoUserNamespace) {
      return HostProperty::Absent("no overlayfs in a user namespace: a user namespace cannot be made here");
    }
    return HostProperty::Absent(absl::StrCat("no overlayfs in a user namespace here: mount(overlay) ", Ending(status)));
  }();
  return property;
}

namespace {

// mknod of a node of `major` in `dir`, then `use` of its path; the node is
// removed again.
template <typename Use>
HostProperty WithDeviceNode(const std::string& dir, uint32_t major, Use use) {
  const std::string node = absl::StrCat(dir, "/cubicle-probe-node");
  if (::mknod(node.c_str(), S_IFCHR | 0600, makedev(major, 0)) != 0) {
    return HostProperty::Absent(
        absl::StrCat("device nodes cannot be made here: mknod(", node, "): ", ErrnoName(errno)));
  }
  HostProperty result = use(node);
  ::unlink(node.c_str());
  return result;
}

}  // namespace

HostProperty DeviceNodes(const std::string& dir, uint32_t major) {
  return WithDeviceNode(dir, major, [](const std::string&) { return HostProperty::Present(); });
}

HostProperty OpenableDeviceNodes(const std::string& dir, uint32_t major) {
  return WithDeviceNode(dir, major, [&](const std::string& node) {
    int fd = ::open(node.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      ::close(fd);
      return HostProperty::Absent(absl::StrCat("character major ", major, " has a driver here"));
    }
    if (errno != ENXIO && errno != ENODEV) {
      return HostProperty::Absent(absl::StrCat("device nodes under ", dir,
                                               " cannot be opened (a nodev mount?): open: ", ErrnoName(errno)));
    }
    return HostProperty::Present();
  });
}

HostProperty DirectWrites(const std::string& dir) {
  const std::string file = absl::StrCat(dir, "/cubicle-probe-direct");
  int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    return HostProperty::Absent(
        absl::StrCat("the filesystem of ", dir, " takes no O_DIRECT writes: open: ", ErrnoName(errno)));
  }
  constexpr size_t kBlock = 4096;  // aligned for any logical block size up to a page
  void* block = nullptr;
  HostProperty result = HostProperty::Present();
  if (::posix_memalign(&block, kBlock, kBlock) != 0) {
    result = HostProperty::Absent("posix_memalign failed");
  } else {
    std::memset(block, 0, kBlock);
    if (::write(fd, block, kBlock) != static_cast<ssize_t>(kBlock)) {
      result = HostProperty::Absent(
          absl::StrCat("the filesystem of ", dir, " takes no O_DIRECT writes: write: ", ErrnoName(errno)));
    }
    std::free(block);
  }
  ::close(fd);
  ::unlink(file.c_str());
  return result;
}

}  // namespace cubicle::test_support
