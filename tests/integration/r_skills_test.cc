// R skills by name through `cubicle serve` (docs/skills.md, "R"): a skill
// answering JSON-RPC over stdio (with jsonlite where the host has it, a
// hand-written reading of one request shape otherwise), an R error as a
// clean failure carrying R's own message, the profile's limits and its
// lack of network, an environment with an interpreter of its own
// masking the host's R, and `requires` naming R packages, checked against
// the R libraries the profile shows before anything runs. Skipped where
// the host has no R (CI installs none): `apt-get install r-base-core
// r-cran-jsonlite` runs them.
#include <arpa/inet.h>
#include <limits.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "base/unique_fd.h"
#include "tests/integration/skills_fixture.h"

namespace cubicle::test_support {
namespace {

namespace fs = std::filesystem;

// Reads one request and answers with the mean, sd and count of its
// params.numbers, which reader it used, and what commandArgs(TRUE) held.
constexpr char kSummary[] = R"r(con <- file("stdin")
open(con)
line <- readLines(con, n = 1L)
if (requireNamespace("jsonlite", quietly = TRUE)) {
  request <- jsonlite::fromJSON(line)
  id <- request$id
  x <- as.numeric(request$params$numbers)
} else {
  # The one shape this skill takes: {"id": N, ... "numbers": [a, b, ...]}.
  id <- sub('.*"id": *([0-9]+).*', "\\1", line)
  inside <- sub('.*"numbers": *\\[([^]]*)\\].*', "\\1", line)
  x <- as.numeric(strsplit(inside, ",")[[1]])
}
# Started by a warm R's bootstrap (its command line is the template's),
# or by the launcher's own Rscript.
cmdline <- readBin("/proc/self/cmdline", "raw", 1e6)
warm <- grepl("cubicle_r_", rawToChar(replace(cmdline, cmdline == as.raw(0), as.raw(32))), fixed = TRUE)
cat(sprintf('{"jsonrpc":"2.0","id":%s,"result":{"mean":%.10g,"sd":%.10g,"n":%d,"jsonlite":%s,"args":%d,"warm":%s}}\n',
            id, mean(x), sd(x), length(x), tolower(requireNamespace("jsonlite", quietly = TRUE)),
            length(commandArgs(TRUE)), tolower(warm)))
)r";

constexpr char kBoom[] = "line <- readLines(file(\"stdin\"), n = 1L)\nx <- 1\nstop(\"boom\")\n";

// Reads its request, then tries the host's listener at params.port and,
// asked for it, more memory than its limit allows.
constexpr char kReach[] = R"r(line <- readLines(file("stdin"), n = 1L)
port <- as.integer(sub('.*"port": *([0-9]+).*', "\\1", line))
net <- tryCatch({
  s <- socketConnection(host = "127.0.0.1", port = port, open = "r+", blocking = TRUE, timeout = 2)
  close(s)
  "connected"
}, error = function(e) conditionMessage(e), warning = function(w) conditionMessage(w))
if (grepl("hog", line)) x <- numeric(64e6)  # 512 MB, every page written
cat(sprintf('{"jsonrpc":"2.0","id":1,"result":{"net":"%s"}}\n', gsub('"', "'", net)))
)r";

// Reads its request, leaves a mark where the test sees it, and answers.
constexpr char kMarks[] = R"r(line <- readLines(file("stdin"), n = 1L)
file.create("/mark/ran")
cat('{"jsonrpc":"2.0","id":1,"result":{"ran":true}}\n')
)r";

// The r profile's route: cold (R started for each call), warm with a
// template (each zygote's R a fork of one), warm with an R per zygote.
struct RRoute {
  const char* name;
  const char* interpreter;  // the profile's "interpreter" member, or ""
};
constexpr RRoute kRRoutes[] = {
    {"Cold", ""},
    {"WarmTemplate", R"(, "interpreter": {"argv": ["Rscript", "--vanilla"]})"},
    {"WarmOwn", R"(, "interpreter": {"argv": ["Rscript", "--vanilla"], "template": false})"},
};

class RSkills : public Skills, public ::testing::WithParamInterface<RRoute> {
 protected:
  void SetUp() override {
    Skills::SetUp();  // first: its TearDown, which runs after a skip too, checks what it saw
    if (::access("/usr/bin/Rscript", X_OK) != 0 || ::access("/etc/R", R_OK) != 0) {
      GTEST_SKIP() << "the host has no R (/usr/bin/Rscript, /etc/R): apt-get install r-base-core";
    }
    envs_ = dir_.Join("environments");
    ASSERT_EQ(::mkdir(envs_.c_str(), 0755), 0);
    ASSERT_EQ(::chmod(mark_.path().c_str(), 0777), 0);  // the sandbox user writes its mark there
  }

  SocketDaemon& StartR() {
    return Start({}, absl::StrCat(R"("environments": {"dir": )", Quoted(envs_), "},"),
                 absl::StrCat(R"(, "r": {"seccomp": "no-network", "binds": [{"source": "/etc/R", "dest": "/etc/R"},
                           {"source": )", Quoted(mark_.path()), R"(, "dest": "/mark", "readonly": false}],
                           "limits": {"memory": "256M", "pids": 64}, "timeout_ms": 30000,
                           "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8})",
                              GetParam().interpreter, "}"));
  }

  void RSkill(const std::string& name, const std::string& script, const std::string& more = "") {
    Put(name + "/skill.yaml", absl::StrCat("name: ", name, "\nversion: 1.0.0\nentry: main.R\n", more));
    Put(name + "/main.R", script);
  }

  // sci@1: an environment with a python3 of its own (a copy of the
  // host's), which masks the host's interpreters, R among them.
  void PutOwnPython() {
    const std::string one = envs_ + "/sci/1";
    for (const std::string& d : {envs_ + "/sci", one, one + "/bin"}) ::mkdir(d.c_str(), 0755);
    ASSERT_TRUE(WriteFile(one + "/environment.json", R"({"description": "its own python"})"));
    ASSERT_TRUE(WriteFile(one + "/pyvenv.cfg", "home = /usr/bin\ninclude-system-site-packages = false\n"));
    char real[PATH_MAX];
    ASSERT_NE(::realpath("/usr/bin/python3", real), nullptr);
    fs::copy_file(real, one + "/bin/python3");
    ASSERT_EQ(::chmod((one + "/bin/python3").c_str(), 0755), 0);
  }

  json::value SkillCall(const std::string& skill, const std::string& params) {
    return Call("skill.call",
                absl::StrCat(R"({"skill": )", Quoted(skill), R"(, "method": "m", "params": )", params, "}"));
  }

  bool Marked() const { return ::access(mark_.Join("ran").c_str(), F_OK) == 0; }

  std::string envs_;
  TempDir mark_;
};

// The Version: of the host's installed R package `name`, or "".
std::string HostRPackageVersion(const std::string& name) {
  std::ifstream description("/usr/lib/R/site-library/" + name + "/DESCRIPTION");
  std::string line;
  while (std::getline(description, line)) {
    if (absl::StartsWith(line, "Version:")) return std::string(absl::StripAsciiWhitespace(line.substr(8)));
  }
  return "";
}

TEST_P(RSkills, AnRSkillAnswersJsonRpcOverStdio) {
  RSkill("r-summary", kSummary);
  // Past the 10000 bytes at which Rscript -e would stop reading.
  std::string padded;
  while (padded.size() < (64 << 10)) padded += "# a line of comment that pads the script past what -e takes\n";
  RSkill("r-padded", padded + kSummary);
  ASSERT_TRUE(StartR().up()) << Log();
  const bool warm = GetParam().interpreter[0] != '\0';

  json::value described = Result("skill.describe", R"({"name": "r-summary"})");
  ASSERT_TRUE(described.is_object());
  EXPECT_EQ(Str(described.at("interpreter")), "r");
  EXPECT_EQ(Str(described.at("profile")), "r");
  EXPECT_EQ(described.at("warm"), warm);

  ASSERT_TRUE(Quiet("r", 1)) << Log();
  json::value reply = SkillCall("r-summary", R"({"numbers": [1, 2, 3, 4]})");
  ASSERT_TRUE(HasResult(reply)) << json::serialize(reply) << Log();
  EXPECT_EQ(reply.at("result").at("result").at("warm"), warm) << json::serialize(reply);
  const json::value& result = reply.at("result").at("result");
  EXPECT_EQ(result.at("mean").to_number<double>(), 2.5);
  EXPECT_NEAR(result.at("sd").to_number<double>(), 1.2909944487, 1e-9);
  EXPECT_EQ(result.at("n"), 4);
  EXPECT_EQ(result.at("args"), 0) << "commandArgs(TRUE) is the skill's own";
  EXPECT_EQ(Str(reply.at("result").at("profile")), "r");

  json::value padded_reply = SkillCall("r-padded", R"({"numbers": [5, 7]})");
  ASSERT_TRUE(HasResult(padded_reply)) << json::serialize(padded_reply);
  EXPECT_EQ(padded_reply.at("result").at("result").at("mean").to_number<double>(), 6.0);
}

TEST_P(RSkills, AnRErrorIsACleanFailureWithItsMessage) {
  RSkill("boom", kBoom);
  ASSERT_TRUE(StartR().up()) << Log();
  json::value reply = SkillCall("boom", "{}");
  ASSERT_EQ(ErrorCode(reply), -32007) << json::serialize(reply);
  const std::string tail = Str(reply.at("error").at("data").at("stderr_tail"));
  EXPECT_TRUE(absl::StrContains(tail, "Error: boom")) << tail;
  EXPECT_FALSE(absl::StrContains(tail, "eval(")) << "R's own top-level message:\n" << tail;
  EXPECT_EQ(reply.at("error").at("data").at("status"), 1);
}

TEST_P(RSkills, TheProfilesLimitsAndNoNetworkApply) {
  // A listener on the host's loopback, which a skill with a network would reach.
  UniqueFd listener(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(listener) << errno;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0) << errno;
  ASSERT_EQ(::listen(listener.get(), 4), 0) << errno;
  ASSERT_EQ(::getsockname(listener.get(), reinterpret_cast<sockaddr*>(&address), &length), 0) << errno;
  const std::string port = std::to_string(ntohs(address.sin_port));

  RSkill("reach", kReach, "limits: {memory: 128M}\n");
  ASSERT_TRUE(StartR().up()) << Log();
  json::value fine = SkillCall("reach", absl::StrCat(R"({"port": )", port, "}"));
  ASSERT_TRUE(HasResult(fine)) << json::serialize(fine) << Log();
  const std::string net = Str(fine.at("result").at("result").at("net"));
  EXPECT_NE(net, "connected");
  EXPECT_FALSE(net.empty());

  json::value hog = SkillCall("reach", absl::StrCat(R"({"hog": true, "port": )", port, "}"));
  ASSERT_EQ(ErrorCode(hog), -32007) << json::serialize(hog);
  EXPECT_EQ(Str(hog.at("error").at("data").at("reason")), "oom") << json::serialize(hog);
}

TEST_P(RSkills, AnEnvironmentWithItsOwnInterpreterMasksTheHostsR) {
  PutOwnPython();
  RSkill("r-in-sci", kSummary, "environment: sci\n");
  ASSERT_TRUE(StartR().up()) << Log();
  const std::string probe =
      R"("argv": ["/bin/sh", "-c", "if [ -s /usr/bin/Rscript ] && [ -s /usr/bin/R ]; then echo shown; else echo masked; fi"])";
  EXPECT_EQ(Str(Result("sandbox.run", absl::StrCat(R"({"profile": "r", )", probe, "}")).at("stdout")), "shown\n");
  json::value in_sci = Result("sandbox.run", absl::StrCat(R"({"profile": "r", "environment": "sci", )", probe, "}"));
  EXPECT_EQ(Str(in_sci.at("stdout")), "masked\n") << json::serialize(in_sci);

  // An R skill there finds no R: a clean failure, not the host's R.
  json::value reply = SkillCall("r-in-sci", R"({"numbers": [1, 2]})");
  ASSERT_EQ(ErrorCode(reply), -32007) << json::serialize(reply);
  EXPECT_TRUE(absl::StrContains(Str(reply.at("error").at("data").at("stderr_tail")), "Rscript"))
      << json::serialize(reply);
}

TEST_P(RSkills, RequiresNamesRPackagesCheckedBeforeAnythingRuns) {
  RSkill("needs-absent", kMarks, "requires: [cubicleNoSuchPackage, stats >= 3.0]\n");
  RSkill("needs-newer", kMarks, "requires: [jsonlite >= 99]\n");
  RSkill("needs-jsonlite", kMarks, "requires: [jsonlite >= 1.0, stats >= 3.0]\n");
  ASSERT_TRUE(StartR().up()) << Log();

  // stats is in R's own library (/usr/lib/R/library), which is searched too.
  json::value reply = SkillCall("needs-absent", "{}");
  ASSERT_EQ(ErrorCode(reply), -32009) << json::serialize(reply);
  EXPECT_EQ(Str(reply.at("error").at("message")), "package cubicleNoSuchPackage not available (not installed)");
  const json::value& data = reply.at("error").at("data");
  EXPECT_EQ(Str(data.at("profile")), "r");
  ASSERT_EQ(data.at("unmet").as_array().size(), 1u) << json::serialize(data);
  EXPECT_EQ(Str(data.at("unmet").at(0).at("package")), "cubicleNoSuchPackage");
  EXPECT_EQ(data.at("unmet").at(0).at("installed"), nullptr);
  EXPECT_FALSE(Marked()) << "nothing ran";

  const std::string jsonlite = HostRPackageVersion("jsonlite");
  if (jsonlite.empty()) {
    GTEST_SKIP() << "the host has no /usr/lib/R/site-library/jsonlite: apt-get install r-cran-jsonlite";
  }
  reply = SkillCall("needs-newer", "{}");
  ASSERT_EQ(ErrorCode(reply), -32009) << json::serialize(reply);
  EXPECT_EQ(Str(reply.at("error").at("message")),
            absl::StrCat("package jsonlite not available (need >= 99, have ", jsonlite, ")"));
  EXPECT_EQ(Str(reply.at("error").at("data").at("unmet").at(0).at("installed")), jsonlite);
  EXPECT_FALSE(Marked()) << "nothing ran";

  json::value ran = SkillCall("needs-jsonlite", "{}");
  ASSERT_TRUE(HasResult(ran)) << json::serialize(ran) << Log();
  EXPECT_EQ(ran.at("result").at("result").at("ran"), true);
  EXPECT_TRUE(Marked());
}

INSTANTIATE_TEST_SUITE_P(Routes, RSkills, ::testing::ValuesIn(kRRoutes),
                         [](const ::testing::TestParamInfo<RRoute>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace cubicle::test_support
