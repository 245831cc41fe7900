// Warm interpreters (DESIGN §5, runtime/warm.h): zygotes whose init has
// started python3 and imported the profile's modules before the request;
// the request's script then runs as __main__ with its own argv, env, cwd
// and stdio, in the process that was already running.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "runtime/warm_template.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

runtime::WarmInterpreter Python(std::vector<std::string> preload = {"json"}) {
  return {{"python3", "-I"}, std::move(preload)};
}

absl::StatusOr<std::unique_ptr<runtime::Zygote>> MakeWarm(runtime::WarmInterpreter interpreter,
                                                          const runtime::DefaultsOptions& defaults = {}) {
  runtime::ZygoteOptions options;
  options.interpreter = std::move(interpreter);
  runtime::SandboxSpec spec = TestSpec({}, defaults);
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "PROFILE_ONLY=yes"};
  return runtime::Zygote::Create(spec, options);
}

runtime::ExecRequest PythonRequest(std::vector<std::string> args) {
  runtime::ExecRequest r;
  r.argv = {"python3", "-I"};
  r.argv.insert(r.argv.end(), args.begin(), args.end());
  r.env = {"PATH=/usr/bin:/bin", "REQUEST_VAR=from-the-request"};
  r.timeout = absl::Seconds(30);
  return r;
}

// The interpreter's pid before the hand-off: the one child of the zygote's
// init, which the kernel shows as init's only child.
pid_t InterpreterPid(pid_t init) {
  std::ifstream children(absl::StrCat("/proc/", init, "/task/", init, "/children"));
  pid_t pid = -1;
  children >> pid;
  return pid;
}

// The host's python3, seen through the sandbox's /usr bind.
class CoreWarmPython : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    REQUIRE_HOST(Python3());
  }
};
class CoreWarm : public HostHygieneTest {};

TEST_F(CoreWarmPython, TheInterpreterIsRunningBeforeTheRequestAndServesIt) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  const pid_t interpreter = InterpreterPid((*z)->init_pid());
  ASSERT_GT(interpreter, 0) << "no interpreter process under the zygote's init";
  std::ifstream comm(absl::StrCat("/proc/", interpreter, "/comm"));
  std::string name;
  comm >> name;
  EXPECT_TRUE(absl::StartsWith(name, "python")) << name;

  absl::StatusOr<SandboxRun> run = RunInZygote(
      **z, PythonRequest({"-c", "import json, os, sys; print(json.dumps({'modules': 'json' in sys.modules}))"}));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error << run->err;
  EXPECT_EQ(run->result.exit_code, 0) << run->err;
  EXPECT_TRUE(run->result.warm);
  // json was imported before the request: the preload is real.
  EXPECT_EQ(run->out, "{\"modules\": true}\n");
}

TEST_F(CoreWarmPython, CodeRunsAsMainWithTheRequestsArgvEnvCwdAndStdio) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  runtime::ExecRequest r = PythonRequest(
      {"-c",
       "import os, sys\n"
       "print(__name__)\n"
       "print(sys.argv)\n"
       "print(os.getcwd())\n"
       "print(os.environ.get('REQUEST_VAR'), os.environ.get('PROFILE_ONLY'))\n"
       "print(sys.stdin.read().strip())\n"
       "sys.stderr.write('to stderr\\n')\n"
       "sys.exit(5)",
       "one", "two words"});
  r.cwd = "/tmp";
  absl::StatusOr<SandboxRun> run = RunInZygote(**z, r, "from stdin\n");
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited) << run->result.setup_error << run->err;
  EXPECT_EQ(run->result.exit_code, 5);
  EXPECT_EQ(run->out, "__main__\n['-c', 'one', 'two words']\n/tmp\nfrom-the-request None\nfrom stdin\n");
  EXPECT_EQ(run->err, "to stderr\n");
}

TEST_F(CoreWarmPython, AScriptFileRunsAsMainWithItsPathAsArgvZero) {
  TempDir dir;
  const std::string script = dir.Join("skill.py");
  {
    std::ofstream f(script);
    f << "import sys\nif __name__ == '__main__':\n    print('main', __file__, sys.argv[1:])\n";
  }
  ASSERT_EQ(::chmod(dir.path().c_str(), 0755), 0);
  ASSERT_EQ(::chmod(script.c_str(), 0644), 0);
  if (IsRoot()) REQUIRE_HOST(IdmappedMounts(dir.path()));  // root's, shown as the sandbox user's
  runtime::DefaultsOptions defaults;
  defaults.workspace = dir.path();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python(), defaults);
  ASSERT_TRUE(z.ok()) << z.status();
  absl::StatusOr<SandboxRun> run = RunInZygote(**z, PythonRequest({"/workspace/skill.py", "--flag", "x"}));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.exit_code, 0) << run->err;
  EXPECT_TRUE(run->result.warm);
  EXPECT_EQ(run->out, "main /workspace/skill.py ['--flag', 'x']\n");
}

TEST_F(CoreWarmPython, AnExceptionPrintsTheScriptsTracebackAndExitsOne) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  absl::StatusOr<SandboxRun> run =
      RunInZygote(**z, PythonRequest({"-c", "def f():\n    raise ValueError('bad input')\nf()\n"}));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kExited);
  EXPECT_EQ(run->result.exit_code, 1);
  // As `python3 -c` prints it: the payload's frames only, none of the
  // bootstrap's.
  EXPECT_EQ(run->err,
            "Traceback (most recent call last):\n"
            "  File \"<string>\", line 3, in <module>\n"
            "  File \"<string>\", line 2, in f\n"
            "ValueError: bad input\n");
}

TEST_F(CoreWarmPython, MatchesAnExecOfTheSameProgram) {
  // The same program, warm and exec'd for real (the request's flags differ
  // from the profile's, so the bootstrap execs it): same output, same exit.
  const std::string program =
      "import sys, atexit\n"
      "atexit.register(lambda: print('atexit ran'))\n"
      "print(__name__, sys.argv, sys.flags.isolated)\n"
      "raise SystemExit('goodbye')\n";
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> warm = MakeWarm(Python());
  ASSERT_TRUE(warm.ok()) << warm.status();
  absl::StatusOr<SandboxRun> a = RunInZygote(**warm, PythonRequest({"-c", program, "arg"}));
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> exec = MakeWarm(Python());
  ASSERT_TRUE(exec.ok()) << exec.status();
  runtime::ExecRequest cold = PythonRequest({"-c", program, "arg"});
  cold.argv = {"/usr/bin/python3", "-I", "-c", program, "arg"};  // not the profile's argv[0]: exec'd
  absl::StatusOr<SandboxRun> b = RunInZygote(**exec, cold);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_TRUE(a->result.warm);
  EXPECT_FALSE(b->result.warm);
  EXPECT_EQ(a->out, b->out);
  EXPECT_EQ(a->out, "__main__ ['-c', 'arg'] 1\natexit ran\n");
  EXPECT_EQ(a->err, b->err);
  EXPECT_EQ(a->err, "goodbye\n");
  EXPECT_EQ(a->result.exit_code, 1);
  EXPECT_EQ(b->result.exit_code, 1);
}

TEST_F(CoreWarmPython, ModuleAndStdinProgramsRunAsMain) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  // -m: the standard library's json.tool as __main__, reading stdin.
  absl::StatusOr<SandboxRun> module = RunInZygote(**z, PythonRequest({"-m", "json.tool", "--compact"}), "{\"a\": [1, 2]}");
  ASSERT_TRUE(module.ok()) << module.status();
  EXPECT_EQ(module->result.exit_code, 0) << module->err;
  EXPECT_EQ(module->out, "{\"a\":[1,2]}\n");

  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z2 = MakeWarm(Python());
  ASSERT_TRUE(z2.ok()) << z2.status();
  absl::StatusOr<SandboxRun> stdin_program =
      RunInZygote(**z2, PythonRequest({"-", "x"}), "import sys\nprint(__name__, sys.argv)\n");
  ASSERT_TRUE(stdin_program.ok()) << stdin_program.status();
  EXPECT_EQ(stdin_program->out, "__main__ ['-', 'x']\n");
}

TEST_F(CoreWarmPython, AMissingScriptFailsAsPythonDoes) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  absl::StatusOr<SandboxRun> run = RunInZygote(**z, PythonRequest({"/nonexistent.py"}));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.exit_code, 2);
  EXPECT_EQ(run->err, "python3: can't open file '/nonexistent.py': [Errno 2] No such file or directory\n");
}

TEST_F(CoreWarmPython, AnotherProgramIsExecdInsteadWithTheSameIsolation) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  runtime::ExecRequest r;
  r.argv = {"sh", "-c", "echo $0 $REQUEST_VAR; grep -E '^(CapEff|NoNewPrivs|Seccomp):' /proc/self/status"};
  r.env = {"PATH=/usr/bin:/bin", "REQUEST_VAR=v"};
  absl::StatusOr<SandboxRun> run = RunInZygote(**z, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_FALSE(run->result.warm);
  EXPECT_EQ(run->result.exit_code, 0) << run->err;
  EXPECT_EQ(run->out, "sh v\nCapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n");

  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z2 = MakeWarm(Python());
  ASSERT_TRUE(z2.ok()) << z2.status();
  runtime::ExecRequest missing = r;
  missing.argv = {"no-such-program"};
  absl::StatusOr<SandboxRun> gone = RunInZygote(**z2, missing);
  ASSERT_TRUE(gone.ok()) << gone.status();
  EXPECT_EQ(gone->result.exit_code, 127);
  EXPECT_TRUE(absl::StrContains(gone->err, "no-such-program")) << gone->err;
}

TEST_F(CoreWarmPython, TheInterpreterRunsConfinedBeforeAnyRequest) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  const pid_t interpreter = InterpreterPid((*z)->init_pid());
  ASSERT_GT(interpreter, 0);
  std::ifstream status(absl::StrCat("/proc/", interpreter, "/status"));
  std::string line, caps, nnp, seccomp;
  while (std::getline(status, line)) {
    if (absl::StartsWith(line, "CapEff:")) caps = line;
    if (absl::StartsWith(line, "NoNewPrivs:")) nnp = line;
    if (absl::StartsWith(line, "Seccomp:")) seccomp = line;
  }
  EXPECT_EQ(caps, "CapEff:\t0000000000000000");
  EXPECT_EQ(nnp, "NoNewPrivs:\t1");
  EXPECT_EQ(seccomp, "Seccomp:\t2");
  // It holds no fd of the launcher's: stdio on /dev/null, its socket to init.
  std::set<std::string> fds = ListDirectory(absl::StrCat("/proc/", interpreter, "/fd"));
  for (const std::string& fd : fds) {
    char target[256] = {};
    ssize_t n = ::readlink(absl::StrCat("/proc/", interpreter, "/fd/", fd).c_str(), target, sizeof(target) - 1);
    ASSERT_GT(n, 0);
    std::string t(target, static_cast<size_t>(n));
    EXPECT_TRUE(t == "/dev/null" || absl::StartsWith(t, "socket:")) << "fd " << fd << " -> " << t;
  }
}

TEST_F(CoreWarmPython, APreloadThatFailsIsACreateErrorNamingTheModule) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python({"json", "no_such_module_xyz"}));
  ASSERT_FALSE(z.ok());
  EXPECT_TRUE(absl::StrContains(z.status().message(), "no_such_module_xyz")) << z.status();
  EXPECT_TRUE(absl::StrContains(z.status().message(), "preload")) << z.status();
}

TEST_F(CoreWarm, ANonPythonInterpreterIsRefused) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm({{"/bin/sh"}, {}});
  ASSERT_FALSE(z.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(z.status())) << z.status();
  EXPECT_TRUE(absl::StrContains(z.status().message(), "only Python")) << z.status();
}

TEST_F(CoreWarmPython, NoStateCrossesFromOneRequestToTheNext) {
  // Each request has its own interpreter: a module attribute, a /tmp file
  // and an environment change made by one are not seen by the next.
  const std::string program =
      "import json, os, sys\n"
      "print(getattr(json, 'cubicle_mark', None), os.path.exists('/tmp/mark'), os.environ.get('MARK'))\n"
      "json.cubicle_mark = 1\n"
      "open('/tmp/mark', 'w').write('x')\n"
      "os.environ['MARK'] = '1'\n";
  for (int i = 0; i < 2; ++i) {
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
    ASSERT_TRUE(z.ok()) << z.status();
    absl::StatusOr<SandboxRun> run = RunInZygote(**z, PythonRequest({"-c", program}));
    ASSERT_TRUE(run.ok()) << run.status();
    EXPECT_EQ(run->out, "None False None\n") << "run " << i;
  }
}

TEST_F(CoreWarmPython, KilledOnTimeoutLikeAnyPayload) {
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = MakeWarm(Python());
  ASSERT_TRUE(z.ok()) << z.status();
  runtime::ExecRequest r = PythonRequest({"-c", "import time\nwhile True: time.sleep(1)\n"});
  r.timeout = absl::Milliseconds(300);
  absl::StatusOr<SandboxRun> run = RunInZygote(**z, r);
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kTimeout);
}

TEST_F(CoreWarmPython, AZygoteHoldingItsTemplatesLastReferenceEndsBoth) {
  // A fork server drops a template once it is too old or too prolific,
  // while zygotes made from it are still idle or running; the last of them
  // then ends the template. The template's init, killed, waits until every
  // process of its pid namespace is reaped, this zygote's init among them:
  // the zygote must have reaped its init before it lets go of the template.
  runtime::ZygoteOptions options;
  options.interpreter = Python();
  runtime::SandboxSpec spec = TestSpec({});
  absl::StatusOr<std::shared_ptr<runtime::WarmTemplate>> from = runtime::WarmTemplate::Start(spec, options);
  ASSERT_TRUE(from.ok()) << from.status();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> served = (*from)->Make(spec, options);
  ASSERT_TRUE(served.ok()) << served.status();
  absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = (*from)->Make(spec, options);
  ASSERT_TRUE(z.ok()) << z.status();
  from->reset();  // the zygotes hold the template now
  absl::StatusOr<SandboxRun> run = RunInZygote(**served, PythonRequest({"-c", "print('served')"}));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(run->out, "served\n");
  served->reset();
  // The last reference: an idle zygote, dropped (as one expired or left
  // at shutdown is), whose init is still running when its teardown starts.
  // Bounded: a teardown that deadlocks fails here instead of hanging.
  std::packaged_task<void()> teardown([&z] { z->reset(); });
  std::future<void> done = teardown.get_future();
  std::thread worker(std::move(teardown));
  if (done.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    worker.detach();
    FAIL() << "the zygote's teardown did not end within 60 s (its template's init waits for it)";
  }
  worker.join();
}

}  // namespace
}  // namespace cubicle::test_support
