// `cubicle serve` under load, end to end: control requests answered while
// every execution slot is busy, exec.start and exec.wait holding no slot,
// cancel of queued and running executions, batches counted per element,
// clients that stall or leave, the drain's deadline, thousands of managed
// executions under a small file limit, and the default limits of a
// profile that names none.
//
// Executions that must keep their slot wait behind a gate the test opens
// (a file appearing in a directory bound into the sandbox), so that every
// assertion is about the order replies arrive in, never about time.
#include <sys/stat.h>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/cgroup_host.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/host_snapshot.h"
#include "tests/support/sandbox_runner.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// A directory bound at /gate in the sandboxes; gated payloads wait until
// the test opens it.
class Gate {
 public:
  Gate() { ::chmod(dir_.path().c_str(), 0755); }  // the sandbox's user looks inside
  const std::string& path() const { return dir_.path(); }
  void Open() { WriteFile(dir_.Join("open"), ""); }
  // The argv of a payload that waits for the gate (its timeout is the
  // bound for a failure), then says "released". `mark` makes it findable
  // among the host's processes.
  std::string Argv(const std::string& mark = "gated") const {
    return absl::StrCat(R"(["sh","-c",": )", mark,
                        R"(; while [ ! -e /gate/open ]; do sleep 0.02; done; echo released"])");
  }

 private:
  TempDir dir_;
};

// A config with one profile, "shell", that sees the gate; `top` adds
// top-level members.
std::string GatedConfig(const Gate& gate, const std::string& top) {
  return absl::StrCat("{", top, top.empty() ? "" : ",", R"("profiles": {"shell": {"binds": [{"source": ")",
                      gate.path(), R"(", "dest": "/gate"}], "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}}}})");
}

// The flags of a daemon whose config is GatedConfig(gate, top), written in `dir`.
std::vector<std::string> GatedDaemon(const Gate& gate, const TempDir& dir, const std::string& top = "") {
  return {"--config", WriteConfig(dir, GatedConfig(gate, top))};
}

// exec.* params naming `exec_id` (as JSON), with `more` members.
std::string ExecParams(const std::string& exec_id, const std::string& more = "") {
  return absl::StrCat(R"({"exec_id":)", exec_id, more, "}");
}

std::string GatedRun(int64_t id, const Gate& gate, const std::string& mark = "gated") {
  return RequestLine(id, "sandbox.run", absl::StrCat(R"({"argv":)", gate.Argv(mark), R"(,"timeout_ms":60000})"));
}

int64_t ErrorCode(const json::value& reply) {
  if (!reply.is_object() || !reply.as_object().contains("error")) return 0;
  return reply.at("error").at("code").as_int64();
}

std::string Message(const json::value& reply) {
  return std::string(reply.at("error").at("message").as_string());
}

// Polls health (answered at once, whatever runs) until `ok` holds; at most
// 20 s, the bound for a failure. The last health reply.
json::value WaitForHealth(SocketDaemon& d, const std::function<bool(const json::object&)>& ok) {
  json::value health;
  for (int i = 0; i < 2000; ++i) {
    health = d.Call(RequestLine(900000 + i, "health"));
    if (health.is_object() && health.as_object().contains("result") && ok(health.at("result").as_object())) break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return health;
}

auto Executions(int64_t running, int64_t queued) {
  return [running, queued](const json::object& h) {
    return h.at("executions").at("running").as_int64() == running &&
           h.at("executions").at("queued").as_int64() == queued;
  };
}

class DaemonControl : public HostHygieneTest {
 protected:
  // A daemon whose one profile sees gate_, with `top` members in its config
  // (written in a directory of its own).
  SocketDaemon& StartGated(const std::string& top = "") {
    dirs_.push_back(std::make_unique<TempDir>());
    daemons_.push_back(std::make_unique<SocketDaemon>(GatedDaemon(gate_, *dirs_.back(), top)));
    return *daemons_.back();
  }

  Gate gate_;

 private:
  std::vector<std::unique_ptr<TempDir>> dirs_;
  std::vector<std::unique_ptr<SocketDaemon>> daemons_;
};

// Every slot is taken and more executions wait; each control request, and
// every error, is answered meanwhile — before any of those executions.
TEST_F(DaemonControl, ControlIsAnsweredWhileEverySlotIsBusy) {
  SocketDaemon& d = StartGated(R"("concurrency": {"max_concurrent": 2, "max_queue": 8})");
  ASSERT_TRUE(d.up());
  DaemonClient runs(d.socket());
  for (int id = 1; id <= 4; ++id) ASSERT_TRUE(runs.Send(GatedRun(id, gate_)));
  json::value health = WaitForHealth(d, Executions(2, 2));
  ASSERT_TRUE(Executions(2, 2)(health.at("result").as_object())) << json::serialize(health);

  DaemonClient control(d.socket());
  json::value h = control.CallJson(RequestLine(10, "health"));
  EXPECT_EQ(h.at("result").at("status"), "ok") << json::serialize(h);
  EXPECT_EQ(h.at("result").at("executions").at("max_concurrent"), 2);
  json::value stats = control.CallJson(RequestLine(11, "pool.stats"));
  EXPECT_TRUE(stats.at("result").at("pools").as_object().contains("shell")) << json::serialize(stats);
  json::value probe = control.CallJson(RequestLine(12, "probe"));
  EXPECT_TRUE(probe.is_object() && probe.as_object().contains("result")) << json::serialize(probe);
  EXPECT_EQ(ErrorCode(control.CallJson(RequestLine(13, "exec.status", R"({"exec_id":"e999"})"))), -32004);
  EXPECT_EQ(ErrorCode(control.CallJson(RequestLine(14, "exec.cancel", R"({"exec_id":"e999"})"))), -32004);
  EXPECT_EQ(ErrorCode(control.CallJson("{not json")), -32700);
  EXPECT_EQ(ErrorCode(control.CallJson(RequestLine(15, "no.such.method"))), -32601);
  EXPECT_EQ(ErrorCode(control.CallJson(RequestLine(16, "sandbox.run", R"({"argv":"ls"})"))), -32602)
      << "bad params are answered at once, not after a slot";
  EXPECT_EQ(ErrorCode(control.CallJson(RequestLine(17, "pool.configure", R"({"min_idle":9,"max_idle":1})"))), -32602);
  json::value started = control.CallJson(RequestLine(18, "exec.start", R"({"argv":["true"]})"));
  EXPECT_EQ(started.at("result").at("state"), "queued") << json::serialize(started);
  json::value waited = control.CallJson(RequestLine(
      19, "exec.wait", ExecParams(json::serialize(started.at("result").at("exec_id")), R"(,"timeout_ms":1)")));
  EXPECT_EQ(waited.at("result").at("state"), "queued") << "a short wait ends by its timeout";
  EXPECT_FALSE(runs.HasReply()) << "an execution was answered before the control requests";

  gate_.Open();
  std::set<int64_t> ids;
  for (int i = 0; i < 4; ++i) {
    json::value r = ParseJson(runs.ReadLine().value_or(""));
    ASSERT_TRUE(r.is_object() && r.as_object().contains("result")) << json::serialize(r);
    EXPECT_EQ(r.at("result").at("stdout"), "released\n");
    ids.insert(r.at("id").as_int64());
  }
  EXPECT_EQ(ids, (std::set<int64_t>{1, 2, 3, 4}));
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// The same over stdio: the reply to health comes out while both runs wait.
TEST_F(DaemonControl, ControlIsAnsweredWhileEverySlotIsBusyOverStdio) {
  TempDir dir;
  const std::string config =
      WriteConfig(dir, GatedConfig(gate_, R"("concurrency": {"max_concurrent": 2, "max_queue": 8})"));
  RunningProcess daemon(CubicleArgv({"serve", "--config", config}),
                        absl::StrCat(GatedRun(1, gate_), "\n", GatedRun(2, gate_), "\n", RequestLine(3, "health"), "\n",
                                     "{not json\n", RequestLine(4, "pool.stats"), "\n"));
  ASSERT_TRUE(daemon.started());
  ASSERT_TRUE(daemon.WaitForStdout(R"("id":4)")) << daemon.StdoutSoFar();
  const std::string before = daemon.StdoutSoFar();
  EXPECT_TRUE(absl::StrContains(before, R"("id":3,"result")")) << before;
  EXPECT_TRUE(absl::StrContains(before, R"("code":-32700)")) << before;
  EXPECT_FALSE(absl::StrContains(before, R"("id":1)")) << before;
  EXPECT_FALSE(absl::StrContains(before, R"("id":2)")) << before;
  gate_.Open();
  ProcessRun done = daemon.Wait();  // EOF: it drains, then exits
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_EQ(Lines(done.out).size(), 5u) << done.out;
}

// 64 requests of every kind at once on one connection, and a batch: each
// id answered exactly once.
TEST_F(DaemonControl, SixtyFourConcurrentRequestsAreEachAnsweredOnce) {
  TempDir dir;
  SocketDaemon d({"--config", WriteConfig(dir, R"({"concurrency": {"max_concurrent": 4, "max_queue": 64},
      "profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}}}})")});
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  std::map<int64_t, std::string> sent;
  for (int id = 1; id <= 64; ++id) {
    switch (id % 5) {
      case 0: sent[id] = RequestLine(id, "health"); break;
      case 1: sent[id] = RequestLine(id, "sandbox.run", absl::StrCat(R"({"argv":["echo",")", id, R"("]})")); break;
      case 2: sent[id] = RequestLine(id, "pool.stats"); break;
      case 3: sent[id] = RequestLine(id, "exec.start", R"({"argv":["true"]})"); break;
      default: sent[id] = RequestLine(id, "sandbox.run", R"({"argv":42})"); break;
    }
  }
  for (const auto& [id, line] : sent) ASSERT_TRUE(c.Send(line));
  std::map<int64_t, int> answered;
  for (int i = 0; i < 64; ++i) {
    json::value r = ParseJson(c.ReadLine().value_or(""));
    ASSERT_TRUE(r.is_object()) << "reply " << i << " missing";
    const int64_t id = r.at("id").as_int64();
    ++answered[id];
    if (id % 5 == 1) {
      EXPECT_EQ(std::string(r.at("result").at("stdout").as_string()), absl::StrCat(id, "\n")) << json::serialize(r);
    }
    if (id % 5 == 4) {
      EXPECT_EQ(ErrorCode(r), -32602);
    }
  }
  // A last call: no reply to the 64 may come after all were answered.
  json::value last = c.CallJson(RequestLine(1000, "health"));
  EXPECT_EQ(last.at("id"), 1000) << "a duplicate reply came: " << json::serialize(last);
  EXPECT_EQ(answered.size(), 64u);
  for (const auto& [id, n] : answered) EXPECT_EQ(n, 1) << "id " << id;
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// A batch counts as its elements against max_queue: the ones beyond it are
// busy, the others run — as many at once as there are slots.
TEST_F(DaemonControl, ABatchCountsAsItsElementsAgainstTheQueue) {
  SocketDaemon& d = StartGated(R"("concurrency": {"max_concurrent": 2, "max_queue": 1})");
  ASSERT_TRUE(d.up());
  std::vector<std::string> elements;
  for (int id = 1; id <= 5; ++id) elements.push_back(GatedRun(id, gate_));
  DaemonClient c(d.socket());
  ASSERT_TRUE(c.Send(absl::StrCat("[", absl::StrJoin(elements, ","), "]")));
  json::value health = WaitForHealth(d, Executions(2, 1));
  EXPECT_TRUE(Executions(2, 1)(health.at("result").as_object())) << "two run in parallel, one waits: "
                                                                  << json::serialize(health);
  EXPECT_FALSE(c.HasReply()) << "the batch is answered as a whole";
  gate_.Open();
  json::value batch = ParseJson(c.ReadLine().value_or(""));
  ASSERT_TRUE(batch.is_array()) << json::serialize(batch);
  ASSERT_EQ(batch.as_array().size(), 5u);
  int ran = 0, busy = 0;
  for (const json::value& r : batch.as_array()) {
    if (r.as_object().contains("result")) {
      ++ran;
      EXPECT_EQ(r.at("result").at("stdout"), "released\n");
    } else {
      ++busy;
      EXPECT_EQ(ErrorCode(r), -32000);
      EXPECT_TRUE(absl::StrContains(Message(r), "busy")) << json::serialize(r);
    }
  }
  EXPECT_EQ(ran, 3);
  EXPECT_EQ(busy, 2);
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// exec.start answers with its id while the only slot is taken; cancel
// withdraws a queued execution (it never runs) and kills a running one;
// cancel of an ended one only answers.
TEST_F(DaemonControl, CancelReachesAQueuedAndARunningExecution) {
  SocketDaemon& d = StartGated(R"("concurrency": {"max_concurrent": 1, "max_queue": 8})");
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  auto call = [&](int64_t id, const std::string& method, const std::string& params) {
    return c.CallJson(RequestLine(id, method, params));
  };
  const std::string gated = absl::StrCat(R"({"argv":)", gate_.Argv(), R"(,"timeout_ms":60000})");
  json::value a = call(1, "exec.start", gated);
  ASSERT_TRUE(a.is_object() && a.as_object().contains("result")) << json::serialize(a);
  const std::string first = json::serialize(a.at("result").at("exec_id"));
  for (int i = 0; i < 2000; ++i) {  // until it has its slot, at most 20 s
    json::value st = call(20 + i, "exec.status", ExecParams(first));
    if (st.is_object() && st.at("result").at("state") == "running") break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  json::value b = call(2, "exec.start", gated);
  ASSERT_TRUE(b.is_object() && b.as_object().contains("result")) << json::serialize(b);
  EXPECT_EQ(b.at("result").at("state"), "queued");
  const std::string second = json::serialize(b.at("result").at("exec_id"));
  EXPECT_EQ(call(3, "exec.status", ExecParams(first)).at("result").at("state"), "running")
      << "exec.start answered while the slot was still taken";
  EXPECT_EQ(call(4, "exec.status", ExecParams(second)).at("result").at("state"), "queued");

  json::value withdrawn = call(5, "exec.cancel", ExecParams(second));
  EXPECT_EQ(withdrawn.at("result").at("state"), "cancelled") << json::serialize(withdrawn);
  json::value status = call(6, "exec.wait", ExecParams(second, R"(,"timeout_ms":20000)"));
  EXPECT_EQ(status.at("result").at("state"), "cancelled") << json::serialize(status);
  EXPECT_FALSE(status.at("result").as_object().contains("result")) << "it never ran";

  call(7, "exec.cancel", ExecParams(first));
  json::value killed = call(8, "exec.wait", ExecParams(first, R"(,"timeout_ms":20000)"));
  EXPECT_EQ(killed.at("result").at("state"), "done") << json::serialize(killed);
  EXPECT_EQ(killed.at("result").at("result").at("reason"), "killed") << "the gate was never opened";
  json::value again = call(9, "exec.cancel", ExecParams(first));
  EXPECT_EQ(again.at("result").at("state"), "done") << "an ended execution: cancel only answers";
  json::value stats = call(10, "pool.stats", "");
  const json::object& shell = stats.at("result").at("pools").at("shell").as_object();
  EXPECT_EQ(shell.at("hits").as_int64() + shell.at("misses").as_int64(), 1) << "only the first ran";
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// Waiting holds no slot: with one execution running and four exec.wait
// calls waiting for it, a /bin/true takes the other slot and is answered
// while every wait still waits.
TEST_F(DaemonControl, ExecWaitHoldsNoSlot) {
  SocketDaemon& d = StartGated(R"("concurrency": {"max_concurrent": 2, "max_queue": 8})");
  ASSERT_TRUE(d.up());
  json::value g = d.Call(RequestLine(1, "exec.start", absl::StrCat(R"({"argv":)", gate_.Argv(), R"(,"timeout_ms":60000})")));
  ASSERT_TRUE(g.is_object() && g.as_object().contains("result")) << json::serialize(g);
  const std::string id = json::serialize(g.at("result").at("exec_id"));
  WaitForHealth(d, Executions(1, 0));
  DaemonClient waits(d.socket());
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(waits.Send(RequestLine(10 + i, "exec.wait", ExecParams(id, R"(,"timeout_ms":60000)"))));
  }
  // The four waits are in flight (and the execution): in_flight is 5.
  json::value health = WaitForHealth(d, [](const json::object& h) { return h.at("in_flight").as_int64() == 5; });
  EXPECT_EQ(health.at("result").at("in_flight"), 5) << json::serialize(health);
  json::value run = d.Call(RequestLine(2, "sandbox.run", R"({"argv":["/bin/true"]})"));
  ASSERT_TRUE(run.is_object() && run.as_object().contains("result")) << json::serialize(run);
  EXPECT_EQ(run.at("result").at("reason"), "exited");
  EXPECT_FALSE(waits.HasReply()) << "a wait ended before the execution it waits for";
  gate_.Open();
  for (int i = 0; i < 4; ++i) {
    json::value r = ParseJson(waits.ReadLine().value_or(""));
    ASSERT_TRUE(r.is_object() && r.as_object().contains("result")) << json::serialize(r);
    EXPECT_EQ(r.at("result").at("state"), "done");
    EXPECT_EQ(r.at("result").at("result").at("stdout"), "released\n");
  }
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// A client that sends half a line and stops is closed after
// line_timeout_ms, told why; others are served meanwhile.
TEST_F(DaemonControl, AClientThatStallsMidLineIsClosed) {
  TempDir dir;
  SocketDaemon d({"--config", WriteConfig(dir, R"({"connections": {"line_timeout_ms": 200},
      "profiles": {"shell": {"pool": {"min_idle": 0, "max_idle": 1, "max_total": 4}}}})")});
  ASSERT_TRUE(d.up());
  DaemonClient stalled(d.socket());
  ASSERT_TRUE(stalled.SendRaw(R"({"jsonrpc":"2.0","id":1,"method":"hea)"));
  std::optional<std::string> why = stalled.ReadLine();
  ASSERT_TRUE(why.has_value()) << "closed without a word, or never";
  json::value error = ParseJson(*why);
  EXPECT_EQ(ErrorCode(error), -32600) << *why;
  EXPECT_TRUE(absl::StrContains(Message(error), "no complete line within 200 ms")) << *why;
  EXPECT_TRUE(stalled.ClosedByPeer());
  json::value h = d.Call(RequestLine(2, "health"));
  EXPECT_EQ(h.at("result").at("status"), "ok") << json::serialize(h);
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// With idle_timeout_ms, a silent connection is closed — but not one whose
// request is still running, though it has been silent longer.
TEST_F(DaemonControl, AnIdleConnectionIsClosedButNotOneWaitingForItsReply) {
  SocketDaemon& d = StartGated(R"("connections": {"idle_timeout_ms": 300})");
  ASSERT_TRUE(d.up());
  DaemonClient busy(d.socket());
  ASSERT_TRUE(busy.Send(GatedRun(1, gate_)));
  WaitForHealth(d, Executions(1, 0));
  DaemonClient idle(d.socket());  // connected after: its silence is the shorter
  std::optional<std::string> why = idle.ReadLine();
  ASSERT_TRUE(why.has_value());
  EXPECT_TRUE(absl::StrContains(*why, "idle for 300 ms")) << *why;
  EXPECT_TRUE(idle.ClosedByPeer());
  EXPECT_FALSE(busy.HasReply()) << "the connection with a request in flight was closed";
  gate_.Open();
  json::value r = ParseJson(busy.ReadLine().value_or(""));
  EXPECT_EQ(r.at("result").at("stdout"), "released\n") << json::serialize(r);
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// connections.on_disconnect: "cancel" (the default) kills what a client
// that left was running; "finish" lets it run. A client that only shut
// down its sending side still gets its reply.
TEST_F(DaemonControl, ADisconnectCancelsItsRequestsUnlessConfiguredToFinish) {
  {
    SocketDaemon& d = StartGated();
    ASSERT_TRUE(d.up());
    DaemonClient leaver(d.socket());
    ASSERT_TRUE(leaver.Send(GatedRun(1, gate_, "leaver-cancel")));
    ASSERT_TRUE(leaver.Send(GatedRun(2, gate_, "leaver-cancel")));
    WaitForHealth(d, Executions(2, 0));
    leaver.Close();
    json::value health = WaitForHealth(d, Executions(0, 0));
    EXPECT_TRUE(Executions(0, 0)(health.at("result").as_object())) << json::serialize(health);
    DaemonClient half(d.socket());
    ASSERT_TRUE(half.Send(RequestLine(3, "sandbox.run", R"({"argv":["echo","still read"]})")));
    half.ShutdownWrite();
    json::value r = ParseJson(half.ReadLine().value_or(""));
    EXPECT_EQ(r.at("result").at("stdout"), "still read\n") << json::serialize(r);
    EXPECT_EQ(d.Stop().exit_code, 0);
  }
  {
    SocketDaemon& d = StartGated(R"("connections": {"on_disconnect": "finish"})");
    ASSERT_TRUE(d.up());
    DaemonClient leaver(d.socket());
    ASSERT_TRUE(leaver.Send(GatedRun(1, gate_, "leaver-finish")));
    WaitForHealth(d, Executions(1, 0));
    leaver.Close();
    // A run on another connection comes and goes; the one left behind
    // still runs.
    json::value other = d.Call(RequestLine(2, "sandbox.run", R"({"argv":["true"]})"));
    EXPECT_EQ(other.at("result").at("reason"), "exited") << json::serialize(other);
    // Once that run has let go of its slot, the one left behind is the
    // only request in flight, and still running.
    json::value health = WaitForHealth(d, [](const json::object& h) {
      return h.at("executions").at("running").as_int64() == 1 && h.at("in_flight").as_int64() == 1;
    });
    EXPECT_EQ(health.at("result").at("executions").at("running"), 1) << json::serialize(health);
    EXPECT_EQ(health.at("result").at("in_flight"), 1) << json::serialize(health);
    gate_.Open();
    EXPECT_TRUE(Executions(0, 0)(WaitForHealth(d, Executions(0, 0)).at("result").as_object()));
    EXPECT_EQ(d.Stop().exit_code, 0);
  }
}

// SIGTERM drains for shutdown.drain_timeout_ms, then kills what still runs
// and exits: the execution's reply says killed, and nothing is left.
TEST_F(DaemonControl, TheDrainHasADeadline) {
  SocketDaemon& d = StartGated(R"("shutdown": {"drain_timeout_ms": 1500})");
  ASSERT_TRUE(d.up());
  const std::string mark = absl::StrCat("drain-", ::getpid(), "-mark");
  DaemonClient running(d.socket());
  ASSERT_TRUE(running.Send(GatedRun(1, gate_, mark)));
  WaitForHealth(d, Executions(1, 0));
  DaemonClient during(d.socket());  // connected before: served while draining
  ASSERT_TRUE(during.connected());
  const pid_t pid = d.pid();
  d.process().Signal(SIGTERM);
  json::value health;
  for (int i = 0; i < 500; ++i) {  // until the signal is taken, at most 5 s
    health = during.CallJson(RequestLine(100 + i, "health"));
    if (health.is_object() && health.at("result").at("status") == "draining") break;
    absl::SleepFor(absl::Milliseconds(10));
  }
  EXPECT_EQ(health.at("result").at("status"), "draining") << json::serialize(health);
  json::value refused = during.CallJson(RequestLine(2, "sandbox.run", R"({"argv":["true"]})"));
  EXPECT_EQ(ErrorCode(refused), -32005) << json::serialize(refused);
  json::value killed = ParseJson(running.ReadLine().value_or(""));
  ASSERT_TRUE(killed.is_object() && killed.as_object().contains("result")) << json::serialize(killed);
  EXPECT_EQ(killed.at("result").at("reason"), "killed") << "cancelled at the deadline, the gate never opened";
  ProcessRun done = d.process().Wait();
  EXPECT_EQ(done.exit_code, 0) << done.err;
  EXPECT_TRUE(absl::StrContains(done.err, "the drain's deadline")) << done.err;
  EXPECT_EQ(WaitUntilGone(mark), std::vector<pid_t>{}) << "the execution outlived the daemon";
  EXPECT_EQ(CgroupsMadeBy(pid), std::vector<std::string>{}) << "cgroups outlived the daemon";
  struct stat st;
  EXPECT_NE(::stat(d.socket().c_str(), &st), 0) << "the socket file was left behind";
}

// The descriptors in /proc/PID/fd.
size_t OpenFds(pid_t pid) { return ListDirectory(absl::StrCat("/proc/", pid, "/fd")).size(); }

// 5,000 exec.start under RLIMIT_NOFILE 1024: each answered, no queued or
// finished execution holds a descriptor, and the daemon serves on. A
// configuration the limit cannot hold is refused at start.
TEST_F(DaemonControl, FiveThousandExecStartsUnderAThousandDescriptors) {
  TempDir dir;
  SocketDaemon d(SocketDaemon::Options{
      {"--config", WriteConfig(dir, R"({"concurrency": {"max_concurrent": 2, "max_queue": 8192},
          "profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}}}})")},
      1024});
  ASSERT_TRUE(d.up()) << d.process().Wait().err;
  DaemonClient c(d.socket());
  constexpr int kStarts = 5000;
  std::string lines;
  for (int id = 1; id <= kStarts; ++id) {
    absl::StrAppend(&lines, RequestLine(id, "exec.start", R"({"argv":["true"]})"), "\n");
  }
  ASSERT_TRUE(c.SendRaw(lines));
  std::vector<std::string> ids;
  int answered = 0;
  for (int i = 0; i < kStarts; ++i) {
    json::value r = ParseJson(c.ReadLine().value_or(""));
    ASSERT_TRUE(r.is_object()) << "reply " << i << " missing";
    ++answered;
    ASSERT_TRUE(r.as_object().contains("result")) << json::serialize(r);
    ids.push_back(json::serialize(r.at("result").at("exec_id")));
  }
  EXPECT_EQ(answered, kStarts);
  EXPECT_LT(OpenFds(d.pid()), 400u) << "thousands of queued or ended executions hold descriptors";
  std::string cancels;
  for (size_t i = 0; i < ids.size(); ++i) {
    absl::StrAppend(&cancels, RequestLine(kStarts + 1 + i, "exec.cancel", ExecParams(ids[i])), "\n");
  }
  ASSERT_TRUE(c.SendRaw(cancels));
  for (int i = 0; i < kStarts; ++i) {
    json::value r = ParseJson(c.ReadLine().value_or(""));
    ASSERT_TRUE(r.is_object() && r.as_object().contains("result")) << json::serialize(r);
  }
  json::value run = c.CallJson(RequestLine(20000, "sandbox.run", R"({"argv":["echo","usable"]})"));
  ASSERT_TRUE(run.is_object() && run.as_object().contains("result")) << json::serialize(run);
  EXPECT_EQ(run.at("result").at("stdout"), "usable\n");
  EXPECT_LT(OpenFds(d.pid()), 400u);
  EXPECT_EQ(d.Stop().exit_code, 0);

  // 64 executions at once need more than 1024 descriptors: refused up front.
  ProcessRun refused = RunProcess(
      {"/bin/sh", "-c", R"(ulimit -Sn 1024 && ulimit -Hn 1024 && exec "$0" serve --config "$1")", CubicleBinary(),
       WriteConfig(dir, R"({"concurrency": {"max_concurrent": 64}, "profiles": {"shell": {}}})")});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_TRUE(absl::StrContains(refused.err, "RLIMIT_NOFILE is 1024")) << refused.err;
  EXPECT_TRUE(absl::StrContains(refused.err, "concurrency.max_concurrent 64")) << refused.err;
}

// A profile that names no limit runs with the built-in memory and pids
// limits, on the pooled path and the cold one.
TEST_F(DaemonControl, AProfileWithNoLimitsGetsTheDefaultMemoryAndPidsLimits) {
  if (!runtime::CgroupsUsable().ok()) GTEST_SKIP() << "no usable cgroups: " << runtime::CgroupsUsable();
  TempDir dir;
  SocketDaemon d({"--config", WriteConfig(dir, R"({"profiles": {"shell": {"pool": {"min_idle": 1, "max_idle": 1, "max_total": 4}}}})")});
  ASSERT_TRUE(d.up());
  REQUIRE_HOST(Python3());
  json::value warm = d.Call(RequestLine(1, "pool.warm", R"({"count":1,"timeout_ms":20000})"));
  EXPECT_TRUE(warm.at("result").at("warm").as_bool()) << json::serialize(warm);
  // More threads than the default 1024 pids: the last ones cannot start.
  constexpr char kThreads[] = R"PY(
import threading
gate = threading.Event()
n = 0
try:
    for _ in range(1100):
        threading.Thread(target=gate.wait, daemon=True).start()
        n += 1
except RuntimeError:
    print("stopped at", n)
gate.set()
)PY";
  json::value bomb = d.Call(RequestLine(
      2, "sandbox.run", absl::StrCat(R"({"argv":["python3","-c",)", json::serialize(json::value(kThreads)), "]}")));
  ASSERT_TRUE(bomb.is_object() && bomb.as_object().contains("result")) << json::serialize(bomb);
  EXPECT_TRUE(absl::StartsWith(std::string(bomb.at("result").at("stdout").as_string()), "stopped at"))
      << "no pids limit stopped 1100 threads: " << json::serialize(bomb);
  // More memory than the default (1 GiB at most): the kernel OOM-kills.
  json::value hog = d.Call(RequestLine(3, "sandbox.run", R"J({"argv":["python3","-c","b = b'x' * (1200 << 20)"]})J"));
  ASSERT_TRUE(hog.is_object() && hog.as_object().contains("result")) << json::serialize(hog);
  EXPECT_EQ(hog.at("result").at("reason"), "oom") << json::serialize(hog);
  EXPECT_EQ(d.Stop().exit_code, 0);
}

// A bad configuration is refused before anything is made: the daemon
// exits 2 naming the key, and leaves no socket behind.
TEST_F(DaemonControl, BadConfigurationsAreRefusedWithClearErrors) {
  TempDir dir;
  const std::string socket = dir.Join("rpc.sock");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"ceilings": {"memory": "Unlimited"}, "profiles": {"shell": {}}})",
       R"(ceilings.memory: 'Unlimited' is not a size (expected 256M, bytes or "unlimited"))"},
      {R"({"ceilings": {"pids": "none"}, "profiles": {"shell": {}}})",
       R"(ceilings.pids: expected a whole number or "unlimited", got 'none')"},
      {R"({"profiles": {"shell": {"limits": {"memory": "unlimited"}}}})",
       "profiles.shell.limits.memory: unlimited exceeds the ceiling"},
      {R"({"ceilings": {"pids": 100}, "profiles": {"shell": {"limits": {"pids": "unlimited"}}}})",
       "profiles.shell.limits.pids: unlimited exceeds the ceiling 100 (ceilings.pids)"},
      {R"({"connections": {"on_disconnect": "ignore"}, "profiles": {"shell": {}}})",
       "connections.on_disconnect: 'ignore' is not a policy (expected cancel or finish)"},
      {R"({"connections": {"line_timeout_ms": 0}, "profiles": {"shell": {}}})", "connections.line_timeout_ms"},
      {R"({"shutdown": {"drain_timeout_ms": "30s"}, "profiles": {"shell": {}}})", "shutdown.drain_timeout_ms"},
  };
  for (const auto& [text, expected] : cases) {
    ProcessRun run = RunCubicle({"serve", "--config", WriteConfig(dir, text), "--socket", socket});
    EXPECT_EQ(run.exit_code, 2) << text << "\n" << run.err;
    EXPECT_TRUE(absl::StrContains(run.err, expected)) << text << "\n" << run.err;
    struct stat st;
    EXPECT_NE(::stat(socket.c_str(), &st), 0) << "a socket was made for " << text;
  }
}

// A second daemon on a socket a live one serves refuses to start, naming
// the first's pid, instead of unlinking it and taking its clients; the
// first serves on.
TEST_F(DaemonControl, ASecondDaemonOnALiveSocketRefusesNamingTheFirst) {
  SocketDaemon a;
  ASSERT_TRUE(a.up());
  ProcessRun b = RunCubicle({"serve", "--socket", a.socket()});
  EXPECT_NE(b.exit_code, 0) << b.err;
  EXPECT_FALSE(b.timed_out);
  EXPECT_TRUE(absl::StrContains(b.err, absl::StrCat("is served by pid ", a.pid()))) << b.err;
  json::value health = a.Call(RequestLine(1, "health"));
  EXPECT_TRUE(health.is_object() && health.as_object().contains("result")) << json::serialize(health);
}

}  // namespace
}  // namespace cubicle::test_support
