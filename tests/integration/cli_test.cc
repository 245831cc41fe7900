// `cubicle run` through the real binary: exit statuses (the payload's,
// 128+N, 124, 125, 2), flag errors, --json-status, and the flags that shape
// what the payload sees.
#include <fcntl.h>
#include <poll.h>
#include <seccomp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/value.hpp>
#include <boost/json/value_to.hpp>

#include <gtest/gtest.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "rpc/config.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

class CoreCli : public HostHygieneTest {};

std::string ReadLink(const std::string& path) {
  char target[256] = {};
  ssize_t n = ::readlink(path.c_str(), target, sizeof(target) - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : "";
}

// `cubicle run FLAGS... -- /bin/sh -c SCRIPT`.
ProcessRun RunScript(std::vector<std::string> flags, const std::string& script,
                     const std::vector<std::string>& extra_env = {}) {
  std::vector<std::string> args = {"run"};
  args.insert(args.end(), flags.begin(), flags.end());
  for (const char* a : {"--", "/bin/sh", "-c"}) args.push_back(a);
  args.push_back(script);
  ProcessRun run = RunCubicle(args, "", extra_env);
  EXPECT_FALSE(run.timed_out) << "cubicle did not finish: " << run.err;
  return run;
}

TEST_F(CoreCli, PayloadExitStatusIsCubiclesExitStatus) {
  ProcessRun run = RunScript({}, "exit 3");
  EXPECT_EQ(run.exit_code, 3) << run.err;
  EXPECT_EQ(run.err, "");
  EXPECT_EQ(RunScript({}, "true").exit_code, 0);
}

TEST_F(CoreCli, DeathBySignalIs128PlusN) {
  EXPECT_EQ(RunScript({}, "kill -TERM $$; sleep 5").exit_code, 128 + 15);
  EXPECT_EQ(RunScript({}, "kill -KILL $$; sleep 5").exit_code, 128 + 9);
}

TEST_F(CoreCli, TimeoutIs124AndSaysSo) {
  ProcessRun run = RunScript({"--timeout", "0.3"}, "sleep 30");
  EXPECT_EQ(run.exit_code, 124);
  EXPECT_TRUE(absl::StrContains(run.err, "timed out")) << run.err;
}

TEST_F(CoreCli, MissingCommandIs125NamingExecve) {
  ProcessRun run = RunCubicle({"run", "--", "/no/such/command"});
  EXPECT_EQ(run.exit_code, 125);
  EXPECT_TRUE(absl::StrContains(run.err, "execve")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "/no/such/command")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "ENOENT")) << run.err;
}

// A bind source is a flag value: a missing one is bad input (2), caught
// before anything is created, not a setup failure (125).
TEST_F(CoreCli, MissingBindSourceIsAUsageErrorNamingThePath) {
  ProcessRun run = RunCubicle({"run", "--ro-bind", "/nonexistent-itest", "/x", "--", "/bin/true"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_EQ(Lines(run.err).size(), 1u) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "/nonexistent-itest")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "ENOENT")) << run.err;
}

struct BadFlag {
  std::vector<std::string> flags;
  std::string named;  // what the one-line error must mention
};

TEST_F(CoreCli, BadFlagValuesAreUsageErrorsNamingTheFlag) {
  const std::vector<BadFlag> cases = {
      {{"--timeout", "-1"}, "--timeout"},
      {{"--timeout", "abc"}, "--timeout"},
      {{"--timeout", "0"}, "--timeout"},
      {{"--uid", "x"}, "--uid"},
      {{"--gid", "-5"}, "--gid"},
      {{"--tmp-size", "12Q"}, "--tmp-size"},
      {{"--rlimit", "nofile=abc"}, "--rlimit"},
      {{"--rlimit", "bogus=5"}, "--rlimit"},
      {{"--tmpfs", "../x"}, "--tmpfs"},
      {{"--chdir", "relative"}, "--chdir"},
      {{"--setenv", "A=B", "c"}, "--setenv"},
      {{"--size", "0", "--tmpfs", "/x"}, "--size"},
      {{"--no-such-flag"}, "--no-such-flag"},
  };
  for (const BadFlag& c : cases) {
    SCOPED_TRACE(c.flags[0] + (c.flags.size() > 1 ? " " + c.flags[1] : ""));
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.flags.begin(), c.flags.end());
    args.insert(args.end(), {"--", "/bin/true"});
    ProcessRun run = RunCubicle(args);
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_EQ(Lines(run.err).size(), 1u) << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, c.named)) << run.err;
    EXPECT_EQ(run.out, "");
  }
}

// Regression test: every flag error names its flag ("--uid 'x': ..."), as
// cli/flag_values.h promises; --seccomp used to print seccomp::ParsePolicy's
// message ("unknown seccomp policy 'bogus' (...)") without the flag.
TEST_F(CoreCli, BadSeccompPolicyIsAUsageErrorNamingTheFlag) {
  ProcessRun run = RunCubicle({"run", "--seccomp", "bogus", "--", "/bin/true"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(Lines(run.err).size(), 1u) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "bogus")) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "--seccomp")) << run.err;
}

TEST_F(CoreCli, NoCommandIsAUsageError) {
  ProcessRun run = RunCubicle({"run"});
  EXPECT_EQ(run.exit_code, 2);
  EXPECT_TRUE(absl::StrContains(run.err, "command")) << run.err;
}

TEST_F(CoreCli, JsonStatusHasReasonExitCodeStepsAndRusage) {
  TempDir dir;
  const std::string path = dir.Join("status.json");
  ProcessRun run = RunScript({"--json-status", path}, "exit 4");
  EXPECT_EQ(run.exit_code, 4) << run.err;
  std::string text = ReadFile(path);
  boost::system::error_code ec;
  boost::json::value doc = boost::json::parse(text, ec);
  ASSERT_FALSE(ec) << ec.message() << ": " << text;
  ASSERT_TRUE(doc.is_object()) << text;
  const boost::json::object& o = doc.as_object();
  for (const char* key : {"reason", "exit_code", "signal", "status", "wall_ms", "setup_ms", "rusage",
                          "steps", "warnings"}) {
    EXPECT_TRUE(o.contains(key)) << "no '" << key << "' in " << text;
  }
  ASSERT_TRUE(o.contains("reason") && o.at("reason").is_string());
  EXPECT_EQ(o.at("reason").as_string(), "exited");
  ASSERT_TRUE(o.contains("exit_code") && o.at("exit_code").is_int64()) << text;
  EXPECT_EQ(o.at("exit_code").as_int64(), 4);
  ASSERT_TRUE(o.contains("steps") && o.at("steps").is_array()) << text;
  bool has_rootfs = false;
  for (const boost::json::value& step : o.at("steps").as_array()) {
    ASSERT_TRUE(step.is_object()) << text;
    ASSERT_TRUE(step.as_object().contains("step") && step.as_object().contains("ms")) << text;
    if (step.as_object().at("step") == "rootfs") has_rootfs = true;
  }
  EXPECT_TRUE(has_rootfs) << text;
  ASSERT_TRUE(o.contains("rusage") && o.at("rusage").is_object()) << text;
  EXPECT_TRUE(o.at("rusage").as_object().contains("max_rss_kb")) << text;
}

TEST_F(CoreCli, JsonStatusOfASetupFailureCarriesTheError) {
  TempDir dir;
  const std::string path = dir.Join("status.json");
  ProcessRun run = RunCubicle({"run", "--json-status", path, "--", "/no/such/command"});
  EXPECT_EQ(run.exit_code, 125);
  boost::system::error_code ec;
  boost::json::value doc = boost::json::parse(ReadFile(path), ec);
  ASSERT_FALSE(ec) << ReadFile(path);
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.as_object().at("reason"), "setup_failed");
  ASSERT_TRUE(doc.as_object().contains("error"));
  EXPECT_TRUE(absl::StrContains(boost::json::value_to<std::string>(doc.as_object().at("error")), "execve"));
}

TEST_F(CoreCli, SetenvChdirAndHostnameAreVisibleInside) {
  ProcessRun run = RunScript({"--setenv", "GREETING", "hello world", "--chdir", "/tmp", "--hostname", "box"},
                             "echo \"$GREETING\"; pwd; uname -n");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "hello world\n/tmp\nbox\n");
}

TEST_F(CoreCli, UnsetenvRemovesADefault) {
  ProcessRun run = RunScript({"--unsetenv", "LANG"}, "echo \"lang=${LANG-unset}\"");
  EXPECT_EQ(run.out, "lang=unset\n") << run.err;
}

TEST_F(CoreCli, EnvironmentIsCleared) {
  ProcessRun run = RunScript({}, "env", {"CUBICLE_ITEST_CALLER_VAR=visible"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(absl::StrContains(run.out, "CUBICLE_ITEST_CALLER_VAR")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "PATH=/usr/local/bin:/usr/bin:/bin")) << run.out;
}

TEST_F(CoreCli, TheReadmeExampleShowsTheSandbox) {
  ProcessRun run = RunScript({}, "id; hostname; ls -la /; cat /proc/self/status");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_TRUE(absl::StrContains(run.out, "uid=1000")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "\ncubicle\n")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "Seccomp:\t2\n")) << run.out;
  EXPECT_TRUE(absl::StrContains(run.out, "NoNewPrivs:\t1\n")) << run.out;
}

TEST_F(CoreCli, Pid1IsCubiclesInit) {
  ProcessRun run = RunScript({}, "cat /proc/1/comm; echo $$");
  EXPECT_EQ(run.out, "cubicle-init\n2\n") << run.err;
}

TEST_F(CoreCli, LauncherCommandLineIsHiddenFromTheSandbox) {
  // Init is a copy of the cubicle process: its argv (host paths, tokens in
  // flags) must not be readable through /proc/1/cmdline.
  ProcessRun run = RunScript({"--setenv", "ITEST_TOKEN", "tok-8d1f"},
                             "tr '\\0' ' ' < /proc/1/cmdline; echo");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_FALSE(absl::StrContains(run.out, "tok-8d1f")) << run.out;
  EXPECT_FALSE(absl::StrContains(run.out, "--setenv")) << run.out;
}

TEST_F(CoreCli, StdinAndStderrPassThrough) {
  ProcessRun run = RunCubicle({"run", "--", "/bin/sh", "-c", "cat; echo oops >&2"}, "from stdin\n");
  EXPECT_EQ(run.exit_code, 0);
  EXPECT_EQ(run.out, "from stdin\n");
  EXPECT_EQ(run.err, "oops\n");
}

TEST_F(CoreCli, TmpSizeCapsTmp) {
  ProcessRun run = RunScript({"--tmp-size", "1M"}, "head -c 2097152 /dev/zero > /tmp/big; echo rc=$?");
  EXPECT_EQ(run.out, "rc=1\n");
  EXPECT_TRUE(absl::StrContains(run.err, "No space left on device")) << run.err;
}

TEST_F(CoreCli, WorkspaceIsTheWorkingDirectory) {
  TempDir ws;
  if (IsRoot()) REQUIRE_HOST(IdmappedMounts(ws.path()));  // root's, shown as the sandbox user's
  ProcessRun run = RunScript({"--workspace", ws.path()}, "pwd; echo made > f");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "/workspace\n");
  EXPECT_EQ(ReadFile(ws.Join("f")), "made\n");
}

// Regression test: `--rlimit` was a vector option, so CLI11 let
// one occurrence take several values; when it is the last flag, the `--`
// that follows ends the option's values instead of starting the command,
// and the command's own dash arguments are then parsed as cubicle flags:
// `cubicle run --rlimit nofile=64 -- /bin/sh -c 'ulimit -n'` exits 2 with
// "The following argument was not expected: -c". --rlimit now takes
// exactly one value per occurrence.
TEST_F(CoreCli, RlimitApplies) {
  ProcessRun run = RunScript({"--rlimit", "nofile=64"}, "ulimit -n");
  EXPECT_EQ(run.out, "64\n") << run.err;
  // Not last: works today.
  run = RunScript({"--rlimit", "nofile=64", "--hostname", "x"}, "ulimit -n");
  EXPECT_EQ(run.out, "64\n") << run.err;
}

TEST_F(CoreCli, JsonStatusOfATimeout) {
  TempDir dir;
  const std::string path = dir.Join("status.json");
  ProcessRun run = RunScript({"--timeout", "0.2", "--json-status", path}, "sleep 30");
  EXPECT_EQ(run.exit_code, 124);
  boost::system::error_code ec;
  boost::json::value doc = boost::json::parse(ReadFile(path), ec);
  ASSERT_FALSE(ec) << ReadFile(path);
  ASSERT_TRUE(doc.is_object());
  const boost::json::object& o = doc.as_object();
  EXPECT_EQ(o.at("reason"), "timeout");
  EXPECT_EQ(o.at("status"), 124);
  EXPECT_EQ(o.at("signal"), 9);  // docs/cli.md: the sandbox is SIGKILLed
  EXPECT_TRUE(o.at("exit_code").is_null());
}

TEST_F(CoreCli, JsonStatusToAnInheritedFd) {
  ProcessRun run = RunCubicle({"run", "--json-status", "/dev/fd/1", "--", "/bin/true"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  boost::system::error_code ec;
  boost::json::value doc = boost::json::parse(run.out, ec);
  ASSERT_FALSE(ec) << run.out;
  ASSERT_TRUE(doc.is_object());
  EXPECT_EQ(doc.as_object().at("reason"), "exited");
}

TEST_F(CoreCli, BadWorkspaceIsAUsageErrorNamingIt) {
  TempDir dir;
  ASSERT_TRUE(WriteFile(dir.Join("file"), "x"));
  for (const std::string& ws : {dir.Join("missing"), dir.Join("file")}) {
    SCOPED_TRACE(ws);
    ProcessRun run = RunCubicle({"run", "--workspace", ws, "--", "/bin/true"});
    EXPECT_EQ(run.exit_code, 2) << run.err;
    EXPECT_EQ(Lines(run.err).size(), 1u) << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, "workspace")) << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, ws)) << run.err;
  }
}

TEST_F(CoreCli, SeccompFlagSelectsThePolicy) {
  REQUIRE_HOST(Python3());
  constexpr char kInetSocket[] =
      "import socket\n"
      "try:\n"
      "    socket.socket(socket.AF_INET, socket.SOCK_DGRAM).close(); print('inet ok')\n"
      "except PermissionError:\n"
      "    print('inet EPERM')\n";
  auto python = [&](const std::string& policy) {
    return RunCubicle({"run", "--seccomp", policy, "--", "/usr/bin/python3", "-I", "-c", kInetSocket});
  };
  EXPECT_EQ(python("no-network").out, "inet EPERM\n");
  EXPECT_EQ(python("default").out, "inet ok\n");
  ProcessRun none = RunScript({"--seccomp", "none"}, "grep '^Seccomp:' /proc/self/status");
  EXPECT_EQ(none.out, "Seccomp:\t0\n") << none.err;
}

TEST_F(CoreCli, TermToCubicleIsForwardedToThePayload) {
  RunningProcess cubicle(CubicleArgv(
      {"run", "--", "/bin/sh", "-c",
       "trap 'echo got-term; exit 42' TERM; echo ready; "
       "i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; echo not-signalled"}));
  ASSERT_TRUE(cubicle.started());
  ASSERT_TRUE(cubicle.WaitForStdout("ready\n"));
  cubicle.Signal(SIGTERM);
  ProcessRun run = cubicle.Wait();
  EXPECT_EQ(run.exit_code, 42) << run.err;
  EXPECT_EQ(run.out, "ready\ngot-term\n");
}

// Regression test: fails as root. The sandbox's init asks for
// PR_SET_PDEATHSIG before BecomeSandboxIds(); the kernel clears the
// parent-death signal whenever the euid/egid/fsuid/fsgid change, and as root
// setresuid() moves init from kuid 0 to the unprivileged host id, so the
// request is silently lost: killing cubicle leaves init and every payload
// process running, reparented to the host's init. (Rootless the kuid does
// not change and it passed.) Fixed: the signal is set after the id switch,
// and the control socket is checked to close the race with the parent's death.
TEST_F(CoreCli, KillingCubicleKillsTheWholeSandbox) {
  // Every process of the sandbox but init carries the marker in its
  // command line; none may survive cubicle's death (DESIGN §8).
  const std::string mark = absl::StrCat("sleep 1000.", ::getpid(), "7");
  RunningProcess cubicle(CubicleArgv(
      {"run", "--", "/bin/sh", "-c",
       absl::StrCat(mark, " & setsid sh -c '", mark, "' & nohup ", mark,
                    " >/dev/null 2>&1 & echo ready; ", mark)}));
  ASSERT_TRUE(cubicle.started());
  ASSERT_TRUE(cubicle.WaitForStdout("ready\n"));
  cubicle.Signal(SIGKILL);
  ProcessRun run = cubicle.Wait();
  EXPECT_EQ(run.signal, SIGKILL);
  std::vector<pid_t> survivors = WaitUntilGone(mark);
  EXPECT_EQ(survivors, std::vector<pid_t>{});
  // Clean up after a failure: without its payload, the orphaned init exits.
  for (pid_t pid : survivors) ::kill(pid, SIGKILL);
  EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{});
}

// `cubicle run` exits at once when its payload does, its sandbox's
// teardown left to a cleaner (runtime/teardown.h), but never before every
// process of the sandbox is dead: what the payload left running in the
// background is gone when the exit is seen. The marker comes on stdin, so
// that only the sandbox's processes carry it, not the launcher's argv.
TEST_F(CoreCli, RunExitsOnlyOnceEveryProcessOfTheSandboxIsDead) {
  const std::string mark = absl::StrCat("sleep 1000.", ::getpid(), "5");
  ProcessRun run = RunCubicle({"run", "--", "/bin/sh", "-s"},
                              absl::StrCat(mark, " >/dev/null 2>&1 &\n", "setsid ", mark,
                                           " >/dev/null 2>&1 &\n", "exit 3\n"));
  EXPECT_EQ(run.exit_code, 3) << run.err;
  std::vector<pid_t> survivors = ProcessesWithArgument(mark);
  EXPECT_EQ(survivors, std::vector<pid_t>{}) << "alive after cubicle run exited";
  for (pid_t pid : survivors) ::kill(pid, SIGKILL);
  EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{});
}

// `cubicle run ARGS` spawned with its stdout on a pipe (and its stdin
// closed if asked), waited for; then whether the pipe was at EOF at once
// (no writer left) and what it held.
struct PipedRun {
  int status = -1;
  bool eof_at_exit = false;
  std::string out;
};
PipedRun RunToPipe(const std::vector<std::string>& cubicle_args, bool close_stdin) {
  PipedRun run;
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return run;
  const std::vector<std::string> args = CubicleArgv(cubicle_args);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, out[1], 1);
  if (close_stdin) posix_spawn_file_actions_addclose(&actions, 0);
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(out[1]);
  if (spawned == 0 && ::waitpid(pid, &run.status, 0) == pid) {
    struct pollfd p = {out[0], POLLIN, 0};
    run.eof_at_exit = ::poll(&p, 1, 0) == 1 && (p.revents & POLLHUP);
    char buf[256];
    ssize_t n;
    while ((n = ::read(out[0], buf, sizeof(buf))) > 0) run.out.append(buf, static_cast<size_t>(n));
  }
  ::close(out[0]);
  return run;
}

// Nothing that outlives `cubicle run` (its cleaner) holds what the caller
// gave it: the caller's pipe reaches EOF when the launcher has exited.
TEST_F(CoreCli, RunsCallersPipeIsAtEofWhenItExits) {
  PipedRun run = RunToPipe({"run", "--", "/bin/echo", "done"}, /*close_stdin=*/false);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 0) << run.status;
  EXPECT_TRUE(run.eof_at_exit) << "a writer of the caller's pipe outlives cubicle run";
  EXPECT_EQ(run.out, "done\n");
}

// A caller that closed stdin: the run still works, and the fd numbers the
// exit path reuses for /dev/null do not disturb it.
TEST_F(CoreCli, RunWithStdinClosedRunsAndExits) {
  PipedRun run = RunToPipe({"run", "--", "/bin/sh", "-c", "echo in-sandbox; exit 4"}, /*close_stdin=*/true);
  EXPECT_TRUE(WIFEXITED(run.status) && WEXITSTATUS(run.status) == 4) << run.status;
  EXPECT_TRUE(run.eof_at_exit);
  EXPECT_EQ(run.out, "in-sandbox\n");
}

// The launcher's parent (an orchestrator) is SIGKILLed while the payload
// runs `sleep 2; touch F`: the payload must die with it and F never
// appear. For `cubicle run` (die-with-parent is its default) and `cubicle
// bwrap --die-with-parent`, with and without a pid namespace. Failed
// before: `cubicle run` did not die with its parent at all, and bwrap's
// payload without --unshare-pid outlived the death of cubicle and its init
// (a subreaper only, there).
TEST_F(CoreCli, KillingTheLaunchersParentEndsThePayload) {
  if (::geteuid() != 0) GTEST_SKIP() << "root only: the payload writes into a bound host directory";
  const std::string bwrap_sys =
      "bwrap --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib "
      "--symlink usr/lib64 /lib64 --bind DIR /out";
  int n = 0;
  for (const std::string& launch :
       {std::string("run --bind DIR /out --"), bwrap_sys, bwrap_sys + " --unshare-pid"}) {
    TempDir dir;
    ::chmod(dir.path().c_str(), 0777);  // writable by the sandbox's unprivileged host id
    const std::string mark = absl::StrCat("2.", ::getpid(), "0", ++n);  // a unique sleep argument
    const std::string command = absl::StrReplaceAll(launch, {{"DIR", dir.path()}});
    RunningProcess parent({"/bin/sh", "-c",
                           absl::StrCat("'", CubicleBinary(), "' ", command, " /bin/sh -c 'sleep ", mark,
                                        "; touch /out/F' & echo started; wait")});
    ASSERT_TRUE(parent.started());
    ASSERT_TRUE(parent.WaitForStdout("started\n"));
    bool running = false;  // the payload's sleep, at most 10 s
    for (int i = 0; i < 1000 && !running; ++i) {
      for (pid_t pid : ProcessesWithArgument(mark)) running |= ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "sleep\n";
      if (!running) ::usleep(10'000);
    }
    ASSERT_TRUE(running) << launch << ": the payload never started";
    parent.Signal(SIGKILL);
    parent.Wait();
    // Everything carrying the mark (launcher, payload shell, its sleep) is
    // gone within the bound: killed, or (an orphaned sleep) ended.
    std::vector<pid_t> survivors = WaitUntilGone(mark);
    EXPECT_EQ(survivors, std::vector<pid_t>{}) << launch;
    for (pid_t pid : survivors) ::kill(pid, SIGKILL);  // ours, by pid
    EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{});
    EXPECT_NE(::access(dir.Join("F").c_str(), F_OK), 0) << launch << ": the payload outlived its launcher's parent";
  }
  // The sandboxes' cgroups, if any, are swept like a killed daemon's.
  EXPECT_EQ(RunCubicle({"cleanup"}).exit_code, 0);
}

// `cubicle cleanup` removes what exists; a parent it cannot make (rootless,
// no delegated subtree) holds nothing to remove and is no failure. A parent
// of the test's own, so that no test beside it has made it already.
TEST_F(CoreCli, CleanupSucceedsWhereTheParentsCannotBeMade) {
  const std::string parent = absl::StrCat("cubicle-cleanup-test-", ::getpid());
  TempDir dir;
  std::vector<std::string> env = {absl::StrCat("CUBICLE_HOST_CACHE=", dir.Join("cache")),
                                  absl::StrCat("CUBICLE_CGROUP_PARENT=", parent)};
  ProcessRun cleanup = RunCubicle({"cleanup"}, "", env);
  EXPECT_EQ(cleanup.exit_code, 0) << cleanup.out << cleanup.err;
  // Whatever it made on the way (as root, the parents) it removed.
  ProcessRun again = RunCubicle({"cleanup"}, "", env);
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_FALSE(absl::StrContains(again.out, "removed")) << again.out;
  for (const std::string& mounts : ListDirectory("/sys/fs/cgroup")) {
    EXPECT_NE(::access(absl::StrCat("/sys/fs/cgroup/", mounts, "/", parent).c_str(), F_OK), 0) << mounts;
  }
}

// As root, a launcher's supplementary groups (here 0, 4 and 27) must not
// reach the sandbox: even unmapped, gid 0 would still count in every host
// permission check. And /proc/self/setgroups must read "deny", as bwrap
// writes it: "allow" would let the sandbox's CAP_SETGID drop a group that
// denies it access (the CVE-2014-8989 class). Failed before: "allow", which
// cubicle wrote so that its child could clear the groups after the maps.
TEST_F(CoreCli, AsRootTheSandboxHasNoHostGroupsAndSetgroupsIsDenied) {
  if (::geteuid() != 0) GTEST_SKIP() << "root only: a rootless launcher cannot clear its groups";
  if (::access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "setpriv(1) is not installed";
  const std::string script = "cat /proc/self/setgroups; grep '^Groups:' /proc/self/status; id -G";
  const std::string bwrap_sys =
      "--ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --proc /proc";
  struct Launch {
    std::string name;
    std::string command;  // after "setpriv --groups 0,4,27 -- CUBICLE"
    std::string groups;   // what `id -G` must print
  };
  const std::vector<Launch> launches = {
      {"run", "run -- /bin/sh -c \"$0\"", "1000"},
      {"bwrap --unshare-user", "bwrap " + bwrap_sys + " --unshare-user sh -c \"$0\"", "0"},
      {"bwrap --unshare-user --uid 5 --gid 6", "bwrap " + bwrap_sys + " --unshare-user --uid 5 --gid 6 sh -c \"$0\"", "6"},
      {"bwrap --unshare-all", "bwrap " + bwrap_sys + " --unshare-all sh -c \"$0\"", "0"},
  };
  for (const Launch& l : launches) {
    ProcessRun run = RunProcess({"/bin/sh", "-c",
                                 absl::StrCat("exec /usr/bin/setpriv --groups 0,4,27 -- '", CubicleBinary(), "' ",
                                              l.command),
                                 script});
    EXPECT_EQ(run.exit_code, 0) << l.name << ": " << run.err;
    std::vector<std::string> lines = Lines(run.out);
    ASSERT_EQ(lines.size(), 3u) << l.name << ": " << run.out << run.err;
    EXPECT_EQ(lines[0], "deny") << l.name;
    EXPECT_EQ(absl::StripAsciiWhitespace(lines[1]), "Groups:") << l.name << ": no supplementary group at all";
    EXPECT_EQ(lines[2], l.groups) << l.name << ": only the primary group";
  }
  // bwrap as root without --unshare-user imitates the host's root, which
  // keeps its groups and has no user namespace to deny setgroups in.
  ProcessRun host_root = RunProcess(
      {"/bin/sh", "-c",
       absl::StrCat("exec /usr/bin/setpriv --groups 0,4,27 -- '", CubicleBinary(), "' bwrap ", bwrap_sys,
                    " sh -c \"$0\""),
       script});
  EXPECT_EQ(host_root.exit_code, 0) << host_root.err;
  EXPECT_EQ(host_root.out, "allow\nGroups:\t0 4 27 \n0 4 27\n");
}

// `cubicle bwrap --userns FD --pidns FD --unshare-pid`, as root and (in the
// rootless run) as an unprivileged user: the namespaces of a holder made
// with unshare(1) are joined, a new pid namespace is nested under the
// joined one, and nothing of the sandbox outlives the run.
TEST_F(CoreCli, BwrapJoinsTheNamespacesItIsGiven) {
  REQUIRE_HOST(Executable("/usr/bin/unshare"));  // util-linux: the holder of the namespaces
  const std::string mark = absl::StrCat("1000.", ::getpid(), "9");
  RunningProcess holder({"/usr/bin/unshare", "--user", "--map-root-user", "--pid", "--fork", "/bin/sleep", mark});
  ASSERT_TRUE(holder.started());
  pid_t sleeper = -1;
  for (int i = 0; i < 1000 && sleeper < 0; ++i) {  // at most 10 s
    for (pid_t pid : ProcessesWithArgument(mark)) {
      if (ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "sleep\n") sleeper = pid;
    }
    if (sleeper < 0) ::usleep(10'000);
  }
  ASSERT_GT(sleeper, 0) << "the holder never started";
  const std::string ns = absl::StrCat("/proc/", sleeper, "/ns/");
  const std::string user_link = ReadLink(ns + "user");
  const std::string pid_link = ReadLink(ns + "pid");
  const std::string script =
      "readlink /proc/self/ns/user; readlink /proc/self/ns/pid; echo pid=$$ uid=$(id -u)";
  ProcessRun run = RunProcess(
      {"/bin/sh", "-c",
       absl::StrCat("exec '", CubicleBinary(),
                    "' bwrap --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib "
                    "--symlink usr/lib64 /lib64 --proc /proc --userns 3 --pidns 4 --unshare-pid "
                    "sh -c '", script, "' 3<", ns, "user 4<", ns, "pid")});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<std::string> lines = absl::StrSplit(run.out, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 3u) << run.out;
  EXPECT_EQ(lines[0], user_link) << "the holder's user namespace, joined";
  EXPECT_NE(lines[1], pid_link) << "a new pid namespace, nested under the joined one";
  EXPECT_EQ(lines[2], "pid=2 uid=0") << "init is 1; the caller is root in the holder's map";
  // A namespace fd that names nothing: bwrap's error, exit 1.
  ProcessRun bad = RunCubicle({"bwrap", "--ro-bind", "/usr", "/usr", "--userns", "99", "/usr/bin/true"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_EQ(bad.err, "bwrap: Joining specified user namespace failed: Bad file descriptor\n");
  ::kill(sleeper, SIGKILL);  // ours, by pid: the holder's pid namespace ends with it
  holder.Wait();
  EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{});
}

// A BPF program from libseccomp in a file of `dir`: every syscall allowed
// but `syscalls`, which fail with `err`.
std::string SeccompProgramFile(const TempDir& dir, const std::string& name, const std::vector<int>& syscalls,
                               int err) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  for (int nr : syscalls) seccomp_rule_add(ctx, SCMP_ACT_ERRNO(err), nr, 0);
  const std::string path = dir.Join(name);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd >= 0) {
    seccomp_export_bpf(ctx, fd);
    ::close(fd);
  }
  seccomp_release(ctx);
  return path;
}

// `cubicle bwrap` with /usr and `options`, run from `cwd` by a shell
// that opens fd 3 and 4 on `fd3` and `fd4` (files) when given.
ProcessRun RunBwrap(const std::string& options, const std::string& command, const std::string& fd3 = "",
                    const std::string& fd4 = "", const std::string& cwd = "/") {
  std::string line = absl::StrCat("cd '", cwd, "' && exec '", CubicleBinary(),
                                  "' bwrap --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib "
                                  "--symlink usr/lib64 /lib64 --proc /proc ",
                                  options, " ", command);
  if (!fd3.empty()) absl::StrAppend(&line, " 3<'", fd3, "'");
  if (!fd4.empty()) absl::StrAppend(&line, " 4<'", fd4, "'");
  ProcessRun run = RunProcess({"/bin/sh", "-c", line});
  EXPECT_FALSE(run.timed_out) << "cubicle bwrap did not finish: " << run.err;
  return run;
}

// bwrap's manual: with several --add-seccomp-fd programs, each but the last
// must allow prctl(PR_SET_SECCOMP), through which bwrap loads them. A first
// program that allows prctl but refuses seccomp(2), sendto and sendmsg (as
// an allowlist without them would) still lets the second load.
TEST_F(CoreCli, BwrapLoadsASeccompStackAsBwrapsManualSays) {
  TempDir dir;
  const std::string first =
      SeccompProgramFile(dir, "first", {SCMP_SYS(seccomp), SCMP_SYS(sendto), SCMP_SYS(sendmsg)}, ENOSYS);
  const std::string second = SeccompProgramFile(dir, "second", {SCMP_SYS(chroot)}, EPERM);
  ProcessRun run =
      RunBwrap("--add-seccomp-fd 3 --add-seccomp-fd 4", "grep Seccomp_filters /proc/self/status", first, second);
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "Seccomp_filters:\t2\n");
}

// What fails once a supplied program is in place reaches the caller as
// bwrap's message and status 1, though the program refuses the syscalls
// cubicle's report would use (sendto, sendmsg); with --as-pid-1 too.
TEST_F(CoreCli, BwrapReportsWhatFailsUnderASuppliedSeccompProgram) {
  TempDir dir;
  const std::string no_prctl = SeccompProgramFile(
      dir, "no-prctl", {SCMP_SYS(prctl), SCMP_SYS(seccomp), SCMP_SYS(sendto), SCMP_SYS(sendmsg)}, EPERM);
  const std::string no_exec = SeccompProgramFile(
      dir, "no-exec", {SCMP_SYS(execve), SCMP_SYS(execveat), SCMP_SYS(sendto), SCMP_SYS(sendmsg)}, EPERM);
  const std::string second = SeccompProgramFile(dir, "second", {SCMP_SYS(chroot)}, EPERM);
  ProcessRun run = RunBwrap("--add-seccomp-fd 3 --add-seccomp-fd 4", "true", no_prctl, second);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err, "bwrap: prctl(PR_SET_SECCOMP): Operation not permitted\n");
  for (const char* as_pid_1 : {"", "--unshare-pid --as-pid-1 "}) {
    run = RunBwrap(absl::StrCat(as_pid_1, "--add-seccomp-fd 3 --add-seccomp-fd 4"), "true", no_exec, second);
    EXPECT_EQ(run.exit_code, 1) << as_pid_1;
    EXPECT_EQ(run.err, "bwrap: execvp true: Operation not permitted\n") << as_pid_1;
  }
  // bwrap closes what it has read: the same fd twice is a closed fd.
  run = RunBwrap("--add-seccomp-fd 3 --add-seccomp-fd 3", "true", second);
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_EQ(run.err, "bwrap: Can't read seccomp data: Bad file descriptor\n");
}

// bwrap 0.11 resolves each overlay source on the host (a relative one from
// its working directory) and escapes ',', ':' and '\' in the mount
// options; its overlays have neither nosuid nor nodev.
TEST_F(CoreCli, BwrapOverlaySourcesMayBeRelativeAndHaveAnyName) {
  REQUIRE_HOST(OverlayfsInUserNamespace());
  TempDir dir;
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);  // the sandbox's host ids, as root, are not root's
  const std::string lower = dir.Join("lower"), odd = dir.Join("odd,lo:w\\er"), upper = dir.Join("odd,up:per\\"),
                    work = dir.Join("odd,wo:rk\\");
  for (const std::string& d : {lower, odd, upper, work}) ASSERT_EQ(::mkdir(d.c_str(), 0777), 0) << d;
  for (const std::string& d : {upper, work}) ASSERT_EQ(::chmod(d.c_str(), 0777), 0) << d;
  ASSERT_TRUE(WriteFile(lower + "/a.txt", "from-lower\n"));
  ASSERT_TRUE(WriteFile(odd + "/b.txt", "from-odd\n"));
  ProcessRun run = RunBwrap(
      "--overlay-src lower --overlay-src 'odd,lo:w\\er' --overlay 'odd,up:per\\' 'odd,wo:rk\\' /ov",
      "sh -c 'cat /ov/a.txt /ov/b.txt && echo written > /ov/new.txt && "
      "while read -r a b c d mp opts rest; do case $mp in /ov) echo \"$opts\";; esac; done < /proc/self/mountinfo'",
      "", "", dir.path());
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, "from-lower\nfrom-odd\nrw,relatime\n");
  EXPECT_EQ(ReadFile(upper + "/new.txt"), "written\n") << "the write lands in the upper layer";
}

// `cubicle serve --check-config` reads and checks everything a start
// would, says what it would serve, and serves nothing: no socket, no
// state directory made. A bad file is a usage error naming the value.
TEST_F(CoreCli, ServeCheckConfigValidatesWithoutServing) {
  TempDir dir;
  const std::string config = dir.Join("config.json");
  ASSERT_TRUE(WriteFile(config, absl::StrCat(R"({"socket": {"path": ")", dir.Join("s.sock"),
                                            R"("}, "profiles": {"shell": {"pool": {"min_idle": 1}}}})")));
  ProcessRun ok = RunCubicle({"serve", "--check-config", "--config", config, "--state-dir", dir.Join("state")});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_TRUE(absl::StrContains(ok.out, "configuration OK: 1 profile(s): shell min_idle 1")) << ok.out;
  EXPECT_TRUE(absl::StrContains(ok.out, absl::StrCat("socket ", dir.Join("s.sock")))) << ok.out;
  EXPECT_TRUE(absl::StrContains(ok.out, absl::StrCat("state directory ", dir.Join("state")))) << ok.out;
  struct stat st;
  EXPECT_NE(::stat(dir.Join("s.sock").c_str(), &st), 0) << "--check-config listened";
  EXPECT_NE(::stat(dir.Join("state").c_str(), &st), 0) << "--check-config made the state directory";

  ASSERT_TRUE(WriteFile(config, R"({"profiles": {"shell": {"limits": {"memory": "12Q"}}}})"));
  ProcessRun bad = RunCubicle({"serve", "--check-config", "--config", config});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(absl::StrContains(bad.err, "profiles.shell.limits.memory: '12Q' is not a size")) << bad.err;
  EXPECT_EQ(bad.out, "");
}

// `cubicle serve --print-default-config` is what the packages install as
// /etc/cubicle/config.json: the built-in text itself, which serve accepts
// as a file. With --config it is a usage error, not one of the two ignored.
TEST_F(CoreCli, ServePrintsTheBuiltInConfig) {
  ProcessRun printed = RunCubicle({"serve", "--print-default-config"});
  EXPECT_EQ(printed.exit_code, 0) << printed.err;
  EXPECT_EQ(printed.out, rpc::DefaultConfigJson());
  TempDir dir;
  const std::string config = dir.Join("config.json");
  ASSERT_TRUE(WriteFile(config, printed.out));
  ProcessRun ok = RunCubicle({"serve", "--check-config", "--config", config});
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  // "r" is there where the host has R; elsewhere the summary says why not.
  const bool host_has_r = ::access("/usr/bin/Rscript", X_OK) == 0 && ::access("/etc/R", R_OK) == 0;
  EXPECT_TRUE(absl::StrContains(ok.out, host_has_r ? "configuration OK: 3 profile(s)" : "configuration OK: 2 profile(s)"))
      << ok.out;
  ProcessRun built_in = RunCubicle({"serve", "--check-config"});
  EXPECT_EQ(built_in.exit_code, 0) << built_in.err;
  EXPECT_EQ(absl::StrContains(built_in.out, "no R on this host: the r profile is left out (apt-get install r-base-core)"),
            !host_has_r)
      << built_in.out;

  ProcessRun both = RunCubicle({"serve", "--print-default-config", "--config", config});
  EXPECT_EQ(both.exit_code, 2) << both.err;
  EXPECT_EQ(both.out, "");
}

}  // namespace
}  // namespace cubicle::test_support
