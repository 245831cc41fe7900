// Helpers for the integration tests: run a sandbox (in-process through the
// launcher, or through the cubicle binary) with its output captured, and
// observe the host around it (our descendant processes, host mounts, temp
// directories) so tests can prove that nothing outlives a sandbox.
#pragma once

#include <sys/types.h>

#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/unique_fd.h"
#include "tests/support/temp_dir.h"
#include "runtime/defaults.h"
#include "runtime/launcher.h"
#include "runtime/result.h"
#include "runtime/spec.h"
#include "runtime/warm.h"
#include "runtime/zygote.h"

namespace cubicle::test_support {

// ---- In-process sandboxes -------------------------------------------------

struct SandboxRun {
  runtime::ExecResult result;
  std::string out;  // everything the payload wrote to stdout
  std::string err;  // ... and to stderr
};

// The default sandbox (runtime::DefaultSpec) running `argv`. Aborts the test
// binary only if DefaultSpec fails, which it cannot without a workspace.
runtime::SandboxSpec TestSpec(std::vector<std::string> argv, const runtime::DefaultsOptions& options = {});

// Mount operations for a spec's `mounts`: a bind of a host path, a tmpfs.
rootfs::MountOp Bind(std::string source, std::string dest, bool readonly);
rootfs::MountOp Tmpfs(std::string dest);

// The default sandbox running `/bin/sh -c script`.
runtime::SandboxSpec ShellSpec(absl::string_view script, const runtime::DefaultsOptions& options = {});

// Launches `spec` with stdin reading `stdin_text` and stdout/stderr captured
// in memfds (no pipes: nothing can deadlock however much the payload
// writes). Returns Launch()'s status when it refuses the spec.
absl::StatusOr<SandboxRun> RunInSandbox(const runtime::SandboxSpec& spec, absl::string_view stdin_text = "",
                                        runtime::LaunchOptions options = {});
// Runs `request` in `zygote` with stdio captured as RunInSandbox does.
absl::StatusOr<SandboxRun> RunInZygote(runtime::Zygote& zygote, runtime::ExecRequest request,
                                       absl::string_view stdin_text = "");

absl::StatusOr<SandboxRun> RunArgv(std::vector<std::string> argv, absl::string_view stdin_text = "");
absl::StatusOr<SandboxRun> RunShell(absl::string_view script, const runtime::DefaultsOptions& options = {});

// ---- Payload routes -------------------------------------------------------

// The ways a payload is started (docs/architecture.md), so that a test can
// prove an isolation property on each of them, not only on the cold path.
enum class PayloadRoute {
  // runtime::Launch: the sandbox is built for its request, its payload
  // spawned by init at hand-off.
  kCold,
  // A zygote built ahead of its request, as a pool makes it, whose payload
  // waits armed; the request, without a workspace, goes to that payload
  // itself over the direct channel.
  kArmedDirect,
  // The same zygote accepting a workspace; the request brings one, so it
  // goes through init, which moves the workspace in and hands the request's
  // stdio to the armed payload. Root only (ValidateRequest).
  kArmedViaInit,
  // A warm-interpreter zygote (WarmPython()): an invocation of that
  // interpreter runs as __main__ in the process already started; any other
  // argv is exec'd by its bootstrap.
  kWarm,
  // The same, its interpreter forked from a warm template's
  // (runtime/warm_template.h) into the zygote: it did the payload's
  // hygiene itself, in Python, after joining the zygote's namespaces.
  kWarmTemplate,
};

inline constexpr PayloadRoute kEveryRoute[] = {PayloadRoute::kCold, PayloadRoute::kArmedDirect,
                                               PayloadRoute::kArmedViaInit, PayloadRoute::kWarm,
                                               PayloadRoute::kWarmTemplate};

// "Cold", "ArmedDirect", "ArmedViaInit", "Warm", "WarmTemplate": a
// parameterised test's name suffix.
std::string RouteName(PayloadRoute route);
void PrintTo(PayloadRoute route, std::ostream* os);

// The warm route's interpreter: the host's python3 in isolated mode, as
// tests invoke it (`/usr/bin/python3 -I -c CODE`), with nothing preloaded.
runtime::WarmInterpreter WarmPython();

// Runs `spec` on `route` with stdio captured as RunInSandbox does. On a
// zygote route the spec is the zygote's profile and its argv, env, cwd and
// timeout are the request, as Launch() splits them; the zygote is made
// before the request's stdio exists, the request is handed off as a pool
// hands it off (return_at_exit), and the zygote is torn down before this
// returns. kArmedViaInit attaches the spec's /workspace bind at hand-off
// instead (a fresh empty directory when the spec has none). Returns the
// status of Launch(), Create() or Run() when they refuse, and
// InvalidArgument for a spec a request cannot carry (argv0, cwd_fallbacks,
// inherited_fds).
absl::StatusOr<SandboxRun> RunOnRoute(PayloadRoute route, const runtime::SandboxSpec& spec,
                                      absl::string_view stdin_text = "");

// ---- The cubicle binary ---------------------------------------------------

struct ProcessRun {
  int exit_code = -1;  // WEXITSTATUS, or -1 when it died of a signal
  int signal = 0;      // WTERMSIG, or 0
  bool timed_out = false;  // killed by us after the helper's own limit
  std::string out;
  std::string err;
};

// $CUBICLE_BINARY when set (the rootless script copies the binary), else
// the path compiled in by CMake.
std::string CubicleBinary();

// Runs `argv` (argv[0] is the program path) with our environment plus
// `extra_env` ("NAME=value"), stdin from `stdin_text`, output captured.
// Killed with SIGKILL (and reported as timed_out) after `limit`.
ProcessRun RunProcess(const std::vector<std::string>& argv, absl::string_view stdin_text = "",
                      const std::vector<std::string>& extra_env = {},
                      absl::Duration limit = absl::Seconds(60));

// A process started with captured output, for tests that act on it while it
// runs (signal it, kill it). Killed with SIGKILL and reaped on destruction
// if still running.
class RunningProcess {
 public:
  RunningProcess(const std::vector<std::string>& argv, absl::string_view stdin_text = "",
                 const std::vector<std::string>& extra_env = {});
  ~RunningProcess();
  RunningProcess(const RunningProcess&) = delete;
  RunningProcess& operator=(const RunningProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool started() const { return pid_ > 0; }
  // What it has written to stdout (stderr) so far.
  std::string StdoutSoFar() const;
  std::string StderrSoFar() const;
  // Polls (every 10 ms, at most `limit`) until stdout contains `text`.
  bool WaitForStdout(absl::string_view text, absl::Duration limit = absl::Seconds(20)) const;
  void Signal(int sig) const;
  // Waits at most `limit`, then kills; the result carries all output.
  ProcessRun Wait(absl::Duration limit = absl::Seconds(60));

 private:
  pid_t pid_ = -1;
  int pidfd_ = -1;
  int stdout_fd_ = -1;
  int stderr_fd_ = -1;
  std::string spawn_error_;
};

// Makes this process the subreaper of what its children leave behind, so
// that a test can wait for it: a cold `cubicle run` exits before its
// cleaner (runtime/teardown.h) has removed the sandbox's groups. Undone,
// after a last ReapAll(), on destruction.
class OrphanReaper {
 public:
  OrphanReaper();
  ~OrphanReaper();
  OrphanReaper(const OrphanReaper&) = delete;
  OrphanReaper& operator=(const OrphanReaper&) = delete;
  // Reaps every child this process has, waiting at most `limit` for them
  // to exit (polling every millisecond); returns how many it reaped.
  int ReapAll(absl::Duration limit = absl::Seconds(20));
};

// RunProcess of `cubicle ARGS...`.
ProcessRun RunCubicle(const std::vector<std::string>& args, absl::string_view stdin_text = "",
                      const std::vector<std::string>& extra_env = {});

// `cubicle ARGS...` as a RunningProcess.
std::vector<std::string> CubicleArgv(const std::vector<std::string>& args);

// ---- Observing the host ---------------------------------------------------

// Every live (or zombie) process whose parent chain leads to `ancestor`
// (default: this process), found by walking /proc/*/stat.
std::vector<pid_t> Descendants(pid_t ancestor = 0);

// A pidfd of `pid` and whether it has exited, without the doubt of a
// reused pid.
class ProcessWatch {
 public:
  explicit ProcessWatch(pid_t pid);
  pid_t pid() const { return pid_; }
  bool valid() const { return fd_.valid(); }
  // Waits at most `limit` (a bound for failures only).
  bool Exited(absl::Duration limit = absl::ZeroDuration()) const;

 private:
  pid_t pid_;
  UniqueFd fd_;
};

// Polls (every 10 ms, at most `limit`) until no process other than this one
// has `marker` in its command line; returns the survivors, if any.
std::vector<pid_t> WaitUntilGone(absl::string_view marker, absl::Duration limit = absl::Seconds(10));

// Processes other than this one whose command line contains `marker`, e.g.
// a unique `sleep` argument: finds escapees that were reparented away.
std::vector<pid_t> ProcessesWithArgument(absl::string_view marker);

// The host mount table as this process sees it (/proc/self/mountinfo
// lines, sorted): equal before and after means no mount leaked. Left out:
// the kernel's pseudo filesystems that the host mounts on first access
// (tracefs at /sys/kernel/tracing, debugfs, binfmt_misc, autofs points...),
// which any process may trigger during a test and no sandbox ever makes.
std::vector<std::string> HostMounts();

// Names in directory `dir` (no "." or "..").
std::set<std::string> ListDirectory(const std::string& dir);

// ---- Files ----------------------------------------------------------------

// TempDir: tests/support/temp_dir.h.

bool WriteFile(const std::string& path, absl::string_view data);
std::string ReadFile(const std::string& path);  // "" when unreadable

// Lines of `text` without their terminators; no trailing empty line.
std::vector<std::string> Lines(absl::string_view text);

// The value of `Key:` in a /proc/PID/status text, trimmed ("" if absent).
std::string StatusField(absl::string_view status_text, absl::string_view key);

}  // namespace cubicle::test_support
