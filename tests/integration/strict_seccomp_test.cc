// The strict seccomp policy (docs/security.md, "The strict policy") through
// `cubicle serve`: a profile with "seccomp": "strict" runs the example
// skills by name (examples/skills), and inside it the probes a skill could
// try — a socket, a fork, ptrace, a host path, another program — are
// refused with the errnos the docs state; a program that is not Python
// still runs, in a cold sandbox. The same probes on a skill whose
// manifest asks for "seccomp: strict" in the default-policy profile (a
// sandbox made for the call).
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/skills_fixture.h"

namespace cubicle::test_support {
namespace {

// The repository, from this file's path: absolute, or relative to the
// build directory (the test binary's parent's parent), as CMake passed it.
std::string SourceDir() {
  std::string file = __FILE__;
  if (!file.empty() && file.front() != '/') {
    char exe[4096];
    const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
      std::string build(exe, static_cast<size_t>(n));
      build = build.substr(0, build.rfind('/'));  // build/tests
      file = absl::StrCat(build.substr(0, build.rfind('/')), "/", file);
    }
  }
  return file.substr(0, file.rfind("/tests/integration/"));
}

std::string ReadSource(const std::string& path) {
  std::stringstream text;
  text << std::ifstream(absl::StrCat(SourceDir(), "/", path)).rdbuf();
  return text.str();
}

// Answers with the errno name each probe got ("ok" when it was let through).
// The exec probes are StrictSeccompExec's: an exec that works replaces
// the skill.
constexpr char kProbes[] = R"PY(import ctypes, errno, json, os, socket, sys
request = json.loads(sys.stdin.readline())
def probe(f):
    try:
        f()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, str(e.errno))
libc = ctypes.CDLL(None, use_errno=True)
def ptrace():
    if libc.ptrace(0, 0, None, None) != 0:
        raise OSError(ctypes.get_errno(), "ptrace")
def fork():
    if os.fork() == 0:
        os._exit(0)
result = {
    "socket_inet": probe(lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)),
    "socket_unix": probe(lambda: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)),
    "fork": probe(fork),
    "ptrace": probe(ptrace),
    "host_path": probe(lambda: open(request["params"]["host_path"]).close()),
    "write_root": probe(lambda: open("/cubicle-strict-probe", "w").close()),
}
print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)
)PY";

class StrictSeccomp : public Skills {
 protected:
  void PutExampleSkills(const std::string& profile_line) {
    const std::pair<const char*, const char*> kExamples[] = {
        {"word-stats/1.0.0/word_stats.py", ""},
        {"checked-divide/1.0.0/checked_divide.py", ""},
        {"tally/1.0.0/tally.py", ""},
        {"text-report/1.0.0/text_report.py", "calls: [word-stats@^1]\n"}};
    for (const auto& [skill, more] : kExamples) {
      std::string script = ReadSource(absl::StrCat("examples/skills/", skill));
      ASSERT_FALSE(script.empty()) << skill;
      const std::string name = std::string(skill).substr(0, std::string(skill).find('/'));
      Put(absl::StrCat(name, "/skill.yaml"),
          absl::StrCat("name: ", name, "\nversion: 1.0.0\nentry: main.py\n", profile_line, more));
      Put(absl::StrCat(name, "/main.py"), script);
    }
  }
  json::value Probe(const std::string& skill) {
    return Result("skill.call", absl::StrCat(R"({"skill": )", Quoted(skill),
                                             R"(, "method": "probe", "params": {"host_path": )", Quoted(config_),
                                             "}}"));
  }
  // The probes' answers, each as the docs state them for the strict policy.
  void ExpectRefused(const json::value& answer) {
    ASSERT_TRUE(answer.is_object() && answer.as_object().contains("result")) << json::serialize(answer);
    const json::value& r = answer.at("result");
    EXPECT_EQ(Str(r.at("socket_inet")), "EPERM");
    EXPECT_EQ(Str(r.at("socket_unix")), "EPERM");
    EXPECT_EQ(Str(r.at("fork")), "EPERM");
    EXPECT_EQ(Str(r.at("ptrace")), "EPERM");
    EXPECT_EQ(Str(r.at("host_path")), "ENOENT") << "the daemon's config is not in the sandbox's mount tree";
    EXPECT_EQ(Str(r.at("write_root")), "EROFS");
  }
  static constexpr char kStrictProfile[] =
      R"(, "strict": {"seccomp": "strict", "limits": {"memory": "256M"}, )"
      R"("pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}, )"
      R"("interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}})";
};

TEST_F(StrictSeccomp, AStrictProfileRunsTheExampleSkills) {
  PutExampleSkills("profile: strict\n");
  ASSERT_TRUE(Start({}, "", kStrictProfile).up());
  EXPECT_EQ(Result("skill.list", "").at("errors").as_array().size(), 0u) << Log();
  json::value stats =
      Result("skill.call", R"({"skill": "word-stats", "method": "stats", "params": {"text": "a b a", "top": 1}})");
  ASSERT_TRUE(stats.is_object() && stats.as_object().contains("result")) << json::serialize(stats) << Log();
  EXPECT_EQ(stats.at("result").at("words").as_int64(), 3);
  json::value divide =
      Result("skill.call", R"({"skill": "checked-divide", "method": "divide", "params": {"a": 1, "b": 0}})");
  ASSERT_TRUE(divide.is_object() && divide.as_object().contains("error")) << json::serialize(divide) << Log();
  EXPECT_EQ(Str(divide.at("error").at("message")), "division by zero");
  EXPECT_EQ(Str(Result("skill.describe", R"({"name": "word-stats"})").at("seccomp")), "strict");
  // A skill session (two calls, one process) and a skill calling another
  // through its stdin and stdout: nothing beyond the allowlist either.
  json::value opened = Result("skill.session.open", R"({"skill": "tally"})");
  ASSERT_TRUE(opened.is_object()) << Log();
  const std::string in = absl::StrCat(R"({"skill_session": )", Quoted(Str(opened.at("skill_session"))));
  Result("skill.call", absl::StrCat(in, R"(, "method": "add", "params": {"values": [1, 2]}})"));
  json::value tally = Result("skill.call", absl::StrCat(in, R"(, "method": "add", "params": {"values": [3]}})"));
  ASSERT_TRUE(tally.is_object() && tally.as_object().contains("result")) << json::serialize(tally) << Log();
  EXPECT_EQ(tally.at("result").at("count").as_int64(), 3);
  Result("skill.session.close", absl::StrCat(in, "}"));
  json::value report =
      Result("skill.call", R"({"skill": "text-report", "method": "report", "params": {"text": "to be or not to be"}})");
  ASSERT_TRUE(report.is_object() && report.as_object().contains("result")) << json::serialize(report) << Log();
  EXPECT_EQ(Str(report.at("result").at("summary")), "6 words, most often 'to'");
}

TEST_F(StrictSeccomp, AStrictProfileRefusesTheProbesWithTheDocumentedErrnos) {
  Put("probe/skill.yaml", "name: probe\nversion: 1.0.0\nentry: main.py\nprofile: strict\n");
  Put("probe/main.py", kProbes);
  ASSERT_TRUE(Start({}, "", kStrictProfile).up());
  ExpectRefused(Probe("probe"));
}

// The manifest tightens the default profile's policy: the call runs cold,
// in a sandbox of its own, under strict; the example skills still run.
TEST_F(StrictSeccomp, AManifestAsksForStrictInADefaultProfile) {
  python_more_ = R"(, "seccomp": "default")";
  PutExampleSkills("profile: python\nseccomp: strict\n");
  Put("probe/skill.yaml", "name: probe\nversion: 1.0.0\nentry: main.py\nprofile: python\nseccomp: strict\n");
  Put("probe/main.py", kProbes);
  Put("loose/skill.yaml", "name: loose\nversion: 1.0.0\nentry: main.py\nprofile: python\n");
  Put("loose/main.py", kProbes);
  ASSERT_TRUE(Start().up());
  EXPECT_EQ(Result("skill.list", "").at("errors").as_array().size(), 0u) << Log();
  json::value described = Result("skill.describe", R"({"name": "probe"})");
  EXPECT_EQ(Str(described.at("seccomp")), "strict");
  EXPECT_FALSE(described.at("warm").as_bool());
  EXPECT_EQ(Str(Result("skill.describe", R"({"name": "loose"})").at("seccomp")), "default");
  ExpectRefused(Probe("probe"));
  // The same probes in the profile's own policy: a unix socket and a fork go through.
  json::value loose = Probe("loose");
  ASSERT_TRUE(loose.is_object() && loose.as_object().contains("result")) << json::serialize(loose);
  EXPECT_EQ(Str(loose.at("result").at("socket_unix")), "ok");
  EXPECT_EQ(Str(loose.at("result").at("fork")), "ok");
  json::value stats =
      Result("skill.call", R"({"skill": "word-stats", "method": "stats", "params": {"text": "a b a", "top": 1}})");
  ASSERT_TRUE(stats.is_object() && stats.as_object().contains("result")) << json::serialize(stats) << Log();
  EXPECT_EQ(stats.at("result").at("words").as_int64(), 3);
}

// The exec probes (as in isolation_test.cc): Python's execv of another
// program, and a raw execveat whose sixth argument, the strict policy's
// exec token, is 0. Each prints the errno name it got, or the program
// it started prints "execd".
constexpr char kExecvProbe[] = R"PY(import errno, os
try:
    os.execv("/bin/echo", ["echo", "execd"])
except OSError as e:
    print(errno.errorcode.get(e.errno, str(e.errno)))
)PY";
constexpr char kExecveatProbe[] = R"PY(import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
NR = {"x86_64": 322, "aarch64": 281}[os.uname().machine]
argv = (ctypes.c_char_p * 3)(b"echo", b"execd", None)
envp = (ctypes.c_char_p * 1)(None)
L = ctypes.c_long
if libc.syscall(L(NR), L(-100), ctypes.c_char_p(b"/bin/echo"), argv, envp, L(0), L(0)) == -1:
    print(errno.errorcode.get(ctypes.get_errno(), "?"))
)PY";

class StrictSeccompExec : public StrictSeccomp {
 protected:
  json::value RunArgv(const std::string& profile, const std::vector<std::string>& argv) {
    std::string list;
    for (const std::string& a : argv) absl::StrAppend(&list, list.empty() ? "" : ",", Quoted(a));
    return Result("sandbox.run", absl::StrCat(R"({"profile": )", Quoted(profile), R"(, "argv": [)", list, "]}"));
  }
  std::string Stdout(const json::value& result) {
    return result.is_object() && result.as_object().contains("stdout") ? Str(result.at("stdout")) : "<no result>";
  }
};

// On the strict profile a Python payload, run warm, cannot exec; a
// program that is not an invocation of the profile's interpreter still
// runs, sent to a cold sandbox whose one exec is that program's. The
// default-policy profile (the control) lets both probes exec.
TEST_F(StrictSeccompExec, AStrictProfileRefusesExecButRunsAnotherProgramCold) {
  python_more_ = R"(, "seccomp": "default")";
  ASSERT_TRUE(Start({}, "", kStrictProfile).up());
  for (const char* probe : {kExecvProbe, kExecveatProbe}) {
    json::value strict = RunArgv("strict", {"python3", "-I", "-c", probe});
    EXPECT_EQ(Stdout(strict), "EPERM\n") << json::serialize(strict) << Log();
    EXPECT_TRUE(strict.is_object() && strict.at("warm").as_bool()) << json::serialize(strict);
    json::value loose = RunArgv("python", {"python3", "-I", "-c", probe});
    EXPECT_EQ(Stdout(loose), "execd\n") << json::serialize(loose) << Log();
  }
  json::value echo = RunArgv("strict", {"/bin/echo", "hi"});
  EXPECT_EQ(Stdout(echo), "hi\n") << json::serialize(echo) << Log();
  EXPECT_TRUE(echo.is_object() && !echo.at("warm").as_bool()) << json::serialize(echo);
  // And a shell, whose own commands still cannot start another program.
  json::value shell = RunArgv("strict", {"/bin/sh", "-c", "echo ok; /bin/true"});
  EXPECT_EQ(Stdout(shell), "ok\n") << json::serialize(shell) << Log();
  // After them, a warm request is served warm again.
  json::value again = RunArgv("strict", {"python3", "-I", "-c", "print('warm')"});
  EXPECT_EQ(Stdout(again), "warm\n") << json::serialize(again) << Log();
}

TEST_F(StrictSeccomp, AManifestCannotAskForALooserPolicy) {
  Put("lax/skill.yaml", "name: lax\nversion: 1.0.0\nentry: main.py\nseccomp: none\n");
  Put("lax/main.py", kProbes);
  ASSERT_TRUE(Start().up());
  json::value errors = Result("skill.list", "").at("errors");
  ASSERT_EQ(errors.as_array().size(), 1u) << json::serialize(errors);
  EXPECT_NE(json::serialize(errors).find("seccomp"), std::string::npos) << json::serialize(errors);
}

}  // namespace
}  // namespace cubicle::test_support
