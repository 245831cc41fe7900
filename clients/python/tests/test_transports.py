"""The client against a real daemon, the same cases over each transport:
the Unix socket and HTTP (one daemon serving both) and stdio (a daemon the
client spawns itself)."""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import unittest

import cubicle
from daemon_fixture import (ADMIN_KEY, BINARY, ROOT, SocketDaemon, Workdir, descendants, isolation_prefix, leftovers,
                            require_binary)

DAEMON: SocketDaemon
WORKDIR: Workdir
WAIT = 60.0  # the bound on each reply, for failures only

SKILL = r"""
import json, sys
request = json.loads(sys.stdin.readline())
print("adding", file=sys.stderr, flush=True)
p = request["params"]
if p.get("fail"):
    answer = {"error": {"code": 7, "message": "asked to fail", "data": {"a": p["a"]}}}
else:
    answer = {"result": p["a"] + p["b"]}
print(json.dumps({"jsonrpc": "2.0", "id": request["id"], **answer}), flush=True)
"""


def setUpModule() -> None:
    global DAEMON, WORKDIR
    require_binary()
    WORKDIR = Workdir()
    DAEMON = SocketDaemon(WORKDIR)


def tearDownModule() -> None:
    below = descendants(DAEMON.process.pid)
    status = DAEMON.stop()
    WORKDIR.remove()
    assert status == 0, f"the daemon exited with status {status}"
    left = leftovers(DAEMON.process.pid, below)
    assert not left, f"the daemon left {left}"


class ClientCases:
    """Cases every transport must pass; a subclass says how to connect."""

    client: cubicle.Client

    def connect(self) -> cubicle.Client:
        raise NotImplementedError

    def setUp(self) -> None:
        self.client = self.connect()

    def workspace_root(self) -> str:
        """Under the daemon's workspace_roots (docs/config.md; root only)."""
        return WORKDIR.roots

    def test_run_returns_the_status_and_both_streams(self) -> None:
        r = self.client.run(["sh", "-c", r"printf 'hi\n'; printf '\377' >&2; exit 3"])
        self.assertEqual((r.reason, r.exit_code, r.status), ("exited", 3, 3))
        self.assertFalse(r.ok)
        self.assertEqual(r.stdout, "hi\n")
        self.assertEqual(r.stderr_data, b"\xff", "not UTF-8: it came as stderr_base64")
        self.assertIn("stderr_base64", r.raw)
        self.assertEqual((r.stdout_bytes, r.stderr_bytes), (3, 1))
        self.assertEqual(r.profile, "shell")

    def test_run_feeds_text_and_binary_stdin(self) -> None:
        self.assertEqual(self.client.run(["cat"], stdin="hello").stdout, "hello")
        binary = self.client.run(["od", "-An", "-tx1"], stdin=b"\x00\xff\x10")
        self.assertEqual(binary.stdout.split(), ["00", "ff", "10"])

    def test_truncated_output_says_so(self) -> None:
        r = self.client.run(["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a"], output_bytes=100)
        self.assertTrue(r.stdout_truncated)
        self.assertEqual(len(r.stdout), 100)
        self.assertEqual(r.stdout_bytes, 5000)

    def test_skill_call_returns_the_answer_and_logs(self) -> None:
        argv = ["python3", "-I", "-c", SKILL]
        answer = self.client.skill_call(argv, "add", {"a": 1, "b": 2}, profile="python")
        self.assertEqual(answer.unwrap(), 3)
        self.assertEqual(answer.logs, "adding\n")
        failed = self.client.skill_call(argv, "add", {"a": 5, "b": 0, "fail": True}, profile="python")
        self.assertFalse(failed.ok)
        with self.assertRaises(cubicle.SkillAnswerError) as caught:
            failed.unwrap()
        self.assertEqual((caught.exception.code, caught.exception.message, caught.exception.data),
                         (7, "asked to fail", {"a": 5}))

    def test_a_skill_by_name_answers_and_is_audited(self) -> None:
        listed = self.client.skill_list()
        self.assertIn("word-stats", [s["name"] for s in listed["skills"]])
        described = self.client.skill_describe("word-stats")
        answer = self.client.call_skill("word-stats", "stats", {"text": "a b a", "top": 1})
        self.assertEqual(answer.unwrap()["words"], 3)
        self.assertEqual(answer.skill["name"], "word-stats")
        self.assertEqual(answer.skill["id"], described["id"])
        self.assertIn("user_ms", answer.usage)
        lines = self.client.audit_query(skill=described["id"], limit=1000)
        self.assertTrue(lines, "the call is in the audit trail")
        self.assertEqual(lines[0]["skill"]["version"], answer.skill["version"])
        with self.assertRaises(cubicle.NotFoundError):
            self.client.call_skill("no-such-skill", "x")

    def test_a_skill_session_keeps_its_tally_and_streams_progress(self) -> None:
        progress = []
        with self.client.skill_session("tally", idle_timeout_ms=60000) as session:
            self.assertIn(session.key, [s["skill_session"] for s in self.client.skill_sessions()])
            first = session.call("add", {"values": [1, 2, 3]}, on_progress=progress.append)
            second = session.call("add", {"values": [4]}, on_progress=progress.append)
        self.assertEqual(first.unwrap(), {"count": 3, "total": 6.0, "mean": 2.0})
        self.assertEqual(second.unwrap()["count"], 4)  # the same process, its state kept
        self.assertEqual([(p["params"]["done"], p["params"]["of"]) for p in progress], [(1, 3), (2, 3), (3, 3), (1, 1)])
        self.assertTrue(all(p["skill_session"] == session.key for p in progress))
        self.assertEqual(session.ended["reason"], "killed")
        self.assertNotIn(session.key, [s["skill_session"] for s in self.client.skill_sessions()])
        with self.assertRaises(cubicle.NotFoundError):
            session.call("add", {"values": [1]})

    def test_a_skill_calls_the_skill_its_manifest_allows(self) -> None:
        answer = self.client.call_skill("text-report", "report", {"text": "to be or not to be"})
        self.assertEqual(answer.unwrap()["summary"], "6 words, most often 'to'")
        self.assertEqual(answer.raw["skill_calls"], 1)

    def test_environments_are_listed_and_an_unknown_one_is_not_found(self) -> None:
        listed = self.client.environment_list()
        self.assertIsNone(listed["dir"], "the fixture's daemon has no environments directory")
        self.assertEqual((listed["environments"], listed["errors"], listed["path"]), ([], [], "/env"))
        with self.assertRaises(cubicle.NotFoundError) as caught:
            self.client.call_skill("word-stats", "stats", {"text": "a"}, environment="sci@2")
        self.assertIn("no environment named 'sci'", caught.exception.message)
        with self.assertRaises(cubicle.NotFoundError):
            self.client.environment_describe("sci")
        with self.assertRaises(cubicle.InvalidParams):
            self.client.run(["true"], environment="sci@x")

    def test_a_skill_that_never_answers_is_skill_failed(self) -> None:
        with self.assertRaises(cubicle.SkillFailed) as caught:
            self.client.skill_call(["sh", "-c", "echo not an answer; exit 4"], "x", profile="shell")
        self.assertEqual(caught.exception.code, -32007)
        self.assertIn("reason", caught.exception.data)
        self.assertIn("not an answer", caught.exception.data.get("stdout_tail", ""))

    def test_errors_are_raised_as_their_codes_subclass(self) -> None:
        cases = [
            (lambda: self.client.call("no.such.method"), cubicle.MethodNotFound, "no.such.method"),
            (lambda: self.client.call("sandbox.run", {"argv": ["true"], "timeout_ms": "500"}),
             cubicle.InvalidParams, "params.timeout_ms"),
            (lambda: self.client.run(["true"], profile="no-such-profile"), cubicle.NotFoundError, "no-such-profile"),
            (lambda: self.client.run(["true"], timeout_ms=10 ** 8), cubicle.LimitExceeded, "timeout_ms"),
            (lambda: self.client.exec_status("e-unknown"), cubicle.NotFoundError, "e-unknown"),
        ]
        for call, cls, named in cases:
            with self.subTest(expected=cls.__name__):
                with self.assertRaises(cls) as caught:
                    call()
                self.assertEqual(caught.exception.code, cls.code)
                self.assertIn(named, caught.exception.message)
                self.assertIsInstance(caught.exception, cubicle.RpcError)

    def test_a_second_exec_id_is_a_conflict_naming_the_first(self) -> None:
        exec_id = f"py-{type(self).__name__}-{os.getpid()}-{time.monotonic_ns()}"
        self.client.exec_start(["true"], exec_id=exec_id)
        with self.assertRaises(cubicle.Conflict) as caught:
            self.client.exec_start(["true"], exec_id=exec_id)
        self.assertEqual(caught.exception.data.get("exec_id"), exec_id)
        self.assertEqual(self.client.exec_wait(exec_id, timeout_ms=30000).state, "done")

    def test_a_managed_execution_from_start_to_logs(self) -> None:
        started = self.client.exec_start(["sh", "-c", "echo out; echo err >&2"])
        self.assertIn(started.state, ("queued", "running", "done"))
        done = self.client.exec_wait(started.exec_id, timeout_ms=30000)
        self.assertEqual(done.state, "done")
        self.assertTrue(done.ended)
        self.assertEqual((done.result.stdout, done.result.stderr), ("out\n", "err\n"))
        page = self.client.exec_logs(started.exec_id, stream="stderr")
        self.assertEqual((page.data, page.next_offset, page.eof), ("err\n", 4, True))
        self.assertEqual(self.client.exec_status(started.exec_id).result.exit_code, 0)
        listed = [e.exec_id for e in self.client.exec_list(limit=1000).executions]
        self.assertIn(started.exec_id, listed)

    def test_batch_answers_each_call_in_order(self) -> None:
        answers = self.client.batch([("health", None), ("no.such", None), ("pool.stats", {})])
        self.assertEqual(answers[0]["status"], "ok")
        self.assertIsInstance(answers[1], cubicle.MethodNotFound)
        self.assertIn("shell", answers[2]["pools"])

    def test_calls_from_several_threads_get_their_own_replies(self) -> None:
        got: dict = {}

        def run(n: int) -> None:
            got[n] = self.client.run(["echo", str(n)]).stdout

        threads = [threading.Thread(target=run, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT)
        self.assertEqual(got, {n: f"{n}\n" for n in range(4)})

    def test_health_and_pool_stats_are_typed(self) -> None:
        health = self.client.health()
        self.assertEqual(health.status, "ok")
        self.assertIn("max_concurrent", health.executions)
        stats = self.client.pool_stats()
        self.assertEqual(set(stats), {"shell", "python"})
        self.assertTrue(stats["python"].warm_interpreter)
        self.assertEqual(stats["shell"].max_total, 8)

    # ---- sessions (root: each workspace is a tmpfs the daemon mounts) ----

    def test_a_session_keeps_files_between_executions_and_is_destroyed_on_exit(self) -> None:
        require_root_for_sessions()
        with self.client.session(profile="shell") as s:
            self.assertTrue(s.info.created)
            self.assertEqual(s.info.profile, "shell")
            s.put_file("uploads/in.txt", "one two three")
            first = s.exec(["sh", "-c", "wc -w < uploads/in.txt > count; echo done > outputs/report.txt"])
            self.assertTrue(first.ok, first)
            self.assertEqual([f.path for f in first.outputs], ["outputs/report.txt"])
            second = s.exec(["cat", "count"])
            self.assertEqual(second.stdout.strip(), "3", "the second execution sees the first's file")
            self.assertEqual(s.get_file("outputs/report.txt"), b"done\n")
            self.assertEqual(sorted(f.path for f in s.list_files()), ["count", "outputs", "uploads"])
            info = s.stat("count", sha256=True)
            self.assertEqual((info.type, info.size, len(info.sha256)), ("file", 2, 64))
            s.delete_file("count")
            with self.assertRaises(cubicle.NotFoundError):
                s.get_file("count")
            self.assertIn(second.exec_id, [e.exec_id for e in s.executions().executions])
            key = s.id
        with self.assertRaises(cubicle.NotFoundError):
            self.client.get_session(key)

    def test_a_kept_session_outlives_its_block(self) -> None:
        require_root_for_sessions()
        with self.client.session(profile="shell", keep=True) as s:
            s.put_file("a", b"\x00\x01")
        try:
            self.assertEqual(self.client.get_session(s.id).session, s.id)
            again = self.client.session(s.id)
            self.assertFalse(again.info.created, "a live key is taken as it is")
            self.assertEqual(again.get_file("a"), b"\x00\x01")
        finally:
            self.client.destroy_session(s.id, archive=False)

    def test_a_busy_session_refuses_without_waiting_and_cancel_kills(self) -> None:
        require_root_for_sessions()
        with self.client.session(profile="shell") as s:
            started = self.client.exec_start(["sleep", "30"], session=s.id)
            try:
                running = wait_for(lambda: self.client.exec_status(started.exec_id).state == "running")
                self.assertTrue(running, "the long execution never ran")
                with self.assertRaises(cubicle.BusyError):
                    s.exec(["true"], wait=False)
            finally:
                self.client.exec_cancel(started.exec_id)
            ended = self.client.exec_wait(started.exec_id, timeout_ms=30000)
            self.assertEqual(ended.result.reason, "killed")

    # ---- streaming (exec.follow) --------------------------------------

    def test_streamed_chunks_follow_on_and_add_up_to_the_result(self) -> None:
        script = r"echo one; printf '\377\n'; echo two >&2; echo three"
        with self.client.stream(["sh", "-c", script]) as stream:
            chunks = list(stream)
        self.assertEqual(stream.status.state, "done")
        result = stream.result
        self.assertEqual((result.exit_code, result.stdout_data, result.stderr), (0, b"one\n\xff\nthree\n", "two\n"))
        self.assertEqual((stream.stdout, stream.stderr), (result.stdout_data, result.stderr_data))
        for name in ("stdout", "stderr"):
            offset = 0
            for chunk in (c for c in chunks if c.stream == name):
                self.assertEqual(chunk.offset, offset, "pieces of one stream follow on")
                offset += len(chunk.data)

    def test_following_an_ended_execution_from_an_offset_sends_the_rest(self) -> None:
        started = self.client.exec_start(["echo", "0123456789"])
        self.client.exec_wait(started.exec_id, timeout_ms=30000)
        with self.client.follow(started.exec_id, stdout_offset=4) as stream:
            rest = [(c.stream, c.offset, c.data) for c in stream]
        self.assertEqual(rest, [("stdout", 4, b"456789\n")])
        self.assertEqual(stream.result.stdout, "0123456789\n")

    def test_chunks_arrive_while_the_execution_runs(self) -> None:
        # The payload prints, then waits for a file that the test makes
        # only once the first chunk is here: the chunk came before the end.
        if not ROOT:
            self.skipTest("needs root: a host workspace is attached at hand-off only as root")
        workspace = tempfile.mkdtemp(dir=self.workspace_root())
        os.chmod(workspace, 0o755)
        self.addCleanup(shutil.rmtree, workspace)
        probe = self.client.run(["true"], workspace=workspace)
        if not probe.ok:  # an idmapped mount of it, say, that this host's filesystem cannot make
            self.skipTest(f"no host workspace on this host: {probe.reason}: {probe.error}")
        script = ("echo first; i=0; while [ ! -e /workspace/go ] && [ $i -lt 400 ]; do sleep 0.05; i=$((i+1)); done;"
                  " if [ -e /workspace/go ]; then echo second; else echo gave up; fi")
        with self.client.stream(["sh", "-c", script], workspace=workspace) as stream:
            chunks = iter(stream)
            first = next(chunks)
            self.assertEqual((first.stream, first.offset, first.text), ("stdout", 0, "first\n"))
            self.assertIsNone(stream.status, "the execution had not ended")
            open(os.path.join(workspace, "go"), "w").close()
            rest = b"".join(c.data for c in chunks)
        self.assertEqual(rest, b"second\n")
        self.assertEqual(stream.result.stdout, "first\nsecond\n")

    def test_a_stream_closed_early_leaves_the_client_usable(self) -> None:
        with self.client.stream(["sh", "-c", "echo a; sleep 30; echo b"]) as stream:
            first = next(iter(stream))
        self.assertEqual(first.text, "a\n")
        self.assertIsNone(stream.status)
        self.assertEqual(self.client.health().status, "ok", "what the abandoned follow still sends is dropped")
        self.assertEqual(stream.cancel().exec_id, stream.exec_id)
        self.assertEqual(self.client.exec_wait(stream.exec_id, timeout_ms=30000).result.reason, "killed")

    def test_a_client_side_timeout_raises_and_the_client_serves_on(self) -> None:
        with self.assertRaises(cubicle.CallTimeout):
            self.client.run(["sleep", "2"], timeout=0.2)
        self.assertEqual(self.client.run(["echo", "after"]).stdout, "after\n")

    def test_a_session_stream_writes_what_the_next_execution_reads(self) -> None:
        require_root_for_sessions()
        with self.client.session(profile="shell") as s:
            with s.stream(["sh", "-c", "echo streamed | tee note"]) as stream:
                self.assertEqual(b"".join(c.data for c in stream), b"streamed\n")
            self.assertEqual(stream.result.exit_code, 0)
            self.assertEqual(s.exec(["cat", "note"]).stdout, "streamed\n")


def require_root_for_sessions() -> None:
    if not ROOT:
        raise unittest.SkipTest("needs root: each session's workspace is a tmpfs the daemon mounts")


def wait_for(probe, tries: int = 500, pause: float = 0.02):
    """`probe()` once it is truthy, asking at most `tries` times (a bound for failures)."""
    for _ in range(tries):
        value = probe()
        if value:
            return value
        time.sleep(pause)
    return probe()


class UnixSocketTest(ClientCases, unittest.TestCase):
    def connect(self) -> cubicle.Client:
        client = cubicle.connect_unix(DAEMON.socket, timeout=WAIT)
        self.addCleanup(client.close)
        return client

    def test_nothing_listening_is_a_transport_error(self) -> None:
        with self.assertRaises(cubicle.TransportError) as caught:
            cubicle.connect_unix(WORKDIR.join("nobody.sock"))
        self.assertIn("nobody.sock", str(caught.exception))


class HttpTest(ClientCases, unittest.TestCase):
    def connect(self) -> cubicle.Client:
        client = cubicle.connect_http(DAEMON.url, api_key=ADMIN_KEY, timeout=WAIT)
        self.addCleanup(client.close)
        return client


class StdioTest(ClientCases, unittest.TestCase):
    """One spawned daemon for the class; closing the client ends it."""

    @classmethod
    def setUpClass(cls) -> None:
        require_binary()
        cls.workdir = Workdir()
        cls.log = open(cls.workdir.log, "ab")
        cls.shared = cubicle.spawn(["--config", cls.workdir.config, "--state-dir", cls.workdir.state],
                                   binary=BINARY, prefix=isolation_prefix(), stderr=cls.log, timeout=WAIT)

    @classmethod
    def tearDownClass(cls) -> None:
        process = cls.shared.transport.process
        below = descendants(process.pid)
        cls.shared.close()
        cls.log.close()
        cls.workdir.remove()
        assert process.returncode == 0, f"cubicle serve exited with status {process.returncode}"
        left = leftovers(process.pid, below)
        assert not left, f"the daemon left {left}"

    def connect(self) -> cubicle.Client:
        return self.shared

    def workspace_root(self) -> str:
        return self.workdir.roots

    def test_a_daemon_that_exits_at_once_says_so(self) -> None:
        with cubicle.spawn(["--no-such-flag"], binary=BINARY, stderr=self.log, timeout=WAIT) as client:
            with self.assertRaises(cubicle.TransportError) as caught:
                client.health()
            self.assertIn("status 2", str(caught.exception))

    def test_a_missing_binary_is_a_transport_error(self) -> None:
        with self.assertRaises(cubicle.TransportError):
            cubicle.spawn(binary=self.workdir.join("no-such-binary"))


if __name__ == "__main__":
    unittest.main()
