// Warm R interpreters (runtime/warm_r.h): a zygote whose R was started
// ahead of the request — its own, or forked from a warm template — runs
// the request's program as Rscript would: the same output, warnings,
// errors and exit status as an exec of the same argv in a cold sandbox,
// with the request's argv, env, cwd and stdio; and it runs confined, as
// any payload is. Skipped where the host has no R.
#include <unistd.h>

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "runtime/cgroup_host.h"
#include "runtime/warm_r.h"
#include "runtime/warm_template.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

// The interpreter's zygote: its own R, or a fork of a template's.
enum class Start { kOwn, kTemplate };

std::string StartName(const ::testing::TestParamInfo<Start>& info) {
  return info.param == Start::kOwn ? "OwnInterpreter" : "FromTemplate";
}

// What the host's R needs in a sandbox besides the default mounts: its
// configuration (R_HOME/etc links into /etc/R).
runtime::SandboxSpec RSpec() {
  runtime::SandboxSpec spec = TestSpec({});
  spec.mounts.push_back(Bind("/etc/R", "/etc/R", true));
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin", "PROFILE_ONLY=yes"};
  spec.limits.memory_max = 512ull << 20;
  spec.limits.pids_max = 64;
  return spec;
}

runtime::ExecRequest RRequest(std::vector<std::string> argv) {
  runtime::ExecRequest r;
  r.argv = std::move(argv);
  r.env = {"PATH=/usr/bin:/bin", "REQUEST_VAR=from-the-request", "TZ=UTC"};
  r.cwd = "/tmp";
  r.timeout = absl::Seconds(60);
  return r;
}

std::vector<std::string> Rscript(std::vector<std::string> rest) {
  std::vector<std::string> argv = {"Rscript", "--vanilla"};
  argv.insert(argv.end(), rest.begin(), rest.end());
  return argv;
}

// Prints what a program can tell of how it was started, warns, and fails
// at top level.
constexpr char kProgram[] = R"r(print(commandArgs())
x <- 41 + 1
x
cat("var:", Sys.getenv("REQUEST_VAR"), "profile:", Sys.getenv("PROFILE_ONLY"), "wd:", getwd(), "\n")
cat("home:", Sys.getenv("R_HOME"), "tmp:", dir.exists(tempdir()), startsWith(tempdir(), "/tmp/Rtmp"), "\n")
cat("attached:", "package:jsonlite" %in% search(), "seed:", exists(".Random.seed"), "\n")
f <- function() warning("careful")
f()
stop("boom")
cat("never\n")
)r";

class CoreWarmR : public HostHygieneTest, public ::testing::WithParamInterface<Start> {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (::access("/usr/bin/Rscript", X_OK) != 0 || ::access("/etc/R", R_OK) != 0) {
      GTEST_SKIP() << "the host has no R (/usr/bin/Rscript, /etc/R): apt-get install r-base-core";
    }
  }
  void TearDown() override {
    zygote_.reset();
    template_.reset();
    HostHygieneTest::TearDown();
  }

  // A warm zygote of `interpreter`, built before any request.
  absl::Status Make(runtime::WarmInterpreter interpreter) {
    runtime::ZygoteOptions options;
    interpreter.from_template = GetParam() == Start::kTemplate;
    options.interpreter = interpreter;
    if (GetParam() == Start::kTemplate) {
      absl::StatusOr<std::shared_ptr<runtime::WarmTemplate>> t = runtime::WarmTemplate::Start(RSpec(), options);
      if (!t.ok()) return t.status();
      template_ = *std::move(t);
      absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = template_->Make(RSpec(), options);
      if (!z.ok()) return z.status();
      zygote_ = *std::move(z);
      return absl::OkStatus();
    }
    absl::StatusOr<std::unique_ptr<runtime::Zygote>> z = runtime::Zygote::Create(RSpec(), options);
    if (!z.ok()) return z.status();
    zygote_ = *std::move(z);
    return absl::OkStatus();
  }

  // `argv` served by a fresh warm zygote, and the same request exec'd in a
  // cold sandbox of the same spec.
  std::pair<SandboxRun, SandboxRun> WarmAndCold(const std::vector<std::string>& argv, const std::string& stdin_text = "",
                                                runtime::WarmInterpreter interpreter = {{"Rscript", "--vanilla"}, {}}) {
    absl::Status made = Make(interpreter);
    EXPECT_TRUE(made.ok()) << made;
    absl::StatusOr<SandboxRun> warm = made.ok() ? RunInZygote(*zygote_, RRequest(argv), stdin_text)
                                                : absl::StatusOr<SandboxRun>(made);
    zygote_.reset();
    template_.reset();
    runtime::SandboxSpec cold_spec = RSpec();
    runtime::ExecRequest request = RRequest(argv);
    cold_spec.argv = request.argv;
    cold_spec.env = request.env;
    cold_spec.cwd = request.cwd;
    absl::StatusOr<SandboxRun> cold = RunInSandbox(cold_spec, stdin_text);
    EXPECT_TRUE(warm.ok()) << warm.status();
    EXPECT_TRUE(cold.ok()) << cold.status();
    return {warm.ok() ? *warm : SandboxRun{}, cold.ok() ? *cold : SandboxRun{}};
  }

  std::shared_ptr<runtime::WarmTemplate> template_;
  std::unique_ptr<runtime::Zygote> zygote_;
};

INSTANTIATE_TEST_SUITE_P(WarmR, CoreWarmR, ::testing::Values(Start::kOwn, Start::kTemplate), StartName);

TEST_P(CoreWarmR, ExpressionsRunAsRscriptRunsThem) {
  auto [warm, cold] = WarmAndCold(Rscript({"-e", kProgram, "-e", "cat('second\\n')", "one", "two"}));
  EXPECT_TRUE(warm.result.warm) << "exec'd, not run by the warm interpreter: " << warm.err;
  EXPECT_FALSE(cold.result.warm);
  EXPECT_EQ(warm.result.exit_code, 1) << warm.err;
  EXPECT_EQ(warm.out, cold.out);
  EXPECT_EQ(warm.err, cold.err);
  EXPECT_EQ(warm.result.exit_code, cold.result.exit_code);
  // What the comparison stands on: the program ran, in both.
  EXPECT_TRUE(absl::StrContains(warm.out, "[1] 42")) << warm.out;
  EXPECT_TRUE(absl::StrContains(warm.out, "\"--args\"")) << warm.out;
  EXPECT_TRUE(absl::StrContains(warm.out, "var: from-the-request profile:  wd: /tmp")) << warm.out;
  EXPECT_TRUE(absl::StrContains(warm.out, "home: /usr/lib/R tmp: TRUE TRUE")) << warm.out;
  EXPECT_TRUE(absl::StrContains(warm.out, "attached: FALSE seed: FALSE")) << warm.out;
  EXPECT_TRUE(absl::StrContains(warm.err, "Warning message:\nIn f() : careful")) << warm.err;
  EXPECT_TRUE(absl::StrContains(warm.err, "Error: boom\nExecution halted")) << warm.err;
  EXPECT_FALSE(absl::StrContains(warm.out, "\nnever\n")) << "ran past the error";
}

TEST_P(CoreWarmR, StdinProgramsAndQuitStatusAsRscript) {
  const std::string program = "cat(readLines(file('stdin'), n = 0L), 'from stdin\\n')\nquit(status = 3)\n";
  auto [warm, cold] = WarmAndCold(Rscript({"-", "arg"}), program);
  EXPECT_TRUE(warm.result.warm) << warm.err;
  EXPECT_EQ(warm.result.exit_code, 3) << warm.err;
  EXPECT_EQ(warm.out, cold.out);
  EXPECT_EQ(warm.err, cold.err);
  EXPECT_EQ(cold.result.exit_code, 3) << cold.err;
  EXPECT_TRUE(absl::StrContains(warm.out, "from stdin")) << warm.out;
}

TEST_P(CoreWarmR, AnRInterpreterReadsItsProgramOnStdin) {
  const std::string program = "print(commandArgs())\ncat(sum(1:10), '\\n')\n";
  auto [warm, cold] = WarmAndCold({"R", "--vanilla", "--slave"}, program, {{"R", "--vanilla", "--slave"}, {}});
  EXPECT_TRUE(warm.result.warm) << warm.err;
  EXPECT_EQ(warm.result.exit_code, 0) << warm.err;
  EXPECT_EQ(warm.out, cold.out);
  EXPECT_EQ(warm.err, cold.err);
  EXPECT_TRUE(absl::StrContains(warm.out, "55")) << warm.out;
}

TEST_P(CoreWarmR, TheSkillLauncherRunsItsProgramAsAScript) {
  const std::string program =
      "cat(readLines(file('stdin'), n = 1L), '\\n')\n"
      "cat(grepl('^--file=/tmp/[.]cubicle-skill-[0-9]+[.]R$', commandArgs()[5]), length(commandArgs(TRUE)), '\\n')\n"
      "stop('bad input')\n";
  auto [warm, cold] = WarmAndCold({"/bin/sh", "-c", runtime::RSkillLauncher(), "a-skill", program}, "a line\n");
  EXPECT_TRUE(warm.result.warm) << warm.err;
  EXPECT_EQ(warm.out, "a line \nTRUE 0 \n");
  EXPECT_EQ(warm.out, cold.out);
  EXPECT_EQ(warm.err, cold.err);
  EXPECT_EQ(warm.err, "Error: bad input\nExecution halted\n");
  EXPECT_EQ(warm.result.exit_code, 1);
}

TEST_P(CoreWarmR, AMissingScriptFailsAsRscriptDoes) {
  auto [warm, cold] = WarmAndCold(Rscript({"/nonexistent.R"}));
  EXPECT_TRUE(warm.result.warm);
  EXPECT_EQ(warm.result.exit_code, 2);
  // R says it on stdout.
  EXPECT_EQ(warm.out, "Fatal error: cannot open file '/nonexistent.R': No such file or directory\n");
  EXPECT_EQ(warm.out, cold.out);
  EXPECT_EQ(warm.err, cold.err);
  EXPECT_EQ(warm.result.exit_code, cold.result.exit_code);
}

TEST_P(CoreWarmR, AnotherProgramIsExecdInstead) {
  auto [warm, cold] = WarmAndCold({"/bin/sh", "-c", "echo \"$REQUEST_VAR\" in \"$PWD\"; exit 4"});
  EXPECT_FALSE(warm.result.warm);
  EXPECT_EQ(warm.out, "from-the-request in /tmp\n");
  EXPECT_EQ(warm.result.exit_code, 4) << warm.err;
}

// What the request's code finds of its process: no capabilities, no new
// privileges, a seccomp filter, the sandbox's unprivileged uid, a
// read-only /usr, only its stdio open.
TEST_P(CoreWarmR, TheRequestRunsConfined) {
  const std::string program = R"r(status <- readLines("/proc/self/status")
for (key in c("Uid", "CapEff", "CapBnd", "NoNewPrivs", "Seccomp")) cat(grep(paste0("^", key, ":"), status, value = TRUE), "\n")
cat("fds:", sort(as.integer(list.files("/proc/self/fd"))), "\n")
cat("usr:", tryCatch(file.create("/usr/cubicle-probe", showWarnings = FALSE), error = function(e) "error"), "\n")
)r";
  ASSERT_TRUE(Make({{"Rscript", "--vanilla"}, {}}).ok());
  absl::StatusOr<SandboxRun> run = RunInZygote(*zygote_, RRequest(Rscript({"-e", program})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->result.warm);
  EXPECT_EQ(run->result.exit_code, 0) << run->err;
  EXPECT_TRUE(absl::StrContains(run->out, "CapEff:\t0000000000000000")) << run->out;
  EXPECT_TRUE(absl::StrContains(run->out, "CapBnd:\t0000000000000000")) << run->out;
  EXPECT_TRUE(absl::StrContains(run->out, "NoNewPrivs:\t1")) << run->out;
  EXPECT_TRUE(absl::StrContains(run->out, "Seccomp:\t2")) << run->out;
  EXPECT_FALSE(absl::StrContains(run->out, "Uid:\t0\t")) << run->out;
  // list.files itself holds the directory open while it reads it.
  EXPECT_TRUE(absl::StrContains(run->out, "fds: 0 1 2 3 \n") || absl::StrContains(run->out, "fds: 0 1 2 \n"))
      << run->out;
  EXPECT_TRUE(absl::StrContains(run->out, "usr: FALSE")) << run->out;
}

TEST_P(CoreWarmR, KilledPastItsMemoryLimitLikeAnyPayload) {
  if (!IsRoot()) GTEST_SKIP() << "needs root: cgroups are not delegated to this user";
  if (absl::Status usable = runtime::CgroupsUsable(); !usable.ok()) GTEST_SKIP() << "no usable cgroups here: " << usable;
  ASSERT_TRUE(Make({{"Rscript", "--vanilla"}, {}}).ok());
  absl::StatusOr<SandboxRun> run = RunInZygote(*zygote_, RRequest(Rscript({"-e", "x <- numeric(128e6); cat(sum(x))"})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->result.warm);
  EXPECT_EQ(run->result.reason, runtime::ExitReason::kOom) << run->err;
}

TEST_P(CoreWarmR, APreloadThatFailsIsACreateErrorNamingThePackage) {
  absl::Status made = Make({{"Rscript", "--vanilla"}, {"cubicleNoSuchPackage"}});
  ASSERT_FALSE(made.ok());
  EXPECT_TRUE(absl::StrContains(made.message(), "cubicleNoSuchPackage")) << made;
}

TEST_P(CoreWarmR, APreloadedNamespaceIsLoadedButNotAttached) {
  if (::access("/usr/lib/R/site-library/jsonlite", R_OK) != 0) GTEST_SKIP() << "no jsonlite (r-cran-jsonlite)";
  ASSERT_TRUE(Make({{"Rscript", "--vanilla"}, {"jsonlite"}}).ok());
  absl::StatusOr<SandboxRun> run = RunInZygote(
      *zygote_, RRequest(Rscript({"-e", "cat(isNamespaceLoaded('jsonlite'), 'package:jsonlite' %in% search(), "
                                        "jsonlite::toJSON(list(a = 1), auto_unbox = TRUE), '\\n')"})));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_TRUE(run->result.warm);
  EXPECT_EQ(run->out, "TRUE FALSE {\"a\":1} \n") << run->err;
}

}  // namespace
}  // namespace cubicle::test_support
