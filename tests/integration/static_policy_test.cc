// The static policy of Python skills through `cubicle serve`
// (docs/skills.md, "Static policy"): a profile with a policy and a skills
// directory of a clean skill and one that imports subprocess — the clean
// one is served, the other listed with its violation and refused by
// skill.call naming the rule, before anything runs (no zygote taken, an
// audit line that says "refused"), as --check-config foretells; skill
// sessions and skills calling skills meet the same refusal; a reload that
// removes the policy makes it callable, one that changes nothing checks
// nothing again, and one with a bad policy is refused naming the field; a
// skill whose check cannot be made is left out. Waits are bounds for
// failures; nothing asserts how long anything took.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/integration/skills_fixture.h"
#include "tests/support/daemon_client.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

constexpr char kPolicy[] =
    R"(, "static_policy": {"deny_imports": ["subprocess", "ctypes", "socket.*"],
                           "deny_calls": ["eval", "exec", "os.system", "__import__"],
                           "deny_attributes": ["__subclasses__", "__globals__", "__builtins__"]})";

class StaticPolicy : public Skills {
 protected:
  // clean 1.0.0 and word-stats 1.0.0 (which imports subprocess on line
  // 3) in profile "python", greet 0.1.0 in "shell".
  void PutSkills() {
    Put("clean/skill.yaml", "name: clean\nversion: 1.0.0\nentry: main.py\n");
    Put("clean/main.py", PythonSkill("clean"));
    Put("word-stats/1.0.0/skill.yaml", "name: word-stats\nversion: 1.0.0\nentry: main.py\n");
    Put("word-stats/1.0.0/main.py", PythonSkill("1.0.0", "# counts words\nimport subprocess\n"));
    Put("greet/skill.yaml", "name: greet\nversion: 0.1.0\nentry: greet.sh\n");
    Put("greet/greet.sh", kShellSkill);
  }

  json::value CallDenied() {
    return Call("skill.call", R"({"skill": "word-stats", "method": "count", "params": {"text": "a b"}})");
  }

  // The config file again, with `python_more_` as it is now; then SIGHUP.
  bool ReloadWith(const std::string& python_more) {
    python_more_ = python_more;
    WriteConfig(dir_, Config());
    return Reload();
  }

  json::value StaticHealth() { return Result("health", "").at("skills").at("static_policy"); }

  TempDir state_;
};

TEST_F(StaticPolicy, ADeniedSkillIsListedAndRefusedBeforeAnythingRuns) {
  PutSkills();
  python_more_ = kPolicy;
  // --check-config says so first, as the start would.
  ProcessRun checked = RunCubicle({"serve", "--check-config", "--config", WriteConfig(dir_, Config())});
  EXPECT_EQ(checked.exit_code, 0) << checked.err;
  EXPECT_TRUE(absl::StrContains(checked.out, "skill denied by the static policy: word-stats@1.0.0: deny_imports: "
                                             "subprocess (line 3: import subprocess)\n"))
      << checked.out;
  EXPECT_TRUE(absl::StrContains(checked.out, "static policy: 2 skill(s) checked in 1 sandbox(es)")) << checked.out;

  ASSERT_TRUE(Start({"--state-dir", state_.Join("state")}).up());

  // Listed, each with its verdict: null where the profile has no policy.
  json::value list = Result("skill.list", "");
  ASSERT_TRUE(list.is_object());
  EXPECT_TRUE(list.at("errors").as_array().empty()) << json::serialize(list);
  const json::array& skills = list.at("skills").as_array();
  ASSERT_EQ(skills.size(), 3u) << json::serialize(list);
  EXPECT_EQ(json::serialize(skills[0].at("versions").at(0).at("static_policy")), R"({"ok":true})");  // clean
  EXPECT_TRUE(skills[1].at("versions").at(0).at("static_policy").is_null());                         // greet
  const json::value& verdict = skills[2].at("versions").at(0).at("static_policy");                   // word-stats
  EXPECT_EQ(verdict.at("ok"), false);
  EXPECT_EQ(json::serialize(verdict.at("violations")),
            R"([{"rule":"deny_imports: subprocess","what":"import subprocess","line":3,"col":1}])");
  json::value described = Result("skill.describe", R"({"name": "word-stats"})");
  EXPECT_EQ(described.at("static_policy"), verdict);
  EXPECT_TRUE(absl::StrContains(Log(), "skill denied by the static policy of profile python: word-stats@1.0.0"))
      << Log();

  // Refused naming the rule, and nothing ran: no zygote taken, no miss.
  ASSERT_TRUE(Quiet("python", 1)) << Log();
  const json::value before = PoolStats("python");
  json::value refused = CallDenied();
  EXPECT_EQ(ErrorCode(refused), -32010) << json::serialize(refused);
  EXPECT_EQ(Str(refused.at("error").at("message")),
            "skill word-stats@1.0.0 denied by the static policy: deny_imports: subprocess (line 3: import subprocess)");
  EXPECT_EQ(refused.at("error").at("data").at("violations"), verdict.at("violations"));
  const json::value after = PoolStats("python");
  EXPECT_EQ(after.at("hits"), before.at("hits"));
  EXPECT_EQ(after.at("misses"), before.at("misses"));
  EXPECT_EQ(after.at("in_use"), 0);

  // The audit trail says so, as of any refusal; no call of it went through.
  json::value audit = Result("audit.query", R"({"skill": "word-stats"})");
  ASSERT_EQ(audit.at("entries").as_array().size(), 1u) << json::serialize(audit);
  const json::value& line = audit.at("entries").at(0);
  EXPECT_EQ(Str(line.at("outcome")), "refused");
  EXPECT_EQ(line.at("error_code"), -32010);
  EXPECT_EQ(Str(line.at("reason")), "static_policy");

  // The others serve as ever.
  EXPECT_EQ(VersionRun(CallSkill("clean")), "clean");
  EXPECT_EQ(Str(CallSkill("greet").at("result").at("greeting")), "hello from greet");
  json::value checks = StaticHealth();
  EXPECT_EQ(checks.at("checked"), 2) << json::serialize(checks);
  EXPECT_EQ(checks.at("denied"), 1);
  EXPECT_EQ(checks.at("failed"), 0);
}

TEST_F(StaticPolicy, AReloadRechecksWhatChangedAndCanLiftThePolicy) {
  PutSkills();
  python_more_ = kPolicy;
  ASSERT_TRUE(Start().up());
  EXPECT_EQ(ErrorCode(CallDenied()), -32010);

  // Nothing changed: every verdict comes from the cache, no sandbox made.
  ASSERT_TRUE(ReloadWith(kPolicy)) << Log();
  json::value checks = StaticHealth();
  EXPECT_EQ(checks.at("checked"), 0) << json::serialize(checks);
  EXPECT_EQ(checks.at("cached"), 2);
  EXPECT_EQ(checks.at("sandboxes"), 0);
  EXPECT_EQ(ErrorCode(CallDenied()), -32010);

  // One script changed: only it is checked again, and it is clean now.
  Put("word-stats/1.0.0/main.py", PythonSkill("edited"));
  ASSERT_TRUE(ReloadWith(kPolicy)) << Log();
  checks = StaticHealth();
  EXPECT_EQ(checks.at("checked"), 1) << json::serialize(checks);
  EXPECT_EQ(checks.at("cached"), 1);
  EXPECT_EQ(VersionRun(CallSkill("word-stats")), "edited");

  // Back to the denied script, then the policy lifted: callable.
  Put("word-stats/1.0.0/main.py", PythonSkill("1.0.0", "# counts words\nimport subprocess\n"));
  ASSERT_TRUE(ReloadWith(kPolicy)) << Log();
  EXPECT_EQ(ErrorCode(CallDenied()), -32010);
  ASSERT_TRUE(ReloadWith("")) << Log();
  EXPECT_TRUE(Result("skill.describe", R"({"name": "word-stats"})").at("static_policy").is_null());
  EXPECT_EQ(VersionRun(CallSkill("word-stats")), "1.0.0");
  EXPECT_EQ(Result("health", "").at("reloads").at("refused"), 0);
}

TEST_F(StaticPolicy, ABadPolicyIsRefusedNamingTheField) {
  PutSkills();
  const std::string bad = R"(, "static_policy": {"deny_calls": ["eval", "os."]})";
  const std::string says = "profiles.python.static_policy.deny_calls[1]: 'os.' is not a dotted name";
  python_more_ = bad;
  ProcessRun checked = RunCubicle({"serve", "--check-config", "--config", WriteConfig(dir_, Config())});
  EXPECT_EQ(checked.exit_code, 2) << checked.err;
  EXPECT_TRUE(absl::StrContains(checked.err, says)) << checked.err;

  // A running daemon refuses it whole, keeping the policy it had.
  python_more_ = kPolicy;
  ASSERT_TRUE(Start().up());
  ASSERT_TRUE(ReloadWith(bad)) << Log();
  json::value reloads = Result("health", "").at("reloads");
  EXPECT_EQ(reloads.at("refused"), 1);
  EXPECT_TRUE(absl::StrContains(Str(reloads.at("last_error")), says)) << json::serialize(reloads);
  EXPECT_EQ(ErrorCode(CallDenied()), -32010);
}

// A skill that calls the skill its params name, then answers with what
// it got back (result or error).
constexpr char kCaller[] = R"PY(
import json, sys
req = json.loads(sys.stdin.readline())
print(json.dumps({"jsonrpc": "2.0", "id": "c1", "method": "skill.call",
                  "params": {"skill": req["params"]["callee"], "method": "count", "params": {}}}), flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if msg.get("id") == "c1":
        break
print(json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": msg}), flush=True)
)PY";

// Every way of running a skill by name meets the same refusal: a skill
// session is not opened, and a skill calling a denied skill gets the
// refusal as its call's error, audited.
TEST_F(StaticPolicy, SessionsAndSkillsCallingSkillsAreRefusedToo) {
  PutSkills();
  Put("caller/skill.yaml", "name: caller\nversion: 1.0.0\nentry: main.py\ncalls: [word-stats, clean]\n");
  Put("caller/main.py", kCaller);
  python_more_ = kPolicy;
  ASSERT_TRUE(Start({"--state-dir", state_.Join("state")}).up());

  json::value opened = Call("skill.session.open", R"({"skill": "word-stats"})");
  EXPECT_EQ(ErrorCode(opened), -32010) << json::serialize(opened);
  EXPECT_EQ(Result("skill.session.list", "").at("skill_sessions").as_array().size(), 0u);

  json::value allowed = Result("skill.call", R"({"skill": "caller", "method": "go", "params": {"callee": "clean"}})");
  ASSERT_TRUE(allowed.is_object());
  EXPECT_EQ(Str(allowed.at("result").at("result").at("result").at("version")), "clean") << json::serialize(allowed);
  json::value denied =
      Result("skill.call", R"({"skill": "caller", "method": "go", "params": {"callee": "word-stats"}})");
  ASSERT_TRUE(denied.is_object());
  const json::value& error = denied.at("result").at("error");
  EXPECT_EQ(error.at("code"), -32010) << json::serialize(denied);
  EXPECT_TRUE(absl::StrContains(Str(error.at("message")), "denied by the static policy: deny_imports: subprocess"));
  json::value audit = Result("audit.query", R"({"skill": "word-stats"})");
  ASSERT_EQ(audit.at("entries").as_array().size(), 1u) << json::serialize(audit);
  EXPECT_EQ(Str(audit.at("entries").at(0).at("outcome")), "refused");
  EXPECT_EQ(Str(audit.at("entries").at(0).at("caller").at("skill").at("name")), "caller");
}

// Fails closed: a profile whose sandboxes have no python3 on their PATH
// cannot check, so its skills are left out, saying why.
TEST_F(StaticPolicy, ASkillWhoseCheckCannotBeMadeIsLeftOut) {
  Put("orphan/skill.yaml", "name: orphan\nversion: 1.0.0\nentry: main.py\nprofile: nopy\n");
  Put("orphan/main.py", PythonSkill("orphan"));
  Put("clean/skill.yaml", "name: clean\nversion: 1.0.0\nentry: main.py\n");
  Put("clean/main.py", PythonSkill("clean"));
  python_more_ = kPolicy;
  ASSERT_TRUE(Start({}, "", R"(, "nopy": {"env": {"PATH": "/nonexistent"}, "pool": {"min_idle": 0},
                                        "static_policy": {"deny_imports": ["subprocess"]}})")
                  .up());
  json::value list = Result("skill.list", "");
  ASSERT_EQ(list.at("errors").as_array().size(), 1u) << json::serialize(list);
  const std::string error = Str(list.at("errors").at(0).at("error"));
  EXPECT_TRUE(absl::StrContains(error, "orphan/skill.yaml: static_policy: the check in profile 'nopy' could not be "
                                       "made, so the skill is left out: "))
      << error;
  EXPECT_TRUE(absl::StrContains(error, "python3")) << error;
  EXPECT_EQ(ErrorCode(Call("skill.call", R"({"skill": "orphan", "method": "m"})")), -32004);
  EXPECT_EQ(VersionRun(CallSkill("clean")), "clean");
  EXPECT_EQ(StaticHealth().at("failed"), 1);
}

}  // namespace
}  // namespace cubicle::test_support
