// runtime/warm.h: which requests a warm Python or R serves without
// exec'ing, and which interpreter configurations are accepted.
#include "runtime/warm.h"

#include <elf.h>
#include <unistd.h>

#include <cstring>

#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "runtime/warm_r.h"

namespace cubicle::runtime {
namespace {

const WarmInterpreter kPython{{"python3", "-I"}, {"json"}};

std::optional<WarmInvocation> Match(std::vector<std::string> argv, const WarmInterpreter& i = kPython) {
  return MatchWarmInvocation(i, argv);
}

TEST(WarmInvocation, ScriptCodeModuleAndStdinFormsAreWarm) {
  EXPECT_EQ(Match({"python3", "-I", "skill.py", "a"}), (WarmInvocation{WarmMode::kScript, 2}));
  EXPECT_EQ(Match({"python3", "-I", "-c", "print(1)", "a"}), (WarmInvocation{WarmMode::kCode, 3}));
  EXPECT_EQ(Match({"python3", "-I", "-m", "json.tool"}), (WarmInvocation{WarmMode::kModule, 3}));
  EXPECT_EQ(Match({"python3", "-I", "-", "x"}), (WarmInvocation{WarmMode::kStdin, 2}));
  EXPECT_EQ(Match({"python3", "-I"}), (WarmInvocation{WarmMode::kStdin, 2}));
  // A script whose name looks like code is still a script.
  EXPECT_EQ(Match({"python3", "-I", "print(1)"}), (WarmInvocation{WarmMode::kScript, 2}));
}

TEST(WarmInvocation, AnythingElseIsExecd) {
  EXPECT_EQ(Match({"/usr/bin/python3", "-I", "x.py"}), std::nullopt);  // another argv[0]
  EXPECT_EQ(Match({"python3", "x.py"}), std::nullopt);                // not the profile's flags
  EXPECT_EQ(Match({"python3", "-I", "-u", "x.py"}), std::nullopt);    // an extra option
  EXPECT_EQ(Match({"python3", "-I", "-c"}), std::nullopt);            // python's own usage error
  EXPECT_EQ(Match({"python3", "-I", "-m"}), std::nullopt);
  EXPECT_EQ(Match({"python3", "-I", ""}), std::nullopt);
  EXPECT_EQ(Match({"sh", "-c", "true"}), std::nullopt);
  EXPECT_EQ(Match({"python3"}), std::nullopt);
}

TEST(WarmInvocation, MultiWordFlagsMustMatchInOrder) {
  const WarmInterpreter utf8{{"python3", "-I", "-X", "utf8"}, {}};
  EXPECT_EQ(Match({"python3", "-I", "-X", "utf8", "a.py"}, utf8), (WarmInvocation{WarmMode::kScript, 4}));
  EXPECT_EQ(Match({"python3", "-X", "utf8", "-I", "a.py"}, utf8), std::nullopt);
  EXPECT_EQ(Match({"python3", "-I", "a.py"}, utf8), std::nullopt);
}

TEST(WarmInvocation, EncodesModeAndIndexForTheRequestHeader) {
  EXPECT_EQ((WarmInvocation{WarmMode::kCode, 3}).Encode(), 2u | (3u << 8));
}

TEST(WarmInterpreterConfig, OnlyPythonWithOptionsAndModuleNames) {
  EXPECT_TRUE(ValidateWarmInterpreter(kPython).ok());
  EXPECT_TRUE(ValidateWarmInterpreter({{"/usr/bin/python3.11", "-I", "-X", "utf8", "-W", "error"}, {"os.path", "_io"}}).ok());
  auto error = [](WarmInterpreter i) { return std::string(ValidateWarmInterpreter(i).message()); };
  EXPECT_TRUE(absl::StrContains(error({{"Rscript2"}, {}}), "only Python")) << error({{"Rscript2"}, {}});
  EXPECT_TRUE(absl::StrContains(error({{"pythonista"}, {}}), "only Python"));
  EXPECT_TRUE(absl::StrContains(error({{}, {}}), "needs an argv"));
  EXPECT_TRUE(absl::StrContains(error({{"python3", "script.py"}, {}}), "'script.py'"));
  EXPECT_TRUE(absl::StrContains(error({{"python3", "-c"}, {}}), "'-c'"));
  EXPECT_TRUE(absl::StrContains(error({{"python3"}, {"os;import sys"}}), "'os;import sys' is not a module name"));
  EXPECT_TRUE(absl::StrContains(error({{"python3"}, {"a..b"}}), "not a module name"));
  EXPECT_TRUE(absl::StrContains(error({{"python3"}, {"1abc"}}), "not a module name"));
}

TEST(WarmInterpreterConfig, TheCommandLineCarriesTheBootstrapAndItsArguments) {
  std::vector<std::string> argv = WarmCommandLine(kPython, kWarmSocketFd);
  ASSERT_EQ(argv.size(), 6u);
  EXPECT_EQ(argv[0], "python3");
  EXPECT_EQ(argv[1], "-I");
  EXPECT_EQ(argv[2], "-c");
  EXPECT_TRUE(absl::StrContains(argv[3], "def _cubicle_bootstrap"));
  EXPECT_EQ(argv[4], "3");
  EXPECT_EQ(argv[5], "json");
}

const WarmInterpreter kRscript{{"Rscript", "--vanilla"}, {"jsonlite"}};

TEST(WarmRInvocation, ScriptExpressionsStdinAndTheSkillLauncherAreWarm) {
  EXPECT_EQ(Match({"Rscript", "--vanilla", "skill.R", "a"}, kRscript), (WarmInvocation{WarmMode::kScript, 2}));
  EXPECT_EQ(Match({"Rscript", "--vanilla", "-e", "1", "-e", "2", "a"}, kRscript),
            (WarmInvocation{WarmMode::kCode, 2}));
  EXPECT_EQ(Match({"Rscript", "--vanilla", "-", "a"}, kRscript), (WarmInvocation{WarmMode::kStdin, 2}));
  EXPECT_EQ(Match({"/bin/sh", "-c", RSkillLauncher(), "skill", "cat(1)"}, kRscript),
            (WarmInvocation{WarmMode::kRSkill, 4}));
  const WarmInterpreter r{{"R", "--vanilla", "--slave"}, {}};
  EXPECT_EQ(Match({"R", "--vanilla", "--slave"}, r), (WarmInvocation{WarmMode::kStdin, 3}));
}

TEST(WarmRInvocation, AnythingElseIsExecd) {
  EXPECT_EQ(Match({"Rscript", "--vanilla"}, kRscript), std::nullopt);  // Rscript's own usage message
  EXPECT_EQ(Match({"Rscript", "--vanilla", "-e"}, kRscript), std::nullopt);
  EXPECT_EQ(Match({"Rscript", "--vanilla", "--verbose", "x.R"}, kRscript), std::nullopt);
  EXPECT_EQ(Match({"Rscript", "x.R"}, kRscript), std::nullopt);
  EXPECT_EQ(Match({"/usr/bin/Rscript", "--vanilla", "x.R"}, kRscript), std::nullopt);
  EXPECT_EQ(Match({"python3", "-I", "x.py"}, kRscript), std::nullopt);
  // The launcher is Rscript --vanilla's: another interpreter's flags would
  // make the launcher's exec and the warm run differ.
  const WarmInterpreter quiet{{"Rscript", "--vanilla", "--quiet"}, {}};
  EXPECT_EQ(Match({"/bin/sh", "-c", RSkillLauncher(), "skill", "cat(1)"}, quiet), std::nullopt);
  EXPECT_EQ(Match({"/bin/sh", "-c", "exec Rscript --vanilla \"$1\"", "skill", "x.R"}, kRscript), std::nullopt);
  const WarmInterpreter r{{"R", "--vanilla", "--slave"}, {}};
  EXPECT_EQ(Match({"R", "--vanilla", "--slave", "-f", "x.R"}, r), std::nullopt);
}

TEST(WarmRInterpreterConfig, StartUpOptionsAndPackageNamesOnly) {
  EXPECT_TRUE(ValidateWarmInterpreter(kRscript).ok());
  EXPECT_TRUE(ValidateWarmInterpreter({{"/usr/bin/R", "--vanilla", "--slave"}, {"stats4", "data.table"}}).ok());
  auto error = [](WarmInterpreter i) { return std::string(ValidateWarmInterpreter(i).message()); };
  EXPECT_TRUE(absl::StrContains(error({{"Rscript", "-e"}, {}}), "'-e'"));
  EXPECT_TRUE(absl::StrContains(error({{"Rscript", "--file=x.R"}, {}}), "'--file=x.R'"));
  EXPECT_TRUE(absl::StrContains(error({{"Rscript", "x.R"}, {}}), "'x.R'"));
  EXPECT_TRUE(absl::StrContains(error({{"Rscript"}, {"json lite"}}), "not an R package name"));
  EXPECT_TRUE(absl::StrContains(error({{"Rscript"}, {"1pkg"}}), "not an R package name"));
  EXPECT_TRUE(absl::StrContains(error({{"Rscript"}, {"pkg."}}), "not an R package name"));
  EXPECT_TRUE(absl::StrContains(error({{"Rscript"}, {"x);system('id'"}}), "not an R package name"));
  EXPECT_TRUE(IsPreloadName(kRscript, "data.table"));
  EXPECT_FALSE(IsPreloadName(kRscript, "os.path."));
  EXPECT_TRUE(IsPreloadName(kPython, "os.path"));
}

TEST(WarmRInterpreterConfig, TheCommandLineCarriesTheBootstrapAndItsArguments) {
  std::vector<std::string> argv = WarmCommandLine(kRscript, kWarmSocketFd);
  ASSERT_EQ(argv.size(), 6u);
  EXPECT_EQ(argv[2], "-e");
  EXPECT_TRUE(absl::StrContains(argv[3], "cubicle_r_serve")) << argv[3];
  EXPECT_LT(argv[3].size(), 10000u) << "Rscript -e keeps no more";
  EXPECT_EQ(argv[4], "3");
  EXPECT_EQ(argv[5], "jsonlite");
  argv = TemplateCommandLine({{"R", "--vanilla", "--slave"}, {}}, kWarmSocketFd, kTemplateOwnerFd);
  ASSERT_EQ(argv.size(), 9u);
  EXPECT_EQ(argv[5], "--args");  // R, unlike Rscript, needs it before the bootstrap's arguments
  EXPECT_EQ(argv[6], "template");
  EXPECT_EQ(argv[7], "3");
  EXPECT_EQ(argv[8], "4");
}

// The library is embedded whole: a shared object of this machine, which
// exports the bootstrap's three entry points.
TEST(WarmRLibrary, IsAnEmbeddedSharedObjectWithItsEntryPoints) {
  const std::string_view library = RLibrary();
  ASSERT_GT(library.size(), sizeof(Elf64_Ehdr));
  EXPECT_EQ(library.substr(0, 4), std::string_view(ELFMAG, SELFMAG));
  Elf64_Ehdr header;
  std::memcpy(&header, library.data(), sizeof(header));
  EXPECT_EQ(header.e_type, ET_DYN);
  for (const char* symbol : {"cubicle_r_serve", "cubicle_r_template", "cubicle_r_fail", "ptr_R_ReadConsole"}) {
    EXPECT_NE(library.find(symbol), std::string_view::npos) << symbol;
  }
  const int fd = RLibraryMemfd();
  ASSERT_GE(fd, 0) << -fd;
  EXPECT_EQ(::lseek(fd, 0, SEEK_END), static_cast<off_t>(library.size()));
  EXPECT_LT(::write(fd, "x", 1), 0) << "the memfd is sealed against writes";
  ::close(fd);
}

}  // namespace
}  // namespace cubicle::runtime
