// rpc/skill_catalog.h and the "skills" key of the configuration: a skill
// checked against the profile it names — each way it may not fit is
// refused naming the manifest's field — and the command it runs as.
#include "rpc/skill_catalog.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <boost/json/parse.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "rpc/config.h"
#include "runtime/warm_r.h"

namespace cubicle::rpc {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A directory under /tmp (itest-*), removed with what it holds.
class ScratchDir {
 public:
  ScratchDir() {
    char tmpl[] = "/tmp/itest-skills-rpc-XXXXXX";
    path_ = ::mkdtemp(tmpl) != nullptr ? tmpl : "/nonexistent";
  }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Profiles "py" (warm, 512M, 128 pids, at most 60 s, an allowlist) and
// "plain" (no interpreter, no limits, no network).
DaemonConfig Profiles() {
  absl::StatusOr<DaemonConfig> c = ParseConfig(absl::StrCat(R"({"ceilings": {"memory": "unlimited", "pids": "unlimited"},
    "profiles": {
    "py": {"limits": {"memory": "512M", "pids": 128}, "max_timeout_ms": 60000,
           "network": {"mode": "allowlist", "allow_domains": ["pypi.org", "files.pythonhosted.org"]},
           "interpreter": {"argv": ["python3", "-I", "-X", "utf8"], "preload": ["json"]}},
    "plain": {"limits": {"memory": "unlimited", "pids": "unlimited"}}}})"));
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *std::move(c) : DaemonConfig{};
}

skills::Skill PythonSkill() {
  skills::Skill s;
  s.manifest.name = "word-stats";
  s.manifest.version = skills::Version{1, 2, 0, {}};
  s.manifest.entry = "main.py";
  s.manifest.profile = "py";
  s.script = "print(1)\n";
  return s;
}

std::string Fits(const skills::Skill& skill, const DaemonConfig& config) {
  auto it = config.profiles.find(skill.manifest.profile);
  absl::Status st = CheckSkillFits(skill, it == config.profiles.end() ? nullptr : &it->second);
  return st.ok() ? "fits" : std::string(st.message());
}

TEST(SkillFits, AnUnknownProfileIsRefused) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  EXPECT_EQ(Fits(s, config), "fits");
  s.manifest.profile = "gpu";
  EXPECT_EQ(Fits(s, config), "profile: no profile named 'gpu' is configured");
}

TEST(SkillFits, AProfileWithAcceleratorsIsRefused) {
  DaemonConfig config = Profiles();
  Profile chips = config.profiles.at("py");
  chips.npus = {0};
  absl::Status st = CheckSkillFits(PythonSkill(), &chips);
  EXPECT_EQ(st.message(), "profile: 'py' passes accelerators through, which skill.call does not take");
}

TEST(SkillFits, LimitsMustFitTheProfiles) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  s.manifest.limits.memory = uint64_t{256} << 20;
  s.manifest.limits.pids = 64;
  EXPECT_EQ(Fits(s, config), "fits");
  s.manifest.limits.memory = uint64_t{1} << 30;
  EXPECT_EQ(Fits(s, config), "limits: memory: 1073741824 (1 GiB) exceeds the profile's 536870912 (512 MiB)");
  s.manifest.limits.memory.reset();
  s.manifest.limits.pids = 129;
  EXPECT_EQ(Fits(s, config), "limits: pids: 129 exceeds the profile's 128");
  s.manifest.profile = "plain";  // sets none: any valid value fits
  EXPECT_EQ(Fits(s, config), "fits");
}

TEST(SkillFits, TimeoutMustFitTheProfiles) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  s.manifest.timeout = absl::Seconds(60);
  EXPECT_EQ(Fits(s, config), "fits");
  s.manifest.timeout = absl::Seconds(61);
  EXPECT_EQ(Fits(s, config), "timeout_ms: 61000 exceeds the profile's ceiling of 60000");
}

TEST(SkillFits, NetworkMayOnlyNarrowTheProfiles) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  s.manifest.network = boost::json::value("none");
  EXPECT_EQ(Fits(s, config), "fits");
  s.manifest.network = boost::json::parse(R"({"mode": "allowlist", "allow_domains": ["pypi.org"]})");
  EXPECT_EQ(Fits(s, config), "fits");
  s.manifest.network = boost::json::parse(R"({"mode": "allowlist", "allow_domains": ["example.org"]})");
  EXPECT_THAT(Fits(s, config), HasSubstr("network: "));
  s.manifest.profile = "plain";  // no network at all
  s.manifest.network = boost::json::parse(R"({"mode": "allowlist", "allow_domains": ["pypi.org"]})");
  EXPECT_THAT(Fits(s, config), HasSubstr("network: "));
}

TEST(SkillFits, TheScriptAndEnvironmentMustFitAnExecutionRequest) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  s.script = std::string(96 << 10, '#');
  EXPECT_EQ(Fits(s, config), "fits");
  s.manifest.env = {{"BIG", std::string(40 << 10, 'x')}};
  EXPECT_THAT(Fits(s, config), HasSubstr("entry: the script (98304 bytes) with the environment needs about"));
}

TEST(SkillArgv, PythonTakesTheWarmInterpreterShellTakesSh) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  EXPECT_THAT(SkillArgv(s, config.profiles.at("py")), ElementsAre("python3", "-I", "-X", "utf8", "-c", "print(1)\n"));
  EXPECT_THAT(SkillArgv(s, config.profiles.at("plain")), ElementsAre("python3", "-I", "-c", "print(1)\n"));
  s.manifest.interpreter = skills::Interpreter::kShell;
  s.script = "echo hi\n";
  EXPECT_THAT(SkillArgv(s, config.profiles.at("py")), ElementsAre("/bin/sh", "-c", "echo hi\n", "word-stats"));
}

// R's script travels as the launcher's $1, never through -e (which R cuts
// at 10000 bytes), and runs cold whatever the profile keeps warm.
TEST(SkillArgv, RTakesTheLauncherAndTheScriptAsItsArgument) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  s.manifest.interpreter = skills::Interpreter::kR;
  s.script = std::string(20000, '#') + "\ncat('hi')\n";
  EXPECT_THAT(SkillArgv(s, config.profiles.at("py")), ElementsAre("/bin/sh", "-c", runtime::RSkillLauncher(), "word-stats", s.script));
  EXPECT_THAT(SkillArgv(s, config.profiles.at("plain")),
              ElementsAre("/bin/sh", "-c", runtime::RSkillLauncher(), "word-stats", s.script));
  EXPECT_THAT(runtime::RSkillLauncher(), HasSubstr("exec Rscript --vanilla"));
}

TEST(SkillsConfig, DirMustBeAnExistingAbsoluteDirectory) {
  ScratchDir scratch;
  const std::string& dir = scratch.path();
  auto error = [](const std::string& skills) {
    absl::StatusOr<DaemonConfig> c = ParseConfig(absl::StrCat(R"({"skills": )", skills, R"(, "profiles": {"x": {}}})"));
    return c.ok() ? "dir " + c->skills_dir : std::string(c.status().message());
  };
  EXPECT_EQ(error(absl::StrCat(R"({"dir": ")", dir, R"("})")), "dir " + dir);
  EXPECT_EQ(error(R"({"dir": "relative/skills"})"), "skills.dir: 'relative/skills' is not an existing absolute directory");
  EXPECT_THAT(error(absl::StrCat(R"({"dir": ")", dir, R"(/absent"})")), HasSubstr("is not an existing absolute"));
  EXPECT_EQ(error("{}"), "dir ");  // no directory: skills by argv only
  EXPECT_EQ(error(R"({"sessions": {"idle_timeout_ms": 7200000}})"),
            "skills.sessions.idle_timeout_ms: exceeds max_idle_timeout_ms");
  EXPECT_THAT(error(R"({"max_call_depth": 17})"), HasSubstr("skills.max_call_depth"));
  EXPECT_THAT(error(R"({"dir": "/", "reload": true})"), HasSubstr("skills.reload: unknown key"));
  EXPECT_THAT(error(R"("/srv/skills")"), HasSubstr("skills: expected an object"));
}

TEST(SkillsConfig, AutoLimitsDefaultsAndBounds) {
  auto parse = [](const std::string& auto_limits) {
    return ParseConfig(absl::StrCat(R"({"skills": {"auto_limits": )", auto_limits, R"(}, "profiles": {"x": {}}})"));
  };
  absl::StatusOr<DaemonConfig> c =
      parse(R"({"floor": "16M", "headroom": 2, "window": 50, "min_samples": 3, "time_floor_ms": 250})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->auto_limits.time_floor, absl::Milliseconds(250));
  EXPECT_EQ(c->auto_limits.floor, 16u << 20);
  EXPECT_EQ(c->auto_limits.headroom, 2.0);
  EXPECT_EQ(c->auto_limits.window, 50u);
  EXPECT_EQ(c->auto_limits.min_samples, 3u);
  absl::StatusOr<DaemonConfig> defaults = parse("{}");
  ASSERT_TRUE(defaults.ok()) << defaults.status();
  EXPECT_EQ(defaults->auto_limits, AutoLimitsConfig{});
  EXPECT_EQ(defaults->auto_limits.floor, 32u << 20);
  EXPECT_EQ(defaults->auto_limits.time_floor, absl::Seconds(1));
  EXPECT_THAT(parse(R"({"time_floor_ms": 0})").status().message(), HasSubstr("skills.auto_limits.time_floor_ms"));
  EXPECT_THAT(parse(R"({"time_floor_ms": "1s"})").status().message(), HasSubstr("skills.auto_limits.time_floor_ms"));
  EXPECT_THAT(parse(R"({"headroom": 0.5})").status().message(), HasSubstr("skills.auto_limits.headroom"));
  EXPECT_THAT(parse(R"({"window": 0})").status().message(), HasSubstr("skills.auto_limits.window"));
  EXPECT_THAT(parse(R"({"window": 4, "min_samples": 5})").status().message(),
              HasSubstr("skills.auto_limits.min_samples: exceeds window"));
  EXPECT_THAT(parse(R"({"ceiling": "1G"})").status().message(), HasSubstr("skills.auto_limits.ceiling: unknown key"));
}

TEST(SkillsConfig, AutoMemoryNeedsAProfileMemoryLimit) {
  DaemonConfig config = Profiles();
  skills::Skill s = PythonSkill();
  s.manifest.limits.memory_auto = true;
  Profile bounded = config.profiles.at("py");
  bounded.spec.limits.memory_max = 256u << 20;
  EXPECT_TRUE(CheckSkillFits(s, &bounded).ok());
  Profile unbounded = bounded;
  unbounded.spec.limits.memory_max.reset();
  EXPECT_THAT(std::string(CheckSkillFits(s, &unbounded).message()),
              HasSubstr("limits: memory: auto needs a memory limit in profile"));
}

TEST(SkillsConfig, LoadChecksEachSkillAgainstItsProfile) {
  ScratchDir scratch;
  const std::string& dir = scratch.path();
  auto write = [&](const std::string& name, const std::string& text) {
    fs::create_directories(fs::path(dir + "/" + name).parent_path());
    std::ofstream(dir + "/" + name) << text;
  };
  write("ok/skill.yaml", "name: ok\nversion: 1.0.0\nentry: m.py\nprofile: py\n");
  write("ok/m.py", "print(1)\n");
  write("big/skill.yaml", "name: big\nversion: 1.0.0\nentry: m.py\nprofile: py\nlimits: {memory: 1G}\n");
  write("big/m.py", "print(1)\n");
  DaemonConfig config = Profiles();
  std::shared_ptr<const skills::Catalog> c = LoadSkillCatalog(dir, [&](const std::string& name) -> const Profile* {
    auto it = config.profiles.find(name);
    return it == config.profiles.end() ? nullptr : &it->second;
  }, /*static_checks=*/nullptr);
  EXPECT_EQ(c->versions(), 1u);
  ASSERT_EQ(c->errors().size(), 1u);
  EXPECT_EQ(c->errors()[0].message,
            dir + "/big/skill.yaml: limits: memory: 1073741824 (1 GiB) exceeds the profile's 536870912 (512 MiB)");
  EXPECT_EQ(LoadSkillCatalog("", nullptr, nullptr)->versions(), 0u);
}

}  // namespace
}  // namespace cubicle::rpc
