// The operator metrics as a scraper sees them: on `--metrics tcp:` (and
// the HTTP front's /metrics), counters that move with what the test does —
// sessions archived and restored with their bytes, admission rejections by
// reason, fork-server and warm-template health — and the whole text
// accepted by Prometheus' own `promtool check metrics` where it is
// installed.
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <regex>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/http_client.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

// The port `--metrics tcp:127.0.0.1:0` bound, from the daemon's info line
// "serving metrics on 127.0.0.1:PORT"; 0 when it has not said so in 20 s.
uint16_t MetricsPort(RunningProcess& daemon) {
  static const std::regex kLine(R"(serving metrics on 127\.0\.0\.1:(\d+))");
  for (int i = 0; i < 1000; ++i) {
    std::smatch m;
    const std::string err = daemon.StderrSoFar();
    if (std::regex_search(err, m, kLine)) return static_cast<uint16_t>(std::stoi(m[1]));
    absl::SleepFor(absl::Milliseconds(20));
  }
  return 0;
}

// One scrape of the metrics listener on `port`: the body, "" when none came.
std::string Scrape(uint16_t port) {
  HttpClient c(port);
  if (!c.connected()) return "";
  std::optional<HttpReply> reply = c.Request("GET", "/metrics");
  return reply.has_value() && reply->status == 200 ? reply->body : "";
}

// The value of the sample `series` (name and labels, exactly as written) in
// `text`; -1 when there is none.
double Sample(const std::string& text, const std::string& series) {
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (!absl::ConsumePrefix(&line, series) || !absl::ConsumePrefix(&line, " ")) continue;
    double v = 0;
    if (absl::SimpleAtod(line, &v)) return v;
  }
  return -1;
}

// Scrapes until `series` reaches `at_least` (every 50 ms, at most 20 s);
// the last text.
std::string ScrapeUntil(uint16_t port, const std::string& series, double at_least) {
  std::string text;
  for (int i = 0; i < 400; ++i) {
    text = Scrape(port);
    if (Sample(text, series) >= at_least) break;
    absl::SleepFor(absl::Milliseconds(50));
  }
  return text;
}

// promtool(1), from Debian's prometheus package: in PATH or where
// scripts/install-deps.sh puts it. "" when absent.
std::string Promtool() {
  for (const char* path : {"/usr/bin/promtool", "/usr/local/bin/promtool"}) {
    if (::access(path, X_OK) == 0) return path;
  }
  return "";
}

class OperatorMetrics : public SessionDaemonTest {};

TEST_F(OperatorMetrics, SessionsAndRejectionsAreCountedAndPromtoolAcceptsTheText) {
  // The info line names the bound port.
  std::string config = SessionConfig(StateMembers());
  config.insert(1, R"("log": {"level": "info"}, )");
  SocketDaemon& d = StartDaemon(config, {"--metrics", "tcp:127.0.0.1:0"});
  ASSERT_TRUE(d.up()) << d.process().StderrSoFar();
  const uint16_t port = MetricsPort(d.process());
  ASSERT_NE(port, 0) << d.process().StderrSoFar();
  const std::string before = Scrape(port);
  ASSERT_FALSE(before.empty());
  EXPECT_EQ(Sample(before, "cubicle_sessions_live"), 0) << before;
  EXPECT_EQ(Sample(before, R"(cubicle_admission_rejections_total{reason="busy"})"), 0) << before;

  DaemonClient c(d.socket());
  ASSERT_TRUE(HasResult(Create(c, "m1")));
  ASSERT_TRUE(HasResult(Put(c, "m1", "data.txt", std::string(64 << 10, 'x'))));
  EXPECT_EQ(Sample(Scrape(port), "cubicle_sessions_live"), 1);

  // A writer holds the workspace; one that will not wait is refused busy.
  boost::json::value held = Call(c, "exec.start", R"({"session": "m1", "argv": ["sleep", "2"]})");
  ASSERT_TRUE(HasResult(held)) << held;
  boost::json::value refused = Exec(c, "m1", "true", R"(, "wait": false)");
  EXPECT_EQ(ErrorCode(refused), -32000) << refused;
  EXPECT_EQ(Sample(Scrape(port), R"(cubicle_admission_rejections_total{reason="busy"})"), 1);
  boost::json::value waited =
      Call(c, "exec.wait", absl::StrCat(R"({"exec_id": )", Quoted(Str(held.at("result").at("exec_id"))), "}"));
  ASSERT_TRUE(HasResult(waited)) << waited;

  // Archived on destroy, restored on the next create.
  ASSERT_TRUE(HasResult(Destroy(c, "m1", /*archive=*/true)));
  const std::string archived = Scrape(port);
  EXPECT_EQ(Sample(archived, "cubicle_sessions_live"), 0) << archived;
  EXPECT_EQ(Sample(archived, R"(cubicle_session_archives_total{result="ok"})"), 1) << archived;
  EXPECT_GT(Sample(archived, "cubicle_session_archived_bytes_total"), 0) << archived;
  ASSERT_TRUE(HasResult(Create(c, "m1")));
  const std::string restored = Scrape(port);
  EXPECT_EQ(Sample(restored, R"(cubicle_session_restores_total{result="ok"})"), 1) << restored;
  EXPECT_EQ(Sample(restored, "cubicle_session_restored_bytes_total"),
            Sample(restored, "cubicle_session_archived_bytes_total"))
      << restored;
  EXPECT_EQ(Sample(restored, "cubicle_sessions_live"), 1);

  // Zygotes made by fork servers: one per refill thread, alive.
  const std::string healthy = ScrapeUntil(port, R"(cubicle_pool_makers_alive{pool="shell"})", 2);
  EXPECT_EQ(Sample(healthy, R"(cubicle_pool_makers_alive{pool="shell"})"),
            Sample(healthy, R"(cubicle_pool_makers_wanted{pool="shell"})"))
      << healthy;
  EXPECT_EQ(Sample(healthy, R"(cubicle_pool_consecutive_build_failures{pool="shell"})"), 0) << healthy;

  const std::string promtool = Promtool();
  if (promtool.empty()) {
    GTEST_SKIP() << "promtool is not installed (Debian's prometheus package; scripts/install-deps.sh unpacks it): "
                    "the text was not linted";
  }
  TempDir dir;
  const std::string file = dir.Join("metrics.prom");
  WriteFile(file, healthy);
  ProcessRun lint = RunProcess({"/bin/sh", "-c", absl::StrCat(promtool, " check metrics < ", file)});
  EXPECT_EQ(lint.exit_code, 0) << lint.out << lint.err;
  EXPECT_EQ(lint.out + lint.err, "") << "promtool's lint found problems";
}

TEST(MetricsListener, OffLoopbackItNeedsAllowNoAuth) {
  TempDir dir;
  const std::string socket = dir.Join("rpc.sock");
  ProcessRun run = RunCubicle({"serve", "--socket", socket, "--metrics", "tcp:0.0.0.0:0"});
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_TRUE(absl::StrContains(run.err, "not a loopback address")) << run.err;
  EXPECT_NE(::access(socket.c_str(), F_OK), 0) << "the socket was left behind";
  ProcessRun bad = RunCubicle({"serve", "--socket", socket, "--metrics", "tcp:127.0.0.1"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_TRUE(absl::StrContains(bad.err, "--metrics 'tcp:127.0.0.1'")) << bad.err;
}

TEST(MetricsListener, UnauthenticatedHttpRequestsAreCountedAsRejections) {
  TempDir dir;
  const std::string keys = dir.Join("keys.json");
  WriteFile(keys, R"({"keys": [{"name": "ops", "key": "k-0123456789abcdef0123456789abcdef"}]})");
  ::chmod(keys.c_str(), 0600);
  HttpDaemon daemon({"--config", WriteConfig(dir, R"({"profiles": {"shell": {"pool": {"min_idle": 1}}}})"),
                     "--keys-file", keys});
  ASSERT_TRUE(daemon.up());
  HttpClient c(daemon.port());
  for (int i = 0; i < 3; ++i) {
    std::optional<HttpReply> r = c.Request("POST", "/rpc", RpcBody(i, "health"), {{"Authorization", "Bearer nope"}});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, 401);
  }
  std::optional<HttpReply> m =
      c.Request("GET", "/metrics", "", {{"Authorization", "Bearer k-0123456789abcdef0123456789abcdef"}});
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(Sample(m->body, R"(cubicle_admission_rejections_total{reason="unauthenticated"})"), 3) << m->body;
}

TEST(MetricsListener, WarmTemplatesAreCounted) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3 for the warm python profile";
  if (::geteuid() != 0) GTEST_SKIP() << "warm templates are made by fork servers as root";
  TempDir dir;
  // The built-in configuration: its python profile is warm.
  SocketDaemon d(SocketDaemon::Options{{"--metrics", "tcp:127.0.0.1:0"}, std::nullopt, {"CUBICLE_LOG_LEVEL=info"}});
  ASSERT_TRUE(d.up()) << d.process().StderrSoFar();
  const uint16_t port = MetricsPort(d.process());
  ASSERT_NE(port, 0);
  const std::string text = ScrapeUntil(port, R"(cubicle_pool_template_starts_total{pool="python"})", 1);
  EXPECT_GE(Sample(text, R"(cubicle_pool_template_starts_total{pool="python"})"), 1) << text;
  EXPECT_EQ(Sample(text, R"(cubicle_pool_template_deaths_total{pool="python"})"), 0) << text;
  EXPECT_EQ(Sample(text, R"(cubicle_pool_template_starts_total{pool="shell"})"), 0) << "shell has no template";
  EXPECT_EQ(d.Stop().exit_code, 0);
}

}  // namespace
}  // namespace cubicle::test_support
