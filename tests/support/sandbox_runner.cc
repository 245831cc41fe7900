#include "tests/support/sandbox_runner.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/warm_template.h"
#include "absl/time/clock.h"
#include "base/unique_fd.h"

extern char** environ;

namespace cubicle::test_support {
namespace {

// A memfd holding `data`, positioned at its start.
UniqueFd MemfdWith(const char* name, absl::string_view data) {
  UniqueFd fd(::memfd_create(name, MFD_CLOEXEC));
  if (!fd) {
    std::perror("memfd_create");
    std::abort();
  }
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd.get(), data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      std::perror("write(memfd)");
      std::abort();
    }
    off += static_cast<size_t>(n);
  }
  ::lseek(fd.get(), 0, SEEK_SET);
  return fd;
}

// Everything in `fd` from offset 0, whatever the shared file offset is.
std::string ReadAll(int fd) {
  std::string out;
  char buf[65536];
  off_t off = 0;
  for (;;) {
    ssize_t n = ::pread(fd, buf, sizeof(buf), off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return out;
}

// pid -> ppid for every process in /proc.
std::map<pid_t, pid_t> ParentTable() {
  std::map<pid_t, pid_t> table;
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return table;
  while (struct dirent* e = ::readdir(dir)) {
    pid_t pid;
    if (!absl::SimpleAtoi(e->d_name, &pid)) continue;
    std::string stat = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    size_t close = stat.rfind(')');
    if (close == std::string::npos) continue;
    std::vector<std::string> fields = absl::StrSplit(stat.substr(close + 1), ' ', absl::SkipEmpty());
    pid_t ppid;
    if (fields.size() < 2 || !absl::SimpleAtoi(fields[1], &ppid)) continue;
    table[pid] = ppid;
  }
  ::closedir(dir);
  return table;
}

}  // namespace

runtime::SandboxSpec TestSpec(std::vector<std::string> argv, const runtime::DefaultsOptions& options) {
  absl::StatusOr<runtime::SandboxSpec> spec = runtime::DefaultSpec(options);
  if (!spec.ok()) {
    std::fprintf(stderr, "DefaultSpec: %s\n", spec.status().ToString().c_str());
    std::abort();
  }
  spec->argv = std::move(argv);
  return *std::move(spec);
}

runtime::SandboxSpec ShellSpec(absl::string_view script, const runtime::DefaultsOptions& options) {
  return TestSpec({"/bin/sh", "-c", std::string(script)}, options);
}

namespace {

// Runs `run(stdin, stdout, stderr)` with stdin reading `stdin_text` and the
// output captured in memfds (nothing can deadlock however much is written).
absl::StatusOr<SandboxRun> Captured(absl::string_view stdin_text,
                                    absl::FunctionRef<absl::StatusOr<runtime::ExecResult>(int, int, int)> run) {
  UniqueFd in = MemfdWith("sandbox-stdin", stdin_text);
  UniqueFd out = MemfdWith("sandbox-stdout", "");
  UniqueFd err = MemfdWith("sandbox-stderr", "");
  absl::StatusOr<runtime::ExecResult> result = run(in.get(), out.get(), err.get());
  if (!result.ok()) return result.status();
  SandboxRun captured;
  captured.result = *std::move(result);
  captured.out = ReadAll(out.get());
  captured.err = ReadAll(err.get());
  return captured;
}

}  // namespace

absl::StatusOr<SandboxRun> RunInSandbox(const runtime::SandboxSpec& spec, absl::string_view stdin_text,
                                        runtime::LaunchOptions options) {
  return Captured(stdin_text, [&](int in, int out, int err) {
    options.stdin_fd = in;
    options.stdout_fd = out;
    options.stderr_fd = err;
    return runtime::Launch(spec, options);
  });
}

rootfs::MountOp Bind(std::string source, std::string dest, bool readonly) {
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kBind;
  op.source = std::move(source);
  op.dest = std::move(dest);
  op.readonly = readonly;
  return op;
}

rootfs::MountOp Tmpfs(std::string dest) {
  rootfs::MountOp op;
  op.kind = rootfs::MountKind::kTmpfs;
  op.dest = std::move(dest);
  return op;
}

absl::StatusOr<SandboxRun> RunInZygote(runtime::Zygote& zygote, runtime::ExecRequest request,
                                       absl::string_view stdin_text) {
  return Captured(stdin_text, [&](int in, int out, int err) {
    request.stdin_fd = in;
    request.stdout_fd = out;
    request.stderr_fd = err;
    return zygote.Run(request);
  });
}

absl::StatusOr<SandboxRun> RunArgv(std::vector<std::string> argv, absl::string_view stdin_text) {
  return RunInSandbox(TestSpec(std::move(argv)), stdin_text);
}

absl::StatusOr<SandboxRun> RunShell(absl::string_view script, const runtime::DefaultsOptions& options) {
  return RunInSandbox(ShellSpec(script, options));
}

std::string RouteName(PayloadRoute route) {
  switch (route) {
    case PayloadRoute::kCold:
      return "Cold";
    case PayloadRoute::kArmedDirect:
      return "ArmedDirect";
    case PayloadRoute::kArmedViaInit:
      return "ArmedViaInit";
    case PayloadRoute::kWarm:
      return "Warm";
    case PayloadRoute::kWarmTemplate:
      return "WarmTemplate";
  }
  return absl::StrCat("PayloadRoute(", static_cast<int>(route), ")");
}

void PrintTo(PayloadRoute route, std::ostream* os) { *os << RouteName(route); }

runtime::WarmInterpreter WarmPython() { return {{"/usr/bin/python3", "-I"}, {}}; }

absl::StatusOr<SandboxRun> RunOnRoute(PayloadRoute route, const runtime::SandboxSpec& spec,
                                      absl::string_view stdin_text) {
  if (route == PayloadRoute::kCold) return RunInSandbox(spec, stdin_text);
  if (!spec.argv0.empty() || !spec.cwd_fallbacks.empty() || !spec.inherited_fds.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("argv0, cwd_fallbacks and inherited_fds have no place in a "
                                                   "request: the ", RouteName(route), " route cannot run this spec"));
  }
  runtime::SandboxSpec profile = spec;
  runtime::ZygoteOptions options;  // wait_until_ready, not cold: as a pool makes them
  runtime::ExecRequest request;
  request.argv = spec.argv;
  request.env = spec.env;
  request.cwd = spec.cwd;
  request.timeout = spec.timeout;
  request.return_at_exit = true;  // as a pool hands off: ~Zygote tears the sandbox down
  std::optional<TempDir> fresh_workspace;  // outlives the zygote, which holds its mount
  if (route == PayloadRoute::kArmedViaInit) {
    options.accept_workspace = true;
    auto bind = std::find_if(profile.mounts.begin(), profile.mounts.end(), [](const rootfs::MountOp& op) {
      return op.kind == rootfs::MountKind::kBind && op.dest == runtime::kWorkspaceDir;
    });
    if (bind != profile.mounts.end()) {
      request.workspace = bind->source;
      profile.mounts.erase(bind);
    } else {
      request.workspace = fresh_workspace.emplace().path();
    }
  }
  if (route == PayloadRoute::kWarm || route == PayloadRoute::kWarmTemplate) options.interpreter = WarmPython();
  std::shared_ptr<runtime::WarmTemplate> from;  // outlives the zygote, which holds it too
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> zygote = absl::UnknownError("not made");
  if (route == PayloadRoute::kWarmTemplate) {
    absl::StatusOr<std::shared_ptr<runtime::WarmTemplate>> started = runtime::WarmTemplate::Start(profile, options);
    if (!started.ok()) {
      return absl::Status(started.status().code(), absl::StrCat("WarmTemplate::Start: ", started.status().message()));
    }
    from = *std::move(started);
    zygote = from->Make(profile, options);
  } else {
    zygote = runtime::Zygote::Create(profile, options);
  }
  if (!zygote.ok()) {
    return absl::Status(zygote.status().code(), absl::StrCat("Zygote::Create: ", zygote.status().message()));
  }
  // Built ahead of the request: its armed payload (or interpreter) waits as
  // init's one child, so the request cannot take the cold path's spawn. A
  // template's interpreter is its template child's, not init's.
  const pid_t init = (*zygote)->init_pid();
  std::istringstream children(ReadFile(absl::StrCat("/proc/", init, "/task/", init, "/children")));
  int waiting = 0;
  for (pid_t child; children >> child;) ++waiting;
  if (waiting != (route == PayloadRoute::kWarmTemplate ? 0 : 1)) {
    return absl::FailedPreconditionError(absl::StrCat("the ", RouteName(route), " route: init has ", waiting,
                                                      " children before the request"));
  }
  return Captured(stdin_text, [&](int in, int out, int err) {
    request.stdin_fd = in;
    request.stdout_fd = out;
    request.stderr_fd = err;
    absl::StatusOr<runtime::ExecResult> result = (*zygote)->Run(request);
    // Gone before the output is read: nothing of the sandbox writes after.
    zygote->reset();
    return result;
  });
}

std::string CubicleBinary() {
  const char* env = std::getenv("CUBICLE_BINARY");
  if (env != nullptr && env[0] != '\0') return env;
  return CUBICLE_BINARY;
}

RunningProcess::RunningProcess(const std::vector<std::string>& argv, absl::string_view stdin_text,
                               const std::vector<std::string>& extra_env) {
  UniqueFd in = MemfdWith("process-stdin", stdin_text);
  UniqueFd out = MemfdWith("process-stdout", "");
  UniqueFd err = MemfdWith("process-stderr", "");

  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  for (const std::string& kv : extra_env) envp.push_back(const_cast<char*>(kv.c_str()));
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // dup2 clears FD_CLOEXEC on the copies; the memfds themselves stay CLOEXEC.
  posix_spawn_file_actions_adddup2(&actions, in.get(), 0);
  posix_spawn_file_actions_adddup2(&actions, out.get(), 1);
  posix_spawn_file_actions_adddup2(&actions, err.get(), 2);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, args[0], &actions, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) {
    spawn_error_ = absl::StrCat("posix_spawn(", argv[0], "): ", std::strerror(rc));
    return;
  }
  pid_ = pid;
  pidfd_ = static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
  stdout_fd_ = out.release();
  stderr_fd_ = err.release();
}

RunningProcess::~RunningProcess() {
  if (pid_ > 0) Wait(absl::ZeroDuration());
  for (int fd : {pidfd_, stdout_fd_, stderr_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

std::string RunningProcess::StdoutSoFar() const { return stdout_fd_ >= 0 ? ReadAll(stdout_fd_) : ""; }
std::string RunningProcess::StderrSoFar() const { return stderr_fd_ >= 0 ? ReadAll(stderr_fd_) : ""; }

bool RunningProcess::WaitForStdout(absl::string_view text, absl::Duration limit) const {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    if (absl::StrContains(StdoutSoFar(), text)) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

void RunningProcess::Signal(int sig) const {
  if (pid_ > 0) ::kill(pid_, sig);
}

ProcessRun RunningProcess::Wait(absl::Duration limit) {
  ProcessRun run;
  if (pid_ <= 0) {
    run.err = spawn_error_;
    return run;
  }
  // Bounded wait: poll the pidfd until the deadline, then kill.
  const absl::Time deadline = absl::Now() + limit;
  if (pidfd_ >= 0) {
    for (;;) {
      absl::Duration left = deadline - absl::Now();
      if (left <= absl::ZeroDuration()) break;
      struct pollfd p = {pidfd_, POLLIN, 0};
      int n = ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
      if (n > 0) break;
      if (n < 0 && errno != EINTR) break;
    }
  }
  int status = 0;
  pid_t got = ::waitpid(pid_, &status, WNOHANG);
  if (got == 0) {
    run.timed_out = true;
    ::kill(pid_, SIGKILL);
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  pid_ = -1;
  if (WIFEXITED(status)) run.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) run.signal = WTERMSIG(status);
  run.out = ReadAll(stdout_fd_);
  run.err = ReadAll(stderr_fd_);
  return run;
}

ProcessRun RunProcess(const std::vector<std::string>& argv, absl::string_view stdin_text,
                      const std::vector<std::string>& extra_env, absl::Duration limit) {
  RunningProcess process(argv, stdin_text, extra_env);
  return process.Wait(limit);
}

OrphanReaper::OrphanReaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

OrphanReaper::~OrphanReaper() {
  ReapAll();
  ::prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0);
}

int OrphanReaper::ReapAll(absl::Duration limit) {
  int reaped = 0;
  const absl::Time deadline = absl::Now() + limit;
  while (absl::Now() < deadline) {
    const pid_t pid = ::waitpid(-1, nullptr, WNOHANG | __WALL);
    if (pid > 0) {
      ++reaped;
    } else if (pid < 0 && errno == ECHILD) {
      break;
    } else {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  return reaped;
}

std::vector<std::string> CubicleArgv(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {CubicleBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

ProcessRun RunCubicle(const std::vector<std::string>& args, absl::string_view stdin_text,
                      const std::vector<std::string>& extra_env) {
  return RunProcess(CubicleArgv(args), stdin_text, extra_env);
}

std::vector<pid_t> WaitUntilGone(absl::string_view marker, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  for (;;) {
    std::vector<pid_t> left = ProcessesWithArgument(marker);
    if (left.empty() || absl::Now() >= deadline) return left;
    absl::SleepFor(absl::Milliseconds(10));
  }
}

ProcessWatch::ProcessWatch(pid_t pid) : pid_(pid), fd_(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0))) {}

bool ProcessWatch::Exited(absl::Duration limit) const {
  struct pollfd p = {fd_.get(), POLLIN, 0};
  return ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(limit))) == 1;
}

std::vector<pid_t> Descendants(pid_t ancestor) {
  if (ancestor == 0) ancestor = ::getpid();
  std::map<pid_t, pid_t> parents = ParentTable();
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : parents) {
    pid_t cur = ppid;
    // Bounded walk: pid namespaces are at most 32 deep, process trees can be
    // deeper, but a cycle (pid reuse during the scan) must not hang us.
    for (int hops = 0; hops < 4096 && cur > 1; ++hops) {
      if (cur == ancestor) {
        out.push_back(pid);
        break;
      }
      auto it = parents.find(cur);
      if (it == parents.end()) break;
      cur = it->second;
    }
  }
  return out;
}

std::vector<pid_t> ProcessesWithArgument(absl::string_view marker) {
  std::vector<pid_t> out;
  const pid_t self = ::getpid();
  DIR* dir = ::opendir("/proc");
  if (dir == nullptr) return out;
  while (struct dirent* e = ::readdir(dir)) {
    pid_t pid;
    if (!absl::SimpleAtoi(e->d_name, &pid) || pid == self) continue;
    std::string cmdline = ReadFile(absl::StrCat("/proc/", pid, "/cmdline"));
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (absl::StrContains(cmdline, marker)) out.push_back(pid);
  }
  ::closedir(dir);
  return out;
}

std::vector<std::string> HostMounts() {
  static const std::set<std::string, std::less<>> kAutomounted = {
      "autofs", "binfmt_misc", "bpf", "configfs", "debugfs", "efivarfs",
      "fusectl", "pstore", "rpc_pipefs", "securityfs", "tracefs"};
  std::vector<std::string> lines;
  for (std::string& line : Lines(ReadFile("/proc/self/mountinfo"))) {
    // "... - FSTYPE SOURCE OPTIONS"
    size_t dash = line.find(" - ");
    if (dash != std::string::npos) {
      absl::string_view type = absl::string_view(line).substr(dash + 3);
      type = type.substr(0, type.find(' '));
      if (kAutomounted.contains(type)) continue;
    }
    lines.push_back(std::move(line));
  }
  std::sort(lines.begin(), lines.end());
  return lines;
}

std::set<std::string> ListDirectory(const std::string& path) {
  std::set<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return names;
  while (struct dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    names.insert(e->d_name);
  }
  ::closedir(dir);
  return names;
}

bool WriteFile(const std::string& path, absl::string_view data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
  return static_cast<bool>(f);
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::string> Lines(absl::string_view text) {
  std::vector<std::string> out = absl::StrSplit(text, '\n');
  if (!out.empty() && out.back().empty()) out.pop_back();
  return out;
}

std::string StatusField(absl::string_view status_text, absl::string_view key) {
  std::string prefix = absl::StrCat(key, ":");
  for (const std::string& line : Lines(status_text)) {
    if (line.rfind(prefix, 0) == 0) {
      return std::string(absl::StripAsciiWhitespace(absl::string_view(line).substr(prefix.size())));
    }
  }
  return "";
}

}  // namespace cubicle::test_support
