// Sessions of `cubicle serve` end to end (rpc/session_methods.cc,
// rpc/files_methods.cc, rpc/exec_records.cc): a workspace that lives across
// executions, its files API, its archive on destroy and on reap, its cap,
// the paths a payload plants in it, executions one at a time, and what a
// daemon finds in its state directory after another was killed; and, as
// any user, CoreSessionRootless. The fixture and its helpers:
// tests/support/session_daemon.h.
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <boost/json/serialize.hpp>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "tests/support/daemon_client.h"
#include "tests/support/host_probes.h"
#include "tests/support/sandbox_runner.h"
#include "tests/support/session_daemon.h"

namespace cubicle::test_support {
namespace {

namespace json = boost::json;

// Root only (SessionDaemonTest): each workspace is a tmpfs.
class Session : public SessionDaemonTest {};

// What an execution leaves in its session's workspace, the next one sees;
// outputs/ reports what each made or changed, hashed; the files API reads
// it; destroy archives it and a create with the same key brings it back,
// unless destroy was told not to archive.
TEST_F(Session, Flow) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());

  json::value created = Create(c, "flow");
  ASSERT_TRUE(HasResult(created)) << json::serialize(created);
  const json::value& info = created.at("result");
  EXPECT_EQ(info.at("session"), "flow");
  EXPECT_EQ(info.at("created"), true);
  EXPECT_EQ(info.at("restored"), false);
  EXPECT_EQ(info.at("workspace").at("size_bytes"), 512 << 20) << "sessions.workspace_bytes' default";
  EXPECT_EQ(info.at("workspace").at("capped"), true) << "root: a tmpfs of its own";

  json::value put = Put(c, "flow", "uploads/in.txt", "hello\n");
  ASSERT_TRUE(HasResult(put)) << json::serialize(put);
  EXPECT_EQ(put.at("result").at("size"), 6);

  // 1: reads the upload, writes outputs/a.txt.
  json::value one = Exec(c, "flow", "cat uploads/in.txt > outputs/a.txt && echo one >> outputs/a.txt && pwd");
  ASSERT_TRUE(HasResult(one)) << json::serialize(one);
  const json::value& r1 = one.at("result");
  EXPECT_EQ(r1.at("status"), 0) << json::serialize(r1);
  EXPECT_EQ(r1.at("stdout"), "/workspace\n");
  EXPECT_EQ(r1.at("session"), "flow");
  const std::string a1 = "hello\none\n";
  EXPECT_EQ(json::serialize(r1.at("outputs")),
            absl::StrCat(R"({"files":[{"path":"outputs/a.txt","size":)", a1.size(), R"(,"sha256":")", Sha256Hex(a1),
                         R"("}],"refused":[]})"));

  // 2: sees a.txt; changes nothing, so reports nothing.
  json::value two = Exec(c, "flow", "cat outputs/a.txt");
  ASSERT_TRUE(HasResult(two)) << json::serialize(two);
  EXPECT_EQ(two.at("result").at("status"), 0) << json::serialize(two);
  EXPECT_EQ(Str(two.at("result").at("stdout")), a1);
  EXPECT_EQ(json::serialize(two.at("result").at("outputs")), R"({"files":[],"refused":[]})");

  // 3: appends; the changed file is reported again, with its new hash.
  json::value three = Exec(c, "flow", "echo three >> outputs/a.txt");
  ASSERT_TRUE(HasResult(three)) << json::serialize(three);
  EXPECT_EQ(three.at("result").at("status"), 0) << json::serialize(three);
  const std::string a3 = a1 + "three\n";
  EXPECT_EQ(json::serialize(three.at("result").at("outputs")),
            absl::StrCat(R"({"files":[{"path":"outputs/a.txt","size":)", a3.size(), R"(,"sha256":")", Sha256Hex(a3),
                         R"("}],"refused":[]})"));

  json::value got = Get(c, "flow", "outputs/a.txt");
  ASSERT_TRUE(HasResult(got)) << json::serialize(got);
  EXPECT_EQ(got.at("result").at("size"), a3.size());
  EXPECT_EQ(Unb64(got.at("result").at("data")), a3);

  // The session's executions, newest first.
  json::value list = Call(c, "exec.list", R"({"session":"flow"})");
  ASSERT_TRUE(HasResult(list)) << json::serialize(list);
  std::vector<std::string> ids;
  for (const json::value& e : list.at("result").at("executions").as_array()) {
    ids.push_back(Str(e.at("exec_id")));
    EXPECT_EQ(e.at("state"), "done") << json::serialize(e);
    EXPECT_EQ(e.at("session"), "flow") << json::serialize(e);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{Str(three.at("result").at("exec_id")), Str(two.at("result").at("exec_id")),
                                           Str(one.at("result").at("exec_id"))}));

  json::value destroyed = Destroy(c, "flow", /*archive=*/true);
  ASSERT_TRUE(HasResult(destroyed)) << json::serialize(destroyed);
  EXPECT_EQ(json::serialize(destroyed.at("result")), R"({"session":"flow","destroyed":true,"archived":true})");
  EXPECT_EQ(ErrorCode(Call(c, "session.get", R"({"session":"flow"})")), -32004);
  EXPECT_EQ(WorkspaceMountsUnder(state_), std::vector<std::string>{}) << "destroy unmounts the workspace";

  json::value again = Create(c, "flow");
  ASSERT_TRUE(HasResult(again)) << json::serialize(again);
  EXPECT_EQ(again.at("result").at("created"), true);
  EXPECT_EQ(again.at("result").at("restored"), true) << json::serialize(again);
  EXPECT_EQ(Unb64(Get(c, "flow", "outputs/a.txt").at("result").at("data")), a3);
  EXPECT_EQ(Unb64(Get(c, "flow", "uploads/in.txt").at("result").at("data")), "hello\n");

  json::value gone = Destroy(c, "flow", /*archive=*/false);
  EXPECT_EQ(json::serialize(gone.at("result")), R"({"session":"flow","destroyed":true,"archived":false})");
  // Destroyed for good: the old archive does not come back either.
  json::value fresh = Create(c, "flow");
  ASSERT_TRUE(HasResult(fresh)) << json::serialize(fresh);
  EXPECT_EQ(fresh.at("result").at("restored"), false) << json::serialize(fresh);
  EXPECT_EQ(ErrorCode(Get(c, "flow", "outputs/a.txt")), -32004);
  EXPECT_TRUE(HasResult(Destroy(c, "flow", /*archive=*/false)));
}

// A session idle past its TTL is reaped (archived, unmounted); a create
// with its key restores it.
TEST_F(Session, IdleReap) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers(R"("idle_ttl_ms": 1000)")));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  json::value created = Create(c, "idle");
  ASSERT_TRUE(HasResult(created)) << json::serialize(created);
  EXPECT_EQ(created.at("result").at("idle_ttl_ms"), 1000);
  ASSERT_TRUE(HasResult(Put(c, "idle", "uploads/keep.txt", "kept\n")));

  json::value got;
  for (int i = 0; i < 150; ++i) {  // at most 30 s: the bound for a failure
    got = Call(c, "session.get", R"({"session":"idle"})");
    if (ErrorCode(got) == -32004) break;
    absl::SleepFor(absl::Milliseconds(200));
  }
  ASSERT_EQ(ErrorCode(got), -32004) << "never reaped: " << json::serialize(got);
  EXPECT_EQ(WorkspaceMountsUnder(state_), std::vector<std::string>{}) << "the reap unmounts the workspace";

  json::value again = Create(c, "idle");
  ASSERT_TRUE(HasResult(again)) << json::serialize(again);
  EXPECT_EQ(again.at("result").at("restored"), true) << json::serialize(again);
  json::value file = Get(c, "idle", "uploads/keep.txt");
  ASSERT_TRUE(HasResult(file)) << json::serialize(file);
  EXPECT_EQ(Unb64(file.at("result").at("data")), "kept\n");
  EXPECT_TRUE(HasResult(Destroy(c, "idle", /*archive=*/false)));
}

// Unknown sessions, keys that are not one file name, and sessions or files
// asked of a daemon without a state directory: each a clear error, and
// nothing made.
TEST_F(Session, BadInput) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  json::value unknown = Exec(c, "nobody", "true");
  EXPECT_EQ(ErrorCode(unknown), -32004) << json::serialize(unknown);
  EXPECT_TRUE(absl::StrContains(ErrorMessage(unknown), "nobody")) << json::serialize(unknown);
  EXPECT_EQ(ErrorCode(Get(c, "nobody", "a")), -32004);
  for (const char* key : {"../x", "a/b", ".hidden", ""}) {
    json::value bad = Create(c, key);
    // "" asks for a generated key: that one is made, and destroyed again.
    if (std::string(key).empty()) {
      ASSERT_TRUE(HasResult(bad)) << json::serialize(bad);
      EXPECT_TRUE(HasResult(Destroy(c, Str(bad.at("result").at("session")), false)));
      continue;
    }
    EXPECT_EQ(ErrorCode(bad), -32602) << key << ": " << json::serialize(bad);
  }
  EXPECT_EQ(ListDirectory(state_ + "/workspaces"), std::set<std::string>{});
  EXPECT_EQ(ListDirectory(dir_.path()), (std::set<std::string>{"config.json", "state"})) << "../x made nothing";
  EXPECT_EQ(ListDirectory(state_ + "/archives"), std::set<std::string>{});

  SocketDaemon& stateless = StartDaemon(SessionConfig(""));
  ASSERT_TRUE(stateless.up());
  DaemonClient s(stateless.socket());
  for (const json::value& reply :
       {Get(s, "x", "a"), Put(s, "x", "a", "b"), Call(s, "files.list", R"({"session":"x"})"), Create(s, "x"),
        Exec(s, "x", "true")}) {
    EXPECT_EQ(ErrorCode(reply), -32600) << json::serialize(reply);
    EXPECT_TRUE(absl::StrContains(ErrorMessage(reply), "sessions.state_dir")) << json::serialize(reply);
  }
}

// What a payload plants under outputs/ — symlinks out of the workspace, a
// FIFO, a sparse file of a terabyte — is refused by the collection, never
// followed, opened or read; the files API refuses to read or write through
// any of it, or to leave the workspace by name, and deletes a link itself.
TEST_F(Session, PathAttacks) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  ASSERT_TRUE(HasResult(Create(c, "attack")));
  json::value planted = Exec(c, "attack",
                             "ln -s /etc/shadow outputs/leak && ln -s /etc outputs/etcdir && mkfifo outputs/fifo && "
                             "truncate -s 1T outputs/sparse");
  ASSERT_TRUE(HasResult(planted)) << json::serialize(planted);
  ASSERT_EQ(planted.at("result").at("status"), 0) << json::serialize(planted);
  const json::value& outputs = planted.at("result").at("outputs");
  EXPECT_EQ(outputs.at("files").as_array().size(), 0u) << json::serialize(outputs);
  std::vector<std::string> refused;
  for (const json::value& r : outputs.at("refused").as_array()) {
    refused.push_back(Str(r.at("path")));
    EXPECT_FALSE(Str(r.at("reason")).empty()) << json::serialize(r);
  }
  EXPECT_EQ(refused, (std::vector<std::string>{"outputs/etcdir", "outputs/fifo", "outputs/leak", "outputs/sparse"}))
      << json::serialize(outputs);

  for (const char* path :
       {"outputs/leak", "outputs/etcdir/passwd", "../etc/passwd", "/etc/passwd", "outputs/fifo", "outputs/sparse"}) {
    json::value got = Get(c, "attack", path);  // the FIFO too answers: ReadLine's bound is for a failure only
    EXPECT_NE(ErrorCode(got), 0) << path << ": " << json::serialize(got);
    EXPECT_FALSE(HasResult(got)) << path;
  }
  const std::string planted_name = absl::StrCat("cubicle-session-test-", ::getpid());
  json::value through = Put(c, "attack", absl::StrCat("outputs/etcdir/", planted_name), "x");
  EXPECT_NE(ErrorCode(through), 0) << json::serialize(through);
  struct stat st;
  EXPECT_NE(::lstat(absl::StrCat("/etc/", planted_name).c_str(), &st), 0) << "files.put wrote through a symlink";
  if (::lstat(absl::StrCat("/etc/", planted_name).c_str(), &st) == 0) ::unlink(absl::StrCat("/etc/", planted_name).c_str());

  json::value deleted = Call(c, "files.delete", R"({"session":"attack","path":"outputs/leak"})");
  ASSERT_TRUE(HasResult(deleted)) << json::serialize(deleted);
  EXPECT_EQ(::lstat("/etc/shadow", &st), 0) << "files.delete removed the link's target";
  EXPECT_EQ(ErrorCode(Call(c, "files.stat", R"({"session":"attack","path":"outputs/leak"})")), -32004);
  json::value etcdir = Call(c, "files.stat", R"({"session":"attack","path":"outputs/etcdir"})");
  EXPECT_EQ(etcdir.at("result").at("type"), "symlink") << json::serialize(etcdir);
  EXPECT_TRUE(HasResult(Destroy(c, "attack", /*archive=*/false)));
}

// A workspace's cap is the kernel's: a payload that writes past it gets
// ENOSPC, files.put past it fails as "workspace is full" and leaves
// nothing; sessions.max_sessions bounds the live sessions.
TEST_F(Session, Quota) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers(R"("max_sessions": 2)")));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  json::value created = Create(c, "quota", R"(,"workspace_bytes":4194304)");
  ASSERT_TRUE(HasResult(created)) << json::serialize(created);
  EXPECT_EQ(json::serialize(created.at("result").at("workspace")), R"({"size_bytes":4194304,"capped":true})");
  EXPECT_EQ(ErrorCode(Create(c, "tiny", R"(,"workspace_bytes":1048575)")), -32602) << "1 MiB is the least";

  json::value flood = Exec(c, "quota", "head -c 8388608 /dev/zero > outputs/big");
  ASSERT_TRUE(HasResult(flood)) << json::serialize(flood);
  EXPECT_NE(flood.at("result").at("status"), 0) << json::serialize(flood);
  EXPECT_TRUE(absl::StrContains(Str(flood.at("result").at("stderr")), "No space left")) << json::serialize(flood);
  ASSERT_TRUE(HasResult(Call(c, "files.delete", R"({"session":"quota","path":"outputs/big"})")));

  // 3 MiB written by a payload fits; 2 MiB more by files.put does not. (A
  // request line holds at most 4 MiB, so a larger put cannot reach the
  // workspace at all.)
  json::value fill = Exec(c, "quota", "head -c 3145728 /dev/zero > uploads/fill");
  ASSERT_TRUE(HasResult(fill)) << json::serialize(fill);
  EXPECT_EQ(fill.at("result").at("status"), 0) << json::serialize(fill);
  json::value put = Put(c, "quota", "uploads/more", std::string(2 << 20, 'x'));
  EXPECT_EQ(ErrorCode(put), -32002) << json::serialize(put);
  EXPECT_TRUE(absl::StrContains(ErrorMessage(put), "workspace is full")) << json::serialize(put);
  EXPECT_EQ(ErrorCode(Call(c, "files.stat", R"({"session":"quota","path":"uploads/more"})")), -32004)
      << "a failed put leaves nothing";
  json::value listed = Call(c, "files.list", R"({"session":"quota","path":"uploads"})");
  ASSERT_TRUE(HasResult(listed)) << json::serialize(listed);
  EXPECT_EQ(listed.at("result").at("entries").as_array().size(), 1u) << "no temporary left: " << json::serialize(listed);

  ASSERT_TRUE(HasResult(Create(c, "second")));
  json::value third = Create(c, "third");
  EXPECT_EQ(ErrorCode(third), -32002) << json::serialize(third);
  EXPECT_TRUE(absl::StrContains(ErrorMessage(third), "sessions.max_sessions")) << json::serialize(third);
  EXPECT_FALSE(absl::StrContains(absl::StrJoin(ListDirectory(state_ + "/workspaces"), ","), "third"));
  EXPECT_TRUE(HasResult(Destroy(c, "second", /*archive=*/false)));
  EXPECT_TRUE(HasResult(Destroy(c, "quota", /*archive=*/false)));
}

// Executions in one session run one at a time, in the order admitted, even
// from two connections; with "wait": false one that would wait is refused.
TEST_F(Session, Serialized) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  ASSERT_TRUE(HasResult(Create(c, "ser")));
  DaemonClient a(d.socket()), b(d.socket());
  auto step = [](const char* who) {
    return absl::StrCat(R"({"session":"ser","argv":["sh","-c","echo start )", who,
                        R"( >> log; sleep 0.3; echo end )", who, R"( >> log"]})");
  };
  ASSERT_TRUE(a.Send(RequestLine(101, "session.exec", step("A"))));
  ASSERT_TRUE(b.Send(RequestLine(102, "session.exec", step("B"))));
  json::value ra = ParseJson(a.ReadLine().value_or(""));
  json::value rb = ParseJson(b.ReadLine().value_or(""));
  ASSERT_TRUE(HasResult(ra)) << json::serialize(ra);
  ASSERT_TRUE(HasResult(rb)) << json::serialize(rb);
  EXPECT_EQ(ra.at("result").at("status"), 0);
  EXPECT_EQ(rb.at("result").at("status"), 0);
  std::vector<std::string> log = Lines(Unb64(Get(c, "ser", "log").at("result").at("data")));
  ASSERT_EQ(log.size(), 4u) << absl::StrJoin(log, "|");
  const std::string first = log[0].substr(log[0].size() - 1);
  const std::string second = first == "A" ? "B" : "A";
  EXPECT_EQ(log, (std::vector<std::string>{"start " + first, "end " + first, "start " + second, "end " + second}));

  // One waits on a gate the test opens from the host (the workspace is
  // mounted there): files.put would itself wait behind the execution.
  ASSERT_TRUE(a.Send(RequestLine(
      103, "session.exec",
      R"({"session":"ser","argv":["sh","-c","while [ ! -e uploads/go ]; do sleep 0.02; done; echo released"],"timeout_ms":60000})")));
  json::value info;
  for (int i = 0; i < 1000; ++i) {  // at most 20 s: the bound for a failure
    info = Call(c, "session.get", R"({"session":"ser"})");
    if (HasResult(info) && info.at("result").at("executing") == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(info.at("result").at("executing"), 1) << json::serialize(info);
  json::value refused = Call(b, "session.exec", R"({"session":"ser","argv":["true"],"wait":false})");
  EXPECT_EQ(ErrorCode(refused), -32000) << json::serialize(refused);
  EXPECT_TRUE(absl::StrContains(ErrorMessage(refused), "session ser")) << json::serialize(refused);
  json::value refused_put = Call(b, "files.delete", R"({"session":"ser","path":"log","wait":false})");
  EXPECT_EQ(ErrorCode(refused_put), -32000) << json::serialize(refused_put);
  EXPECT_TRUE(WriteFile(state_ + "/workspaces/ser/uploads/go", ""));
  json::value released = ParseJson(a.ReadLine().value_or(""));
  ASSERT_TRUE(HasResult(released)) << json::serialize(released);
  EXPECT_EQ(Str(released.at("result").at("stdout")), "released\n");
  EXPECT_TRUE(HasResult(Get(c, "ser", "log"))) << "the refused delete deleted nothing";
  EXPECT_TRUE(HasResult(Destroy(c, "ser", /*archive=*/false)));
}

// While a session.exec holds the session, a files.put (waiting by default)
// queues behind it and writes only after it ends; a files.get, which takes
// no lease, answers while the execution still runs.
TEST_F(Session, FilesWritesWaitForTheExecutionReadsDoNot) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  ASSERT_TRUE(HasResult(Create(c, "files")));
  ASSERT_TRUE(HasResult(Put(c, "files", "uploads/early.txt", "early\n")));

  // The execution waits on a gate the test opens from the host, then says
  // whether the queued put had written meanwhile.
  DaemonClient exec(d.socket()), put(d.socket()), get(d.socket());
  ASSERT_TRUE(exec.Send(RequestLine(
      201, "session.exec",
      R"({"session":"files","timeout_ms":60000,"argv":["sh","-c",)"
      R"("while [ ! -e uploads/go ]; do sleep 0.02; done; if [ -e uploads/late.txt ]; then echo written; else echo not-yet; fi"]})")));
  json::value info;
  for (int i = 0; i < 1000; ++i) {  // at most 20 s: the bound for a failure
    info = Call(c, "session.get", R"({"session":"files"})");
    if (HasResult(info) && info.at("result").at("executing") == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(info.at("result").at("executing"), 1) << json::serialize(info);

  ASSERT_TRUE(put.Send(RequestLine(
      202, "files.put", absl::StrCat(R"({"session":"files","path":"uploads/late.txt","data":)", Quoted(B64("late\n")),
                                     "}"))));
  for (int i = 0; i < 1000; ++i) {  // at most 20 s: the bound for a failure
    info = Call(c, "session.get", R"({"session":"files"})");
    if (HasResult(info) && info.at("result").at("queued") == 1) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(info.at("result").at("queued"), 1) << "the put does not wait for the session: " << json::serialize(info);

  // The read answers now: the execution cannot have answered, its gate is shut.
  json::value early = Get(get, "files", "uploads/early.txt");
  ASSERT_TRUE(HasResult(early)) << json::serialize(early);
  EXPECT_EQ(Unb64(early.at("result").at("data")), "early\n");
  EXPECT_FALSE(exec.HasReply()) << "the execution answered before its gate opened";
  EXPECT_FALSE(put.HasReply()) << "the put answered while the execution held the session";

  EXPECT_TRUE(WriteFile(state_ + "/workspaces/files/uploads/go", ""));
  json::value ran = ParseJson(exec.ReadLine().value_or(""));
  ASSERT_TRUE(HasResult(ran)) << json::serialize(ran);
  EXPECT_EQ(Str(ran.at("result").at("stdout")), "not-yet\n") << "the put wrote while the execution ran";
  json::value written = ParseJson(put.ReadLine().value_or(""));
  ASSERT_TRUE(HasResult(written)) << json::serialize(written);
  EXPECT_EQ(written.at("id"), 202);
  EXPECT_EQ(Unb64(Get(c, "files", "uploads/late.txt").at("result").at("data")), "late\n");
}

// A daemon SIGKILLed with a session and a running managed execution: the
// next daemon on its state directory finds the session and its files, the
// finished execution's result, and the running one as "lost", whose id
// stays taken. The killed daemon's sandbox dies with it and leaves no
// cgroup.
TEST_F(Session, Restart) {
  const std::string config = SessionConfig(StateMembers());
  SocketDaemon& a = StartDaemon(config);
  ASSERT_TRUE(a.up());
  const pid_t a_pid = a.pid();
  DaemonClient c(a.socket());
  ASSERT_TRUE(HasResult(Create(c, "kept")));
  ASSERT_TRUE(HasResult(Put(c, "kept", "uploads/f.txt", "survives\n")));

  const std::string mark = absl::StrCat("30.", ::getpid(), "6");  // a unique sleep argument
  json::value started = Call(c, "exec.start", absl::StrCat(R"({"argv":["sleep",")", mark, R"("],"exec_id":"job-1"})"));
  ASSERT_TRUE(HasResult(started)) << json::serialize(started);
  EXPECT_EQ(started.at("result").at("exec_id"), "job-1");
  json::value fin = Call(c, "exec.start", R"({"argv":["sh","-c","echo fin"],"exec_id":"fin-1"})");
  ASSERT_TRUE(HasResult(fin)) << json::serialize(fin);
  json::value waited = Call(c, "exec.wait", R"({"exec_id":"fin-1","timeout_ms":30000})");
  ASSERT_EQ(waited.at("result").at("state"), "done") << json::serialize(waited);
  bool running = false;
  for (int i = 0; i < 1000 && !running; ++i) {  // at most 20 s: the bound for a failure
    running = Call(c, "exec.status", R"({"exec_id":"job-1"})").at("result").at("state") == "running" &&
              !ProcessesWithArgument(mark).empty();
    if (!running) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(running) << "job-1 never ran";
  // The groups are named after the process that made them: the daemon or
  // a fork server of its.
  std::vector<pid_t> makers = {a_pid};
  for (pid_t pid : Descendants(a_pid)) makers.push_back(pid);
  EXPECT_FALSE(CgroupsMadeBy(makers).empty()) << "daemon A made no cgroup to watch";

  c.Close();
  a.process().Signal(SIGKILL);
  a.process().Wait();
  std::vector<pid_t> sleepers = WaitUntilGone(mark);
  EXPECT_EQ(sleepers, std::vector<pid_t>{}) << "job-1's sandbox outlived daemon A's SIGKILL";
  for (pid_t pid : sleepers) ::kill(pid, SIGKILL);  // ours (A's), by pid, after a failure

  SocketDaemon& b = StartDaemon(config);
  ASSERT_TRUE(b.up());
  DaemonClient cb(b.socket());
  json::value info = Call(cb, "session.get", R"({"session":"kept"})");
  ASSERT_TRUE(HasResult(info)) << json::serialize(info);
  EXPECT_EQ(info.at("result").at("session"), "kept");
  EXPECT_EQ(info.at("result").at("executing"), 0);
  json::value file = Get(cb, "kept", "uploads/f.txt");
  ASSERT_TRUE(HasResult(file)) << json::serialize(file);
  EXPECT_EQ(Unb64(file.at("result").at("data")), "survives\n");

  json::value done = Call(cb, "exec.status", R"({"exec_id":"fin-1"})");
  ASSERT_TRUE(HasResult(done)) << json::serialize(done);
  EXPECT_EQ(done.at("result").at("state"), "done") << json::serialize(done);
  EXPECT_EQ(Str(done.at("result").at("result").at("stdout")), "fin\n") << json::serialize(done);
  EXPECT_EQ(done.at("result").at("result").at("status"), 0) << json::serialize(done);
  json::value lost = Call(cb, "exec.status", R"({"exec_id":"job-1"})");
  ASSERT_TRUE(HasResult(lost)) << json::serialize(lost);
  EXPECT_EQ(lost.at("result").at("state"), "lost") << json::serialize(lost);
  EXPECT_EQ(lost.at("result").at("result").at("reason"), "lost") << json::serialize(lost);
  json::value again = Call(cb, "exec.start", R"({"argv":["true"],"exec_id":"job-1"})");
  EXPECT_EQ(ErrorCode(again), -32003) << json::serialize(again);
  EXPECT_EQ(again.at("error").at("data").at("exec_id"), "job-1") << json::serialize(again);

  // Daemon B is up: whatever sweeps a killed daemon's groups has run.
  EXPECT_EQ(CgroupsMadeBy(makers), std::vector<std::string>{}) << "daemon A's cgroups outlived it";
  EXPECT_TRUE(HasResult(Destroy(cb, "kept", /*archive=*/false)));
}

// Two daemons on one state directory would hand out each other's sessions:
// the second refuses to start and names the first.
TEST_F(Session, SecondDaemonRefused) {
  SocketDaemon& a = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(a.up());
  ProcessRun b = RunCubicle({"serve", "--socket", dir_.Join("b.sock"), "--config", config_});
  EXPECT_NE(b.exit_code, 0) << b.err;
  EXPECT_FALSE(b.timed_out);
  EXPECT_TRUE(absl::StrContains(b.err, absl::StrCat("in use by cubicle pid ", a.pid()))) << b.err;
  struct stat st;
  EXPECT_NE(::stat(dir_.Join("b.sock").c_str(), &st), 0) << "the refused daemon listened";
  EXPECT_TRUE(HasResult(a.Call(RequestLine(1, "session.list", "{}")))) << "daemon A serves on";
}

// A session keeps the size and idle TTL it was created with across a
// restart: its tmpfs is still mounted with its cap, and a later restore
// must be bounded by that cap, not by the config's default.
TEST_F(Session, RestartKeepsTheSessionsShape) {
  const std::string config = SessionConfig(StateMembers());
  SocketDaemon& a = StartDaemon(config);
  ASSERT_TRUE(a.up());
  json::value created = a.Call(RequestLine(
      1, "session.create", R"({"session":"shaped","workspace_bytes":4194304,"idle_ttl_ms":600000})"));
  ASSERT_TRUE(HasResult(created)) << json::serialize(created);
  EXPECT_EQ(json::serialize(created.at("result").at("workspace")), R"({"size_bytes":4194304,"capped":true})");
  a.Stop();

  SocketDaemon& b = StartDaemon(config);
  ASSERT_TRUE(b.up());
  json::value info = b.Call(RequestLine(2, "session.get", R"({"session":"shaped"})"));
  ASSERT_TRUE(HasResult(info)) << json::serialize(info);
  EXPECT_EQ(json::serialize(info.at("result").at("workspace")), R"({"size_bytes":4194304,"capped":true})");
  EXPECT_EQ(info.at("result").at("idle_ttl_ms"), 600000);
}

// Host workspaces (workspace_roots) have leases too: a sandbox.run and an
// exec.start on one directory never run at once; "wait": false is refused
// naming it. exec.start in a session holds the session for its whole life,
// so a session.exec waits for it, and is listed with the session.
TEST_F(Session, LeasesHoldForHostWorkspacesAndManagedSessionRuns) {
  const std::string ws = dir_.Join("ws");
  ASSERT_EQ(::mkdir(ws.c_str(), 0755), 0);
  // Root's directory is attached idmapped (shown as the sandbox user).
  REQUIRE_HOST(IdmappedMounts(ws));
  SocketDaemon& d = StartDaemon(absl::StrCat(
      R"({"workspace_roots": [)", Quoted(dir_.path()), R"(], "sessions": {)", StateMembers(),
      R"(}, "profiles": {"shell": {"limits": {"memory": "256M", "pids": 64}, "pool": {"min_idle": 1, "max_total": 4}}}})"));
  ASSERT_TRUE(d.up());
  DaemonClient a(d.socket()), b(d.socket()), c(d.socket());
  // A managed run that waits for a gate the test opens from the host.
  const std::string gated = absl::StrCat(
      R"({"argv":["sh","-c","echo s1 >> /workspace/log; while [ ! -e /workspace/go ]; do sleep 0.02; done; echo e1 >> /workspace/log"],"timeout_ms":60000,"workspace":)",
      Quoted(ws), "}");
  json::value first = Call(a, "exec.start", gated);
  ASSERT_TRUE(HasResult(first)) << json::serialize(first);
  const std::string first_id = Str(first.at("result").at("exec_id"));
  std::string log;
  for (int i = 0; i < 1000 && log.empty(); ++i) {  // at most 20 s: the bound for a failure
    log = ReadFile(ws + "/log");
    if (log.empty()) absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_EQ(log, "s1\n");
  json::value refused = Call(b, "sandbox.run",
                             absl::StrCat(R"({"argv":["true"],"wait":false,"workspace":)", Quoted(ws), "}"));
  EXPECT_EQ(ErrorCode(refused), -32000) << json::serialize(refused);
  EXPECT_TRUE(absl::StrContains(ErrorMessage(refused), ws)) << json::serialize(refused);
  // This one waits its turn: its reply comes only after the gate opens.
  ASSERT_TRUE(b.Send(RequestLine(
      7, "sandbox.run",
      absl::StrCat(R"({"argv":["sh","-c","echo s2 >> /workspace/log; echo e2 >> /workspace/log"],"workspace":)",
                   Quoted(ws), "}"))));
  json::value early = Call(c, "health", "{}");
  ASSERT_TRUE(HasResult(early));
  EXPECT_FALSE(b.HasReply()) << "the second run did not wait for the first";
  ASSERT_TRUE(WriteFile(ws + "/go", ""));
  json::value second = ParseJson(b.ReadLine().value_or(""));
  ASSERT_TRUE(HasResult(second)) << json::serialize(second);
  EXPECT_EQ(ReadFile(ws + "/log"), "s1\ne1\ns2\ne2\n");
  json::value done = Call(a, "exec.wait", absl::StrCat(R"({"exec_id":)", Quoted(first_id), "}"));
  EXPECT_EQ(Str(done.at("result").at("state")), "done") << json::serialize(done);

  // A managed execution in a session.
  ASSERT_TRUE(HasResult(Create(c, "managed")));
  json::value started = Call(a, "exec.start", R"({"session":"managed","argv":["sh","-c","while [ ! -e uploads/go ]; do sleep 0.02; done; echo m > outputs/m.txt"],"timeout_ms":60000})");
  ASSERT_TRUE(HasResult(started)) << json::serialize(started);
  const std::string managed_id = Str(started.at("result").at("exec_id"));
  json::value busy = Call(b, "session.exec", R"({"session":"managed","argv":["true"],"wait":false})");
  for (int i = 0; i < 1000 && ErrorCode(busy) != -32000; ++i) {  // until it is admitted (at most 20 s)
    absl::SleepFor(absl::Milliseconds(20));
    busy = Call(b, "session.exec", R"({"session":"managed","argv":["true"],"wait":false})");
  }
  EXPECT_EQ(ErrorCode(busy), -32000) << json::serialize(busy);
  ASSERT_TRUE(WriteFile(state_ + "/workspaces/managed/uploads/go", ""));
  json::value ended = Call(a, "exec.wait", absl::StrCat(R"({"exec_id":)", Quoted(managed_id), "}"));
  ASSERT_EQ(Str(ended.at("result").at("state")), "done") << json::serialize(ended);
  const json::value& files = ended.at("result").at("result").at("outputs").at("files");
  ASSERT_EQ(files.as_array().size(), 1u) << json::serialize(ended);
  EXPECT_EQ(Str(files.at(0).at("path")), "outputs/m.txt");
  json::value list = Call(c, "exec.list", R"({"session":"managed"})");
  ASSERT_EQ(list.at("result").at("executions").as_array().size(), 1u) << json::serialize(list);
  EXPECT_EQ(Str(list.at("result").at("executions").at(0).at("exec_id")), managed_id);
  EXPECT_TRUE(HasResult(Destroy(c, "managed", /*archive=*/false)));
}

// A client that has the reply of a session.exec or a files.put may
// destroy the session at once: the call is over, and both let go of the
// workspace lease before they answer.
TEST_F(Session, ADestroyRightAfterTheReplyIsNotRefused) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  int refused = 0;
  for (int i = 0; i < 30; ++i) {
    const std::string key = absl::StrCat("quick-", i);
    ASSERT_TRUE(HasResult(Create(c, key)));
    json::value ran = i % 2 == 0 ? Exec(c, key, "true") : Put(c, key, "uploads/f", "x");
    ASSERT_TRUE(HasResult(ran)) << json::serialize(ran);
    json::value destroyed = Destroy(c, key, /*archive=*/false);
    if (!HasResult(destroyed)) {
      ++refused;
      ADD_FAILURE() << (i % 2 == 0 ? "after session.exec: " : "after files.put: ") << json::serialize(destroyed);
    }
  }
  EXPECT_EQ(refused, 0);
}

// Sessions as any user (tests/rootless.sh runs Core* unprivileged too):
// rootless, the workspace is a directory in a state directory the user
// owns, bound into each sandbox, and nothing caps it.
class CoreSessionRootless : public SessionDaemonTest {
 protected:
  bool RootOnly() const override { return false; }
};

// A file put in, read by an execution that writes outputs/x; outputs lists
// x with its hash; session.get says whether the kernel caps the workspace.
TEST_F(CoreSessionRootless, FilesInExecutionOutputsOut) {
  // No limits: rootless, a host may delegate no cgroup.
  SocketDaemon& d = StartDaemon(absl::StrCat(R"({"profiles": {"shell": {}}, "sessions": {)", StateMembers(), "}}"));
  ASSERT_TRUE(d.up()) << d.Stop().err;
  DaemonClient c(d.socket());
  json::value created = Create(c, "mine");
  ASSERT_TRUE(HasResult(created)) << json::serialize(created);

  json::value put = Put(c, "mine", "uploads/in.txt", "rootless?\n");
  ASSERT_TRUE(HasResult(put)) << json::serialize(put);
  json::value ran = Exec(c, "mine", "cat uploads/in.txt && tr a-z A-Z < uploads/in.txt > outputs/x");
  ASSERT_TRUE(HasResult(ran)) << json::serialize(ran);
  EXPECT_EQ(ran.at("result").at("status"), 0) << json::serialize(ran);
  EXPECT_EQ(Str(ran.at("result").at("stdout")), "rootless?\n") << json::serialize(ran);
  const std::string x = "ROOTLESS?\n";
  EXPECT_EQ(json::serialize(ran.at("result").at("outputs")),
            absl::StrCat(R"({"files":[{"path":"outputs/x","size":)", x.size(), R"(,"sha256":")", Sha256Hex(x),
                         R"("}],"refused":[]})"));
  json::value got = Get(c, "mine", "outputs/x");
  ASSERT_TRUE(HasResult(got)) << json::serialize(got);
  EXPECT_EQ(Unb64(got.at("result").at("data")), x);

  json::value info = Call(c, "session.get", R"({"session":"mine"})");
  ASSERT_TRUE(HasResult(info)) << json::serialize(info);
  EXPECT_EQ(info.at("result").at("workspace").at("capped"), IsRoot())
      << (IsRoot() ? "root: a tmpfs of its own" : "rootless: a plain directory") << ": " << json::serialize(info);
}

// A payload that fills a workspace larger than its memory limit is killed
// by the OOM killer (tmpfs pages are charged to its group and belong to no
// process, so init itself goes): the reason says so, not a setup failure,
// and the next execution sees what was written.
TEST_F(Session, FillingTheWorkspacePastTheMemoryLimitIsOom) {
  SocketDaemon& d = StartDaemon(SessionConfig(StateMembers()));  // memory 256M, workspace 512M
  ASSERT_TRUE(d.up());
  DaemonClient c(d.socket());
  ASSERT_TRUE(HasResult(Create(c, "oom")));
  // One process, so whichever the OOM killer takes — the writer, or init
  // once nothing but the tmpfs holds the memory — the run is over.
  json::value filled = Exec(c, "oom", "exec head -c 400000000 /dev/zero > big");
  ASSERT_TRUE(HasResult(filled)) << json::serialize(filled);
  EXPECT_EQ(Str(filled.at("result").at("reason")), "oom") << json::serialize(filled);
  json::value after = Exec(c, "oom", "test -s big && rm big && echo removed");
  ASSERT_TRUE(HasResult(after)) << json::serialize(after);
  EXPECT_EQ(Str(after.at("result").at("stdout")), "removed\n") << json::serialize(after);
  EXPECT_TRUE(HasResult(Destroy(c, "oom", /*archive=*/false)));
}

}  // namespace
}  // namespace cubicle::test_support
