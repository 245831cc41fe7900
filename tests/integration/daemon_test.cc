// `cubicle serve` end to end: JSON-RPC 2.0 conformance over stdio, the
// methods, many concurrent clients on the Unix socket, and shutdown that
// leaves nothing behind.
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <algorithm>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/unique_fd.h"
#include "runtime/cgroup_host.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// Feeds `lines` to `cubicle serve` on stdin; EOF makes it drain and exit.
// Returns its stdout lines as JSON values.
std::vector<json::value> Serve(const std::vector<std::string>& lines, ProcessRun* run_out = nullptr,
                               const std::vector<std::string>& flags = {}) {
  std::vector<std::string> args = {"serve"};
  args.insert(args.end(), flags.begin(), flags.end());
  ProcessRun run = RunCubicle(args, absl::StrJoin(lines, "\n") + "\n");
  EXPECT_EQ(run.exit_code, 0) << run.err;
  std::vector<json::value> out;
  for (const std::string& line : Lines(run.out)) {
    boost::system::error_code ec;
    json::value v = json::parse(line, ec);
    EXPECT_FALSE(ec) << "not JSON on stdout: " << line;
    out.push_back(v);
  }
  if (run_out != nullptr) *run_out = run;
  return out;
}

const json::value* ById(const std::vector<json::value>& replies, int64_t id) {
  for (const json::value& r : replies) {
    if (r.is_object() && r.as_object().contains("id") && r.at("id").is_int64() && r.at("id").as_int64() == id) {
      return &r;
    }
  }
  return nullptr;
}

int64_t ErrorCode(const json::value& reply) { return reply.at("error").at("code").as_int64(); }

class CoreDaemon : public HostHygieneTest {};

TEST_F(CoreDaemon, ProtocolErrorsOverStdio) {
  std::vector<json::value> r = Serve({
      "{not json",                                                       // -32700, id null
      R"({"jsonrpc":"2.0","id":1})",                                     // -32600 (no method)
      R"({"jsonrpc":"2.0","id":2,"method":"no.such.method"})",           // -32601
      R"({"jsonrpc":"2.0","id":3,"method":"sandbox.run","params":{"argv":"ls"}})",  // -32602
      R"({"jsonrpc":"2.0","method":"health"})",                          // notification: no reply
      R"({"jsonrpc":"2.0","id":4,"method":"sandbox.run","params":{"argv":["true"],"bogus":1}})",
  });
  ASSERT_EQ(r.size(), 5u) << "the notification gets no reply";
  bool saw_parse_error = false;
  for (const json::value& v : r) {
    if (v.at("id").is_null()) {
      saw_parse_error = true;
      EXPECT_EQ(ErrorCode(v), -32700);
    }
  }
  EXPECT_TRUE(saw_parse_error);
  ASSERT_NE(ById(r, 1), nullptr);
  EXPECT_EQ(ErrorCode(*ById(r, 1)), -32600);
  EXPECT_EQ(ErrorCode(*ById(r, 2)), -32601);
  EXPECT_EQ(ErrorCode(*ById(r, 3)), -32602);
  EXPECT_TRUE(absl::StrContains(json::serialize(*ById(r, 3)), "argv")) << "the message names the field";
  EXPECT_EQ(ErrorCode(*ById(r, 4)), -32602);
  EXPECT_TRUE(absl::StrContains(json::serialize(*ById(r, 4)), "bogus"));
}

// Params are read by the config's rules: a duplicate key is refused naming
// it, wherever it is; a whole number may be spelt 1e3 but not 1.5.
TEST_F(CoreDaemon, DuplicateKeysAreRefusedAndWholeNumbersReadAlikeOverStdio) {
  std::vector<json::value> r = Serve({
      R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["true"],"argv":["false"]}})",
      R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"argv":["true"],"limits":{"pids":8,"pids":9}}})",
      R"({"jsonrpc":"2.0","id":3,"method":"sandbox.run","params":{"argv":["true"],"timeout_ms":1e3}})",
      R"({"jsonrpc":"2.0","id":4,"method":"sandbox.run","params":{"argv":["true"],"timeout_ms":1.5}})",
  });
  ASSERT_EQ(r.size(), 4u);
  auto message = [&](int64_t id) { return std::string(ById(r, id)->at("error").at("message").as_string()); };
  EXPECT_EQ(ErrorCode(*ById(r, 1)), -32602);
  EXPECT_EQ(message(1), "params: duplicate key 'argv'");
  EXPECT_EQ(ErrorCode(*ById(r, 2)), -32602);
  EXPECT_EQ(message(2), "params.limits: duplicate key 'pids'");
  EXPECT_EQ(ById(r, 3)->at("result").at("reason").as_string(), "exited") << json::serialize(*ById(r, 3));
  EXPECT_EQ(ErrorCode(*ById(r, 4)), -32602);
  EXPECT_EQ(message(4), "params.timeout_ms: expected a whole number, got 1.5");
}

// Diagnostics are JSON lines on stderr, made at the first line logged, at
// the level CUBICLE_LOG_LEVEL asks (warn by default, so nothing here).
TEST_F(CoreDaemon, LogsAreJsonLinesOnStderrAtTheLevelAsked) {
  ProcessRun quiet = RunCubicle({"serve"}, "");
  EXPECT_EQ(quiet.exit_code, 0) << quiet.err;
  EXPECT_EQ(quiet.err, "");
  ProcessRun told = RunCubicle({"serve"}, "", {"CUBICLE_LOG_LEVEL=info"});
  EXPECT_EQ(told.exit_code, 0) << told.err;
  std::vector<std::string> lines = Lines(told.err);
  ASSERT_FALSE(lines.empty()) << "nothing logged at info";
  boost::system::error_code ec;
  json::value first = json::parse(lines.front(), ec);
  ASSERT_FALSE(ec) << "not a JSON line: " << lines.front();
  EXPECT_EQ(first.at("level"), "info") << lines.front();
  EXPECT_EQ(first.at("msg"), "serving JSON-RPC on stdio") << lines.front();
  EXPECT_TRUE(first.at("ts").is_string()) << lines.front();
  EXPECT_EQ(told.out, "");
}

TEST_F(CoreDaemon, BatchesAnswerEveryCallButNoNotification) {
  std::vector<json::value> r = Serve({
      R"([{"jsonrpc":"2.0","id":1,"method":"health"},{"jsonrpc":"2.0","method":"health"},)"
      R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"argv":["echo","in-a-batch"]}},1])",
      "[]",
  });
  ASSERT_EQ(r.size(), 2u);
  const json::array* batch = nullptr;
  for (const json::value& v : r) {
    if (v.is_array()) batch = &v.as_array();
    if (v.is_object()) {
      EXPECT_EQ(ErrorCode(v), -32600) << "an empty batch is one invalid request";
    }
  }
  ASSERT_NE(batch, nullptr);
  EXPECT_EQ(batch->size(), 3u) << "two calls and the invalid element; not the notification";
  std::vector<json::value> items(batch->begin(), batch->end());
  ASSERT_NE(ById(items, 2), nullptr);
  EXPECT_EQ(ById(items, 2)->at("result").at("stdout").as_string(), "in-a-batch\n");
}

TEST_F(CoreDaemon, SandboxRunReturnsStatusOutputAndAccounting) {
  std::vector<json::value> r = Serve({
      R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["/bin/sh","-c","cat; echo err >&2; exit 3"],"stdin":"hi\n"}})",
      R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"argv":["sh","-c","echo $FOO; pwd"],"env":{"FOO":"bar"},"cwd":"/tmp"}})",
      R"({"jsonrpc":"2.0","id":3,"method":"sandbox.run","params":{"argv":["sleep","10"],"timeout_ms":200}})",
      R"({"jsonrpc":"2.0","id":4,"method":"sandbox.run","params":{"argv":["sh","-c","head -c 100000 /dev/zero | tr '\\0' '\\377'"],"output_bytes":10}})",
      R"({"jsonrpc":"2.0","id":5,"method":"sandbox.run","params":{"argv":["true"],"timeout_ms":99999999}})",
      R"({"jsonrpc":"2.0","id":6,"method":"sandbox.run","params":{"argv":["true"],"profile":"nope"}})",
      R"({"jsonrpc":"2.0","id":7,"method":"sandbox.run","params":{"argv":["no-such-cmd"]}})",
  });
  ASSERT_EQ(r.size(), 7u);
  const json::object& a = ById(r, 1)->at("result").as_object();
  EXPECT_EQ(a.at("reason").as_string(), "exited");
  EXPECT_EQ(a.at("exit_code").as_int64(), 3);
  EXPECT_EQ(a.at("stdout").as_string(), "hi\n");
  EXPECT_EQ(a.at("stderr").as_string(), "err\n");
  EXPECT_TRUE(a.contains("rusage"));
  EXPECT_EQ(ById(r, 2)->at("result").at("stdout").as_string(), "bar\n/tmp\n");
  EXPECT_EQ(ById(r, 3)->at("result").at("reason").as_string(), "timeout");
  const json::object& d = ById(r, 4)->at("result").as_object();
  ASSERT_TRUE(d.contains("stdout_base64")) << "0xff bytes are not UTF-8: " << json::serialize(d);
  EXPECT_EQ(d.at("stdout_base64").as_string(), "/////////////w==") << "10 bytes of 0xff, base64";
  EXPECT_TRUE(d.at("stdout_truncated").as_bool());
  EXPECT_EQ(d.at("stdout_bytes").as_int64(), 100000);
  EXPECT_EQ(ErrorCode(*ById(r, 5)), -32002) << "above the profile's timeout ceiling";
  EXPECT_EQ(ErrorCode(*ById(r, 6)), -32004);
  EXPECT_EQ(ById(r, 7)->at("result").at("reason").as_string(), "setup_failed");
}

TEST_F(CoreDaemon, PoolMethodsResizeAndReport) {
  std::vector<json::value> r = Serve({
      R"({"jsonrpc":"2.0","id":1,"method":"pool.warm","params":{"profile":"shell","count":3,"timeout_ms":20000}})",
      R"({"jsonrpc":"2.0","id":2,"method":"pool.configure","params":{"profile":"shell","min_idle":5,"max_idle":2}})",
      R"({"jsonrpc":"2.0","id":3,"method":"pool.stats"})",
  });
  ASSERT_EQ(r.size(), 3u);
  EXPECT_TRUE(ById(r, 1)->at("result").at("warm").as_bool());
  EXPECT_GE(ById(r, 1)->at("result").at("idle").as_int64(), 3);
  EXPECT_EQ(ErrorCode(*ById(r, 2)), -32602);
  EXPECT_TRUE(ById(r, 3)->at("result").at("pools").as_object().contains("python"));
}

using Client = DaemonClient;

TEST_F(CoreDaemon, SixtyFourConcurrentRunsOverTheSocketAreAllCorrect) {
  TempDir dir;
  const std::string socket = dir.Join("cubicle.sock");
  RunningProcess daemon(CubicleArgv({"serve", "--socket", socket}));
  ASSERT_TRUE(daemon.started());
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {
    up = Client(socket).connected();
    if (!up) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(up) << "the daemon never listened";
  struct stat st;
  ASSERT_EQ(::stat(socket.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::atomic<int> correct{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < 64; ++i) {
    clients.emplace_back([&, i] {
      Client c(socket);
      if (!c.connected()) return;
      std::string reply = c.Call(absl::StrCat(
          R"({"jsonrpc":"2.0","id":)", i, R"(,"method":"sandbox.run","params":{"argv":["sh","-c","echo $N"],"env":{"N":")",
          i, R"("}}})"));
      boost::system::error_code ec;
      json::value v = json::parse(reply, ec);
      if (ec || !v.is_object() || !v.as_object().contains("result")) return;
      if (v.at("id").as_int64() == i && v.at("result").at("stdout").as_string() == absl::StrCat(i, "\n")) ++correct;
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(correct.load(), 64);
  // SIGTERM: drain, remove every zygote and cgroup, remove the socket, exit 0.
  daemon.Signal(SIGTERM);
  ProcessRun done = daemon.Wait(absl::Seconds(60));
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(::stat(socket.c_str(), &st), 0) << "the socket file was left behind";
}

// Starts a sandbox.run of `sleep MARK` on the daemon's socket, from a
// thread (answered, if at all, when the daemon ends the sandbox), and
// waits until the sleep runs.
bool StartSleepingSandbox(const std::string& socket, const std::string& mark, std::thread* caller) {
  *caller = std::thread([socket, mark] {
    Client(socket).Call(absl::StrCat(R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["sleep",")",
                                     mark, R"("]}})"));
  });
  for (int i = 0; i < 1000; ++i) {  // at most 10 s
    for (pid_t pid : ProcessesWithArgument(mark)) {
      if (ReadFile(absl::StrCat("/proc/", pid, "/comm")) == "sleep\n") return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// A daemon serving its spawner's stdio ends with that process, and so do
// its running sandboxes: the orchestrator (here a shell, whose stdin is a
// pipe this test keeps open, so there is no EOF) is SIGKILLed while a
// sandbox sleeps. Failed before: the daemon and the sleep lived on.
TEST_F(CoreDaemon, AStdioDaemonEndsWithItsParentAndSoDoItsSandboxes) {
  TempDir dir;
  const std::string socket = dir.Join("cubicle.sock");
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  UniqueFd in_read(in[0]), in_write(in[1]);
  RunningProcess parent({"/bin/sh", "-c",
                         absl::StrCat("'", CubicleBinary(), "' serve --socket '", socket, "' --stdio </proc/",
                                      ::getpid(), "/fd/", in_read.get(), " & echo started; wait")});
  ASSERT_TRUE(parent.started());
  ASSERT_TRUE(parent.WaitForStdout("started\n"));
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {  // at most 5 s
    up = Client(socket).connected();
    if (!up) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(up) << "the daemon never listened";
  const std::string mark = absl::StrCat("1000.", ::getpid(), "3");  // a unique sleep argument
  std::thread caller;
  const bool running = StartSleepingSandbox(socket, mark, &caller);
  parent.Signal(SIGKILL);
  parent.Wait();
  std::vector<pid_t> sleepers = WaitUntilGone(mark);
  std::vector<pid_t> daemons = WaitUntilGone(socket);
  EXPECT_TRUE(running) << "the sandbox never started";
  EXPECT_EQ(sleepers, std::vector<pid_t>{}) << "the sandbox outlived the daemon's parent";
  EXPECT_EQ(daemons, std::vector<pid_t>{}) << "the daemon outlived its parent";
  for (pid_t pid : daemons) ::kill(pid, SIGKILL);  // ours, by pid (after a failure)
  for (pid_t pid : sleepers) ::kill(pid, SIGKILL);
  caller.join();
  EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{});
  // The killed sandboxes' cgroups are swept, as after a killed daemon.
  ProcessRun next = RunCubicle({"cleanup"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
}

// The orchestrator that spawned `cubicle serve` (a shell here, whose stdin
// is a pipe this test keeps open: no EOF) is SIGKILLed while the pools are
// warm and a sandbox runs. The daemon kills the sandbox and tears down as
// after SIGTERM: every zygote killed, every cgroup it made removed, its
// socket removed, no mount left; then it exits. Nothing is swept by a later
// cubicle. Failed before: the daemon _exit()ed and left its cgroups.
TEST_F(CoreDaemon, AKilledOrchestratorsDaemonTearsDownItsPoolsAndCgroups) {
  OrphanReaper reaper;  // the orphaned daemon becomes our child: we see it exit
  TempDir dir;
  const std::string socket = dir.Join("cubicle.sock");
  const std::string config = dir.Join("config.json");
  const std::string log = dir.Join("daemon.log");
  // Limits, so that every sandbox has a cgroup.
  ASSERT_TRUE(WriteFile(config, R"({"profiles": {"shell": {"limits": {"memory": "256M", "pids": 64},
                                    "pool": {"min_idle": 2, "max_idle": 2, "max_total": 4}}}})"));
  int in[2];
  ASSERT_EQ(::pipe2(in, O_CLOEXEC), 0);
  UniqueFd in_read(in[0]), in_write(in[1]);
  RunningProcess parent({"/bin/sh", "-c",
                         absl::StrCat("'", CubicleBinary(), "' serve --config '", config, "' --socket '", socket,
                                      "' --stdio </proc/", ::getpid(), "/fd/", in_read.get(), " 2>'", log,
                                      "' & echo $!; wait")});
  ASSERT_TRUE(parent.started());
  ASSERT_TRUE(parent.WaitForStdout("\n"));
  pid_t daemon_pid = 0;
  ASSERT_TRUE(absl::SimpleAtoi(absl::StripAsciiWhitespace(parent.StdoutSoFar()), &daemon_pid))
      << parent.StdoutSoFar();
  ProcessWatch daemon(daemon_pid);
  ASSERT_TRUE(daemon.valid());

  bool warm = false;
  for (int i = 0; i < 3000 && !warm; ++i) {  // at most 30 s
    Client c(socket);
    warm = c.connected() && absl::StrContains(c.Call(R"({"jsonrpc":"2.0","id":1,"method":"pool.stats"})"),
                                              R"("idle":2)");
    if (!warm) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(warm) << "the pool never filled: " << ReadFile(log);
  const std::string mark = absl::StrCat("1000.", ::getpid(), "5");  // a unique sleep argument
  std::thread caller;
  EXPECT_TRUE(StartSleepingSandbox(socket, mark, &caller)) << "the sandbox never started";
  std::vector<std::unique_ptr<ProcessWatch>> zygotes;
  // The groups are named after the process that made them: the daemon, or
  // a fork server of its.
  std::vector<pid_t> makers = {daemon_pid};
  for (pid_t pid : Descendants(daemon_pid)) {
    zygotes.push_back(std::make_unique<ProcessWatch>(pid));
    makers.push_back(pid);
  }
  EXPECT_GE(zygotes.size(), 2u) << "no zygote to watch";
  const std::vector<std::string> cgroups = CgroupsMadeBy(makers);
  if (runtime::CgroupsUsable().ok()) {
    EXPECT_FALSE(cgroups.empty()) << "the daemon made no cgroup to watch";
  }

  parent.Signal(SIGKILL);
  parent.Wait();
  const bool exited = daemon.Exited(absl::Seconds(60));  // the bound for a failure only
  EXPECT_TRUE(exited) << "the daemon outlived its parent";
  int status = 0;
  if (!exited) ::kill(daemon_pid, SIGKILL);  // ours, by pid
  EXPECT_EQ(::waitpid(daemon_pid, &status, 0), daemon_pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << "status " << status << "\n" << ReadFile(log);
  caller.join();

  // The teardown ran: the zygotes are gone, and so are the cgroups, now.
  for (const auto& z : zygotes) {
    EXPECT_TRUE(z->Exited()) << "process " << z->pid() << " of the daemon outlived it";
    if (!z->Exited()) ::kill(z->pid(), SIGKILL);  // ours (the daemon's), by pid
  }
  EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{}) << "the sandbox outlived the daemon";
  const std::vector<std::string> left = CgroupsMadeBy(makers);
  EXPECT_EQ(left, std::vector<std::string>{}) << "cgroups outlived the daemon";
  struct stat st;
  EXPECT_NE(::stat(socket.c_str(), &st), 0) << "the socket file was left behind";
  EXPECT_TRUE(absl::StrContains(ReadFile(log), "exited: ending every sandbox")) << ReadFile(log);
  if (!left.empty()) {
    EXPECT_EQ(RunCubicle({"cleanup"}).exit_code, 0);  // leave the host clean all the same
  }
}

TEST_F(CoreDaemon, KilledDaemonLeavesNoZygoteBehind) {
  TempDir dir;
  const std::string socket = dir.Join("cubicle.sock");
  RunningProcess daemon(CubicleArgv({"serve", "--socket", socket}));
  ASSERT_TRUE(daemon.started());
  bool warm = false;
  for (int i = 0; i < 500 && !warm; ++i) {
    Client c(socket);
    if (c.connected()) {
      std::string r = c.Call(R"({"jsonrpc":"2.0","id":1,"method":"pool.stats"})");
      warm = absl::StrContains(r, R"("idle":2)");
    }
    if (!warm) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(warm) << "pools never filled";
  std::vector<pid_t> zygotes = Descendants(daemon.pid());
  ASSERT_FALSE(zygotes.empty());
  daemon.Signal(SIGKILL);
  daemon.Wait();
  // Every zygote's init dies with the daemon (PR_SET_PDEATHSIG).
  for (int i = 0; i < 500; ++i) {
    bool any = false;
    for (pid_t p : zygotes) any |= ::kill(p, 0) == 0;
    if (!any) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  for (pid_t p : zygotes) EXPECT_NE(::kill(p, 0), 0) << "zygote " << p << " outlived the daemon";
  // The next start sweeps their cgroups.
  ProcessRun next = RunCubicle({"cleanup"});
  EXPECT_EQ(next.exit_code, 0) << next.err;
}

}  // namespace
}  // namespace cubicle::test_support

namespace cubicle::test_support {
namespace {

std::string Quoted(const std::string& s) { return json::serialize(json::value(s)); }

std::string SkillCall(int id, const std::string& profile, const std::vector<std::string>& argv,
                      const std::string& extra = "") {
  std::vector<std::string> quoted;
  for (const std::string& a : argv) quoted.push_back(Quoted(a));
  return absl::StrCat(R"({"jsonrpc":"2.0","id":)", id, R"(,"method":"skill.call","params":{"profile":")", profile,
                      R"(","argv":[)", absl::StrJoin(quoted, ","), R"(],"method":"add","params":{"a":1,"b":2})",
                      extra, "}}");
}

constexpr char kGoodSkill[] = R"PY(
import json, sys, time
print("warming up: a log line before the answer")
req = json.loads(sys.stdin.readline())
print("to stderr", file=sys.stderr, flush=True)
p = req["params"]
# A BOM, CRLF, and no exit afterwards: the daemon must answer anyway.
sys.stdout.write("\ufeff" + json.dumps({"jsonrpc": "2.0", "id": req["id"], "result": p["a"] + p["b"]}) + "\r\n")
sys.stdout.flush()
time.sleep(60)
)PY";

TEST_F(CoreDaemon, SkillCallReturnsTheMatchingResponseAndItsLogs) {
  REQUIRE_HOST(Python3());
  std::vector<json::value> r = Serve({SkillCall(1, "python", {"python3", "-c", kGoodSkill})});
  ASSERT_EQ(r.size(), 1u);
  ASSERT_TRUE(r[0].as_object().contains("result")) << json::serialize(r[0]);
  const json::object& res = r[0].at("result").as_object();
  EXPECT_EQ(res.at("result").as_int64(), 3);
  EXPECT_EQ(res.at("logs").as_string(), "to stderr\n");
  EXPECT_TRUE(absl::StrContains(std::string(res.at("stdout_logs").as_string()), "warming up")) << json::serialize(res);
}

TEST_F(CoreDaemon, SkillCallErrorsCarryTheSkillsStatusAndStderr) {
  REQUIRE_HOST(Python3());
  constexpr char kOverlong[] = "import sys; sys.stdout.write('x' * (5 << 20)); sys.stdout.flush()";
  constexpr char kErrorReply[] =
      "import json,sys; r=json.loads(sys.stdin.readline()); "
      "print(json.dumps({'jsonrpc':'2.0','id':r['id'],'error':{'code':7,'message':'bad add'}}))";
  std::vector<json::value> r = Serve({
      SkillCall(1, "shell", {"/bin/sh", "-c", "read line; echo 'not json'; echo oops >&2; exit 4"}),
      SkillCall(2, "shell", {"sleep", "30"}, R"(,"timeout_ms":300)"),
      SkillCall(3, "python", {"python3", "-c", kOverlong}),
      SkillCall(4, "python", {"python3", "-c", kErrorReply}),
  });
  ASSERT_EQ(r.size(), 4u);
  const json::value& ended = *ById(r, 1);
  EXPECT_EQ(ErrorCode(ended), -32007);
  EXPECT_EQ(ended.at("error").at("data").at("status").as_int64(), 4);
  EXPECT_EQ(ended.at("error").at("data").at("stderr_tail").as_string(), "oops\n");
  EXPECT_TRUE(absl::StrContains(std::string(ended.at("error").at("data").at("stdout_tail").as_string()), "not json"));
  const json::value& silent = *ById(r, 2);
  EXPECT_EQ(ErrorCode(silent), -32007);
  EXPECT_EQ(silent.at("error").at("data").at("reason").as_string(), "timeout");
  EXPECT_EQ(ErrorCode(*ById(r, 3)), -32007);
  EXPECT_TRUE(absl::StrContains(std::string(ById(r, 3)->at("error").at("message").as_string()), "longer than"));
  // The skill's own JSON-RPC error comes back as data, not as our error.
  const json::value& answered = *ById(r, 4);
  ASSERT_TRUE(answered.as_object().contains("result")) << json::serialize(answered);
  EXPECT_EQ(answered.at("result").at("error").at("message").as_string(), "bad add");
}

}  // namespace
}  // namespace cubicle::test_support

namespace cubicle::test_support {
namespace {

TEST_F(CoreDaemon, ManagedExecutionsStartWaitCancelAndRefuseADuplicateKey) {
  // One client, calls in sequence: each reply is known before the next call.
  TempDir dir;
  const std::string socket = dir.Join("cubicle.sock");
  RunningProcess daemon(CubicleArgv({"serve", "--socket", socket}));
  ASSERT_TRUE(daemon.started());
  for (int i = 0; i < 500 && !Client(socket).connected(); ++i) absl::SleepFor(absl::Milliseconds(10));
  Client c(socket);
  ASSERT_TRUE(c.connected());
  auto call = [&](const std::string& method, const std::string& params) {
    boost::system::error_code ec;
    json::value v = json::parse(
        c.Call(absl::StrCat(R"({"jsonrpc":"2.0","id":1,"method":")", method, R"(","params":)", params, "}")), ec);
    EXPECT_FALSE(ec);
    return v;
  };
  json::value started = call("exec.start", R"({"argv":["sh","-c","echo managed"],"key":"k1"})");
  ASSERT_TRUE(started.as_object().contains("result")) << json::serialize(started);
  const std::string first(started.at("result").at("exec_id").as_string());
  json::value dup = call("exec.start", R"({"argv":["sh","-c","echo again"],"key":"k1"})");
  EXPECT_EQ(ErrorCode(dup), -32003) << "the same key within 60 s: no second execution";
  EXPECT_EQ(dup.at("error").at("data").at("exec_id").as_string(), first);
  json::value waited = call("exec.wait", absl::StrCat(R"({"exec_id":")", first, R"(","timeout_ms":20000})"));
  EXPECT_EQ(waited.at("result").at("state").as_string(), "done");
  EXPECT_EQ(waited.at("result").at("result").at("stdout").as_string(), "managed\n");
  json::value sleeper = call("exec.start", R"({"argv":["sleep","30"],"timeout_ms":60000})");
  const std::string second(sleeper.at("result").at("exec_id").as_string());
  json::value status = call("exec.status", absl::StrCat(R"({"exec_id":")", second, R"("})"));
  EXPECT_NE(status.at("result").at("state").as_string(), "done");
  call("exec.cancel", absl::StrCat(R"({"exec_id":")", second, R"("})"));
  json::value cancelled = call("exec.wait", absl::StrCat(R"({"exec_id":")", second, R"(","timeout_ms":20000})"));
  // exec.start answers at once: the cancel finds it queued (it never runs)
  // or running (it is killed).
  const std::string state(cancelled.at("result").at("state").as_string());
  if (state == "done") {
    EXPECT_EQ(cancelled.at("result").at("result").at("reason").as_string(), "killed");
  } else {
    EXPECT_EQ(state, "cancelled") << json::serialize(cancelled);
  }
  EXPECT_EQ(ErrorCode(call("exec.status", R"({"exec_id":"e-unknown"})")), -32004);
  daemon.Signal(SIGTERM);
  EXPECT_EQ(daemon.Wait(absl::Seconds(60)).exit_code, 0);
}

TEST_F(CoreDaemon, PythonRequestsAreServedByAWarmInterpreter) {
  REQUIRE_HOST(Python3());
  SocketDaemon d;
  ASSERT_TRUE(d.up());
  json::value warmed = d.Call(R"({"jsonrpc":"2.0","id":1,"method":"pool.warm","params":{"profile":"python","count":1,"timeout_ms":20000}})");
  ASSERT_TRUE(warmed.is_object() && warmed.at("result").at("warm").as_bool()) << json::serialize(warmed);
  json::value r2 = d.Call(R"J({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"profile":"python","argv":["python3","-I","-c","import sys; print(__name__, sys.argv, 'json' in sys.modules)","x"]}})J");
  json::value r3 = d.Call(R"J({"jsonrpc":"2.0","id":3,"method":"sandbox.run","params":{"profile":"python","argv":["python3","-c","print('exec')"]}})J");
  json::value r4 = d.Call(R"({"jsonrpc":"2.0","id":4,"method":"pool.stats"})");
  ASSERT_TRUE(r2.is_object() && r3.is_object() && r4.is_object());
  const json::object& warm = r2.at("result").as_object();
  // json was preloaded: imported before the request came.
  EXPECT_EQ(warm.at("stdout").as_string(), "__main__ ['-c', 'x'] True\n") << json::serialize(warm);
  EXPECT_TRUE(warm.at("warm").as_bool());
  // Not the profile's flags: exec'd, same result shape.
  const json::object& exec = r3.at("result").as_object();
  EXPECT_EQ(exec.at("stdout").as_string(), "exec\n");
  EXPECT_FALSE(exec.at("warm").as_bool());
  const json::object& python = r4.at("result").at("pools").at("python").as_object();
  EXPECT_TRUE(python.at("warm_interpreter").as_bool());
  EXPECT_GE(python.at("hits").as_int64(), 1);
  EXPECT_GE(python.at("handoff_ms").at("count").as_int64(), 1);
  EXPECT_GE(python.at("refill_ms").at("count").as_int64(), 1);
  EXPECT_EQ(d.Stop().exit_code, 0);
}

TEST_F(CoreDaemon, PerRequestLimitsOnlyTighten) {
  // Eight pids at most: the ninth `sleep` cannot be forked.
  const std::string forks = "i=0; while [ $i -lt 12 ]; do sleep 2 & i=$((i+1)); done 2>&1; kill $(jobs -p) 2>/dev/null; true";
  std::vector<json::value> r = Serve({
      absl::StrCat(R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["sh","-c",)", Quoted(forks),
                   R"(],"limits":{"pids":8}}})"),
      absl::StrCat(R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"argv":["sh","-c",)", Quoted(forks),
                   R"(]}})"),
      R"({"jsonrpc":"2.0","id":3,"method":"sandbox.run","params":{"argv":["true"],"limits":{"memory":"64G"}}})",
      R"({"jsonrpc":"2.0","id":4,"method":"sandbox.run","params":{"argv":["true"],"limits":{"memory":"12Q"}}})",
      R"({"jsonrpc":"2.0","id":5,"method":"sandbox.run","params":{"argv":["true"],"limits":{"swap":"1G"}}})",
  });
  ASSERT_EQ(r.size(), 5u);
  const std::string tight(ById(r, 1)->at("result").at("stdout").as_string());
  // The daemon (this user, this host) gets cgroups where this process would:
  // as root with the memory and pids controllers, or rootless with a
  // delegated subtree.
  if (runtime::CgroupsUsable().ok()) {
    EXPECT_TRUE(absl::StrContains(tight, "fork")) << "the 8-pid limit was not applied: " << tight;
  } else {
    // No usable cgroup (rootless without delegation, a host without the
    // controllers): said, not silently dropped.
    EXPECT_TRUE(absl::StrContains(json::serialize(ById(r, 1)->at("result").at("warnings")), "not enforced"))
        << json::serialize(*ById(r, 1));
  }
  const std::string loose(ById(r, 2)->at("result").at("stdout").as_string());
  EXPECT_FALSE(absl::StrContains(loose, "fork")) << "the profile's own limit is not that tight: " << loose;
  ASSERT_TRUE(ById(r, 3)->as_object().contains("error"));
  EXPECT_EQ(ErrorCode(*ById(r, 3)), -32002);
  EXPECT_TRUE(absl::StrContains(std::string(ById(r, 3)->at("error").at("message").as_string()),
                                "exceeds the profile's"))
      << json::serialize(*ById(r, 3));
  EXPECT_EQ(ErrorCode(*ById(r, 4)), -32602);
  EXPECT_TRUE(absl::StrContains(std::string(ById(r, 4)->at("error").at("message").as_string()),
                                "params.limits.memory"))
      << json::serialize(*ById(r, 4));
  EXPECT_EQ(ErrorCode(*ById(r, 5)), -32602);
}

TEST_F(CoreDaemon, AWorkspaceUnderAConfiguredRootIsAttachedAtHandoff) {
  if (!IsRoot()) GTEST_SKIP() << "a workspace is attached at hand-off only as root";
  TempDir root;
  TempDir outside;
  const std::string ws = root.Join("ws");
  ASSERT_EQ(::mkdir(ws.c_str(), 0755), 0);
  REQUIRE_HOST(IdmappedMounts(ws));  // root's, shown as the sandbox user's
  const std::string config = root.Join("config.json");
  {
    std::ofstream f(config);
    f << R"({"workspace_roots": [")" << root.path()
      << R"("], "profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}}}})";
  }
  std::vector<json::value> r = Serve(
      {
          R"({"jsonrpc":"2.0","id":1,"method":"pool.warm","params":{"profile":"shell","count":1,"timeout_ms":20000}})",
          absl::StrCat(R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"argv":["sh","-c","echo made > /workspace/out; ls /workspace"],"workspace":)",
                       Quoted(ws), "}}"),
          absl::StrCat(R"({"jsonrpc":"2.0","id":3,"method":"sandbox.run","params":{"argv":["true"],"workspace":)",
                       Quoted(outside.path()), "}}"),
          absl::StrCat(R"({"jsonrpc":"2.0","id":4,"method":"sandbox.run","params":{"argv":["true"],"workspace":)",
                       Quoted(root.Join("ws/../../")), "}}"),
      },
      nullptr, {"--config", config});
  ASSERT_EQ(r.size(), 4u);
  ASSERT_TRUE(ById(r, 2)->as_object().contains("result")) << json::serialize(*ById(r, 2));
  EXPECT_EQ(ById(r, 2)->at("result").at("stdout").as_string(), "out\n");
  std::ifstream made(ws + "/out");
  std::string text;
  made >> text;
  EXPECT_EQ(text, "made");
  EXPECT_EQ(ErrorCode(*ById(r, 3)), -32602);
  EXPECT_TRUE(absl::StrContains(std::string(ById(r, 3)->at("error").at("message").as_string()), "workspace root"));
  EXPECT_EQ(ErrorCode(*ById(r, 4)), -32602) << "a path that resolves outside the root is refused";
}

TEST_F(CoreDaemon, AWorkspaceIsRefusedWithoutConfiguredRoots) {
  TempDir dir;
  std::vector<json::value> r = Serve({absl::StrCat(
      R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["true"],"workspace":)", Quoted(dir.path()), "}}")});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(ErrorCode(r[0]), -32602);
  EXPECT_TRUE(absl::StrContains(std::string(r[0].at("error").at("message").as_string()), "workspace_roots"));
}

TEST_F(CoreDaemon, MetricsFileHoldsPrometheusTextOfThePools) {
  TempDir dir;
  const std::string metrics = dir.Join("cubicle.prom");
  {
    SocketDaemon d({"--metrics", metrics});
    ASSERT_TRUE(d.up());
    d.Call(R"({"jsonrpc":"2.0","id":1,"method":"pool.warm","params":{"profile":"shell","count":1,"timeout_ms":20000}})");
    d.Call(R"({"jsonrpc":"2.0","id":2,"method":"sandbox.run","params":{"argv":["true"]}})");
    EXPECT_EQ(d.Stop().exit_code, 0);  // the final counts are written at exit
  }
  std::ifstream f(metrics);
  std::stringstream text;
  text << f.rdbuf();
  const std::string t = text.str();
  EXPECT_TRUE(absl::StrContains(t, "# TYPE cubicle_pool_handoff_seconds histogram\n")) << t;
  EXPECT_TRUE(absl::StrContains(t, "cubicle_pool_hits_total{pool=\"shell\"} 1\n")) << t;
  EXPECT_TRUE(absl::StrContains(t, "cubicle_pool_handoff_seconds_count{pool=\"shell\"} 1\n")) << t;
  EXPECT_TRUE(absl::StrContains(t, "cubicle_pool_refill_seconds_bucket{pool=\"python\",le=\"+Inf\"}")) << t;
  EXPECT_EQ(ListDirectory(dir.path()), (std::set<std::string>{"cubicle.prom"})) << "no temporary file left";
  EXPECT_EQ(RunCubicle({"serve", "--metrics", "relative/path"}).exit_code, 2);
}

TEST_F(CoreDaemon, MetricsSocketAnswersHttp) {
  TempDir dir;
  const std::string socket = dir.Join("rpc.sock");
  const std::string metrics = dir.Join("metrics.sock");
  RunningProcess daemon(CubicleArgv({"serve", "--socket", socket, "--metrics", "unix:" + metrics}));
  ASSERT_TRUE(daemon.started());
  bool up = false;
  for (int i = 0; i < 500 && !up; ++i) {
    up = Client(metrics).connected();
    if (!up) absl::SleepFor(absl::Milliseconds(10));
  }
  ASSERT_TRUE(up) << "the metrics socket never listened";
  struct stat st;
  ASSERT_EQ(::stat(metrics.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  Client c(metrics);
  ASSERT_TRUE(c.connected());
  std::string status = c.Call("GET /metrics HTTP/1.0\r\n\r");
  EXPECT_EQ(status, "HTTP/1.0 200 OK\r");
  daemon.Signal(SIGTERM);
  ProcessRun done = daemon.Wait(absl::Seconds(60));
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_NE(::stat(metrics.c_str(), &st), 0) << "the metrics socket was left behind";
}

// The daemon's peak resident memory so far (VmHWM), in KiB.
uint64_t PeakRssKib(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string key;
  while (status >> key) {
    if (key == "VmHWM:") {
      uint64_t kib = 0;
      status >> kib;
      return kib;
    }
    status.ignore(1 << 10, '\n');
  }
  return 0;
}

// `n` sandbox.run lines, ids 1..n, each running `argv_json`.
std::vector<std::string> RunLines(int n, const std::string& argv_json) {
  std::vector<std::string> lines;
  for (int i = 1; i <= n; ++i) {
    lines.push_back(absl::StrCat(R"({"jsonrpc":"2.0","id":)", i, R"(,"method":"sandbox.run","params":{"argv":)",
                                 argv_json, "}}"));
  }
  return lines;
}

TEST_F(CoreDaemon, BeyondTheQueueRequestsAreBusyAndTheRestAreServed) {
  TempDir dir;
  const std::string config = WriteConfig(dir, R"({"concurrency": {"max_concurrent": 1, "max_queue": 1},
             "profiles": {"shell": {"pool": {"min_idle": 0, "max_idle": 1, "max_total": 4}}}})");
  std::vector<json::value> r = Serve(RunLines(6, R"(["sleep","0.5"])"), nullptr, {"--config", config});
  ASSERT_EQ(r.size(), 6u);
  int served = 0, busy = 0;
  for (const json::value& v : r) {
    if (v.as_object().contains("result")) {
      ++served;
      EXPECT_EQ(v.at("result").at("reason").as_string(), "exited");
    } else {
      ++busy;
      EXPECT_EQ(ErrorCode(v), -32000);
      EXPECT_TRUE(absl::StrContains(std::string(v.at("error").at("message").as_string()), "busy"));
    }
  }
  // One running and one queued at most while the lines arrive together.
  EXPECT_GE(served, 1);
  EXPECT_GE(busy, 1);
  EXPECT_EQ(served + busy, 6);
}

// A lone request over stdio runs on the reader thread that read it
// (rpc/transports.h, StdioTransport): the reading must go on meanwhile, so a
// health check sent after a long run is answered first.
TEST_F(CoreDaemon, WhileALoneRequestRunsTheNextLinesAreStillRead) {
  std::vector<json::value> r = Serve({
      R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["sleep","1"]}})",
      R"({"jsonrpc":"2.0","id":2,"method":"health"})",
  });
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].at("id").as_int64(), 2) << json::serialize(r[0]);
  EXPECT_EQ(r[1].at("id").as_int64(), 1) << json::serialize(r[1]);
  EXPECT_EQ(r[1].at("result").at("reason").as_string(), "exited") << json::serialize(r[1]);
}

// `max_concurrent` bounds the runs at once whether a request runs on the
// reader thread or on a worker: with 1, three runs sent together (one
// taken by the reader, two queued for the workers) never overlap. Each
// payload prints the clock (the host's: there is no time namespace) at
// its start and end.
TEST_F(CoreDaemon, MaxConcurrentHoldsForRequestsRunWhereTheyWereRead) {
  TempDir dir;
  const std::string config = WriteConfig(dir, R"({"concurrency": {"max_concurrent": 1, "max_queue": 8},
             "profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 2, "max_total": 4}}}})");
  std::vector<json::value> r =
      Serve(RunLines(3, R"(["sh","-c","date +%s%N; sleep 0.3; date +%s%N"])"), nullptr, {"--config", config});
  ASSERT_EQ(r.size(), 3u);
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const json::value& v : r) {
    ASSERT_TRUE(v.as_object().contains("result")) << json::serialize(v);
    std::vector<std::string> out = Lines(std::string(v.at("result").at("stdout").as_string()));
    ASSERT_EQ(out.size(), 2u) << json::serialize(v);
    spans.emplace_back(std::stoll(out[0]), std::stoll(out[1]));
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    EXPECT_GE(spans[i].first, spans[i - 1].second) << "runs " << i - 1 << " and " << i << " overlapped";
  }
}

TEST_F(CoreDaemon, AnOversizedLineIsRefusedAndTheNextLineServed) {
  // Over stdio the daemon skips to the end of the line and goes on (on the
  // socket it answers, then closes that connection: docs/protocol.md).
  std::string huge = absl::StrCat(R"({"jsonrpc":"2.0","id":2,"method":"health","params":{"pad":")",
                                  std::string(5 << 20, 'x'), R"("}})");
  std::vector<json::value> r = Serve({huge, R"({"jsonrpc":"2.0","id":3,"method":"health"})"});
  ASSERT_EQ(r.size(), 2u);
  bool refused = false, served = false;
  for (const json::value& v : r) {
    if (v.as_object().contains("error")) refused = ErrorCode(v) == -32006;
    if (v.as_object().contains("result")) served = v.at("id").as_int64() == 3;
  }
  EXPECT_TRUE(refused);
  EXPECT_TRUE(served);
}

TEST_F(CoreDaemon, AFloodOfOutputLeavesTheDaemonBounded) {
  SocketDaemon d;
  ASSERT_TRUE(d.up());
  // 256 MiB of output against a 1 MiB budget: truncated, counted, and the
  // daemon never holds more than the budget.
  json::value flood = d.Call(
      R"({"jsonrpc":"2.0","id":1,"method":"sandbox.run","params":{"argv":["sh","-c","head -c 268435456 /dev/zero"],"output_bytes":1048576}})");
  ASSERT_TRUE(flood.is_object() && flood.as_object().contains("result")) << json::serialize(flood);
  EXPECT_TRUE(flood.at("result").at("stdout_truncated").as_bool());
  EXPECT_EQ(flood.at("result").at("stdout_bytes").as_int64(), int64_t{268435456});
  json::value after = d.Call(R"({"jsonrpc":"2.0","id":3,"method":"health"})");
  ASSERT_TRUE(after.is_object() && after.as_object().contains("result")) << json::serialize(after);
  // Bounded: far below the 256 MiB written.
  EXPECT_LT(PeakRssKib(d.pid()), 64u * 1024) << "the daemon's peak RSS grew with the flood";
  EXPECT_EQ(d.Stop().exit_code, 0);
}

}  // namespace
}  // namespace cubicle::test_support
