// A profile's "static_policy" (docs/config.md, docs/skills.md "Static
// policy"): read and validated with every error naming the element at
// fault, off unless given, and a change of it alone updating the profile
// in place; then the daemon's checks of a load (rpc/skill_static_policy.h)
// with a stand-in for the sandbox — which skills are checked, batches, the
// cache, failing closed, finding the script that breaks the checker — and
// skill.call's refusal.
#include "rpc/skill_static_policy.h"

#include <memory>
#include <string>
#include <vector>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "rpc/config.h"
#include "rpc/config_reload.h"

namespace cubicle::rpc {
namespace {

namespace json = boost::json;
using ::testing::HasSubstr;

constexpr char kPolicy[] = R"({"deny_imports": ["subprocess", "socket.*"], "deny_calls": ["eval", "os.system"],
                               "deny_attributes": ["__globals__"]})";

// Profiles "py" (with `policy` as its static_policy, when given) and
// "plain" (none).
absl::StatusOr<DaemonConfig> Parse(const std::string& policy) {
  return ParseConfig(absl::StrCat(R"({"profiles": {"py": {)",
                                  policy.empty() ? "" : absl::StrCat(R"("static_policy": )", policy),
                                  R"(}, "plain": {}}})"));
}

std::string ErrorOf(const std::string& policy) {
  absl::StatusOr<DaemonConfig> c = Parse(policy);
  return c.ok() ? "(parsed)" : std::string(c.status().message());
}

TEST(ParseConfigStaticPolicy, IsOffUnlessGiven) {
  absl::StatusOr<DaemonConfig> none = Parse("");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->profiles.at("py").static_policy.has_value());
  absl::StatusOr<DaemonConfig> builtin = DefaultConfig();
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  for (const auto& [name, profile] : builtin->profiles) EXPECT_FALSE(profile.static_policy.has_value()) << name;
}

TEST(ParseConfigStaticPolicy, ReadsTheThreeListsInOrder) {
  absl::StatusOr<DaemonConfig> c = Parse(kPolicy);
  ASSERT_TRUE(c.ok()) << c.status();
  const skills::StaticPolicy& p = *c->profiles.at("py").static_policy;
  EXPECT_THAT(p.deny_imports, ::testing::ElementsAre("subprocess", "socket.*"));
  EXPECT_THAT(p.deny_calls, ::testing::ElementsAre("eval", "os.system"));
  EXPECT_THAT(p.deny_attributes, ::testing::ElementsAre("__globals__"));
  EXPECT_EQ(p.digest.size(), 64u);
  EXPECT_FALSE(c->profiles.at("plain").static_policy.has_value());
  // The digest tells policies apart, order included (it decides the rule named).
  absl::StatusOr<DaemonConfig> same = Parse(kPolicy);
  absl::StatusOr<DaemonConfig> other = Parse(R"({"deny_calls": ["os.system", "eval"]})");
  absl::StatusOr<DaemonConfig> empty = Parse("{}");
  ASSERT_TRUE(same.ok() && other.ok() && empty.ok());
  EXPECT_EQ(same->profiles.at("py").static_policy->digest, p.digest);
  EXPECT_NE(other->profiles.at("py").static_policy->digest, p.digest);
  EXPECT_TRUE(empty->profiles.at("py").static_policy.has_value()) << "{} checks syntax only";
}

TEST(ParseConfigStaticPolicy, EachErrorNamesTheElement) {
  const std::string at = "profiles.py.static_policy";
  EXPECT_THAT(ErrorOf(R"(["subprocess"])"), HasSubstr(at + ": expected an object"));
  EXPECT_THAT(ErrorOf(R"({"deny_modules": []})"), HasSubstr(at + ".deny_modules: unknown key"));
  EXPECT_THAT(ErrorOf(R"({"deny_imports": "subprocess"})"), HasSubstr(at + ".deny_imports: expected an array"));
  EXPECT_THAT(ErrorOf(R"({"deny_imports": ["os", 3]})"), HasSubstr(at + ".deny_imports[1]: expected a string"));
  for (const char* bad : {"", "os.", ".os", "a..b", "*", "a.*.b", "a.b*", "1os", "os path", "os-path", "é"}) {
    EXPECT_THAT(ErrorOf(absl::StrCat(R"({"deny_calls": ["eval", ")", bad, R"("]})")),
                HasSubstr(absl::StrCat(at, ".deny_calls[1]: '", bad, "' is not a dotted name")))
        << bad;
  }
  EXPECT_THAT(ErrorOf(R"({"deny_attributes": ["__globals__", "a.b"]})"),
              HasSubstr(at + ".deny_attributes[1]: 'a.b' is not an attribute name"));
  EXPECT_THAT(ErrorOf(R"({"deny_attributes": ["__*"]})"),
              HasSubstr(at + ".deny_attributes[0]: '__*' is not an attribute name"));
  EXPECT_THAT(ErrorOf(R"({"deny_imports": ["ctypes", "subprocess", "ctypes"]})"),
              HasSubstr(at + ".deny_imports[2]: 'ctypes' is listed twice"));
  EXPECT_THAT(ErrorOf(absl::StrCat(R"({"deny_imports": [")", std::string(129, 'a'), R"("]})")),
              HasSubstr(at + ".deny_imports[0]: '" + std::string(64, 'a') + "' is longer than 128 bytes"));
  std::string many = R"({"deny_calls": [)";
  for (int i = 0; i < 257; ++i) absl::StrAppend(&many, i ? ", " : "", "\"f", i, "\"");
  EXPECT_THAT(ErrorOf(many + "]}"), HasSubstr(at + ".deny_calls: 257 names; at most 256 are allowed"));
  EXPECT_EQ(ErrorOf(R"({"deny_imports": ["a.b.*", "_x.y1"], "deny_calls": ["os.*"], "deny_attributes": ["_a"]})"),
            "(parsed)");
}

TEST(ParseConfigStaticPolicy, AChangeOfItAloneUpdatesTheProfileInPlace) {
  absl::StatusOr<DaemonConfig> a = Parse("");
  absl::StatusOr<DaemonConfig> b = Parse(kPolicy);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(CompareProfiles(a->profiles.at("py"), b->profiles.at("py")), ProfileChange::kUpdated);
  EXPECT_EQ(CompareProfiles(b->profiles.at("py"), b->profiles.at("py")), ProfileChange::kSame);
}

// ---------------------------------------------------------------------------
// The checks of a load, with a stand-in for the sandboxed checker: it
// decodes the scripts and denies each that says "import subprocess",
// fails its whole run when one says "BREAK", and counts its runs.

struct FakeChecker {
  int runs = 0;
  bool setup_fails = false;
  std::vector<size_t> batch_sizes;

  StaticCheckRunner Runner() {
    return [this](const Profile& profile, const std::vector<std::string>& argv,
                  const std::string& stdin_data) -> absl::StatusOr<runtime::CapturedRun> {
      ++runs;
      EXPECT_EQ(argv[argv.size() - 2], "-c");
      EXPECT_EQ(argv.back(), skills::StaticCheckerProgram());
      EXPECT_TRUE(profile.static_policy.has_value());
      runtime::CapturedRun run;
      run.result.reason = runtime::ExitReason::kExited;
      run.result.exit_code = 0;
      if (setup_fails) {
        run.result.reason = runtime::ExitReason::kSetupFailed;
        run.result.setup_error = absl::NotFoundError("execve(python3): ENOENT");
        return run;
      }
      json::value input = json::parse(stdin_data);
      json::array results;
      batch_sizes.push_back(input.at("scripts").as_array().size());
      for (const json::value& encoded : input.at("scripts").as_array()) {
        std::string script;
        absl::Base64Unescape(std::string(encoded.as_string()), &script);
        if (absl::StrContains(script, "BREAK")) {
          run.result.exit_code = 1;
          run.err = "Traceback: RecursionError\n";
          return run;
        }
        json::array violations;
        if (absl::StrContains(script, "import subprocess")) {
          violations.push_back(json::object{
              {"rule", "deny_imports: subprocess"}, {"what", "import subprocess"}, {"line", 1}, {"col", 1}});
        }
        results.push_back(json::object{{"violations", std::move(violations)}, {"truncated", false}});
      }
      run.out = json::serialize(json::object{{"results", std::move(results)}}) + "\n";
      return run;
    };
  }
};

class Checks : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<DaemonConfig> c = Parse(kPolicy);
    ASSERT_TRUE(c.ok()) << c.status();
    config_ = *std::move(c);
  }

  skills::Skill& Add(const std::string& name, const std::string& script, const std::string& profile = "py",
                     skills::Interpreter interpreter = skills::Interpreter::kPython) {
    auto s = std::make_unique<skills::Skill>();
    s->manifest.name = name;
    s->manifest.version = skills::Version{1, 0, 0, {}};
    s->manifest.profile = profile;
    s->manifest.interpreter = interpreter;
    s->script = script;
    s->id = skills::SkillId(script, {});
    skills_.push_back(std::move(s));
    return *skills_.back();
  }

  std::vector<absl::Status> CheckAll(StaticPolicyChecks& checks) {
    std::vector<skills::Skill*> all;
    for (auto& s : skills_) all.push_back(s.get());
    return checks.CheckAll(all, [&](const std::string& name) -> const Profile* {
      auto it = config_.profiles.find(name);
      return it == config_.profiles.end() ? nullptr : &it->second;
    });
  }

  DaemonConfig config_;
  std::vector<std::unique_ptr<skills::Skill>> skills_;
  FakeChecker fake_;
};

TEST_F(Checks, OnlyPythonSkillsOfAProfileWithAPolicyAreChecked) {
  skills::Skill& clean = Add("clean", "print(1)\n");
  skills::Skill& denied = Add("denied", "import subprocess\n");
  skills::Skill& plain = Add("plain", "import subprocess\n", "plain");
  skills::Skill& shell = Add("shell", "import subprocess\n", "py", skills::Interpreter::kShell);
  StaticPolicyChecks checks(fake_.Runner());
  for (const absl::Status& st : CheckAll(checks)) EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(fake_.runs, 1);
  ASSERT_TRUE(clean.static_policy.has_value());
  EXPECT_TRUE(clean.static_policy->ok());
  ASSERT_TRUE(denied.static_policy.has_value());
  EXPECT_FALSE(denied.static_policy->ok());
  EXPECT_EQ(denied.static_policy->policy_digest, config_.profiles.at("py").static_policy->digest);
  EXPECT_FALSE(plain.static_policy.has_value());
  EXPECT_FALSE(shell.static_policy.has_value());
  EXPECT_EQ(json::serialize(checks.LastLoad().at("checked")), "2");
  EXPECT_THAT(checks.LastLoadSummary(), HasSubstr("2 skill(s) checked in 1 sandbox(es)"));
}

TEST_F(Checks, ScriptsGoInBatchesAndAReloadChecksOnlyWhatChanged) {
  for (int i = 0; i < 20; ++i) Add(absl::StrCat("s", i), absl::StrCat("print(", i, ")\n"));
  StaticPolicyChecks checks(fake_.Runner());
  CheckAll(checks);
  EXPECT_THAT(fake_.batch_sizes, ::testing::ElementsAre(StaticPolicyChecks::kBatchScripts, 4u));
  // The same scripts again: all from the cache.
  fake_.runs = 0;
  for (auto& s : skills_) s->static_policy.reset();
  CheckAll(checks);
  EXPECT_EQ(fake_.runs, 0);
  for (auto& s : skills_) EXPECT_TRUE(s->static_policy.has_value() && s->static_policy->ok());
  EXPECT_EQ(json::serialize(checks.LastLoad().at("cached")), "20");
  // One script changed: it alone is checked.
  skills_[3]->script = "import subprocess\n";
  skills_[3]->id = skills::SkillId(skills_[3]->script, {});
  fake_.batch_sizes.clear();
  CheckAll(checks);
  EXPECT_THAT(fake_.batch_sizes, ::testing::ElementsAre(1u));
  EXPECT_FALSE(skills_[3]->static_policy->ok());
  // Another policy: everything again.
  absl::StatusOr<DaemonConfig> c = Parse(R"({"deny_imports": ["ctypes"]})");
  ASSERT_TRUE(c.ok());
  config_ = *std::move(c);
  fake_.runs = 0;
  CheckAll(checks);
  EXPECT_EQ(fake_.runs, 2);
}

TEST_F(Checks, ASandboxThatCannotBeSetUpFailsClosed) {
  Add("a", "print(1)\n");
  Add("b", "print(2)\n");
  fake_.setup_fails = true;
  StaticPolicyChecks checks(fake_.Runner());
  std::vector<absl::Status> out = CheckAll(checks);
  ASSERT_EQ(out.size(), 2u);
  for (const absl::Status& st : out) {
    EXPECT_FALSE(st.ok());
    EXPECT_THAT(st.message(), HasSubstr("static_policy: the check in profile 'py' could not be made, so the skill is "
                                        "left out: its sandbox could not be set up: execve(python3): ENOENT"));
  }
  EXPECT_EQ(fake_.runs, 1) << "a sandbox failure is not the scripts': not tried again";
  // Nothing is cached from a failure: the next load tries again.
  fake_.setup_fails = false;
  out = CheckAll(checks);
  EXPECT_TRUE(out[0].ok() && out[1].ok());
  EXPECT_EQ(fake_.runs, 2);
}

TEST_F(Checks, AScriptThatBreaksTheCheckerFailsOnlyItself) {
  for (int i = 0; i < 8; ++i) Add(absl::StrCat("s", i), i == 5 ? "BREAK\n" : absl::StrCat("print(", i, ")\n"));
  StaticPolicyChecks checks(fake_.Runner());
  std::vector<absl::Status> out = CheckAll(checks);
  for (int i = 0; i < 8; ++i) {
    if (i == 5) {
      EXPECT_THAT(out[i].message(), HasSubstr("the checker ended (exited, status 1): Traceback: RecursionError"));
    } else {
      EXPECT_TRUE(out[i].ok()) << i << ": " << out[i];
      EXPECT_TRUE(skills_[i]->static_policy.has_value()) << i;
    }
  }
  EXPECT_EQ(json::serialize(checks.LastLoad().at("failed")), "1");
}

TEST_F(Checks, SkillCallIsRefusedNamingTheFirstViolation) {
  skills::Skill& denied = Add("word-stats", "import subprocess\n");
  skills::Skill& clean = Add("clean", "print(1)\n");
  StaticPolicyChecks checks(fake_.Runner());
  CheckAll(checks);
  const Profile& py = config_.profiles.at("py");
  EXPECT_FALSE(StaticPolicyRefusal(clean, py).has_value());
  std::optional<Error> refused = StaticPolicyRefusal(denied, py);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code, kStaticPolicyDenied);
  EXPECT_EQ(refused->message,
            "skill word-stats@1.0.0 denied by the static policy: deny_imports: subprocess (line 1: import subprocess)");
  EXPECT_EQ(json::serialize(refused->data.at("violations")),
            R"([{"rule":"deny_imports: subprocess","what":"import subprocess","line":1,"col":1}])");
  // No policy any more: served.
  EXPECT_FALSE(StaticPolicyRefusal(denied, config_.profiles.at("plain")).has_value());
  // Another policy than its verdict's (a reload between the two swaps):
  // to be tried again.
  absl::StatusOr<DaemonConfig> other = Parse(R"({"deny_imports": ["ctypes"]})");
  ASSERT_TRUE(other.ok());
  std::optional<Error> later = StaticPolicyRefusal(clean, other->profiles.at("py"));
  ASSERT_TRUE(later.has_value());
  EXPECT_EQ(later->code, kBusy);
  EXPECT_THAT(later->message, HasSubstr("try again"));
}

}  // namespace
}  // namespace cubicle::rpc
