// skills/: a manifest read from a skill's folder, in YAML and in JSON — one
// refusal per field, each naming the file and the field — its script read
// beneath the folder and nowhere else, and its id, recomputed here from
// the bytes by sha256sum(1) rather than by the code under test.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "base/unique_fd.h"
#include "skills/skill.h"
#include "skills/yaml_document.h"

namespace cubicle::skills {
namespace {

namespace json = boost::json;
namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A folder under /tmp (itest-*), removed with what it holds.
class Folder {
 public:
  Folder() {
    char tmpl[] = "/tmp/itest-skills-XXXXXX";
    path_ = ::mkdtemp(tmpl) != nullptr ? tmpl : "";
  }
  ~Folder() {
    std::error_code ec;
    if (!path_.empty()) fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string Join(const std::string& name) const { return path_ + "/" + name; }
  void Write(const std::string& name, const std::string& text) const {
    fs::create_directories(fs::path(Join(name)).parent_path());
    std::ofstream(Join(name), std::ios::binary) << text;
  }

 private:
  std::string path_;
};

absl::StatusOr<Skill> Load(const std::string& folder) {
  UniqueFd fd(::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) return absl::InternalError("cannot open " + folder);
  std::string at;
  return LoadSkill(fd.get(), folder, &at);
}

// `v` as block YAML: mappings as "key: value" lines, sequences as "- item",
// strings double-quoted (JSON's escapes are YAML's).
void EmitYaml(const json::value& v, int indent, std::string* out) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  auto scalar_or_nested = [&](const json::value& child) {
    const bool nested = (child.is_object() && !child.get_object().empty()) ||
                        (child.is_array() && !child.get_array().empty());
    if (!nested) {
      absl::StrAppend(out, " ", child.is_object() ? "{}" : child.is_array() ? "[]" : json::serialize(child), "\n");
      return;
    }
    out->append("\n");
    EmitYaml(child, indent + 2, out);
  };
  if (v.is_object()) {
    for (const auto& kv : v.get_object()) {
      absl::StrAppend(out, pad, json::serialize(json::value(kv.key())), ":");
      scalar_or_nested(kv.value());
    }
  } else if (v.is_array()) {
    for (const json::value& item : v.get_array()) {
      absl::StrAppend(out, pad, "-");
      scalar_or_nested(item);
    }
  } else {
    absl::StrAppend(out, json::serialize(v), "\n");
  }
}

std::string Yaml(const json::value& v) {
  std::string out;
  EmitYaml(v, 0, &out);
  return out;
}

json::object BaseManifest() {
  return json::parse(R"({
    "name": "word-stats", "version": "1.2.0", "description": "Counts words",
    "entry": "main.py", "requires": ["numpy>=1.10", "pandas"],
    "limits": {"memory": "128M", "pids": 32}, "env": {"MODE": "fast"}, "timeout_ms": 5000})")
      .as_object();
}

constexpr char kScript[] = "import sys\nprint('hi')\n";

// ---------------------------------------------------------------------------
// One refusal per field, in each format.

struct FieldCase {
  const char* test_name;
  std::function<void(json::object&)> change;
  const char* needle;  // what the message holds after the manifest's path
};

enum class Format { kYaml, kJson };

class ManifestField : public ::testing::TestWithParam<std::tuple<FieldCase, Format>> {};

TEST_P(ManifestField, IsRefusedNamingTheField) {
  const auto& [c, format] = GetParam();
  Folder dir;
  json::object manifest = BaseManifest();
  c.change(manifest);
  const char* file = format == Format::kYaml ? "skill.yaml" : "skill.json";
  dir.Write(file, format == Format::kYaml ? Yaml(manifest) : json::serialize(manifest));
  dir.Write("main.py", kScript);
  dir.Write("lib.py/x", "");
  absl::StatusOr<Skill> skill = Load(dir.path());
  ASSERT_FALSE(skill.ok()) << (format == Format::kYaml ? Yaml(manifest) : json::serialize(manifest));
  EXPECT_THAT(std::string(skill.status().message()), HasSubstr(absl::StrCat(dir.Join(file), ": ", c.needle)));
}

const FieldCase kFieldCases[] = {
    {"NameMissing", [](json::object& m) { m.erase("name"); }, "name: missing"},
    {"NameUpperCase", [](json::object& m) { m["name"] = "Word Stats"; }, "name: 'Word Stats' is not a skill name"},
    {"NameTooLong", [](json::object& m) { m["name"] = std::string(65, 'a'); }, "name: 'aaaaaaaa"},
    {"NameNotAString", [](json::object& m) { m["name"] = 7; }, "name: expected a string"},
    {"VersionMissing", [](json::object& m) { m.erase("version"); }, "version: missing"},
    {"VersionTwoParts", [](json::object& m) { m["version"] = "1.2"; }, "version: '1.2' is not a semantic version"},
    {"VersionLeadingZero", [](json::object& m) { m["version"] = "1.02.0"; }, "version: '1.02.0' is not a semantic"},
    {"VersionBuildMetadata", [](json::object& m) { m["version"] = "1.2.0+b7"; }, "version: '1.2.0+b7' is not a semantic version (build metadata"},
    {"VersionNumber", [](json::object& m) { m["version"] = 1.5; }, "version: expected a string like \"1.2.0\""},
    {"VersionBadPrerelease", [](json::object& m) { m["version"] = "1.2.0-rc..1"; }, "version: '1.2.0-rc..1' is not a semantic version (a prerelease is"},
    {"EntryMissing", [](json::object& m) { m.erase("entry"); }, "entry: missing"},
    {"EntryParent", [](json::object& m) { m["entry"] = "../main.py"; }, "entry: path '../main.py' has an empty"},
    {"EntryAbsolute", [](json::object& m) { m["entry"] = "/etc/hosts.py"; }, "entry: '/etc/hosts.py' is absolute"},
    {"EntryAbsent", [](json::object& m) { m["entry"] = "other.py"; }, "entry: 'other.py' does not exist"},
    {"EntryFolder", [](json::object& m) { m["entry"] = "lib.py"; }, "entry: 'lib.py' is not a regular file"},
    {"ProfileEmpty", [](json::object& m) { m["profile"] = ""; }, "profile: is empty"},
    {"ProfileNotAString", [](json::object& m) { m["profile"] = json::array{"python"}; }, "profile: expected a string"},
    {"InterpreterUnknown", [](json::object& m) { m["interpreter"] = "ruby"; }, "interpreter: 'ruby' is not an"},
    {"InterpreterUnknowable", [](json::object& m) { m["entry"] = "run"; }, "interpreter: missing: the entry 'run'"},
    {"RequiresBadOperator",
     [](json::object& m) { m["requires"] = json::array{"pandas", "numpy>>1"}; },
     "requires[1]: 'numpy>>1' is not a version constraint"},
    {"RequiresTwice",
     [](json::object& m) { m["requires"] = json::array{"numpy>=1", "NumPy<2"}; },
     "requires[1]: 'numpy' is required already by requires[0]"},
    {"RequiresExtras", [](json::object& m) { m["requires"] = json::array{"dask[array]"}; }, "requires[0]: 'dask[array]': extras"},
    {"RequiresMarker",
     [](json::object& m) { m["requires"] = json::array{"numpy; python_version>'3'"}; },
     "requires[0]: 'numpy; python_version>'3'': environment markers"},
    {"RequiresCompatibleOneNumber", [](json::object& m) { m["requires"] = json::array{"numpy~=1"}; }, "requires[0]: 'numpy~=1': '~=' needs"},
    {"RequiresWildcardOrdered", [](json::object& m) { m["requires"] = json::array{"numpy>=1.*"}; }, "requires[0]"},
    {"RequiresNotAList", [](json::object& m) { m["requires"] = "numpy"; }, "requires: expected an array"},
    {"RequiresNotStrings", [](json::object& m) { m["requires"] = json::array{1}; }, "requires[0]: expected a string"},
    {"LimitsBadSize", [](json::object& m) { m["limits"] = json::object{{"memory", "12Q"}}; }, "limits.memory: '12Q'"},
    {"LimitsUnlimited", [](json::object& m) { m["limits"] = json::object{{"memory", "unlimited"}}; }, "limits.memory"},
    {"LimitsZeroPids", [](json::object& m) { m["limits"] = json::object{{"pids", 0}}; }, "limits.pids"},
    {"LimitsUnknownKey", [](json::object& m) { m["limits"] = json::object{{"disk", "1G"}}; }, "limits.disk: unknown key"},
    {"LimitsNegativeCpus", [](json::object& m) { m["limits"] = json::object{{"cpus", -1}}; }, "limits.cpus"},
    {"LimitsOtherWord", [](json::object& m) { m["limits"] = "automatic"; }, "limits: 'automatic' is not limits"},
    {"LimitsPidsAuto", [](json::object& m) { m["limits"] = json::object{{"pids", "auto"}}; }, "limits.pids"},
    {"EnvNotAMap", [](json::object& m) { m["env"] = json::array{"A=1"}; }, "env: expected"},
    {"EnvBadName", [](json::object& m) { m["env"] = json::object{{"A=B", "1"}}; }, "env.A=B: is not a variable name"},
    {"EnvNumber", [](json::object& m) { m["env"] = json::object{{"N", 1}}; }, "env.N: expected a string"},
    {"NetworkUnknownMode", [](json::object& m) { m["network"] = "some"; }, "network"},
    {"NetworkUnknownKey", [](json::object& m) { m["network"] = json::object{{"allow_domain", "x"}}; }, "network.allow_domain"},
    {"TimeoutZero", [](json::object& m) { m["timeout_ms"] = 0; }, "timeout_ms:"},
    {"TimeoutString", [](json::object& m) { m["timeout_ms"] = "5s"; }, "timeout_ms: expected a whole number"},
    {"TimeoutAutomatic", [](json::object& m) { m["timeout_ms"] = "automatic"; }, "timeout_ms: expected a whole number"},
    {"CallsNotAList", [](json::object& m) { m["calls"] = "word-stats"; }, "calls: expected an array"},
    {"CallsBadName", [](json::object& m) { m["calls"] = json::array{"Word Stats"}; }, "calls[0]: 'Word Stats' is not a skill name"},
    {"CallsBadRange", [](json::object& m) { m["calls"] = json::array{"a@>1"}; }, "calls[0]:"},
    {"CallsTwice", [](json::object& m) { m["calls"] = json::array{"a", "a@^1"}; }, "calls[1]: 'a' is listed already"},
    {"DescriptionNotAString", [](json::object& m) { m["description"] = true; }, "description: expected a string"},
    {"UnknownKey", [](json::object& m) { m["entrypoint"] = "main.py"; }, "entrypoint: unknown key"},
    {"EnvironmentNotAString", [](json::object& m) { m["environment"] = 3; }, "environment: expected a string"},
    {"EnvironmentBadName", [](json::object& m) { m["environment"] = "Sci"; }, "environment: 'Sci' is not an environment"},
    {"EnvironmentEmpty", [](json::object& m) { m["environment"] = ""; }, "environment: '' is not an environment"},
    {"EnvironmentBadRevision",
     [](json::object& m) { m["environment"] = "sci@x"; },
     "environment: 'sci@x': the revision after '@' must be a positive whole number, as in sci@3"},
    {"EnvironmentRevisionZero", [](json::object& m) { m["environment"] = "sci@0"; }, "environment: 'sci@0': the revision"},
    {"EnvironmentRevisionLeadingZero", [](json::object& m) { m["environment"] = "sci@03"; }, "environment: 'sci@03'"},
    {"EnvironmentNoRevision", [](json::object& m) { m["environment"] = "sci@"; }, "environment: 'sci@': the revision"},
    {"SeccompLooser", [](json::object& m) { m["seccomp"] = "none"; }, "seccomp: 'none' is not a policy a skill can ask for"},
    {"SeccompDefault", [](json::object& m) { m["seccomp"] = "default"; }, "seccomp: 'default' is not a policy"},
    {"SeccompNotAString", [](json::object& m) { m["seccomp"] = true; }, "seccomp: expected a string"},
};

INSTANTIATE_TEST_SUITE_P(
    SkillManifest, ManifestField, ::testing::Combine(::testing::ValuesIn(kFieldCases),
                                                     ::testing::Values(Format::kYaml, Format::kJson)),
    [](const ::testing::TestParamInfo<std::tuple<FieldCase, Format>>& info) {
      return absl::StrCat(std::get<0>(info.param).test_name, std::get<1>(info.param) == Format::kYaml ? "Yaml" : "Json");
    });

// ---------------------------------------------------------------------------
// What reads.

TEST(SkillManifest, YamlAndJsonReadAlike) {
  Folder yaml, json_dir;
  yaml.Write("skill.yaml", R"(# a comment
name: word-stats
version: 1.2.0          # plain: a string, not a number
description: >
  Counts words
requires:
  - numpy >= 1.10, < 2
  - Py_YAML
limits: {memory: 128M, pids: 32, cpus: 0.5}
entry: main.py
env:
  MODE: fast
  ON: yes               # plain yes is the string "yes" (YAML 1.2)
timeout_ms: 5000
network: none
environment: sci@3
)");
  yaml.Write("main.py", kScript);
  json_dir.Write("skill.json", R"({"name": "word-stats", "version": "1.2.0", "description": "Counts words\n",
      "requires": ["py-yaml", "numpy<2,>=1.10"], "limits": {"memory": 134217728, "pids": 32, "cpus": 0.5},
      "env": {"MODE": "fast", "ON": "yes"}, "timeout_ms": 5000, "network": "none", "entry": "main.py",
      "environment": "sci@3"})");
  json_dir.Write("main.py", kScript);
  absl::StatusOr<Skill> a = Load(yaml.path());
  absl::StatusOr<Skill> b = Load(json_dir.path());
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  for (const Skill* s : {&*a, &*b}) {
    const Manifest& m = s->manifest;
    EXPECT_EQ(m.name, "word-stats");
    EXPECT_EQ(m.version.ToString(), "1.2.0");
    EXPECT_EQ(m.description, "Counts words\n");
    EXPECT_EQ(m.interpreter, Interpreter::kPython);
    EXPECT_EQ(m.profile, "python");  // the interpreter's, unnamed
    ASSERT_EQ(m.requirements.size(), 2u);
    EXPECT_EQ(m.limits.memory, uint64_t{128} << 20);
    EXPECT_EQ(m.limits.pids, 32u);
    EXPECT_EQ(m.limits.cpus, 0.5);
    EXPECT_EQ(m.env, (std::vector<std::pair<std::string, std::string>>{{"MODE", "fast"}, {"ON", "yes"}}));
    EXPECT_EQ(m.timeout, absl::Milliseconds(5000));
    EXPECT_TRUE(m.network.has_value());
    EXPECT_EQ(m.environment, (EnvironmentRef{"sci", 3}));
    EXPECT_EQ(s->script, kScript);
  }
  EXPECT_EQ(a->manifest.requirements[0].Canonical(), "numpy<2,>=1.10");
  EXPECT_EQ(a->manifest.requirements[1].Canonical(), "py-yaml");
  // The same script and requirements, written otherwise: one id.
  EXPECT_EQ(a->id, b->id);
  EXPECT_EQ(a->manifest_path, yaml.Join("skill.yaml"));
}

// Limits from history: the string "auto" or memory: auto, beside fixed keys.
TEST(SkillManifest, MemoryAutoInBothForms) {
  for (const char* limits : {"auto", "{memory: auto, pids: 32}"}) {
    Folder folder;
    folder.Write("skill.yaml", absl::StrCat("name: a\nversion: 1.0.0\nentry: main.py\nlimits: ", limits, "\n"));
    folder.Write("main.py", kScript);
    absl::StatusOr<Skill> s = Load(folder.path());
    ASSERT_TRUE(s.ok()) << limits << ": " << s.status();
    EXPECT_TRUE(s->manifest.limits.memory_auto) << limits;
    EXPECT_FALSE(s->manifest.limits.memory.has_value()) << limits;
    EXPECT_FALSE(s->manifest.limits.empty()) << limits;
  }
}

// The timeout from history: `timeout_ms: auto`, or `limits: auto` when the
// manifest gives no timeout_ms of its own; `{memory: auto}` is memory only.
TEST(SkillManifest, TimeoutAutoByItselfOrByLimitsAuto) {
  struct Case {
    const char* lines;
    bool timeout_auto;
    bool memory_auto;
  };
  for (const Case& c : {Case{"timeout_ms: auto\n", true, false}, Case{"limits: auto\n", true, true},
                        Case{"limits: auto\ntimeout_ms: 5000\n", false, true},  // its own wins
                        Case{"limits: {memory: auto}\n", false, true},
                        Case{"limits: {pids: 8}\ntimeout_ms: auto\n", true, false}}) {
    Folder folder;
    folder.Write("skill.yaml", absl::StrCat("name: a\nversion: 1.0.0\nentry: main.py\n", c.lines));
    folder.Write("main.py", kScript);
    absl::StatusOr<Skill> s = Load(folder.path());
    ASSERT_TRUE(s.ok()) << c.lines << ": " << s.status();
    EXPECT_EQ(s->manifest.timeout_auto, c.timeout_auto) << c.lines;
    EXPECT_EQ(s->manifest.limits.memory_auto, c.memory_auto) << c.lines;
    // An auto timeout has no fixed one; a timeout_ms given beside `limits: auto` stays fixed.
    if (c.timeout_auto) {
      EXPECT_FALSE(s->manifest.timeout.has_value()) << c.lines;
    }
  }
}

TEST(SkillManifest, ShellByExtensionAndItsProfile) {
  Folder dir;
  dir.Write("skill.yaml", "name: greet\nversion: 0.1.0-alpha.1\nentry: bin/greet.sh\n");
  dir.Write("bin/greet.sh", "echo hi\n");
  absl::StatusOr<Skill> s = Load(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->manifest.interpreter, Interpreter::kShell);
  EXPECT_EQ(s->manifest.profile, "shell");
  EXPECT_TRUE(s->manifest.version.is_prerelease());
  EXPECT_FALSE(s->manifest.environment.has_value());
}

TEST(SkillManifest, RByExtensionOrByNameAndItsProfile) {
  for (const char* entry : {"main.R", "lib/main.r"}) {
    Folder dir;
    dir.Write("skill.yaml", absl::StrCat("name: r-summary\nversion: 1.0.0\nentry: ", entry, "\n"));
    dir.Write(entry, "cat(1)\n");
    absl::StatusOr<Skill> s = Load(dir.path());
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->manifest.interpreter, Interpreter::kR) << entry;
    EXPECT_EQ(s->manifest.profile, "r");
    EXPECT_EQ(InterpreterName(s->manifest.interpreter), "r");
  }
  Folder named;
  named.Write("skill.yaml", "name: stats\nversion: 1.0.0\nentry: stats.txt\ninterpreter: r\nprofile: science\n");
  named.Write("stats.txt", "cat(1)\n");
  absl::StatusOr<Skill> s = Load(named.path());
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->manifest.interpreter, Interpreter::kR);
  EXPECT_EQ(s->manifest.profile, "science");

  Folder unnamed;
  unnamed.Write("skill.yaml", "name: stats\nversion: 1.0.0\nentry: stats.txt\n");
  unnamed.Write("stats.txt", "cat(1)\n");
  absl::StatusOr<Skill> missing = Load(unnamed.path());
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(std::string(missing.status().message()), HasSubstr("ends in none of .py, .sh and .R"));
  unnamed.Write("skill.yaml", "name: stats\nversion: 1.0.0\nentry: stats.txt\ninterpreter: julia\n");
  absl::StatusOr<Skill> julia = Load(unnamed.path());
  ASSERT_FALSE(julia.ok());
  EXPECT_THAT(std::string(julia.status().message()), HasSubstr(R"(expected "python", "shell" or "r")"));
}

TEST(SkillManifest, AnRSkillRequiresRPackages) {
  Folder dir;
  dir.Write("skill.yaml", "name: r-table\nversion: 1.0.0\nentry: main.R\n"
                          "requires: [data.table>=1.14.8-1, Matrix, jsonlite >= 1.8]\n");
  dir.Write("main.R", "cat(1)\n");
  absl::StatusOr<Skill> s = Load(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  std::vector<std::string> canonical;
  for (const Requirement& r : s->manifest.requirements) canonical.push_back(r.Canonical());
  EXPECT_THAT(canonical, ElementsAre("data.table>=1.14.8-1", "Matrix", "jsonlite>=1.8"));
  // R's names are case-sensitive: Matrix and matrix are two packages.
  dir.Write("skill.yaml", "name: r-table\nversion: 1.0.0\nentry: main.R\nrequires: [Matrix, matrix]\n");
  EXPECT_TRUE(Load(dir.path()).ok());
  dir.Write("skill.yaml", "name: r-table\nversion: 1.0.0\nentry: main.R\nrequires: [Matrix, Matrix>=1]\n");
  absl::StatusOr<Skill> twice = Load(dir.path());
  ASSERT_FALSE(twice.ok());
  EXPECT_THAT(std::string(twice.status().message()), HasSubstr("requires[1]: 'Matrix' is required already"));
  dir.Write("skill.yaml", "name: r-table\nversion: 1.0.0\nentry: main.R\nrequires: [numpy~=1.4]\n");
  absl::StatusOr<Skill> python = Load(dir.path());
  ASSERT_FALSE(python.ok());
  EXPECT_THAT(std::string(python.status().message()), HasSubstr("requires[0]: 'numpy~=1.4': '~=' is Python's"));
  // The same names for a Python skill read as PEP 503 reads them.
  dir.Write("skill.yaml", "name: py-table\nversion: 1.0.0\nentry: main.py\nrequires: [data.table, Matrix]\n");
  dir.Write("main.py", kScript);
  absl::StatusOr<Skill> py = Load(dir.path());
  ASSERT_TRUE(py.ok()) << py.status();
  EXPECT_EQ(py->manifest.requirements[0].name, "data-table");
  EXPECT_EQ(py->manifest.requirements[1].name, "matrix");
}

TEST(SkillManifest, SeccompStrictReads) {
  json::object manifest = BaseManifest();
  absl::StatusOr<Manifest> without = ParseManifest(manifest);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_FALSE(without->strict_seccomp);
  manifest["seccomp"] = "strict";
  absl::StatusOr<Manifest> strict = ParseManifest(manifest);
  ASSERT_TRUE(strict.ok()) << strict.status();
  EXPECT_TRUE(strict->strict_seccomp);
}

TEST(SkillManifest, EnvironmentReferencesRead) {
  absl::StatusOr<EnvironmentRef> latest = ParseEnvironmentRef("sci");
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_EQ(latest->name, "sci");
  EXPECT_FALSE(latest->revision.has_value());
  EXPECT_EQ(latest->ToString(), "sci");
  absl::StatusOr<EnvironmentRef> exact = ParseEnvironmentRef("py-3.11_ml@12");
  ASSERT_TRUE(exact.ok()) << exact.status();
  EXPECT_EQ(exact->revision, 12u);
  EXPECT_EQ(exact->ToString(), "py-3.11_ml@12");
  for (const char* bad : {"", "@3", "sci@", "sci@-1", "sci@1.0", "sci@3@4", "SCI", "sci@99999999999999999999"}) {
    EXPECT_FALSE(ParseEnvironmentRef(bad).ok()) << bad;
  }
}

// ---------------------------------------------------------------------------
// The entry, beneath the folder and nowhere else.

class SkillEntry : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_.Write("skill.yaml", "name: e\nversion: 1.0.0\nentry: main.py\n");
    outside_.Write("secret.py", "print('outside')\n");
  }
  std::string Message() {
    absl::StatusOr<Skill> s = Load(dir_.path());
    return s.ok() ? "loaded" : std::string(s.status().message());
  }
  Folder dir_, outside_;
};

TEST_F(SkillEntry, SymlinkOutIsRefused) {
  ASSERT_EQ(::symlink(outside_.Join("secret.py").c_str(), dir_.Join("main.py").c_str()), 0);
  EXPECT_THAT(Message(), HasSubstr("skill.yaml: entry: 'main.py' is a symlink or passes through one"));
}

TEST_F(SkillEntry, SymlinkInsideIsRefusedToo) {
  dir_.Write("real.py", kScript);
  ASSERT_EQ(::symlink("real.py", dir_.Join("main.py").c_str()), 0);
  EXPECT_THAT(Message(), HasSubstr("entry: 'main.py' is a symlink"));
}

TEST_F(SkillEntry, SymlinkedFolderOnTheWayIsRefused) {
  dir_.Write("skill.yaml", "name: e\nversion: 1.0.0\nentry: lib/secret.py\n");
  ASSERT_EQ(::symlink(outside_.path().c_str(), dir_.Join("lib").c_str()), 0);
  EXPECT_THAT(Message(), HasSubstr("entry: 'lib/secret.py' is a symlink or passes through one"));
}

TEST_F(SkillEntry, TooLargeIsRefused) {
  dir_.Write("main.py", std::string(kMaxScriptBytes + 1, '#'));
  EXPECT_THAT(Message(), HasSubstr("entry: 'main.py' is larger than 98304 bytes"));
  dir_.Write("main.py", std::string(kMaxScriptBytes, '#'));
  EXPECT_EQ(Message(), "loaded");
}

TEST_F(SkillEntry, NulByteIsRefused) {
  dir_.Write("main.py", std::string("print(1)\0x", 10));
  EXPECT_THAT(Message(), HasSubstr("entry: 'main.py' holds a NUL byte (at offset 8)"));
}

TEST_F(SkillEntry, FifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(dir_.Join("main.py").c_str(), 0600), 0);
  EXPECT_THAT(Message(), HasSubstr("entry: 'main.py' is not a regular file"));
}

TEST_F(SkillEntry, ManifestSymlinkIsRefused) {
  ::unlink(dir_.Join("skill.yaml").c_str());
  outside_.Write("skill.yaml", "name: e\nversion: 1.0.0\nentry: main.py\n");
  ASSERT_EQ(::symlink(outside_.Join("skill.yaml").c_str(), dir_.Join("skill.yaml").c_str()), 0);
  EXPECT_THAT(Message(), HasSubstr("skill.yaml: 'skill.yaml' is a symlink"));
}

TEST_F(SkillEntry, TwoManifestsAreRefused) {
  dir_.Write("main.py", kScript);
  dir_.Write("skill.json", R"({"name": "e", "version": "1.0.0", "entry": "main.py"})");
  EXPECT_THAT(Message(), HasSubstr("holds both skill.yaml and skill.json"));
}

TEST_F(SkillEntry, NoManifestIsNotFound) {
  ::unlink(dir_.Join("skill.yaml").c_str());
  absl::StatusOr<Skill> s = Load(dir_.path());
  EXPECT_TRUE(absl::IsNotFound(s.status())) << s.status();
}

TEST_F(SkillEntry, LargeManifestIsRefused) {
  dir_.Write("skill.yaml", "name: e\nversion: 1.0.0\nentry: main.py\n#" + std::string(kMaxManifestBytes, 'x'));
  EXPECT_THAT(Message(), HasSubstr("'skill.yaml' is larger than"));
}

// ---------------------------------------------------------------------------
// YAML as a manifest uses it.

std::string YamlError(const std::string& text) {
  absl::StatusOr<json::value> v = ParseYamlDocument(text);
  return v.ok() ? "parsed: " + json::serialize(*v) : std::string(v.status().message());
}

TEST(SkillYaml, PlainScalarsResolveByTheCoreSchema) {
  absl::StatusOr<json::value> v = ParseYamlDocument(
      "a: 12\nb: -3\nc: 1.5e3\nd: true\ne: ~\nf: yes\ng: 0x1F\nh: '12'\ni:\nj: 1.2.0\nk: 18446744073709551615\n");
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(json::serialize(*v),
            R"({"a":12,"b":-3,"c":1.5E3,"d":true,"e":null,"f":"yes","g":"0x1F","h":"12","i":null,"j":"1.2.0",)"
            R"("k":18446744073709551615})");
}

TEST(SkillYaml, RefusesWhatAManifestDoesNotNeed) {
  EXPECT_THAT(YamlError("a: &x 1\nb: *x\n"), HasSubstr("line 1, column 4: anchors and aliases"));
  EXPECT_THAT(YamlError("a: !!str 1\n"), HasSubstr("explicit tags"));
  EXPECT_THAT(YamlError("a: 1\n---\nb: 2\n"), HasSubstr("one document"));
  EXPECT_THAT(YamlError("a: 1\nb:\n  c: 1\n  c: 2\n"), HasSubstr("b: duplicate key 'c' (line 4, column 3)"));
  EXPECT_THAT(YamlError("? [a]\n: 1\n"), HasSubstr("a key must be a scalar"));
  EXPECT_THAT(YamlError("a: [1, 2\n"), HasSubstr("invalid YAML at line"));
  EXPECT_THAT(YamlError(std::string(100, '[') + std::string(100, ']')), HasSubstr("deeper than 64"));
}

TEST(SkillYaml, SyntaxErrorsOfAManifestSayWhere) {
  Folder dir;
  dir.Write("skill.yaml", "name: e\nversion: 1.0.0\n  entry: main.py\n");
  dir.Write("main.py", kScript);
  absl::StatusOr<Skill> s = Load(dir.path());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("skill.yaml: invalid YAML at line 3"));
  Folder json_dir;
  json_dir.Write("skill.json", R"({"name": "e", "name": "f"})");
  s = Load(json_dir.path());
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("skill.json: (top level): duplicate key 'name'"));
}

// ---------------------------------------------------------------------------
// The id, recomputed from the bytes by sha256sum(1).

std::string Sha256sum(const Folder& dir, const std::string& bytes) {
  dir.Write("id-input", bytes);
  std::string command = "sha256sum " + dir.Join("id-input");
  FILE* p = ::popen(command.c_str(), "r");
  if (p == nullptr) return "";
  char out[65] = {};
  size_t n = std::fread(out, 1, 64, p);
  ::pclose(p);
  return std::string(out, n);
}

TEST(SkillId, IsTheSha256OfTheDocumentedBytes) {
  Folder dir, scratch;
  dir.Write("skill.yaml",
            "name: word-stats\nversion: 1.2.0\nentry: main.py\nrequires: ['Pandas', 'numpy >= 1.10, < 2']\n");
  dir.Write("main.py", kScript);
  absl::StatusOr<Skill> s = Load(dir.path());
  ASSERT_TRUE(s.ok()) << s.status();
  // docs/skills.md, "Identity", spelt out by hand.
  const std::string script = kScript;
  const std::string bytes = "cubicle-skill-id-v1\nscript " + std::to_string(script.size()) + "\n" + script +
                            "\nrequires 2\nnumpy<2,>=1.10\npandas\n";
  const std::string expected = Sha256sum(scratch, bytes);
  ASSERT_EQ(expected.size(), 64u);
  EXPECT_EQ(s->id, expected);
  EXPECT_EQ(SkillIdInput(s->script, s->manifest.requirements), bytes);
}

TEST(SkillId, ChangesWithTheScriptAndTheRequirementsOnly) {
  Folder dir;
  dir.Write("main.py", kScript);
  auto id = [&](const std::string& manifest) {
    dir.Write("skill.yaml", manifest);
    absl::StatusOr<Skill> s = Load(dir.path());
    return s.ok() ? s->id : std::string(s.status().message());
  };
  const std::string base = id("name: a\nversion: 1.0.0\nentry: main.py\nrequires: [numpy]\n");
  EXPECT_EQ(id("name: b\nversion: 2.0.0\nentry: main.py\nrequires: [NumPy]\ndescription: other\n"), base);
  EXPECT_NE(id("name: a\nversion: 1.0.0\nentry: main.py\nrequires: [numpy>=1]\n"), base);
  EXPECT_NE(id("name: a\nversion: 1.0.0\nentry: main.py\n"), base);
  dir.Write("main.py", std::string(kScript) + " ");
  EXPECT_NE(id("name: a\nversion: 1.0.0\nentry: main.py\nrequires: [numpy]\n"), base);
}

}  // namespace
}  // namespace cubicle::skills
