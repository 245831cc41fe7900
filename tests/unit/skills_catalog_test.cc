// skills/: versions — their precedence and the selectors a call names one
// by — and a skills directory loaded: its layouts, the folders it passes
// over, bad and duplicate manifests reported while the rest are served.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "skills/catalog.h"
#include "skills/requirement.h"
#include "skills/version.h"
#include "tests/support/temp_dir.h"

namespace cubicle::skills {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

Version V(const std::string& text) {
  absl::StatusOr<Version> v = ParseVersion(text);
  EXPECT_TRUE(v.ok()) << text << ": " << v.status();
  return v.ok() ? *v : Version{};
}

TEST(SkillVersion, PrecedenceIsSemver) {
  // semver.org 2.0.0, item 11's chain.
  const std::vector<std::string> chain = {"1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta",
                                          "1.0.0-beta.2", "1.0.0-beta.11", "1.0.0-rc.1",      "1.0.0",
                                          "1.0.1",        "1.1.0",         "2.0.0",           "10.0.0"};
  for (size_t i = 0; i + 1 < chain.size(); ++i) {
    EXPECT_LT(V(chain[i]), V(chain[i + 1])) << chain[i] << " < " << chain[i + 1];
    EXPECT_EQ(V(chain[i]).ToString(), chain[i]);
  }
  EXPECT_EQ(V("1.2.3"), V("1.2.3"));
  EXPECT_EQ(V("1.0.0-" + std::string(122, 'a')).prerelease[0].size(), 122u);  // 128 bytes in all
}

TEST(SkillVersion, RefusesWhatIsNotSemver) {
  for (const char* bad : {"", "1", "1.2", "1.2.3.4", "v1.2.3", "01.2.3", "1.2.3-", "1.2.3-01", "1.2.3+b", "1.2.x",
                          "1.2.3-a_b", "99999999999999999999.0.0"}) {
    EXPECT_FALSE(ParseVersion(bad).ok()) << bad;
  }
  EXPECT_FALSE(ParseVersion("1.0.0-" + std::string(123, 'a')).ok());  // 129 bytes
}

// The highest version of {1.0.0, 1.2.0, 1.3.0-rc.1, 2.0.0-beta} that `selector` picks.
std::string Pick(const std::string& selector) {
  absl::StatusOr<VersionSelector> s = VersionSelector::Parse(selector);
  if (!s.ok()) return std::string(s.status().message());
  std::string picked = "none";
  for (const char* v : {"1.0.0", "1.2.0", "1.3.0-rc.1", "2.0.0-beta"}) {
    if (s->Matches(V(v))) picked = v;
  }
  return picked;
}

TEST(SkillVersion, SelectorsPickTheHighestReleaseThatMatches) {
  EXPECT_EQ(Pick(""), "1.2.0");  // a prerelease is never picked by default
  EXPECT_EQ(Pick("1.0.0"), "1.0.0");
  EXPECT_EQ(Pick("1.3.0-rc.1"), "1.3.0-rc.1");  // unless named exactly
  EXPECT_EQ(Pick("1"), "1.2.0");
  EXPECT_EQ(Pick("1.0"), "1.0.0");
  EXPECT_EQ(Pick("1.3"), "none");
  EXPECT_EQ(Pick("^1"), "1.2.0");
  EXPECT_EQ(Pick("^1.1"), "1.2.0");
  EXPECT_EQ(Pick("~1.0"), "1.0.0");
  EXPECT_EQ(Pick("~1.2.0"), "1.2.0");
  EXPECT_EQ(Pick("2"), "none");
  EXPECT_EQ(Pick("1.1.0"), "none");
  EXPECT_THAT(Pick("^1.2.x"), HasSubstr("is not a version selector"));
  EXPECT_THAT(Pick(">=1"), HasSubstr("is not a version selector"));
}

TEST(SkillVersion, CaretOfZeroVersionsStaysWithinTheMinorOrPatch) {
  absl::StatusOr<VersionSelector> minor = VersionSelector::Parse("^0.2.3");
  ASSERT_TRUE(minor.ok());
  EXPECT_TRUE(minor->Matches(V("0.2.9")));
  EXPECT_FALSE(minor->Matches(V("0.3.0")));
  EXPECT_FALSE(minor->Matches(V("0.2.2")));
  absl::StatusOr<VersionSelector> patch = VersionSelector::Parse("^0.0.3");
  ASSERT_TRUE(patch.ok());
  EXPECT_TRUE(patch->Matches(V("0.0.3")));
  EXPECT_FALSE(patch->Matches(V("0.0.4")));
}

TEST(SkillRequirement, ReadsAndCanonicalizes) {
  auto canonical = [](const char* text) {
    absl::StatusOr<Requirement> r = ParseRequirement(text);
    return r.ok() ? r->Canonical() : std::string(r.status().message());
  };
  EXPECT_EQ(canonical("numpy"), "numpy");
  EXPECT_EQ(canonical("  NumPy >= 1.10 "), "numpy>=1.10");
  EXPECT_EQ(canonical("pandas>=1.5, <3"), "pandas<3,>=1.5");
  EXPECT_EQ(canonical("Py__Yaml.x"), "py-yaml-x");
  EXPECT_EQ(canonical("a==1.4.*"), "a==1.4.*");
  EXPECT_EQ(canonical("a!=2.0rc1"), "a!=2.0rc1");
  EXPECT_EQ(canonical("a~=1.4.post2"), "a~=1.4.post2");
  EXPECT_EQ(canonical("a<=1.0.dev3,>0.9"), "a<=1.0.dev3,>0.9");
  EXPECT_EQ(canonical("a>1,>1"), "a>1");
  for (const char* bad : {"numpy>>1", "numpy=1", "numpy 1.0", "-numpy", "numpy>=", "numpy>=1.", "numpy<1.*",
                          "numpy,", "numpy>=1,,<2", "num py", "numpy===1", ""}) {
    EXPECT_FALSE(ParseRequirement(bad).ok()) << bad;
  }
}

// ---------------------------------------------------------------------------
// A skills directory.

class SkillsDir : public ::testing::Test {
 protected:
  void Write(const std::string& name, const std::string& text) {
    fs::create_directories(fs::path(Path(name)).parent_path());
    std::ofstream(Path(name), std::ios::binary) << text;
  }
  // A skill folder at `folder` with a manifest of `name`, `version`.
  void Skill(const std::string& folder, const std::string& name, const std::string& version,
             const std::string& more = "") {
    Write(folder + "/skill.yaml", absl::StrCat("name: ", name, "\nversion: ", version, "\nentry: main.py\n", more));
    Write(folder + "/main.py", absl::StrCat("print('", name, " ", version, "')\n"));
  }
  std::string Path(const std::string& name) const { return root_ + "/" + name; }
  std::vector<std::string> Errors(const Catalog& c) const {
    std::vector<std::string> out;
    for (const LoadError& e : c.errors()) out.push_back(e.message.substr(root_.size() + 1));
    return out;
  }
  test_support::TempDir dir_;
  const std::string root_ = dir_.path();
};

TEST_F(SkillsDir, LoadsBothLayoutsAndPassesOverTheRest) {
  Skill("word-stats/1.0.0", "word-stats", "1.0.0");
  Skill("word-stats/1.2.0", "word-stats", "1.2.0");
  Skill("word-stats/2.0.0-rc.1", "word-stats", "2.0.0-rc.1");
  Skill("hello", "hello", "0.1.0");  // a folder that is itself one version
  Skill(".staging/x", "staging", "1.0.0");  // dot names are passed over
  Write("README.md", "not a skill\n");
  Catalog c = Catalog::Load(root_);
  EXPECT_THAT(Errors(c), ElementsAre());
  ASSERT_EQ(c.skills().size(), 2u);
  EXPECT_EQ(c.versions(), 4u);
  absl::StatusOr<std::shared_ptr<const skills::Skill>> s = c.Find("word-stats");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->manifest.version.ToString(), "1.2.0");
  EXPECT_EQ((*s)->script, "print('word-stats 1.2.0')\n");
  EXPECT_EQ((*s)->folder, Path("word-stats/1.2.0"));
  s = c.Find("word-stats@2.0.0-rc.1");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->manifest.version.ToString(), "2.0.0-rc.1");
  s = c.Find("word-stats@1.0");
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ((*s)->manifest.version.ToString(), "1.0.0");
  EXPECT_THAT(std::string(c.Find("word-stats@3").status().message()),
              HasSubstr("skill 'word-stats' has no version matching '3' (it has 1.0.0, 1.2.0, 2.0.0-rc.1)"));
  EXPECT_TRUE(absl::IsNotFound(c.Find("nope").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c.Find("Nope").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c.Find("hello@").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(c.Find("hello@>1").status()));
}

TEST_F(SkillsDir, BadManifestsAreReportedAndTheOthersServed) {
  Skill("good/1.0.0", "good", "1.0.0");
  Skill("bad/1.0.0", "bad", "1.0.0", "requires: [numpy>>1]\n");
  Write("empty/.keep", "");
  Write("noversion/1.0.0/notes.txt", "");
  Catalog c = Catalog::Load(root_);
  EXPECT_THAT(Errors(c),
              ElementsAre(HasSubstr("bad/1.0.0/skill.yaml: requires[0]: 'numpy>>1' is not a version constraint"),
                          "empty: holds neither skill.yaml nor skill.json, nor a folder per version",
                          "noversion/1.0.0: no skill.yaml or skill.json"));
  EXPECT_EQ(c.versions(), 1u);
  EXPECT_TRUE(c.Find("good").ok());
  EXPECT_TRUE(absl::IsNotFound(c.Find("bad").status()));
}

TEST_F(SkillsDir, DuplicatesAreLeftOutBoth) {
  Skill("a/1.0.0", "same", "1.0.0");
  Skill("b/1.0.0", "same", "1.0.0");
  Skill("c/1.1.0", "same", "1.1.0");
  Catalog c = Catalog::Load(root_);
  EXPECT_THAT(Errors(c),
              ElementsAre(absl::StrCat("a/1.0.0/skill.yaml: same@1.0.0 is also the name and version of ", root_,
                                       "/b/1.0.0/skill.yaml; none of them is served"),
                          HasSubstr("b/1.0.0/skill.yaml: same@1.0.0 is also the name and version of")));
  ASSERT_EQ(c.versions(), 1u);
  EXPECT_EQ((*c.Find("same"))->manifest.version.ToString(), "1.1.0");
}

TEST_F(SkillsDir, SymlinkedFoldersAreNotFollowed) {
  Skill("real/1.0.0", "real", "1.0.0");
  ASSERT_EQ(::symlink(Path("real").c_str(), Path("alias").c_str()), 0);
  ASSERT_EQ(::symlink(Path("real/1.0.0").c_str(), Path("real/2.0.0").c_str()), 0);
  Catalog c = Catalog::Load(root_);
  EXPECT_THAT(Errors(c), ElementsAre(HasSubstr("alias: is a symlink"), HasSubstr("real/2.0.0: is a symlink")));
  EXPECT_EQ(c.versions(), 1u);
}

TEST_F(SkillsDir, TheCheckLeavesOutWhatItRefuses) {
  Skill("a", "a", "1.0.0", "profile: gpu\n");
  Skill("b", "b", "1.0.0");
  LoadOptions options;
  options.check = [](const skills::Skill& s) {
    return s.manifest.profile == "gpu" ? absl::InvalidArgumentError("profile: no profile named 'gpu'")
                                       : absl::OkStatus();
  };
  Catalog c = Catalog::Load(root_, options);
  EXPECT_THAT(Errors(c), ElementsAre("a/skill.yaml: profile: no profile named 'gpu'"));
  EXPECT_EQ(c.versions(), 1u);
}

TEST_F(SkillsDir, AMissingDirectoryIsOneError) {
  Catalog c = Catalog::Load(Path("absent"));
  ASSERT_EQ(c.errors().size(), 1u);
  EXPECT_THAT(c.errors()[0].message, HasSubstr("ENOENT"));
  EXPECT_EQ(c.versions(), 0u);
}

TEST_F(SkillsDir, FoldersAreBounded) {
  for (int i = 0; i < 5; ++i) Skill(absl::StrCat("s", i), absl::StrCat("s", i), "1.0.0");
  LoadOptions options;
  options.max_folders = 3;
  Catalog c = Catalog::Load(root_, options);
  EXPECT_EQ(c.versions(), 3u);
  EXPECT_THAT(Errors(c), ElementsAre(HasSubstr("more than 3 folders")));
}

TEST_F(SkillsDir, OnlyPrereleasesNeedAnExactVersion) {
  Skill("p", "p", "1.0.0-beta.1");
  Catalog c = Catalog::Load(root_);
  EXPECT_THAT(std::string(c.Find("p").status().message()),
              HasSubstr("skill 'p' has prereleases only (1.0.0-beta.1): name one exactly, as p@1.0.0-beta.1"));
  EXPECT_TRUE(c.Find("p@1.0.0-beta.1").ok());
}

}  // namespace
}  // namespace cubicle::skills
