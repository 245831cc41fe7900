// Zygotes: sandboxes made ahead of time, then handed one execution
// (DESIGN §5). The cold path is Create + Run; these tests drive the two
// halves apart, as a pool will.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <atomic>
#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/strings/ascii.h"
#include "namespaces/idmap.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

std::unique_ptr<runtime::Zygote> MakeZygote(runtime::ZygoteOptions options = {}) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(TestSpec({}), options);
  EXPECT_TRUE(z.ok()) << z.status();
  return z.ok() ? *std::move(z) : nullptr;
}

runtime::ExecRequest Shell(const std::string& script) {
  runtime::ExecRequest r;
  r.argv = {"/bin/sh", "-c", script};
  r.env = {"PATH=/usr/bin:/bin"};
  return r;
}

class CoreZygote : public HostHygieneTest {};

TEST_F(CoreZygote, IsReadyBeforeTheRequestAndRunsItsArgvEnvAndCwd) {
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  ASSERT_NE(z, nullptr);
  // Built and waiting: its init exists before any request.
  EXPECT_GT(z->init_pid(), 0);
  EXPECT_EQ(::kill(z->init_pid(), 0), 0);
  runtime::ExecRequest r = Shell("echo \"$GREETING from $(pwd)\"; cat; exit 7");
  r.env.push_back("GREETING=hello");
  r.cwd = "/tmp";
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, r, "piped-in\n");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->result.exit_code, 7);
  EXPECT_EQ(run->out, "hello from /tmp\npiped-in\n");
  // The hand-off is timed on its own.
  bool has_handoff = false;
  for (const auto& [name, d] : run->result.steps) has_handoff |= name == "handoff";
  EXPECT_TRUE(has_handoff);
}

TEST_F(CoreZygote, RunsOneExecutionOnly) {
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  ASSERT_NE(z, nullptr);
  ASSERT_TRUE(RunInZygote(*z, Shell("true")).ok());
  absl::StatusOr<SandboxRun> again = RunInZygote(*z, Shell("true"));
  ASSERT_FALSE(again.ok());
  EXPECT_TRUE(absl::IsFailedPrecondition(again.status())) << again.status();
}

TEST_F(CoreZygote, ABadRequestIsRefusedAndTheZygoteStaysUsable) {
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  ASSERT_NE(z, nullptr);
  runtime::ExecRequest empty;
  absl::StatusOr<SandboxRun> bad = RunInZygote(*z, empty);
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "argv is empty")) << bad.status();
  runtime::ExecRequest relative = Shell("true");
  relative.cwd = "tmp";
  EXPECT_FALSE(RunInZygote(*z, relative).ok());
  absl::StatusOr<SandboxRun> good = RunInZygote(*z, Shell("echo still-here"));
  ASSERT_TRUE(good.ok()) << good.status();
  EXPECT_EQ(good->out, "still-here\n");
}

TEST_F(CoreZygote, AMissingCommandIsASetupErrorNotExit127) {
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  ASSERT_NE(z, nullptr);
  runtime::ExecRequest r;
  r.argv = {"no-such-command-here"};
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kSetupFailed);
  EXPECT_TRUE(absl::StrContains(run->result.setup_error.message(), "execve(no-such-command-here): ENOENT"))
      << run->result.setup_error;
}

TEST_F(CoreZygote, AnUnusedZygoteLeavesNothingWhenDestroyed) {
  pid_t init = -1;
  {
    std::unique_ptr<runtime::Zygote> z = MakeZygote();
    ASSERT_NE(z, nullptr);
    init = z->init_pid();
    ASSERT_EQ(::kill(init, 0), 0);
  }
  // Reaped by the destructor: the pid is gone (HostHygieneTest checks that
  // no descendant and no mount remains).
  EXPECT_NE(::kill(init, 0), 0);
}

TEST_F(CoreZygote, NothingOfOneExecutionIsVisibleToTheNext) {
  std::unique_ptr<runtime::Zygote> first = MakeZygote();
  std::unique_ptr<runtime::Zygote> second = MakeZygote();  // made before the first runs
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  runtime::ExecRequest leave = Shell("echo secret > /tmp/left-behind; (sleep 30 &) ; echo done");
  leave.env.push_back("SECRET=1");
  absl::StatusOr<SandboxRun> a = RunInZygote(*first, leave);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->out, "done\n");
  absl::StatusOr<SandboxRun> b = RunInZygote(
      *second, Shell("ls /tmp; echo \"secret=${SECRET:-unset}\"; ls /proc | grep -c '^[0-9]'"));
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE(absl::StrContains(b->out, "left-behind")) << b->out;
  EXPECT_TRUE(absl::StrContains(b->out, "secret=unset")) << b->out;
  EXPECT_FALSE(absl::StrContains(b->out, "\n5\n")) << "the first sandbox's sleep is not visible";
}

TEST_F(CoreZygote, TheWorkspaceIsAttachedAtHandOff) {
  if (!IsRoot()) {
    // Rootless, the kernel allows neither open_tree(OPEN_TREE_CLONE) of a
    // host directory nor a bind from another mount namespace: refused clearly.
    std::unique_ptr<runtime::Zygote> z = MakeZygote();
    ASSERT_NE(z, nullptr);
    runtime::ExecRequest r = Shell("true");
    r.workspace = "/tmp";
    absl::StatusOr<SandboxRun> run = RunInZygote(*z, r);
    ASSERT_FALSE(run.ok());
    EXPECT_TRUE(absl::IsUnimplemented(run.status())) << run.status();
    return;
  }
  TempDir host;
  REQUIRE_HOST(IdmappedMounts(host.path()));  // root's, shown as the sandbox user's
  ASSERT_TRUE(WriteFile(host.Join("input.txt"), "from the host\n"));
  runtime::ZygoteOptions options;
  options.accept_workspace = true;
  std::unique_ptr<runtime::Zygote> z = MakeZygote(options);
  ASSERT_NE(z, nullptr);
  runtime::ExecRequest r = Shell("cat input.txt && echo written > output.txt && id -u");
  r.cwd = "/workspace";
  r.workspace = host.path();
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.exit_code, 0) << run->err << run->result.setup_error;
  EXPECT_TRUE(absl::StrContains(run->out, "from the host")) << run->out;
  EXPECT_EQ(ReadFile(host.Join("output.txt")), "written\n");
  // Written by the sandbox user, owned on the host by the directory's owner.
  struct stat dir_st, file_st;
  ASSERT_EQ(::stat(host.path().c_str(), &dir_st), 0);
  ASSERT_EQ(::stat(host.Join("output.txt").c_str(), &file_st), 0);
  EXPECT_EQ(file_st.st_uid, dir_st.st_uid);
}

TEST_F(CoreZygote, ConcurrentExecutionsSeeOnlyTheirOwnWorkspace) {
  if (!IsRoot()) GTEST_SKIP() << "a workspace is attached at hand-off only as root";
  TempDir a_dir, b_dir;
  REQUIRE_HOST(IdmappedMounts(a_dir.path()));
  ASSERT_TRUE(WriteFile(a_dir.Join("a-only.txt"), "a\n"));
  ASSERT_TRUE(WriteFile(b_dir.Join("b-only.txt"), "b\n"));
  runtime::ZygoteOptions options;
  options.accept_workspace = true;
  std::unique_ptr<runtime::Zygote> a = MakeZygote(options);
  std::unique_ptr<runtime::Zygote> b = MakeZygote(options);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  // Both run at once: each lists /workspace while the other is attached.
  runtime::ExecRequest ra = Shell("sleep 0.3; ls /workspace; ls / | grep -c workspace");
  ra.workspace = a_dir.path();
  runtime::ExecRequest rb = Shell("ls /workspace; sleep 0.3");
  rb.workspace = b_dir.path();
  absl::StatusOr<SandboxRun> run_a;
  std::thread t([&] { run_a = RunInZygote(*a, ra); });
  absl::StatusOr<SandboxRun> run_b = RunInZygote(*b, rb);
  t.join();
  ASSERT_TRUE(run_a.ok() && run_b.ok());
  EXPECT_EQ(run_a->out, "a-only.txt\n1\n");
  EXPECT_EQ(run_b->out, "b-only.txt\n");
}

TEST_F(CoreZygote, ConcurrentUserNamespaceHelpersDoNotHoldEachOther) {
  // MakeUserNamespaceFd forks a helper that waits for its pipe to close.
  // Forked from several threads at once, a helper that kept a copy of
  // another thread's pipe held that thread forever (a hang seen with
  // parallel NPU probes). Four threads, 25 helpers each, under a watchdog.
  namespaces::IdMapping mapping;
  mapping.uids = {{0, ::geteuid(), 1}};
  mapping.gids = {{0, ::getegid(), 1}};
  mapping.deny_setgroups = true;
  struct Shared {
    std::atomic<int> made{0}, failed{0};
    std::promise<void> done;
  };
  auto shared = std::make_shared<Shared>();
  std::future<void> done = shared->done.get_future();
  // Detached: should it deadlock, the test fails at the watchdog instead of
  // hanging in a join.
  std::thread([shared, mapping] {
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&] {
        for (int i = 0; i < 25; ++i) {
          absl::StatusOr<int> fd = namespaces::MakeUserNamespaceFd(mapping);
          if (fd.ok()) {
            ::close(*fd);
            ++shared->made;
          } else {
            ++shared->failed;
          }
        }
      });
    }
    for (std::thread& t : threads) t.join();
    shared->done.set_value();
  }).detach();
  ASSERT_EQ(done.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "user-namespace helpers deadlocked (" << shared->made.load() << " made)";
  const std::atomic<int>& made = shared->made;
  const std::atomic<int>& failed = shared->failed;
  EXPECT_EQ(made.load(), 100);
  EXPECT_EQ(failed.load(), 0);
}

// A launcher's signal state must not reach the payload: a daemon ignores
// SIGPIPE, has handlers, blocks signals in its threads. Init resets every
// disposition but the ones it forwards (namespaces::BecomeInit) and the
// payload it spawns restores those (RestoreSignalsForPayload), so the
// payload starts as a fresh process does, cold or from a zygote.
TEST_F(CoreZygote, ThePayloadStartsWithAFreshSignalState) {
  struct sigaction ignore {}, handler {}, old_pipe {}, old_usr1 {}, old_hup {};
  ignore.sa_handler = SIG_IGN;
  handler.sa_handler = [](int) {};
  ASSERT_EQ(::sigaction(SIGPIPE, &ignore, &old_pipe), 0);
  ASSERT_EQ(::sigaction(SIGHUP, &ignore, &old_hup), 0);  // one init forwards
  ASSERT_EQ(::sigaction(SIGUSR1, &handler, &old_usr1), 0);
  sigset_t block, old_mask;
  sigemptyset(&block);
  sigaddset(&block, SIGUSR2);
  sigaddset(&block, SIGALRM);
  ASSERT_EQ(::pthread_sigmask(SIG_BLOCK, &block, &old_mask), 0);

  // cat: a program that installs no handler of its own (grep catches SIGSEGV).
  const std::string show = "exec cat /proc/self/status";
  absl::StatusOr<SandboxRun> cold = RunInSandbox(TestSpec({"/bin/sh", "-c", show}));
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  absl::StatusOr<SandboxRun> pooled;
  if (z != nullptr) pooled = RunInZygote(*z, Shell(show));

  ::pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ::sigaction(SIGHUP, &old_hup, nullptr);
  ::sigaction(SIGUSR1, &old_usr1, nullptr);

  auto signal_lines = [](const std::string& status) {
    std::istringstream in(status);
    std::string out;
    for (std::string line; std::getline(in, line);) {
      if (absl::StartsWith(line, "SigBlk:") || absl::StartsWith(line, "SigIgn:") ||
          absl::StartsWith(line, "SigCgt:")) {
        absl::StrAppend(&out, line, "\n");
      }
    }
    return out;
  };
  const std::string fresh = "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\nSigCgt:\t0000000000000000\n";
  ASSERT_TRUE(cold.ok()) << cold.status();
  EXPECT_EQ(signal_lines(cold->out), fresh) << cold->result.setup_error;
  ASSERT_NE(z, nullptr);
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  EXPECT_EQ(signal_lines(pooled->out), fresh) << pooled->result.setup_error;
}

// The host pids of a process's children (/proc/PID/task/PID/children).
std::vector<pid_t> ChildrenOf(pid_t pid) {
  std::istringstream in(ReadFile(absl::StrCat("/proc/", pid, "/task/", pid, "/children")));
  std::vector<pid_t> out;
  for (pid_t child; in >> child;) out.push_back(child);
  return out;
}

// The state letter of /proc/PID/stat; '?' once the process is gone (also
// when it goes while being read: ReadFile does not throw).
char StateOf(pid_t pid) {
  const std::string line = ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = line.rfind(')');
  return paren == std::string::npos || paren + 2 >= line.size() ? '?' : line[paren + 2];
}

// The value of `field` in /proc/PID/status ("" when absent or gone).
std::string StatusOf(pid_t pid, const std::string& field) {
  return StatusField(ReadFile(absl::StrCat("/proc/", pid, "/status")), field);
}

// A process's pid in the innermost pid namespace it is in: the last of
// its NSpid's.
std::string InnerPid(pid_t pid) {
  const std::string nspid = StatusOf(pid, "NSpid");
  return nspid.substr(nspid.find_last_of(" \t") + 1);
}

// A zygote, accepting a workspace when asked, and the host pid of its
// armed payload, init's one child (-1, with a failure, when init has not
// exactly one).
std::unique_ptr<runtime::Zygote> MakeArmedZygote(bool accept_workspace, pid_t* armed) {
  runtime::ZygoteOptions options;
  options.accept_workspace = accept_workspace;
  std::unique_ptr<runtime::Zygote> z = MakeZygote(options);
  *armed = -1;
  if (z == nullptr) return z;
  const std::vector<pid_t> children = ChildrenOf(z->init_pid());
  EXPECT_EQ(children.size(), 1u) << "init has no payload waiting";
  if (children.size() == 1) *armed = children[0];
  return z;
}

// A zygote's plain payload is started before its request, its hygiene
// done (runtime/zygote.cc, ArmedPayload): the hand-off pays for no clone,
// no capability drop and no seccomp compile. It waits as init's one child,
// with nothing left to give up, and it is the process the request runs in.
TEST_F(CoreZygote, APlainPayloadWaitsAheadOfItsRequestWithItsHygieneDone) {
  pid_t armed;
  std::unique_ptr<runtime::Zygote> z = MakeArmedZygote(/*accept_workspace=*/false, &armed);
  ASSERT_NE(z, nullptr);
  ASSERT_GT(armed, 0);
  EXPECT_EQ(StatusOf(armed, "NoNewPrivs"), "1");
  EXPECT_EQ(StatusOf(armed, "Seccomp"), "2");
  for (const char* set : {"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"}) {
    EXPECT_EQ(StatusOf(armed, set), "0000000000000000") << set;
  }
  // In the sandbox's groups, as init is: it was started after init's attach.
  EXPECT_EQ(ReadFile(absl::StrCat("/proc/", armed, "/cgroup")),
            ReadFile(absl::StrCat("/proc/", z->init_pid(), "/cgroup")));
  // Its pid in the sandbox's namespace is the request's.
  const std::string inner = InnerPid(armed);
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, Shell("echo $$"));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->out, inner + "\n");
}

// A cold sandbox has no request to wait for: its payload is spawned at
// hand-off, and nothing runs beside init before.
// A request's watch_fd (the daemon's stdin, for its reader) is watched
// while the execution runs: on_watch is called once when it becomes
// readable, not again although it stays readable, and the run goes on.
TEST_F(CoreZygote, AWatchedFdIsReportedOnceWhileTheExecutionRuns) {
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  ASSERT_NE(z, nullptr);
  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  UniqueFd read_end(p[0]), write_end(p[1]);
  runtime::ExecRequest r = Shell("sleep 0.3; echo done");
  int calls = 0;
  r.watch_fd = read_end.get();
  r.on_watch = [&] { ++calls; };
  std::thread writer([&] {
    absl::SleepFor(absl::Milliseconds(50));
    (void)!::write(write_end.get(), "x", 1);  // never read: it stays readable
  });
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, r);
  writer.join();
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->out, "done\n");
  EXPECT_EQ(calls, 1);
}

// Init reports the payload's end before reaping it (waitid with WNOWAIT;
// namespaces/init.cc): the status word and rusage it sends must be the
// ones a reaping wait gives — an exit code, a killing signal, and the
// payload's own CPU time and peak memory.
TEST_F(CoreZygote, TheExitReportCarriesTheStatusAndUsageOfThePayload) {
  struct Case {
    const char* script;
    runtime::ExitReason reason;
    int exit_code;
    int signal;
  };
  for (const Case& c : {Case{"exit 7", runtime::ExitReason::kExited, 7, 0},
                        Case{"kill -SEGV $$", runtime::ExitReason::kSignaled, -1, SIGSEGV},
                        Case{"i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done", runtime::ExitReason::kExited, 0, 0}}) {
    SCOPED_TRACE(c.script);
    std::unique_ptr<runtime::Zygote> z = MakeZygote();
    ASSERT_NE(z, nullptr);
    absl::StatusOr<SandboxRun> run = RunInZygote(*z, Shell(c.script));
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->result.reason, c.reason) << run->result.setup_error;
    if (c.reason == runtime::ExitReason::kExited) {
      EXPECT_EQ(run->result.exit_code, c.exit_code);
    }
    EXPECT_EQ(run->result.signal, c.signal);
    EXPECT_GT(run->result.rusage.ru_maxrss, 0);
    if (c.exit_code == 0) {  // the busy loop: its CPU time is the shell's own
      const int64_t cpu_us = run->result.rusage.ru_utime.tv_sec * 1000000 + run->result.rusage.ru_utime.tv_usec +
                             run->result.rusage.ru_stime.tv_sec * 1000000 + run->result.rusage.ru_stime.tv_usec;
      EXPECT_GT(cpu_us, 0);
    }
  }
}

TEST_F(CoreZygote, AColdSandboxStartsNoPayloadAhead) {
  runtime::ZygoteOptions cold;
  cold.cold = true;
  std::unique_ptr<runtime::Zygote> z = MakeZygote(cold);
  ASSERT_NE(z, nullptr);
  EXPECT_TRUE(ChildrenOf(z->init_pid()).empty());
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, Shell("echo ran"));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "ran\n") << run->result.setup_error;
}

// The two routes a request takes to an armed payload: direct (false),
// and through init (true: a request that brings a workspace, which init
// moves in; that needs root and a host directory that can be idmapped).
// Each test starts with a zygote on its route and its armed payload's pid.
class CoreArmedPayloadRoute : public HostHygieneTest, public testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    if (through_init() && !(IsRoot() && IdmappedMounts(workspace_.path()).present)) {
      GTEST_SKIP() << "a workspace needs root and idmapped mounts here";
    }
    z_ = MakeArmedZygote(through_init(), &armed_);
    ASSERT_NE(z_, nullptr);
    ASSERT_GT(armed_, 0);
  }
  void TearDown() override {
    z_.reset();  // killed and reaped before the hygiene check
    HostHygieneTest::TearDown();
  }
  bool through_init() const { return GetParam(); }
  runtime::ExecRequest Request(const std::string& script) const {
    runtime::ExecRequest r = Shell(script);
    if (through_init()) r.workspace = workspace_.path();
    return r;
  }

  TempDir workspace_;
  std::unique_ptr<runtime::Zygote> z_;
  pid_t armed_ = -1;
};

INSTANTIATE_TEST_SUITE_P(Routes, CoreArmedPayloadRoute, testing::Bool(),
                         [](const testing::TestParamInfo<bool>& info) { return info.param ? "ThroughInit" : "Direct"; });

// Init leaves its wait at the hand-off when the armed payload's end of
// their pair hangs up, which must be its execve (close-on-exec), never the
// install of the request's stdio: so no stdio number holds a socket while
// the payload waits. (Init has no stdio of its own; its socketpair once
// got fds 0 and 1, and the dup2 of the request's stdout over fd 1 woke
// init to supervise while the payload still ran in init's memory.)
TEST_P(CoreArmedPayloadRoute, NoStdioNumberOfTheWaitingPayloadIsASocket) {
  for (int fd = 0; fd <= 2; ++fd) {
    char target[256] = {};
    const std::string link = absl::StrCat("/proc/", armed_, "/fd/", fd);
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    if (n < 0 && errno == EACCES) {
      // Rootless: the payload's fd table is out of this uid's reach.
      GTEST_SKIP() << "readlink(" << link << "): EACCES (the payload's fds need privilege to inspect)";
    }
    if (n < 0) {
      EXPECT_EQ(errno, ENOENT) << link;  // closed: nothing to hang up
      continue;
    }
    EXPECT_FALSE(absl::StartsWith(target, "socket:")) << link << " -> " << target;
  }
  // And the request still runs, with its stdio in place.
  absl::StatusOr<SandboxRun> run = RunInZygote(*z_, Request("echo out; echo err >&2; cat"), "in\n");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->out, "out\nin\n");
}

// Killed while it waits (nothing of cubicle's does that), the payload is
// missed at hand-off: the request fails with a setup error that says so,
// and the zygote still leaves nothing behind (HostHygieneTest).
TEST_P(CoreArmedPayloadRoute, KilledBeforeItsRequestItIsASetupError) {
  ASSERT_EQ(::kill(armed_, SIGKILL), 0);
  // Dead (a zombie, or reaped by init, which sees its channel hang up):
  // 5 s at most.
  auto dead = [&] { return StateOf(armed_) == 'Z' || StateOf(armed_) == '?'; };
  for (int i = 0; i < 500 && !dead(); ++i) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(dead());
  absl::StatusOr<SandboxRun> run = RunInZygote(*z_, Request("echo never"));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kSetupFailed);
  // Init saw it die ("payload(ended before its request)"), or, with the
  // request on its way through init first, could not hand it over.
  const std::string why(run->result.setup_error.message());
  EXPECT_TRUE(absl::StrContains(why, "payload(ended before its request)") ||
              absl::StrContains(why, "the request's stdio to the payload"))
      << why;
  EXPECT_EQ(run->out, "");
}

// Either way the request runs as the process that waited armed, with its
// stdin and exit status, and init, told to linger (a pool's request),
// lingers.
TEST_P(CoreArmedPayloadRoute, TheRequestRunsAsTheArmedPayload) {
  const std::string inner = InnerPid(armed_);
  runtime::ExecRequest r = Request("echo $$; cat; exit 3");
  r.return_at_exit = true;  // a pool's: init lingers after its report
  absl::StatusOr<SandboxRun> run = RunInZygote(*z_, r, "in\n");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->result.exit_code, 3);
  EXPECT_EQ(run->out, inner + "\nin\n");
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_EQ(::kill(z_->init_pid(), 0), 0);
  EXPECT_NE(StateOf(z_->init_pid()), 'Z');
}

// An armed payload says "executing" by writing its stamp where the
// launcher reads it (runtime/zygote.cc, the exec stamp page), not with a message
// that would wake the launcher while it execs: the result still knows when
// the payload started, whether it exits or is killed at its timeout.
TEST_F(CoreZygote, AnArmedPayloadsStartIsTimedWhetherItExitsOrIsKilled) {
  for (bool killed : {false, true}) {
    SCOPED_TRACE(killed ? "killed at its timeout" : "exits");
    std::unique_ptr<runtime::Zygote> z = MakeZygote();
    ASSERT_NE(z, nullptr);
    runtime::ExecRequest r = Shell(killed ? "sleep 30" : "sleep 0.2");
    if (killed) r.timeout = absl::Milliseconds(300);
    absl::StatusOr<SandboxRun> run = RunInZygote(*z, r);
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->result.reason, killed ? runtime::ExitReason::kTimeout : runtime::ExitReason::kExited)
        << run->result.setup_error;
    absl::Duration payload_run = absl::ZeroDuration();
    bool has_setup_step = false;
    for (const auto& [name, d] : run->result.steps) {
      if (name == "run") payload_run = d;
      has_setup_step |= name == "payload_setup";
    }
    EXPECT_TRUE(has_setup_step);
    // The payload ran for most of the wall time (the sleep), and its start
    // came before: setup and run split the wall.
    EXPECT_GT(run->result.setup, absl::ZeroDuration());
    EXPECT_LT(run->result.setup, run->result.wall);
    EXPECT_GE(payload_run, absl::Milliseconds(150));
  }
}

// return_at_exit (a pool's requests): Run() returns at init's report and
// init stays until the zygote is destroyed (namespaces::AfterExit), so that
// its own exit is not on the request path; what the payload left running
// in its pid namespace is killed at the report all the same.
TEST_F(CoreZygote, AfterAnEarlyReturnInitStaysAndKillsWhatThePayloadLeft) {
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  ASSERT_NE(z, nullptr);
  const pid_t init = z->init_pid();
  runtime::ExecRequest r = Shell("sleep 30 & sleep 30 & echo started");
  r.return_at_exit = true;
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error;
  EXPECT_EQ(run->out, "started\n");
  // The two sleeps die (zombies of init, which no longer reaps): bounded
  // wait, 5 s at most.
  bool all_dead = false;
  for (int i = 0; i < 500 && !all_dead; ++i) {
    all_dead = true;
    for (pid_t child : ChildrenOf(init)) all_dead &= StateOf(child) == 'Z' || StateOf(child) == '?';
    if (!all_dead) absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_TRUE(all_dead) << "a process the payload left is still running";
  // Init itself is still there, waiting for the launcher to hang up.
  absl::SleepFor(absl::Milliseconds(100));
  EXPECT_EQ(::kill(init, 0), 0);
  EXPECT_NE(StateOf(init), 'Z');
  z.reset();
  EXPECT_NE(::kill(init, 0), 0);  // reaped with the zygote
}

TEST_F(CoreZygote, TimeoutCountsFromTheHandOff) {
  std::unique_ptr<runtime::Zygote> z = MakeZygote();
  ASSERT_NE(z, nullptr);
  runtime::ExecRequest r = Shell("sleep 30");
  r.timeout = absl::Milliseconds(300);
  absl::StatusOr<SandboxRun> run = RunInZygote(*z, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kTimeout);
}

}  // namespace
}  // namespace cubicle::test_support
