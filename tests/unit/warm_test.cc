// runtime/warm.h: which requests a warm Python serves without exec'ing, and
// which interpreter configurations are accepted.
#include "runtime/warm.h"

#include <gtest/gtest.h>

#include "absl/strings/match.h"

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
  EXPECT_TRUE(absl::StrContains(error({{"Rscript"}, {}}), "only Python")) << error({{"Rscript"}, {}});
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

}  // namespace
}  // namespace cubicle::runtime
