// `cubicle serve` reloading its configuration on SIGHUP (docs/config.md,
// "Reloading"): profiles added, removed, replaced and resized for new
// requests while those in flight finish as they began; a bad configuration
// refused whole with the old one kept; HTTP keys swapped; nothing lost
// under load; the teardown after a reload as complete as without one; and
// a preload module that cannot be imported refused before anything serves.
// Waits are bounds for failures; nothing asserts how long anything took.
#include <signal.h>
#include <sys/stat.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/cgroup_host.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/http_client.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// A profile with limits (so every sandbox has its groups) and a small pool;
// `more` adds members ("\"env\": {...}").
std::string Shell(int min_idle = 1, int max_idle = 2, const std::string& more = "") {
  return absl::StrCat(R"({"limits": {"memory": "256M", "pids": 64}, "pool": {"min_idle": )", min_idle,
                      R"(, "max_idle": )", max_idle, R"(, "max_total": 8})", more.empty() ? "" : ", ", more, "}");
}

// {"profiles": {NAME: PROFILE, ...}}.
std::string Profiles(const std::vector<std::pair<std::string, std::string>>& profiles) {
  std::vector<std::string> members;
  for (const auto& [name, profile] : profiles) members.push_back(absl::StrCat(Quoted(name), ": ", profile));
  return absl::StrCat(R"({"profiles": {)", absl::StrJoin(members, ", "), "}}");
}

// A warm python profile that preloads json and `module`.
std::string Python(const std::string& module) {
  return absl::StrCat(R"({"interpreter": {"argv": ["python3", "-I"], "preload": ["json", )", Quoted(module), "]}}");
}

constexpr char kNoSuchModule[] = "cubicle_no_such_module_for_reload";

std::string RunLine(int64_t id, const std::string& profile, const std::vector<std::string>& argv) {
  std::vector<std::string> quoted;
  for (const std::string& a : argv) quoted.push_back(Quoted(a));
  return RequestLine(id, "sandbox.run",
                     absl::StrCat(R"({"profile":)", Quoted(profile), R"(,"argv":[)", absl::StrJoin(quoted, ","), "]}"));
}

std::string Stdout(const json::value& reply) {
  return HasResult(reply) ? Str(reply.at("result").at("stdout")) : json::serialize(reply);
}

// Writes `text` to `path` whole (a rename): a reload never reads half a file.
void Replace(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".new";
  ASSERT_TRUE(WriteFile(tmp, text));
  ASSERT_EQ(std::rename(tmp.c_str(), path.c_str()), 0) << path;
}

class ConfigReload : public HostHygieneTest {
 protected:
  void SetUp() override {
    HostHygieneTest::SetUp();
    // The mount table compared is this test's own, where only what its
    // daemon mounts shows: other processes' daemons mount session
    // workspaces under /tmp on the host, and remove them, at any time.
    if (IsRoot()) {
      EnterPrivateMountNamespace();
      DetachMountsUnder("/tmp");
    }
  }

  void TearDown() override {
    if (daemon_ != nullptr && daemon_->process().started()) daemon_->Stop();
    daemon_.reset();
    HostHygieneTest::TearDown();
  }

  // A daemon on config.json, holding `text`, logging at info.
  SocketDaemon& Start(const std::string& text, const std::vector<std::string>& more_flags = {}) {
    config_ = WriteConfig(dir_, text);
    std::vector<std::string> flags = {"--config", config_};
    flags.insert(flags.end(), more_flags.begin(), more_flags.end());
    daemon_ = std::make_unique<SocketDaemon>(SocketDaemon::Options{flags, std::nullopt, {"CUBICLE_LOG_LEVEL=info"}});
    return *daemon_;
  }

  json::value Call(const std::string& line) { return daemon_->Call(line); }
  json::value Health() {
    json::value reply = Call(RequestLine(++id_, "health"));
    return HasResult(reply) ? reply.at("result") : json::value(nullptr);
  }
  int64_t Reloads() {
    json::value health = Health();
    if (!health.is_object()) return -1;
    return health.at("reloads").at("ok").as_int64() + health.at("reloads").at("refused").as_int64();
  }

  // SIGHUP with the config file now holding `text`; the daemon's "reloads"
  // once it has counted this one (null if it never did).
  json::value Reload(const std::string& text) {
    Replace(config_, text);
    const int64_t before = Reloads();
    daemon_->process().Signal(SIGHUP);
    for (int i = 0; i < 3000; ++i) {  // at most 30 s
      if (Reloads() > before) return Health().at("reloads");
      absl::SleepFor(absl::Milliseconds(10));
    }
    return nullptr;
  }

  // Polls (at most 30 s) until health's "reloads.draining" is empty.
  bool DrainedAll() {
    for (int i = 0; i < 3000; ++i) {
      json::value health = Health();
      if (health.is_object() && health.at("reloads").at("draining").as_array().empty()) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  // Polls (at most 30 s) until `pool` holds `idle` ready zygotes.
  bool Warm(const std::string& pool, int64_t idle) {
    for (int i = 0; i < 3000; ++i) {
      json::value stats = Call(RequestLine(++id_, "pool.stats"));
      const json::value* p = HasResult(stats) ? stats.at("result").at("pools").as_object().if_contains(pool) : nullptr;
      if (p != nullptr && p->at("idle").as_int64() >= idle) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  }

  json::value PoolStats(const std::string& pool) {
    json::value stats = Call(RequestLine(++id_, "pool.stats"));
    if (!HasResult(stats)) return nullptr;
    const json::value* p = stats.at("result").at("pools").as_object().if_contains(pool);
    return p != nullptr ? *p : json::value(nullptr);
  }

  std::string Log() { return daemon_->process().StderrSoFar(); }

  TempDir dir_;
  std::string config_;
  std::unique_ptr<SocketDaemon> daemon_;
  int64_t id_ = 0;
};

TEST_F(ConfigReload, ANewProfileIsServedAfterSighup) {
  ASSERT_TRUE(Start(Profiles({{"shell", Shell()}})).up());
  json::value before = Call(RunLine(1, "extra", {"echo", "hello"}));
  EXPECT_TRUE(absl::StrContains(ErrorMessage(before), "no profile named 'extra'")) << json::serialize(before);

  json::value reloads = Reload(Profiles({{"shell", Shell()}, {"extra", Shell(0, 1)}}));
  ASSERT_TRUE(reloads.is_object()) << "the reload was never counted\n" << Log();
  EXPECT_EQ(reloads.at("ok"), 1);
  EXPECT_EQ(reloads.at("refused"), 0);
  json::value after = Call(RunLine(2, "extra", {"echo", "hello"}));
  EXPECT_EQ(Stdout(after), "hello\n");
  EXPECT_EQ(after.at("result").at("profile"), "extra");
  EXPECT_TRUE(PoolStats("extra").is_object());
  EXPECT_EQ(Stdout(Call(RunLine(3, "shell", {"echo", "still"}))), "still\n");
  EXPECT_TRUE(absl::StrContains(Log(), "configuration reloaded: profiles added: extra")) << Log();
}

// The execution on the removed profile waits, inside its sandbox, for a
// file the test makes in a bound host directory: it is running when the
// signal comes, and ends only when told.
TEST_F(ConfigReload, ARemovedProfileIsRefusedWhileItsRunningExecutionFinishes) {
  TempDir gate;
  ASSERT_EQ(::chmod(gate.path().c_str(), 0755), 0);  // the sandbox user looks in it
  const std::string doomed = Shell(1, 1, absl::StrCat(R"("binds": [{"source": )", Quoted(gate.path()),
                                                      R"(, "dest": "/gate"}], "timeout_ms": 60000)"));
  ASSERT_TRUE(Start(Profiles({{"shell", Shell()}, {"doomed", doomed}})).up());
  DaemonClient running(daemon_->socket());
  ASSERT_TRUE(running.Send(RunLine(
      1, "doomed", {"sh", "-c", "while [ ! -e /gate/go ]; do sleep 0.02; done; echo finished; exit 7"})));
  bool started = false;
  for (int i = 0; i < 3000 && !started; ++i) {  // at most 30 s
    json::value stats = PoolStats("doomed");
    started = stats.is_object() && stats.at("in_use").as_int64() == 1;
    if (!started) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(started) << "the execution never started";

  json::value reloads = Reload(Profiles({{"shell", Shell()}}));
  ASSERT_TRUE(reloads.is_object()) << Log();
  EXPECT_EQ(reloads.at("ok"), 1);
  EXPECT_EQ(reloads.at("draining"), json::parse(R"(["doomed"])")) << "the pool went before its execution ended";
  json::value refused = Call(RunLine(2, "doomed", {"echo", "no"}));
  EXPECT_TRUE(absl::StrContains(ErrorMessage(refused), "no profile named 'doomed'")) << json::serialize(refused);
  EXPECT_FALSE(PoolStats("doomed").is_object()) << "a removed profile is still in pool.stats";
  EXPECT_FALSE(running.HasReply()) << "the running execution was answered before it ended";

  ASSERT_TRUE(WriteFile(gate.Join("go"), ""));
  std::optional<std::string> line = running.ReadLine();
  ASSERT_TRUE(line.has_value()) << "the running execution was never answered\n" << Log();
  json::value result = ParseJson(*line);
  ASSERT_TRUE(HasResult(result)) << *line;
  EXPECT_EQ(result.at("result").at("reason"), "exited");
  EXPECT_EQ(result.at("result").at("exit_code"), 7);
  EXPECT_EQ(Stdout(result), "finished\n");
  EXPECT_TRUE(DrainedAll()) << "the drained pool was never destroyed";
  EXPECT_TRUE(absl::StrContains(Log(), "profiles removed: doomed")) << Log();
}

// A resize keeps the pool (its counters go on); a changed sandbox gets a
// new pool (counters from zero) whose sandboxes have the new spec.
TEST_F(ConfigReload, PoolSizesResizeInPlaceAndAChangedSandboxReplacesThePool) {
  ASSERT_TRUE(Start(Profiles({{"shell", Shell(1, 2, R"("env": {"MARK": "one"})")}})).up());
  EXPECT_EQ(Stdout(Call(RunLine(1, "shell", {"sh", "-c", "echo $MARK"}))), "one\n");

  ASSERT_TRUE(Reload(Profiles({{"shell", Shell(3, 4, R"("env": {"MARK": "one"})")}})).is_object()) << Log();
  json::value resized = PoolStats("shell");
  ASSERT_TRUE(resized.is_object());
  EXPECT_EQ(resized.at("min_idle"), 3);
  EXPECT_EQ(resized.at("max_idle"), 4);
  EXPECT_EQ(resized.at("hits").as_int64() + resized.at("misses").as_int64(), 1) << "the pool was not resized in place";
  EXPECT_TRUE(Warm("shell", 3)) << "the resized pool never held its new min_idle";
  EXPECT_TRUE(absl::StrContains(Log(), "profiles resized: shell")) << Log();

  ASSERT_TRUE(Reload(Profiles({{"shell", Shell(3, 4, R"("env": {"MARK": "two"})")}})).is_object()) << Log();
  json::value replaced = PoolStats("shell");
  ASSERT_TRUE(replaced.is_object());
  EXPECT_EQ(replaced.at("hits").as_int64() + replaced.at("misses").as_int64(), 0) << "the pool was not replaced";
  EXPECT_EQ(Stdout(Call(RunLine(2, "shell", {"sh", "-c", "echo $MARK"}))), "two\n");
  EXPECT_TRUE(DrainedAll()) << "the replaced pool was never destroyed";
  EXPECT_TRUE(absl::StrContains(Log(), "profiles replaced: shell")) << Log();
}

struct BadConfig {
  const char* name;
  std::string text;
  std::string why;  // in health's last_error and in the log
};

TEST_F(ConfigReload, AnInvalidConfigurationIsRefusedAndTheOldOneKept) {
  const std::string good = Profiles({{"shell", Shell()}});
  ASSERT_TRUE(Start(good).up());
  const std::vector<BadConfig> bad = {
      {"syntax", R"({"profiles": {"shell": )", "invalid JSON at line 1"},
      {"unknown field", Profiles({{"shell", Shell()}, {"extra", R"({"memroy": "1G"})"}}),
       "profiles.extra.memroy: unknown key"},
      {"missing preload", Profiles({{"shell", Shell()}, {"extra", Python(kNoSuchModule)}}),
       absl::StrCat("profiles.extra.interpreter.preload[1]: '", kNoSuchModule, "' cannot be imported")},
      {"restart-only", absl::StrCat(R"({"concurrency": {"max_concurrent": 3}, )", Profiles({{"extra", Shell()}}).substr(1)),
       "only a restart can change concurrency.max_concurrent"},
  };
  int64_t refused = 0;
  for (const BadConfig& b : bad) {
    SCOPED_TRACE(b.name);
    json::value reloads = Reload(b.text);
    ASSERT_TRUE(reloads.is_object()) << Log();
    EXPECT_EQ(reloads.at("refused"), ++refused);
    EXPECT_EQ(reloads.at("ok"), 0);
    EXPECT_TRUE(absl::StrContains(Str(reloads.at("last_error")), b.why)) << Str(reloads.at("last_error"));
    EXPECT_EQ(Stdout(Call(RunLine(1, "shell", {"echo", "kept"}))), "kept\n");
    EXPECT_EQ(ErrorCode(Call(RunLine(2, "extra", {"echo", "no"}))), -32004) << "a refused profile is served";
    const std::string log = Log();
    EXPECT_TRUE(absl::StrContains(log, "configuration reload refused, the running configuration is kept: ") &&
                absl::StrContains(log, b.why))
        << log;
  }
}

TEST_F(ConfigReload, SighupNeitherEndsTheDaemonNorLeavesAnythingAfterSigterm) {
  ASSERT_TRUE(Start(Profiles({{"shell", Shell(1, 2, R"("env": {"MARK": "one"})")}})).up());
  ASSERT_TRUE(Reload(Profiles({{"shell", Shell(1, 2, R"("env": {"MARK": "two"})")}, {"extra", Shell(1, 1)}}))
                  .is_object())
      << Log();
  struct stat st;
  EXPECT_EQ(::stat(daemon_->socket().c_str(), &st), 0) << "SIGHUP removed the socket";
  EXPECT_EQ(Stdout(Call(RunLine(1, "extra", {"echo", "alive"}))), "alive\n");
  ASSERT_TRUE(Warm("shell", 1) && Warm("extra", 1)) << "the pools never filled";

  // The groups are named after the process that made them: the daemon, or
  // a fork server of its.
  const pid_t pid = daemon_->pid();
  std::vector<pid_t> makers = {pid};
  std::vector<std::unique_ptr<ProcessWatch>> watched;
  for (pid_t p : Descendants(pid)) {
    makers.push_back(p);
    auto watch = std::make_unique<ProcessWatch>(p);
    if (watch->valid()) watched.push_back(std::move(watch));  // else gone already
  }
  EXPECT_GE(watched.size(), 2u) << "no zygote to watch";
  if (runtime::CgroupsUsable().ok()) {
    EXPECT_FALSE(CgroupsMadeBy(makers).empty()) << "the daemon made no cgroup to watch";
  }

  ProcessRun stopped = daemon_->Stop();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
  for (const auto& w : watched) EXPECT_TRUE(w->Exited(absl::Seconds(30))) << "process " << w->pid() << " outlived it";
  EXPECT_EQ(CgroupsMadeBy(makers), std::vector<std::string>{}) << "cgroups outlived the daemon";
  EXPECT_NE(::stat(daemon_->socket().c_str(), &st), 0) << "the socket file was left behind";
}

// The keys file's "uid" entries decide who else may use the socket: an
// entry a reload adds lets that user in from then on.
TEST_F(ConfigReload, TheSocketsUidEntriesAreSwappedOnSighup) {
  if (!IsRoot()) GTEST_SKIP() << "the test switches to another user: root only";
  const std::string keys = dir_.Join("keys.json");
  auto write_keys = [&](const std::string& entries) {
    Replace(keys, absl::StrCat(R"({"keys": [{"name": "admin", "key": "admin-0123456789abcdef0123456789abcdef"})",
                               entries, "]}"));
    ::chmod(keys.c_str(), 0600);
  };
  write_keys("");
  const std::string config = absl::StrCat(R"({"socket": {"mode": "0666"}, )", Profiles({{"shell", Shell()}}).substr(1));
  ASSERT_TRUE(Start(config, {"--keys-file", keys}).up());
  // The socket's directory is the test's own: let the other user in.
  const std::string socket_dir = daemon_->socket().substr(0, daemon_->socket().rfind('/'));
  ASSERT_EQ(::chmod(socket_dir.c_str(), 0755), 0);
  const std::string before = AsUser(daemon_->socket(), 65534, {RequestLine(1, "health")});
  EXPECT_TRUE(absl::StrContains(before, "uid 65534 has no entry")) << before;

  write_keys(R"(, {"name": "nobody-agent", "uid": 65534, "methods": ["health"]})");
  json::value reloads = Reload(config);
  ASSERT_TRUE(reloads.is_object()) << Log();
  EXPECT_EQ(reloads.at("ok"), 1) << Str(reloads.at("last_error"));
  const std::string after = AsUser(daemon_->socket(), 65534, {RequestLine(1, "health")});
  EXPECT_TRUE(HasResult(ParseJson(after.substr(0, after.find('\n'))))) << after;
  EXPECT_TRUE(absl::StrContains(Log(), "no profile changed; keys reloaded (2)")) << Log();
}

// Clients keep sandbox.run going on the profile being reloaded — replaced,
// resized, then refused — until the reloads are done: every request is
// answered with its normal result.
TEST_F(ConfigReload, UnderLoadNoRequestIsLostOrFailed) {
  const std::string a = Profiles({{"shell", Shell(1, 2, R"("env": {"MARK": "a"})")}});
  const std::string b = Profiles({{"shell", Shell(2, 3, R"("env": {"MARK": "b"})")}, {"extra", Shell(0, 1)}});
  const std::string invalid = R"({"profiles": )";
  ASSERT_TRUE(Start(a).up());
  constexpr int kThreads = 4;
  constexpr int kAtLeast = 50;  // each, and on until the reloads are done
  constexpr int kAtMost = 2000;
  std::atomic<bool> reloads_done{false};
  std::atomic<int> answered{0};
  std::vector<int> sent(kThreads, 0);
  std::vector<std::vector<std::string>> failures(kThreads);
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&, t] {
      DaemonClient c(daemon_->socket());
      for (int i = 0; i < kAtMost && (i < kAtLeast || !reloads_done.load()); ++i) {
        const std::string word = absl::StrCat("t", t, "-", i);
        json::value reply = c.CallJson(RunLine(i, "shell", {"sh", "-c", "echo $0 $MARK", word}));
        const std::string out = Stdout(reply);
        if (out != word + " a\n" && out != word + " b\n") failures[t].push_back(out);
        ++sent[t];
        ++answered;
      }
    });
  }
  int64_t ok = 0, refused = 0;
  for (const std::string* next : {&b, &invalid, &a, &invalid, &b, &a}) {
    // Requests answered since the last reload: each reload meets the load.
    const int mark = answered.load();
    for (int i = 0; i < 3000 && answered.load() < mark + kThreads; ++i) absl::SleepFor(absl::Milliseconds(10));
    EXPECT_GE(answered.load(), mark + kThreads) << "no request was answered between two reloads";
    json::value reloads = Reload(*next);
    EXPECT_TRUE(reloads.is_object()) << Log();
    if (!reloads.is_object()) break;
    (next == &invalid ? refused : ok) += 1;
    EXPECT_EQ(reloads.at("ok"), ok);
    EXPECT_EQ(reloads.at("refused"), refused);
  }
  reloads_done = true;
  for (std::thread& c : clients) c.join();
  int total = 0;
  for (int t = 0; t < kThreads; ++t) {
    total += sent[t];
    EXPECT_EQ(failures[t], std::vector<std::string>{}) << "client " << t;
  }
  EXPECT_GE(total, kThreads * kAtLeast);
  EXPECT_TRUE(DrainedAll()) << "replaced pools were never destroyed";
  std::printf("[          ] %d requests over 6 reloads, none lost or failed\n", total);
}

TEST(ConfigCheck, AMissingPreloadModuleIsAnErrorAtCheckConfigAndAtStart) {
  TempDir dir;
  const std::string config = WriteConfig(dir, Profiles({{"shell", Shell()}, {"py", Python(kNoSuchModule)}}));
  const std::string why = absl::StrCat("profiles.py.interpreter.preload[1]: '", kNoSuchModule,
                                       "' cannot be imported by python3 in the profile's sandbox: ModuleNotFoundError");
  ProcessRun check = RunCubicle({"serve", "--check-config", "--config", config});
  EXPECT_EQ(check.exit_code, 2) << check.err;
  EXPECT_TRUE(absl::StrContains(check.err, why)) << check.err;
  EXPECT_FALSE(absl::StrContains(check.out, "configuration OK")) << check.out;

  const std::string socket = dir.Join("rpc.sock");
  ProcessRun start = RunCubicle({"serve", "--config", config, "--socket", socket});
  EXPECT_EQ(start.exit_code, 2) << start.err;
  EXPECT_TRUE(absl::StrContains(start.err, why)) << start.err;
  struct stat st;
  EXPECT_NE(::stat(socket.c_str(), &st), 0) << "a refused daemon made its socket";

  // The same profile with a module that exists passes.
  WriteConfig(dir, Profiles({{"shell", Shell()}, {"py", Python("os.path")}}));
  ProcessRun fine = RunCubicle({"serve", "--check-config", "--config", config});
  EXPECT_EQ(fine.exit_code, 0) << fine.err;
  EXPECT_TRUE(absl::StrContains(fine.out, "configuration OK")) << fine.out;
}

// With --listen and --keys-file: a key added by a reload works, a key it
// removed gets 401; a keys file the reload cannot read refuses it whole.
TEST(ConfigReloadHttp, KeysAreSwappedOnSighup) {
  const std::string kOld = "old-0123456789abcdef0123456789abcdef";
  const std::string kNew = "new-0123456789abcdef0123456789abcdef";
  TempDir dir;
  const std::string config = WriteConfig(dir, Profiles({{"shell", Shell()}}));
  const std::string keys = dir.Join("keys.json");
  auto write_keys = [&](const std::string& key, mode_t mode) {
    Replace(keys, absl::StrCat(R"({"keys": [{"name": "k", "key": ")", key, R"("}]})"));
    ::chmod(keys.c_str(), mode);
  };
  write_keys(kOld, 0600);
  HttpDaemon daemon({"--config", config, "--keys-file", keys}, {"CUBICLE_LOG_LEVEL=info"});
  ASSERT_TRUE(daemon.up());
  auto status_with = [&](const std::string& key) {
    HttpClient client(daemon.port());
    std::optional<HttpReply> reply =
        client.Request("POST", "/rpc", RpcBody(1, "health"), {{"Authorization", absl::StrCat("Bearer ", key)}});
    return reply.has_value() ? reply->status : 0;
  };
  auto reloaded = [&](int times) {
    for (int i = 0; i < 3000; ++i) {  // at most 30 s
      const std::string log = daemon.process().StderrSoFar();
      int seen = 0;
      for (size_t at = log.find("configuration reload"); at != std::string::npos;
           at = log.find("configuration reload", at + 1)) {
        ++seen;
      }
      if (seen >= times) return true;
      absl::SleepFor(absl::Milliseconds(10));
    }
    return false;
  };
  EXPECT_EQ(status_with(kOld), 200);
  EXPECT_EQ(status_with(kNew), 401);

  write_keys(kNew, 0600);
  daemon.process().Signal(SIGHUP);
  ASSERT_TRUE(reloaded(1)) << daemon.process().StderrSoFar();
  EXPECT_TRUE(absl::StrContains(daemon.process().StderrSoFar(), "keys reloaded (1)"));
  EXPECT_EQ(status_with(kNew), 200);
  EXPECT_EQ(status_with(kOld), 401);

  write_keys(kOld, 0644);  // open to others: refused, the keys in force stay
  daemon.process().Signal(SIGHUP);
  ASSERT_TRUE(reloaded(2)) << daemon.process().StderrSoFar();
  EXPECT_TRUE(absl::StrContains(daemon.process().StderrSoFar(), "configuration reload refused"));
  EXPECT_EQ(status_with(kNew), 200);
  EXPECT_EQ(status_with(kOld), 401);
  HttpClient client(daemon.port());
  std::optional<HttpReply> metrics = client.Request("GET", "/metrics", "", {{"Authorization", "Bearer " + kNew}});
  ASSERT_TRUE(metrics.has_value());
  EXPECT_TRUE(absl::StrContains(metrics->body, "cubicle_config_reloads_total{result=\"ok\"} 1\n")) << metrics->body;
  EXPECT_TRUE(absl::StrContains(metrics->body, "cubicle_config_reloads_total{result=\"refused\"} 1\n"));
  ProcessRun stopped = daemon.Stop();
  EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
}

}  // namespace
}  // namespace cubicle::test_support
