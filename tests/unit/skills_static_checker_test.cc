// The static policy checker's logic (skills/static_checker.py, embedded)
// run directly with the build's Python on scripts the test writes — each
// rule kind, aliases, getattr with a constant, dynamic imports with a
// constant, a syntax error, a clean script — through the same input and
// output the daemon uses (skills/static_policy.h). The daemon runs it in a
// sandbox; here the inputs are the test's own, so no sandbox is needed.
#include "skills/static_policy.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "tests/support/temp_dir.h"

extern char** environ;

namespace cubicle::skills {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

#ifdef CUBICLE_PYTHON3
constexpr char kPython[] = CUBICLE_PYTHON3;
#else
constexpr char kPython[] = "";
#endif

StaticPolicy Policy() {
  absl::StatusOr<StaticPolicy> p = ParseStaticPolicy(boost::json::parse(R"({
      "deny_imports": ["subprocess", "ctypes", "socket.*"],
      "deny_calls": ["eval", "exec", "os.system", "__import__"],
      "deny_attributes": ["__subclasses__", "__globals__", "__builtins__"]})"),
                                                     "static_policy");
  EXPECT_TRUE(p.ok()) << p.status();
  return p.ok() ? *p : StaticPolicy{};
}

// `python3 -I -c CHECKER` with `input` on stdin: its stdout, or "" with a
// test failure.
std::string RunChecker(const std::string& input) {
  test_support::TempDir dir;
  const std::string in = dir.Join("in.json"), out = dir.Join("out.json");
  std::ofstream(in) << input;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, in.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const std::string program(StaticCheckerProgram());
  std::vector<const char*> argv = {kPython, "-I", "-c", program.c_str(), nullptr};
  pid_t pid = -1;
  const int spawned = ::posix_spawn(&pid, kPython, &actions, nullptr, const_cast<char**>(argv.data()), environ);
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(spawned, 0) << kPython;
  if (spawned != 0) return "";
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the checker ended with status " << status;
  std::stringstream text;
  text << std::ifstream(out).rdbuf();
  return text.str();
}

class StaticChecker : public ::testing::Test {
 protected:
  void SetUp() override {
    if (kPython[0] == '\0' || ::access(kPython, X_OK) != 0) GTEST_SKIP() << "no python3 was found by CMake";
  }

  // Each script's violations, as "RULE | WHAT | LINE:COL".
  std::vector<std::vector<std::string>> Check(const std::vector<std::string>& scripts,
                                              const StaticPolicy& policy = Policy()) {
    std::vector<absl::string_view> views(scripts.begin(), scripts.end());
    absl::StatusOr<std::vector<StaticVerdict>> verdicts =
        ParseStaticCheckOutput(RunChecker(StaticCheckInput(policy, views)), scripts.size(), policy);
    EXPECT_TRUE(verdicts.ok()) << verdicts.status();
    std::vector<std::vector<std::string>> out;
    if (!verdicts.ok()) return out;
    for (const StaticVerdict& v : *verdicts) {
      EXPECT_EQ(v.policy_digest, policy.digest);
      std::vector<std::string> each;
      for (const StaticViolation& x : v.violations) {
        each.push_back(absl::StrCat(x.rule, " | ", x.what, " | ", x.line, ":", x.col));
      }
      out.push_back(each);
    }
    return out;
  }
  std::vector<std::string> CheckOne(const std::string& script) {
    std::vector<std::vector<std::string>> all = Check({script});
    return all.empty() ? std::vector<std::string>{"(no verdict)"} : all[0];
  }
};

TEST_F(StaticChecker, ACleanScriptPasses) {
  EXPECT_THAT(CheckOne("import json, os, sys\nr = json.loads(sys.stdin.readline())\nprint(os.getcwd(), r)\n"),
              ElementsAre());
}

TEST_F(StaticChecker, ImportsMatchModulesAndTheirSubmodules) {
  EXPECT_THAT(CheckOne("import json\nimport subprocess\n"),
              ElementsAre("deny_imports: subprocess | import subprocess | 2:1"));
  EXPECT_THAT(CheckOne("import subprocess as sp\n"),
              ElementsAre("deny_imports: subprocess | import subprocess as sp | 1:1"));
  EXPECT_THAT(CheckOne("from subprocess import run\n"),
              ElementsAre("deny_imports: subprocess | from subprocess import run | 1:1"));
  EXPECT_THAT(CheckOne("import ctypes.util\n"), ElementsAre("deny_imports: ctypes | import ctypes.util | 1:1"));
  // "socket.*": its submodules and what is imported from it, not socket itself.
  EXPECT_THAT(CheckOne("import socket\n"), ElementsAre());
  EXPECT_THAT(CheckOne("from socket import create_connection\n"),
              ElementsAre("deny_imports: socket.* | from socket import create_connection | 1:1"));
  // A relative import cannot be resolved in a skill: matched as absolute.
  EXPECT_THAT(CheckOne("from . import subprocess\n"),
              ElementsAre("deny_imports: subprocess | from . import subprocess | 1:1"));
  // A prefix that is not a dotted parent does not match.
  EXPECT_THAT(CheckOne("import subprocess2\nimport ctypesgen\n"), ElementsAre());
  // Imports by a constant name, through the import functions.
  EXPECT_THAT(CheckOne("import importlib\nm = importlib.import_module('ctypes')\n"),
              ElementsAre("deny_imports: ctypes | importlib.import_module('ctypes') | 2:5"));
  EXPECT_THAT(CheckOne("m = __import__('subprocess')\n"),
              ElementsAre("deny_calls: __import__ | __import__(...) | 1:5",
                          "deny_imports: subprocess | __import__('subprocess') | 1:5"));
}

TEST_F(StaticChecker, CallsAreResolvedThroughTheScriptsImports) {
  EXPECT_THAT(CheckOne("x = eval('1 + 1')\n"), ElementsAre("deny_calls: eval | eval(...) | 1:5"));
  EXPECT_THAT(CheckOne("import os\nos.system('ls')\n"), ElementsAre("deny_calls: os.system | os.system(...) | 2:1"));
  EXPECT_THAT(CheckOne("import os as o\no.system('ls')\n"),
              ElementsAre("deny_calls: os.system | o.system(...) (os.system) | 2:1"));
  EXPECT_THAT(CheckOne("from os import system\nsystem('ls')\n"),
              ElementsAre("deny_calls: os.system | system(...) (os.system) | 2:1"));
  EXPECT_THAT(CheckOne("from os import system as run\nrun('ls')\n"),
              ElementsAre("deny_calls: os.system | run(...) (os.system) | 2:1"));
  EXPECT_THAT(CheckOne("from os import *\nsystem('ls')\n"),
              ElementsAre("deny_calls: os.system | system(...) (os.system) | 2:1"));
  EXPECT_THAT(CheckOne("import builtins\nbuiltins.exec('x')\n"),
              ElementsAre("deny_calls: exec | builtins.exec(...) (exec) | 2:1"));
  // Named without a call, it is denied as its call would be.
  EXPECT_THAT(CheckOne("import os\nrun = os.system\n"),
              ElementsAre("deny_calls: os.system | os.system, named without a call | 2:7"));
  EXPECT_THAT(CheckOne("results = list(map(eval, ['1']))\n"),
              ElementsAre("deny_calls: eval | eval, named without a call | 1:20"));
  // Another module's function of the same name is not the denied one.
  EXPECT_THAT(CheckOne("import mymod\nmymod.system('x')\nfrom mymod import eval\neval('x')\n"), ElementsAre());
}

TEST_F(StaticChecker, AttributesByNameAndThroughGetattrWithAConstant) {
  EXPECT_THAT(CheckOne("classes = ().__class__.__bases__[0].__subclasses__()\n"),
              ElementsAre("deny_attributes: __subclasses__ | (...).__subclasses__ | 1:11"));
  EXPECT_THAT(CheckOne("def f(): pass\ng = f.__globals__\n"),
              ElementsAre("deny_attributes: __globals__ | f.__globals__ | 2:5"));
  EXPECT_THAT(CheckOne("def f(): pass\ng = getattr(f, '__globals__')\n"),
              ElementsAre("deny_attributes: __globals__ | getattr(f, '__globals__') | 2:5"));
  EXPECT_THAT(CheckOne("import os\ngetattr(os, 'system')('ls')\n"),
              ElementsAre("deny_calls: os.system | getattr(os, 'system') | 2:1"));
  // A name computed at run time is beyond it (docs/skills.md, the limits).
  EXPECT_THAT(CheckOne("import sys\nname = sys.argv[0]\ng = getattr(sys, name)\n"), ElementsAre());
}

TEST_F(StaticChecker, ASyntaxErrorIsAViolation) {
  EXPECT_THAT(CheckOne("import json\ndef f(:\n    pass\n"), ElementsAre("syntax | SyntaxError: invalid syntax | 2:7"));
  std::vector<std::string> deep = CheckOne(absl::StrCat("x = ", std::string(100000, '-'), "1\n"));
  ASSERT_EQ(deep.size(), 1u);
  EXPECT_THAT(deep[0], HasSubstr("syntax | "));
}

TEST_F(StaticChecker, ViolationsComeInOrderBoundedAndColumnsCountCharacters) {
  std::string many;
  for (int i = 0; i < 20; ++i) absl::StrAppend(&many, "eval('", i, "')\n");
  std::vector<absl::string_view> one = {many};
  const StaticPolicy policy = Policy();
  absl::StatusOr<std::vector<StaticVerdict>> v =
      ParseStaticCheckOutput(RunChecker(StaticCheckInput(policy, one)), 1, policy);
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_EQ((*v)[0].violations.size(), kMaxStaticViolations);
  EXPECT_TRUE((*v)[0].truncated);
  EXPECT_EQ((*v)[0].violations.front().line, 1);
  EXPECT_EQ((*v)[0].violations.back().line, static_cast<int64_t>(kMaxStaticViolations));
  // "é" is two bytes and one character.
  EXPECT_THAT(CheckOne("s = 'é'; eval(s)\n"), ElementsAre("deny_calls: eval | eval(...) | 1:10"));
  // The first pattern that matches names the rule.
  absl::StatusOr<StaticPolicy> both =
      ParseStaticPolicy(boost::json::parse(R"({"deny_calls": ["os.*", "os.system"]})"), "p");
  ASSERT_TRUE(both.ok()) << both.status();
  EXPECT_THAT(Check({"import os\nos.system('x')\n"}, *both),
              ElementsAre(ElementsAre("deny_calls: os.* | os.system(...) | 2:1")));
}

TEST_F(StaticChecker, ScriptsOfABatchAreCheckedEachOnItsOwn) {
  // A script that is not UTF-8 reaches the checker as its bytes, and is
  // refused as `python3 -c` would refuse it.
  const std::string latin1 = "s = '\xe9'\nimport json\n";
  EXPECT_THAT(Check({"import ctypes\n", "print(1)\n", latin1, "import os as subprocess\nsubprocess.system('x')\n"}),
              ElementsAre(ElementsAre("deny_imports: ctypes | import ctypes | 1:1"), ElementsAre(),
                          ElementsAre("syntax | UnicodeEncodeError: the script is not UTF-8 | 0:0"),
                          ElementsAre("deny_calls: os.system | subprocess.system(...) (os.system) | 2:1")));
  // An empty policy checks syntax only.
  absl::StatusOr<StaticPolicy> empty = ParseStaticPolicy(boost::json::parse("{}"), "p");
  ASSERT_TRUE(empty.ok());
  EXPECT_THAT(Check({"import subprocess\neval('x')\n", "def (\n"}, *empty),
              ElementsAre(ElementsAre(), ElementsAre("syntax | SyntaxError: invalid syntax | 1:5")));
}

// docs/skills.md's recommended policy (keep the two in step): it reads,
// and the example skills pass it.
TEST_F(StaticChecker, TheRecommendedPolicyReadsAndTheExamplesPassIt) {
  absl::StatusOr<StaticPolicy> recommended = ParseStaticPolicy(boost::json::parse(R"({
    "deny_imports": ["subprocess", "multiprocessing", "pty", "ctypes", "cffi", "socket", "ssl", "http", "urllib",
                     "ftplib", "smtplib", "importlib", "marshal", "pickle", "shelve", "code", "codeop", "signal",
                     "resource"],
    "deny_calls": ["eval", "exec", "compile", "__import__", "breakpoint", "os.system", "os.popen", "os.fork",
                   "os.forkpty", "os.kill", "os.killpg", "os.posix_spawn", "os.posix_spawnp", "os.execv",
                   "os.execve", "os.execvp", "os.execvpe", "os.execl", "os.execle", "os.execlp", "os.execlpe",
                   "os.spawnv", "os.spawnve", "os.spawnl", "os.spawnle"],
    "deny_attributes": ["__subclasses__", "__globals__", "__builtins__", "__code__", "__closure__", "__bases__",
                        "__base__", "__mro__", "__getattribute__", "f_globals", "f_locals", "f_back", "f_builtins",
                        "gi_frame", "cr_frame", "tb_frame"]})"),
                                                               "static_policy");
  ASSERT_TRUE(recommended.ok()) << recommended.status();
  std::vector<std::string> scripts;
  for (const char* path : {"/examples/skills/word-stats/1.0.0/word_stats.py",
                           "/examples/skills/checked-divide/1.0.0/checked_divide.py",
                           "/examples/skills/tally/1.0.0/tally.py",
                           "/examples/skills/text-report/1.0.0/text_report.py"}) {
    std::stringstream text;
    text << std::ifstream(absl::StrCat(CUBICLE_SOURCE_DIR, path)).rdbuf();
    ASSERT_FALSE(text.str().empty()) << path;
    scripts.push_back(text.str());
  }
  EXPECT_THAT(Check(scripts, *recommended), ElementsAre(ElementsAre(), ElementsAre(), ElementsAre(), ElementsAre()));
  EXPECT_THAT(Check({"import subprocess\n"}, *recommended),
              ElementsAre(ElementsAre("deny_imports: subprocess | import subprocess | 1:1")));
}

// ---------------------------------------------------------------------------
// The checker's output as the daemon reads it, whatever it says.

TEST(StaticCheckOutput, OnlyTheCheckersAnswerIsRead) {
  const StaticPolicy policy = Policy();
  const std::string one =
      R"({"results": [{"violations": [{"rule": "syntax", "what": "x", "line": 1, "col": 2}], "truncated": false}]})";
  absl::StatusOr<std::vector<StaticVerdict>> ok = ParseStaticCheckOutput(one + "\n", 1, policy);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_FALSE((*ok)[0].ok());
  EXPECT_EQ(DescribeViolation((*ok)[0].violations[0]), "syntax (line 1: x)");
  for (const std::string& bad : {std::string(""), std::string("not json"), std::string(R"({"results": []})"),
                                 std::string(R"({"results": [{}]})"),
                                 std::string(R"({"results": [{"violations": [], "truncated": 1}]})"),
                                 std::string(R"({"results": [{"violations": [{"rule": "x"}], "truncated": false}]})"),
                                 std::string(R"({"results": [{"violations": [], "truncated": false}], "more": 1})")}) {
    absl::StatusOr<std::vector<StaticVerdict>> parsed = ParseStaticCheckOutput(bad, 1, policy);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_THAT(parsed.status().message(), HasSubstr("the checker's output: ")) << bad;
    }
  }
}

}  // namespace
}  // namespace cubicle::skills
