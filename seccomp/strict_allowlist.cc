// Policy::kStrict's allowlist, by name. Derived by measurement: the
// syscalls `strace -f python3 -I` makes running the example skills
// (examples/skills), the warm interpreter's hand-off after its filter is in
// place (runtime/warm_bootstrap.py: _template_payload's end, _cubicle_serve,
// _run_as_main, _finish), and the launcher's own steps between loading the
// filter and its exec (runtime/payload_start.cc: stdio, close_range,
// signals, umask, chdir, the "executing" message). Where x86_64 and aarch64
// name the same service differently (open/openat, stat/newfstatat,
// dup2/dup3, pipe/pipe2, ...) both are listed; compiler.cc skips a name the
// target architecture lacks. Everything else fails with EPERM.
#include "seccomp/strict_allowlist.h"

#include <iterator>

namespace cubicle::seccomp {
namespace {

constexpr const char* kStrictAllowed[] = {
    // The end of a process or a thread, and the way back from a handler.
    "exit",             // a thread's end
    "exit_group",       // the process's end
    "rt_sigreturn",     // return from a signal handler
    "restart_syscall",  // the kernel's own resumption of an interrupted sleep
    // Memory: the interpreter's heap, arenas, and loaded extension modules.
    "brk",       // the C heap
    "mmap",      // arenas, shared libraries, extension modules
    "munmap",    // their release
    "mremap",    // growing a large buffer in place (realloc)
    "mprotect",  // the loader's RELRO and guard pages; thread stacks
    "madvise",   // malloc returning memory (MADV_DONTNEED)
    // Signals: the interpreter installs its handlers at start.
    "rt_sigaction",     // Python's SIGINT/SIGPIPE handlers; the launcher's reset
    "rt_sigprocmask",   // glibc blocks signals around thread creation
    "sigaltstack",      // faulthandler's stack
    "tgkill",           // raise() and abort(): the signal to oneself
    // Threads (clone itself is allowed for CLONE_THREAD only, in compiler.cc).
    "futex",            // every lock and condition, the GIL's included
    "set_robust_list",  // glibc, at each thread's start
    "set_tid_address",  // glibc, at each thread's start
    "rseq",             // glibc registers restartable sequences per thread
    "sched_yield",      // lock back-off
    "sched_getaffinity",  // os.cpu_count() and os.sched_getaffinity
    "arch_prctl",       // x86_64 thread-local storage (ARCH_SET_FS) at start
    // Files. Seccomp cannot read paths: which files exist is the mount
    // namespace's and read-only root's to say (docs/security.md).
    "open", "openat",          // the standard library, the script, /tmp
    "close", "close_range",    // fds; the launcher closes all but stdio before execve
    "read", "readv", "pread64",     // files, pipes, the hand-off socket
    "write", "writev", "pwrite64",  // stdout, stderr, files under /tmp
    "lseek",                   // io's buffered readers
    "stat", "lstat", "fstat", "newfstatat", "statx",  // the import system's probes
    "access", "faccessat", "faccessat2",  // os.access, shutil.which
    "readlink", "readlinkat",  // os.path.realpath; sys.executable at start
    "getdents64",              // os.listdir, the import system's directory caches
    "getcwd", "chdir", "fchdir",  // the request's cwd; os.getcwd
    "fcntl",                   // F_GETFD/F_SETFD at start; F_DUPFD_CLOEXEC
    "dup", "dup2", "dup3",     // stdio installed from the request's fds
    "ftruncate", "fsync", "fdatasync",  // writing files under /tmp
    "mkdir", "mkdirat", "rmdir",        // tempfile.mkdtemp and its cleanup
    "unlink", "unlinkat",               // temporary files' removal
    "rename", "renameat", "renameat2",  // os.replace
    "umask",                   // the launcher's umask(022) before execve
    "pipe", "pipe2",           // os.pipe
    // Waiting on fds the process already has.
    "poll", "ppoll", "select", "pselect6",  // select module, subprocess-free I/O waits
    "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait",  // selectors.DefaultSelector
    // Sockets the process was handed (the warm hand-off, the launcher's
    // control socket): no socket can be made (socket, socketpair), bound,
    // connected or accepted.
    "sendmsg", "recvmsg",      // the request and its stdio fds (SCM_RIGHTS); "R"
    "sendto", "recvfrom",      // send()/recv() on those sockets
    "getsockopt", "getsockname",  // socket.socket(fileno=...) learns the socket's kind
    "shutdown",                // closing one direction of a socket it holds
    // Identity, limits and time: read only.
    "getpid", "getppid", "gettid",
    "getuid", "geteuid", "getgid", "getegid", "getgroups",
    "getresuid", "getresgid",
    "getpgrp", "getpgid", "getsid",
    "uname",              // platform, sys.platform checks
    "sysinfo",            // glibc's sysconf(_SC_PHYS_PAGES) and friends
    "getrlimit",          // resource.getrlimit (prlimit64 is read-only, in compiler.cc)
    "getrusage", "times",  // resource.getrusage, os.times
    "clock_gettime", "clock_getres", "gettimeofday", "time",  // time.time, time.monotonic
    "clock_nanosleep", "nanosleep",  // time.sleep
    "getrandom",          // hash randomisation at start; os.urandom, random.seed
    "getcpu",             // sched_getcpu
    // No execve or execveat here: the payload's own exec after the filter
    // is an execveat that passes the sandbox's exec token (compiler.cc).
    // A further filter only narrows what is allowed: bwrap's supplied
    // --seccomp programs are loaded after this one (prctl, in compiler.cc).
    "seccomp",
};

}  // namespace

std::span<const char* const> StrictAllowedSyscalls() {
  return {std::begin(kStrictAllowed), std::end(kStrictAllowed)};
}

}  // namespace cubicle::seccomp
