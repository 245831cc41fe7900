// The library a warm R interpreter loads (runtime/warm.h, "R"): what
// runtime/warm_bootstrap.py does for Python with os, socket and ctypes, R
// cannot do without compiled code — receive fds, join namespaces, drop
// capabilities, load a seccomp filter, fork a template's children. The R
// bootstrap (runtime/warm_bootstrap.R) loads this file (dyn.load of the
// sealed memfd init passes as kRLibraryFd) and calls, through .C:
//
//   cubicle_r_serve(fd, exe, changed)   a warm zygote's own interpreter:
//       says "R" on fd, takes the one request and becomes it;
//   cubicle_r_template(init, owner, exe, changed)   a warm template's: says
//       "R" on init, then forks, on each of its owner's requests, a child
//       that joins the zygote built for it, does the payload's hygiene,
//       says "R" and takes its request. It returns only in such a child;
//   cubicle_r_fail(fd, reason)   "E" and why, then exit.
//
// Becoming the request: its stdio, cwd and environment, commandArgs() as
// Rscript sets them, a fresh tempdir(), and R's console reading the
// program — the script, the -e expressions, stdin — so that R's own
// top-level loop runs it as `Rscript` would: auto-printing, warnings,
// "Error: ..." then "Execution halted", quit(status =).
//
// Loaded into R, so C underneath: libc only (no C++ runtime), R's API
// declared here (no R headers at build time), and the wire formats kept in
// step with the C++ side as the Python bootstrap's are:
// namespaces/control.h (included) and namespaces/exec_request.h.
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "namespaces/control.h"

// R's API for front-ends (Rinterface.h, RStartup.h), exported by libR.
extern "C" {
extern int (*ptr_R_ReadConsole)(const char*, unsigned char*, int, int);
extern void R_set_command_line_arguments(int argc, char** argv);
extern char* R_TempDir;
extern void R_reInitTempDir(int die_on_fail);
extern int R_NoEcho;
}

namespace {

using cubicle::namespaces::ControlMessage;
using cubicle::namespaces::ControlType;

// namespaces/exec_request.h.
struct ExecRequestHeader {
  uint32_t magic, argc, envc, flags, warm;
};
constexpr uint32_t kExecRequestMagic = 0x63756231;
constexpr size_t kMaxExecRequestBytes = 128 * 1024;
// runtime/warm.h: WarmMode, and the fds a warm interpreter starts with.
constexpr uint32_t kModeScript = 1, kModeCode = 2, kModeStdin = 4, kModeRSkill = 5;
constexpr int kSocketFd = 3, kControlFd = 4, kLibraryFd = 5;
// runtime/warm_template.h kJoined: the namespaces in the order the owner
// sends them; the last (pid) is the template's to join for its next child.
constexpr int kJoinedCount = 6;
constexpr int kJoinedTypes[kJoinedCount] = {CLONE_NEWNS,     CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET,
                                            CLONE_NEWCGROUP, CLONE_NEWPID};

// ---- Becoming the request ---------------------------------------------------

// The template's environment as R's start left it (R_HOME, R_LIBS_SITE...),
// taken before a request replaces it.
char** g_startup_env = nullptr;

void SnapshotEnvironment() {
  size_t n = 0;
  while (environ[n] != nullptr) ++n;
  g_startup_env = static_cast<char**>(calloc(n + 1, sizeof(char*)));
  for (size_t i = 0; g_startup_env != nullptr && i < n; ++i) g_startup_env[i] = strdup(environ[i]);
}

// `entry` (NAME=value)'s name in `env`, or null.
const char* Find(char* const* env, const char* entry) {
  const size_t name = strcspn(entry, "=") + 1;
  for (; env != nullptr && *env != nullptr; ++env) {
    if (strncmp(*env, entry, name) == 0) return *env;
  }
  return nullptr;
}

// What R's start-up script sets (bin/R, etc/Renviron, etc/ldpaths): a fresh
// Rscript sets them again for the request, so the request keeps the
// template's where it does not set them itself.
bool IsRStartupVariable(const char* entry) {
  static const char* const kNames[] = {"EDITOR=", "LD_LIBRARY_PATH=", "LN_S=", "MAKE=", "PAGER=", "SED=", "TAR="};
  if (strncmp(entry, "R_", 2) == 0) return true;
  for (const char* name : kNames) {
    if (strncmp(entry, name, strlen(name)) == 0) return true;
  }
  return false;
}

// What setlocale(LC_*, "") reads.
bool IsLocaleVariable(const char* entry) { return strncmp(entry, "LANG=", 5) == 0 || strncmp(entry, "LC_", 3) == 0; }

bool SameEntry(const char* a, const char* b) { return a == b || (a != nullptr && b != nullptr && strcmp(a, b) == 0); }

// Installs the request's environment (the strings stay in the request's
// buffer, which lives as long as the process); returns whether its locale
// differs from the template's, which R then sets again.
bool BecomeEnvironment(char** env, size_t count) {
  clearenv();
  for (size_t i = 0; i < count; ++i) {
    if (strchr(env[i], '=') != nullptr) putenv(env[i]);
  }
  bool locale_changed = false;
  for (char** e = g_startup_env; e != nullptr && *e != nullptr; ++e) {
    if (IsRStartupVariable(*e) && Find(environ, *e) == nullptr) putenv(*e);
    if (IsLocaleVariable(*e) && !SameEntry(*e, Find(environ, *e))) locale_changed = true;
  }
  for (char** e = environ; *e != nullptr; ++e) {
    if (IsLocaleVariable(*e) && Find(g_startup_env, *e) == nullptr) locale_changed = true;
  }
  return locale_changed;
}

// Where R's console reads the program from once the request is taken.
FILE* g_program = nullptr;

// R's non-interactive console (Rstd_ReadConsole in src/unix/sys-std.c), over
// g_program instead of the start's -e file: a line at a time, CRLF made LF,
// a last line without one given its newline.
int ReadProgram(const char* prompt, unsigned char* buf, int len, int /*history*/) {
  if (!R_NoEcho) {
    fputs(prompt, stdout);
    fflush(stdout);
  }
  char* line = reinterpret_cast<char*>(buf);
  if (fgets(line, len, g_program) == nullptr) return 0;
  size_t n = strlen(line);
  if (n >= 2 && line[n - 1] == '\n' && line[n - 2] == '\r') {
    line[n - 2] = '\n';
    line[--n] = '\0';
  }
  if ((ferror(g_program) || feof(g_program)) && (n == 0 || line[n - 1] != '\n') && n + 1 < static_cast<size_t>(len)) {
    line[n++] = '\n';
    line[n] = '\0';
  }
  if (!R_NoEcho) {
    fputs(line, stdout);
    fflush(stdout);
  }
  return 1;
}

// A growing list of strings (commandArgs, the -e program).
struct Strings {
  char** items = nullptr;
  size_t count = 0;
  void Add(const char* s) {
    items = static_cast<char**>(realloc(items, (count + 1) * sizeof(char*)));
    items[count++] = strdup(s);
  }
};

// R's own words for a script it cannot open (R_Suicide: on stdout), and
// its status.
[[noreturn]] void CannotOpen(const char* path) {
  printf("Fatal error: cannot open file '%s': %s\n", path, strerror(errno));
  fflush(stdout);
  _exit(2);
}

// An -e expression as R's start-up script (bin/R) hands it to R, and
// commandArgs() then shows it: spaces as ~+~, newlines as ~n~.
char* EncodedExpression(const char* text) {
  char* out = nullptr;
  size_t size = 0;
  FILE* f = open_memstream(&out, &size);
  if (f == nullptr) _exit(2);
  for (const char* c = text; *c != '\0'; ++c) {
    if (*c == ' ') {
      fputs("~+~", f);
    } else if (*c == '\n') {
      fputs("~n~", f);
    } else {
      fputc(*c, f);
    }
  }
  if (fclose(f) != 0) _exit(2);
  return out;
}

// The R skill launcher's program (rpc's SkillArgv, runtime/warm.h
// kRSkillLauncher), written where the launcher writes it: its path.
char* WriteSkillProgram(const char* program) {
  const char* dir = getenv("TMPDIR");
  if (dir == nullptr || *dir == '\0') dir = "/tmp";
  char* path = nullptr;
  if (asprintf(&path, "%s/.cubicle-skill-%d.R", dir, static_cast<int>(getpid())) < 0) _exit(2);
  const int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  const size_t size = strlen(program);
  size_t done = 0;
  while (fd >= 0 && done < size) {
    const ssize_t n = write(fd, program + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (fd < 0 || done != size || close(fd) != 0) {
    fprintf(stderr, "cubicle: cannot create %s: %s\n", path, strerror(errno));
    _exit(2);
  }
  return path;
}

// commandArgs() and the program's source for a warm request (its mode and
// the index in argv of the script, the first -e, "-", or argv's end), as
// Rscript passes them to R: R's binary, --no-echo --no-restore, the
// interpreter's options, then --file=SCRIPT or the -e pairs, then --args
// and the rest. An interpreter named R (not Rscript) takes its program on
// stdin with its own options only.
void BecomeProgram(char** argv, size_t argc, uint32_t mode, size_t index, const char* exe) {
  Strings args;
  args.Add(exe);
  const char* base = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
  const bool rscript = strcmp(base, "Rscript") == 0 || mode == kModeRSkill;
  if (rscript) {
    args.Add("--no-echo");
    args.Add("--no-restore");
  }
  size_t rest = argc;  // the first of the program's own arguments
  if (mode == kModeRSkill) {
    args.Add("--vanilla");
    char* path = WriteSkillProgram(argv[index]);
    char* file = nullptr;
    if (asprintf(&file, "--file=%s", path) < 0) _exit(2);
    args.Add(file);
    g_program = fopen(path, "re");
    if (g_program == nullptr) CannotOpen(path);
  } else {
    for (size_t i = 1; i < index && i < argc; ++i) args.Add(argv[i]);
    if (mode == kModeScript) {
      char* file = nullptr;
      if (asprintf(&file, "--file=%s", argv[index]) < 0) _exit(2);
      args.Add(file);
      g_program = fopen(argv[index], "re");
      if (g_program == nullptr) CannotOpen(argv[index]);
      rest = index + 1;
    } else if (mode == kModeCode) {
      char* text = nullptr;
      size_t size = 0;
      FILE* code = open_memstream(&text, &size);
      rest = index;
      while (code != nullptr && rest + 1 < argc && strcmp(argv[rest], "-e") == 0) {
        args.Add("-e");
        args.Add(EncodedExpression(argv[rest + 1]));
        fputs(argv[rest + 1], code);
        fputc('\n', code);
        rest += 2;
      }
      if (code == nullptr || fclose(code) != 0) _exit(2);
      g_program = fmemopen(text, size, "r");
      if (g_program == nullptr) _exit(2);
    } else {
      if (index < argc) {  // Rscript -
        args.Add("--file=-");
        rest = index + 1;
      }
      g_program = stdin;
      clearerr(stdin);
    }
  }
  if (rscript && rest < argc) {
    args.Add("--args");
    for (size_t i = rest; i < argc; ++i) args.Add(argv[i]);
  }
  R_set_command_line_arguments(static_cast<int>(args.count), args.items);
  ptr_R_ReadConsole = ReadProgram;
}

// A request that is not an invocation of this interpreter: the program it
// names, exec'd with a fresh process's signal state.
[[noreturn]] void ExecInstead(char** argv, const char* search_path) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  for (int sig = 1; sig < NSIG; ++sig) signal(sig, SIG_DFL);
  int err = ENOENT;
  if (strchr(argv[0], '/') != nullptr) {
    execve(argv[0], argv, environ);
    err = errno;
  } else {
    const char* dir = search_path;
    while (true) {
      const size_t len = strcspn(dir, ":");
      char* candidate = nullptr;
      if (asprintf(&candidate, "%.*s/%s", static_cast<int>(len), len == 0 ? "." : dir, argv[0]) >= 0) {
        execve(candidate, argv, environ);
        if (errno != ENOENT && errno != ENOTDIR) err = errno;
        free(candidate);
      }
      if (dir[len] == '\0') break;
      dir += len + 1;
    }
  }
  fprintf(stderr, "cubicle: execve(%s): %s\n", argv[0], strerror(err));
  _exit(127);
}

// Closes every fd from `first` up: close_range (Linux 5.9), else one by one
// up to the fd limit.
void CloseFrom(unsigned first) {
  if (syscall(SYS_close_range, first, ~0u, 0u) == 0) return;
  struct rlimit limit;
  const rlim_t top = getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY ? limit.rlim_cur : 65536;
  for (rlim_t fd = first; fd < top; ++fd) close(static_cast<int>(fd));
}

// One message and its fds (close-on-exec) into `data` and `control`, through
// `iov` and `msg`, which the caller reads the fds from.
ssize_t Receive(int sock, char* data, size_t size, char* control, size_t control_size, struct iovec* iov,
                struct msghdr* msg) {
  *iov = {data, size};
  *msg = {};
  msg->msg_iov = iov;
  msg->msg_iovlen = 1;
  msg->msg_control = control;
  msg->msg_controllen = control_size;
  ssize_t n;
  do {
    n = recvmsg(sock, msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  return n;
}

// The one request, from `sock` (init forwards the launcher's execution
// request unchanged, with its stdio as three fds): becomes it and returns
// to R, which then reads the program; or execs another program. Anything
// malformed ends the process, as the Python bootstrap does.
void Serve(int sock, const char* exe, int* locale_changed) {
  static char data[kMaxExecRequestBytes + 1];
  alignas(struct cmsghdr) char control[CMSG_SPACE(3 * sizeof(int))];
  struct iovec iov;
  struct msghdr msg;
  const ssize_t n = Receive(sock, data, sizeof(data), control, sizeof(control), &iov, &msg);
  close(sock);
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  if (n < static_cast<ssize_t>(sizeof(ExecRequestHeader)) || (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
      c == nullptr || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(3 * sizeof(int))) {
    _exit(126);
  }
  int fds[3];
  memcpy(fds, CMSG_DATA(c), sizeof(fds));
  ExecRequestHeader header;
  memcpy(&header, data, sizeof(header));
  const size_t strings = static_cast<size_t>(header.argc) + header.envc + 2;
  size_t nuls = 0;
  for (ssize_t i = sizeof(header); i < n; ++i) nuls += data[i] == '\0';
  if (header.magic != kExecRequestMagic || header.argc == 0 || nuls != strings || data[n - 1] != '\0') _exit(126);
  char** list = static_cast<char**>(calloc(strings + 1, sizeof(char*)));
  if (list == nullptr) _exit(126);
  char* at = data + sizeof(header);
  for (size_t i = 0; i < strings; ++i, at += strlen(at) + 1) list[i] = at;
  char** argv = static_cast<char**>(calloc(header.argc + 1, sizeof(char*)));
  if (argv == nullptr) _exit(126);
  for (size_t i = 0; i < header.argc; ++i) argv[i] = list[i];
  char** env = list + header.argc;
  const char* cwd = list[header.argc + header.envc];
  const char* search_path = list[header.argc + header.envc + 1];

  // Nothing R buffered for the template's /dev/null may reach the request.
  fflush(stdout);
  fflush(stderr);
  for (int i = 0; i < 3; ++i) fds[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 10);
  for (int i = 0; i < 3; ++i) {
    if (fds[i] < 0 || dup2(fds[i], i) != i) _exit(126);
  }
  CloseFrom(3);  // the start's -e file, these fds: only stdio stays
  clearerr(stdin);
  clearerr(stdout);
  clearerr(stderr);
  if (chdir(cwd) != 0) {
    fprintf(stderr, "cubicle: chdir(%s): %s\n", cwd, strerror(errno));
    _exit(127);
  }
  *locale_changed = BecomeEnvironment(env, header.envc) ? 1 : 0;
  if (header.warm == 0) ExecInstead(argv, search_path);
  // R's own per-session folder, made again where this process can see it
  // (the template's is in another mount namespace), as tempdir(check =
  // TRUE) would: R_TempDir unset, then R's own initialisation.
  R_TempDir = nullptr;
  R_reInitTempDir(1);
  BecomeProgram(argv, header.argc, header.warm & 0xFF, header.warm >> 8, exe);
}

bool SendWord(int fd, const char* word, size_t size) {
  ssize_t n;
  do {
    n = send(fd, word, size, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n == static_cast<ssize_t>(size);
}

// ---- The template -----------------------------------------------------------

// The owner's plan (runtime/warm_template.cc SendPlan): 'P', new session
// (byte), rlimits (count, then resource, soft, hard each), the seccomp
// program (count of 8-byte instructions, then them).
struct Plan {
  bool new_session = false;
  uint32_t rlimit_count = 0;
  struct Limit {
    int32_t resource;
    uint64_t soft, hard;
  } * rlimits = nullptr;
  struct sock_fprog seccomp = {};
};

bool ReadPlan(int owner, Plan* plan) {
  static char data[1 << 20];
  ssize_t n;
  do {
    n = recv(owner, data, sizeof(data), 0);
  } while (n < 0 && errno == EINTR);
  size_t at = 1 + 1 + 4;
  if (n < static_cast<ssize_t>(at) || data[0] != 'P') return false;
  plan->new_session = data[1] != 0;
  memcpy(&plan->rlimit_count, data + 2, 4);
  const size_t limit_bytes = 4 + 8 + 8;
  if (plan->rlimit_count > 64 || static_cast<size_t>(n) < at + plan->rlimit_count * limit_bytes + 4) return false;
  plan->rlimits = static_cast<Plan::Limit*>(calloc(plan->rlimit_count + 1, sizeof(Plan::Limit)));
  for (uint32_t i = 0; i < plan->rlimit_count; ++i, at += limit_bytes) {
    memcpy(&plan->rlimits[i].resource, data + at, 4);
    memcpy(&plan->rlimits[i].soft, data + at + 4, 8);
    memcpy(&plan->rlimits[i].hard, data + at + 12, 8);
  }
  uint32_t length = 0;
  memcpy(&length, data + at, 4);
  at += 4;
  if (length > BPF_MAXINSNS || static_cast<size_t>(n) != at + length * sizeof(struct sock_filter)) return false;
  if (length > 0) {
    void* filter = malloc(length * sizeof(struct sock_filter));
    if (filter == nullptr) return false;
    memcpy(filter, data + at, length * sizeof(struct sock_filter));
    plan->seccomp.len = static_cast<unsigned short>(length);
    plan->seccomp.filter = static_cast<struct sock_filter*>(filter);
  }
  return true;
}

// A setup failure, reported on the zygote's control socket as init reports
// its own: the step, its detail, errno.
void SendControl(int control, ControlType type, int status, const struct rusage* usage, const char* step,
                 const char* detail, int err) {
  ControlMessage m;
  memset(&m, 0, sizeof(m));
  m.type = type;
  m.wait_status = status;
  if (usage != nullptr) m.rusage = *usage;
  snprintf(m.error.step, sizeof(m.error.step), "%s", step);
  snprintf(m.error.detail, sizeof(m.error.detail), "%s", detail);
  m.error.err = err;
  ssize_t n;
  do {
    n = write(control, &m, sizeof(m));
  } while (n < 0 && errno == EINTR);  // a launcher that is gone reads nothing: no more to do
}

[[noreturn]] void FailSetup(int control, const char* step, const char* detail, int err) {
  SendControl(control, ControlType::kSetupError, 0, nullptr, step, detail, err);
  _exit(127);
}

// The interpreter of one sandbox, forked into its pid namespace: joins the
// sandbox's groups and other namespaces, does the payload's hygiene
// (namespaces/process.cc, in the same order; warm_bootstrap.py's
// _template_payload), says "R" to init with its kernel-vouched
// credentials, and takes its request.
void TemplateChild(const Plan& plan, int* fds, int nfds, int parent_alive, const char* exe, int* locale_changed) {
  int warm = fds[kJoinedCount];
  int control = fds[kJoinedCount + 1];
  if (prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0) != 0) FailSetup(control, "prctl(PR_SET_PDEATHSIG)", "", errno);
  // The template may have ended before the line above took effect: its end
  // of this pipe (which only it holds) is then closed.
  struct pollfd alive = {parent_alive, POLLIN, 0};
  if (poll(&alive, 1, 0) != 0) _exit(1);
  close(parent_alive);
  for (int i = kJoinedCount + 2; i < nfds; ++i) {
    if (write(fds[i], "0", 1) != 1) FailSetup(control, "join cgroup", "warm interpreter", errno);
    close(fds[i]);
  }
  static const char* const kNames[kJoinedCount] = {"mnt", "uts", "ipc", "net", "cgroup", "pid"};
  for (int i = 0; i < kJoinedCount; ++i) {
    if (kJoinedTypes[i] != CLONE_NEWPID && setns(fds[i], kJoinedTypes[i]) != 0) {
      FailSetup(control, "setns", kNames[i], errno);
    }
    close(fds[i]);
  }
  if (plan.new_session && setsid() < 0) FailSetup(control, "setsid", "warm interpreter", errno);
  for (uint32_t i = 0; i < plan.rlimit_count; ++i) {
    struct rlimit r = {plan.rlimits[i].soft, plan.rlimits[i].hard};
    if (setrlimit(static_cast<__rlimit_resource_t>(plan.rlimits[i].resource), &r) != 0) {
      FailSetup(control, "setrlimit", "warm interpreter", errno);
    }
  }
  // Out of the way first: either may be 3 or 4 already.
  warm = fcntl(warm, F_DUPFD_CLOEXEC, 10);
  control = fcntl(control, F_DUPFD_CLOEXEC, 10);
  if (warm < 0 || control < 0 || dup2(warm, kSocketFd) != kSocketFd || dup2(control, kControlFd) != kControlFd) {
    FailSetup(control >= 0 ? control : fds[kJoinedCount + 1], "close fds", "warm interpreter", errno);
  }
  control = kControlFd;
  CloseFrom(5);
  if (prctl(PR_SET_SECUREBITS, 0xEF, 0, 0, 0) != 0) FailSetup(control, "prctl(PR_SET_SECUREBITS)", "", errno);
  for (int cap = 0; cap < 64; ++cap) {
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) == 0) continue;
    if (errno == EINVAL) break;  // past the last capability
    FailSetup(control, "prctl(PR_CAPBSET_DROP)", "", errno);
  }
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0 && errno != EINVAL) {
    FailSetup(control, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", "", errno);
  }
  struct __user_cap_header_struct header = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct none[2] = {};
  if (syscall(SYS_capset, &header, none) != 0) FailSetup(control, "capset", "", errno);
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) FailSetup(control, "prctl(PR_SET_NO_NEW_PRIVS)", "", errno);
  if (plan.seccomp.len > 0 && prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &plan.seccomp, 0, 0) != 0) {
    FailSetup(control, "seccomp(SECCOMP_SET_MODE_FILTER)", "", errno);
  }
  struct ucred me = {getpid(), getuid(), getgid()};
  alignas(struct cmsghdr) char buf[CMSG_SPACE(sizeof(me))];
  char word = 'R';
  struct iovec iov = {&word, 1};
  struct msghdr msg = {};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = buf;
  msg.msg_controllen = sizeof(buf);
  struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_CREDENTIALS;
  c->cmsg_len = CMSG_LEN(sizeof(me));
  memcpy(CMSG_DATA(c), &me, sizeof(me));
  if (sendmsg(kSocketFd, &msg, MSG_NOSIGNAL) != 1) _exit(1);  // init is gone
  close(kControlFd);  // gone before any of the request's code runs
  Serve(kSocketFd, exe, locale_changed);
}

// The interpreters this template forked, whose parent it is: only a parent
// learns a process's status, so the template reports each one's end on its
// zygote's control socket, as init reports a payload's.
struct Child {
  int pidfd;
  pid_t pid;
  int control;
};

void Reap(const Child& child) {
  int status = 0;
  struct rusage usage = {};
  while (wait4(child.pid, &status, 0, &usage) < 0 && errno == EINTR) {
  }
  SendControl(child.control, ControlType::kPayloadExited, status, &usage, "", "", 0);
  close(child.control);
  close(child.pidfd);
}

// One spawn request ('S' with the zygote's namespaces, its interpreter
// socket, its control socket and its group files). Returns in the child
// only, with true; false in the template.
bool Spawn(int owner, const Plan& plan, int alive, int holder, Child** children, size_t* count, const char* exe,
           int* locale_changed) {
  char word[64];
  alignas(struct cmsghdr) char control[CMSG_SPACE(32 * sizeof(int))];
  struct iovec iov;
  struct msghdr msg;
  const ssize_t n = Receive(owner, word, sizeof(word), control, sizeof(control), &iov, &msg);
  if (n <= 0) _exit(0);  // the owner is gone: the children die with this process
  int fds[32];
  int nfds = 0;
  for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const int got = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    for (int i = 0; i < got && nfds < 32; ++i) memcpy(&fds[nfds++], CMSG_DATA(c) + i * sizeof(int), sizeof(int));
  }
  auto close_all = [&] {
    for (int i = 0; i < nfds; ++i) close(fds[i]);
  };
  if (word[0] != 'S' || nfds < kJoinedCount + 2) {
    close_all();
    return false;
  }
  const int child_control = fds[kJoinedCount + 1];
  if (setns(fds[kJoinedCount - 1], CLONE_NEWPID) != 0) {
    SendControl(child_control, ControlType::kSetupError, 0, nullptr, "setns", "pid", errno);
    close_all();
    return false;
  }
  fflush(stdout);
  fflush(stderr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(owner);
    close(holder);
    for (size_t i = 0; i < *count; ++i) {
      close((*children)[i].pidfd);
      close((*children)[i].control);
    }
    TemplateChild(plan, fds, nfds, alive, exe, locale_changed);
    return true;
  }
  for (int i = 0; i < nfds; ++i) {
    if (fds[i] != child_control) close(fds[i]);
  }
  const int pidfd = pid < 0 ? -1 : static_cast<int>(syscall(SYS_pidfd_open, pid, 0));
  if (pid < 0 || pidfd < 0) {
    SendControl(child_control, ControlType::kSetupError, 0, nullptr, pid < 0 ? "fork" : "pidfd_open",
                "warm interpreter", errno);
    close(child_control);
    return false;
  }
  *children = static_cast<Child*>(realloc(*children, (*count + 1) * sizeof(Child)));
  (*children)[(*count)++] = Child{pidfd, pid, child_control};
  return false;
}

// The template's loop: spawn requests from the owner, children's ends.
// Returns only in a child that has taken its request.
void RunTemplate(int owner, const Plan& plan, const char* exe, int* locale_changed) {
  // Each child's parent-death signal is bound to this process; a child
  // learns whether this process was still there when it took effect from
  // this pipe, whose writing end only this process keeps.
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) _exit(1);
  const int alive = pipe_fds[0], holder = pipe_fds[1];
  Child* children = nullptr;
  size_t count = 0;
  struct pollfd* polled = nullptr;
  while (true) {
    polled = static_cast<struct pollfd*>(realloc(polled, (count + 1) * sizeof(struct pollfd)));
    polled[0] = {owner, POLLIN, 0};
    for (size_t i = 0; i < count; ++i) polled[i + 1] = {children[i].pidfd, POLLIN, 0};
    if (poll(polled, count + 1, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    for (size_t i = count; i-- > 0;) {
      if (polled[i + 1].revents == 0) continue;
      Reap(children[i]);
      children[i] = children[--count];
    }
    if (polled[0].revents != 0 && Spawn(owner, plan, alive, holder, &children, &count, exe, locale_changed)) {
      free(polled);
      return;
    }
  }
}

}  // namespace

extern "C" {

// .C entry points: every argument is a pointer to R's vector data.

__attribute__((visibility("default"))) void cubicle_r_fail(int* fd, char** reason) {
  char word[241] = "E";
  snprintf(word + 1, sizeof(word) - 1, "%s", reason[0]);
  SendWord(*fd, word, strlen(word));
  _exit(1);
}

__attribute__((visibility("default"))) void cubicle_r_serve(int* fd, char** exe, int* locale_changed) {
  close(kLibraryFd);  // mapped: the fd is of no more use
  SnapshotEnvironment();
  if (!SendWord(*fd, "R", 1)) _exit(1);
  Serve(*fd, exe[0], locale_changed);
}

__attribute__((visibility("default"))) void cubicle_r_template(int* init, int* owner, char** exe,
                                                               int* locale_changed) {
  close(kLibraryFd);
  SnapshotEnvironment();
  Plan plan;
  if (!SendWord(*init, "R", 1)) _exit(1);
  close(*init);
  if (!ReadPlan(*owner, &plan)) _exit(2);
  RunTemplate(*owner, plan, exe[0], locale_changed);
}

}  // extern "C"
