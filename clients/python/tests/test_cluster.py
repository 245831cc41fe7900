"""connect_cluster: rendezvous hashing of session keys over nodes, and the
routing, waiting and failover of calls, against fake nodes on a fake clock
(no daemon, no waiting); then against two real daemons, one of which goes
away (root: sessions need it)."""
from __future__ import annotations

import os
import shutil
import tempfile
import time
import unittest
from typing import Any, Callable, Dict, List, Optional

import cubicle
from cubicle import cluster
from cubicle.transport import Exchange
from daemon_fixture import ADMIN_KEY, CONFIG, SocketDaemon, Workdir, require_binary, require_root

KEYS = [f"conversation-{i}" for i in range(2000)]
NODES = [f"10.0.0.{i}:8080" for i in range(1, 6)]


def homes(nodes: List[str], keys: List[str] = KEYS) -> Dict[str, str]:
    return {k: cluster.rank(nodes, cluster.session_route(k))[0] for k in keys}


class RendezvousHashingTest(unittest.TestCase):
    def test_assignment_is_stable_whatever_the_order_nodes_come_in(self) -> None:
        first = homes(NODES)
        self.assertEqual(first, homes(list(reversed(NODES))))
        self.assertEqual(first, homes(NODES[2:] + NODES[:2]))
        # And a client of its own agrees, with nothing shared.
        transport = cluster.ClusterTransport(endpoints=list(reversed(NODES)), transport_factory=FakeNode)
        self.assertEqual(cluster.rank(transport.nodes(), cluster.session_route("conversation-7"))[0],
                         first["conversation-7"])

    def test_removing_a_node_moves_only_its_sessions_each_to_its_next_node(self) -> None:
        before = homes(NODES)
        gone = NODES[2]
        after = homes([n for n in NODES if n != gone])
        for key in KEYS:
            if before[key] != gone:
                self.assertEqual(after[key], before[key], key)
            else:
                self.assertEqual(after[key], cluster.rank(NODES, cluster.session_route(key))[1], key)
        self.assertTrue(any(before[k] == gone for k in KEYS))

    def test_a_new_node_takes_only_sessions_it_now_ranks_first_for(self) -> None:
        before = homes(NODES)
        new = "10.0.0.9:8080"
        after = homes(NODES + [new])
        moved = [k for k in KEYS if after[k] != before[k]]
        self.assertTrue(all(after[k] == new for k in moved))
        # About a sixth of them; the keys are fixed, so this is exact, not a chance.
        self.assertGreater(len(moved), len(KEYS) // 6 // 2)
        self.assertLess(len(moved), len(KEYS) // 6 * 2)

    def test_sessions_spread_over_the_nodes(self) -> None:
        counts = {n: 0 for n in NODES}
        for node in homes(NODES).values():
            counts[node] += 1
        share = len(KEYS) // len(NODES)
        for node, count in counts.items():
            self.assertGreater(count, share * 3 // 4, node)
            self.assertLess(count, share * 5 // 4, node)

    def test_node_names(self) -> None:
        self.assertEqual(cluster.node_name("fd00::1", 8080), "[fd00::1]:8080")
        self.assertEqual(cluster._parse_endpoint("10.1.2.3", 8080), "10.1.2.3:8080")
        self.assertEqual(cluster._parse_endpoint("[fd00::1]:9000", 8080), "[fd00::1]:9000")
        self.assertEqual(cluster._parse_endpoint("http://node-a:81", 8080), "node-a:81")
        with self.assertRaises(ValueError):
            cluster.ClusterTransport(endpoints=[], transport_factory=FakeNode)
        with self.assertRaises(ValueError):
            cluster.ClusterTransport(endpoints=NODES, dns_name="x", transport_factory=FakeNode)


# ---- fake nodes on a fake clock ------------------------------------------

class Reply(Exchange):
    def __init__(self, reply: Any) -> None:
        self._reply = reply

    def messages(self, timeout: Optional[float] = None):
        yield self._reply


class FakeNode:
    """What a daemon answers, in memory: sessions, executions, drains, outages."""

    WORK = {"session.exec", "sandbox.run", "skill.call", "exec.start"}

    def __init__(self, node: str) -> None:
        self.node = node
        self.sessions: Dict[str, Dict[str, str]] = {}
        self.archives: Optional[Dict[str, Dict[str, str]]] = None  # a shared store, when given
        self.executions: Dict[str, str] = {}
        self.calls: List[str] = []
        self.down = False
        self.draining = False
        self.break_after_send = False

    def open(self, message: Any, *, route: Any = None, stream: bool = False, timeout: Any = None) -> Exchange:
        if isinstance(message, list):
            return Reply([self.open(m).reply() for m in message])
        if self.down:
            raise cubicle.ConnectError(f"{self.node}: connect: refused")
        method, params = message["method"], message.get("params") or {}
        self.calls.append(method)
        if self.break_after_send:
            raise cubicle.TransportError(f"{self.node}: the connection broke")
        if self.draining and method in self.WORK:
            return self.error(message, -32005, "shutting down")
        key = params.get("session")
        if method == "session.create":
            restored = False
            if key not in self.sessions:
                saved = (self.archives or {}).get(key)
                self.sessions[key] = dict(saved or {})
                restored = saved is not None
            return self.ok(message, {"session": key, "restored": restored})
        if method in cluster.SESSION_METHODS or (method in ("exec.start", "exec.list") and key):
            if key not in self.sessions:
                return self.error(message, -32004, f"no session with key '{key}'")
            if method == "files.put":
                self.sessions[key][params["path"]] = params["data"]
            if method == "session.destroy":
                if self.archives is not None:
                    self.archives[key] = self.sessions[key]
                del self.sessions[key]
        if method == "exec.start":
            self.executions[params["exec_id"]] = "queued"
            return self.ok(message, {"exec_id": params["exec_id"], "state": "queued"})
        if method in cluster.EXEC_ID_METHODS:
            if params["exec_id"] not in self.executions:
                return self.error(message, -32004, f"no execution '{params['exec_id']}'")
            return self.ok(message, {"exec_id": params["exec_id"], "state": "done"})
        return self.ok(message, {"node": self.node, "session": key})

    @staticmethod
    def ok(message: Any, result: Any) -> Reply:
        return Reply({"jsonrpc": "2.0", "id": message.get("id"), "result": result})

    @staticmethod
    def error(message: Any, code: int, text: str) -> Reply:
        return Reply({"jsonrpc": "2.0", "id": message.get("id"), "error": {"code": code, "message": text}})

    def close(self) -> None:
        pass


class FakeCluster:
    """Nodes, a clock that only sleeping moves, and events at given times."""

    def __init__(self, count: int = 4, shared_archives: bool = False) -> None:
        self.now = 1000.0
        self.nodes = {f"10.0.0.{i}:8080": FakeNode(f"10.0.0.{i}:8080") for i in range(1, count + 1)}
        archives: Dict[str, Dict[str, str]] = {}
        for n in self.nodes.values():
            n.archives = archives if shared_archives else None
        self.events: List[tuple] = []  # (time, action)
        self.slept = 0.0

    def at(self, when: float, action: Callable[[], None]) -> None:
        self.events.append((self.now + when, action))

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        for event in [e for e in self.events if e[0] <= self.now]:
            self.events.remove(event)
            event[1]()

    def client(self, nodes: Optional[List[str]] = None, **options: Any) -> cubicle.ClusterClient:
        options.setdefault("failover_after_s", 90.0)
        transport = cluster.ClusterTransport(endpoints=nodes or list(self.nodes), transport_factory=self.nodes.get,
                                             clock=lambda: self.now, sleep=self.sleep, **options)
        return cubicle.ClusterClient(transport)

    def home(self, key: str, nodes: Optional[List[str]] = None) -> FakeNode:
        return self.nodes[cluster.rank(nodes or list(self.nodes), cluster.session_route(key))[0]]

    def holding(self, key: str) -> List[str]:
        return [n.node for n in self.nodes.values() if key in n.sessions]


class RoutingTest(unittest.TestCase):
    @staticmethod
    def live_session(key: str) -> tuple:
        """Four fake nodes, a client, and session `key` made on its home node."""
        c = FakeCluster()
        client = c.client()
        client.session(key)
        return c, client, c.home(key)

    def test_a_sessions_calls_all_reach_its_home_node(self) -> None:
        c = FakeCluster()
        client = c.client()
        s = client.session()  # no key given: the client makes one, so that it routes
        self.assertRegex(s.id, r"^s[0-9a-f]{26}$")
        home = c.home(s.id)
        s.put_file("uploads/a", "1")
        s.exec(["true"])
        s.list_files()
        self.assertEqual(c.holding(s.id), [home.node])
        self.assertEqual(client.node_of(s.id), home.node)
        for other in c.nodes.values():
            if other is not home:
                self.assertNotIn("session.create", other.calls)
                self.assertNotIn("files.put", other.calls)
        self.assertEqual(c.slept, 0)

    def test_an_execution_is_found_by_a_client_that_did_not_start_it(self) -> None:
        c = FakeCluster()
        c.client().session("k1")
        started = c.client().exec_start(["sleep", "1"], session="k1")
        self.assertRegex(started.exec_id, r"^r[0-9a-f]{16}-")
        home = c.home("k1")
        self.assertIn(started.exec_id, home.executions)
        fresh = c.client()
        self.assertEqual(fresh.exec_status(started.exec_id).state, "done")
        # The id's route named the node: one question, no search.
        self.assertEqual(sum(n.calls.count("exec.status") for n in c.nodes.values()), 2)

    def test_an_id_of_the_callers_own_is_searched_for_on_every_node(self) -> None:
        c = FakeCluster()
        started = c.client().exec_start(["true"], exec_id="job-42")
        holder = [n for n in c.nodes.values() if "job-42" in n.executions]
        self.assertEqual(len(holder), 1)
        self.assertEqual(c.client().exec_status("job-42").state, "done")
        self.assertEqual(started.exec_id, "job-42")
        with self.assertRaises(cubicle.NotFoundError):
            c.client().exec_status("no-such-job")

    def test_a_session_made_before_a_node_joined_is_still_found(self) -> None:
        c = FakeCluster(count=5)
        nodes = sorted(c.nodes)
        old = nodes[:4]
        # A key whose home is the fifth node once it is a member.
        key = next(k for k in KEYS if c.home(k, nodes).node == nodes[4])
        c.client(old).session(key)
        first_home = c.home(key, old)
        client = c.client(nodes)
        client.session_exec(key, ["true"])
        self.assertEqual(c.holding(key), [first_home.node])
        self.assertIn("session.exec", first_home.calls)
        self.assertNotIn("session.exec", c.nodes[nodes[4]].calls)

    def test_a_restarting_node_is_waited_for_and_keeps_its_sessions(self) -> None:
        c, client, home = self.live_session("k2")
        home.down = True  # its pod is being replaced
        c.at(20.0, lambda: setattr(home, "down", False))
        fresh = c.client()  # knows nothing yet
        fresh.session_exec("k2", ["true"])
        client.session_exec("k2", ["true"])
        self.assertEqual(c.holding("k2"), [home.node])
        self.assertGreaterEqual(c.slept, 20.0)
        self.assertLess(c.slept, 90.0)

    def test_a_draining_node_is_waited_for_too(self) -> None:
        c, client, home = self.live_session("k3")
        home.draining = True
        c.at(5.0, lambda: setattr(home, "draining", False))
        client.session_exec("k3", ["true"])
        self.assertEqual(home.calls.count("session.exec"), 2 + 5 - 1)  # refused every second, then run
        self.assertEqual(c.holding("k3"), [home.node])

    def test_past_failover_after_s_a_gone_nodes_session_is_made_again_elsewhere(self) -> None:
        c = FakeCluster(shared_archives=True)
        client = c.client()
        with client.session("k4", keep=True) as s:
            s.put_file("notes", "kept")
        client.destroy_session("k4", archive=True)  # archived (the fakes' shared store)
        client.session("k4")                        # and live again on its node
        home = c.home("k4")
        home.down = True                            # the node is gone for good
        with self.assertRaises(cubicle.NotFoundError):
            client.session_exec("k4", ["true"])     # the next node has not heard of it
        self.assertGreaterEqual(c.slept, 90.0)
        self.assertLess(c.slept, 90.0 + 15.0)
        again = client.session("k4")                # made there, from the last archive
        self.assertTrue(again.info.raw["restored"])
        self.assertEqual(set(c.holding("k4")), {home.node, c.home("k4", [n for n in c.nodes if n != home.node]).node})
        slept = c.slept
        client.session_exec("k4", ["true"])         # no more waiting for the gone node
        self.assertEqual(c.slept, slept)

    def test_stateless_calls_go_round_a_node_that_cannot_take_them(self) -> None:
        c = FakeCluster()
        for node in list(c.nodes.values())[:3]:
            node.down = True
        client = c.client()
        for _ in range(5):
            client.run(["true"])
        self.assertEqual(list(c.nodes.values())[3].calls.count("sandbox.run"), 5)
        self.assertEqual(c.slept, 0)
        for node in c.nodes.values():
            node.down = True
        with self.assertRaises(cubicle.TransportError):
            client.run(["true"])

    def test_a_request_that_reached_a_node_is_never_sent_again(self) -> None:
        c, client, home = self.live_session("k5")
        home.break_after_send = True
        with self.assertRaises(cubicle.TransportError):
            client.session_exec("k5", ["true"])
        self.assertEqual(home.calls.count("session.exec"), 1)
        self.assertEqual(sum(n.calls.count("session.exec") for n in c.nodes.values()), 1)

    def test_a_batch_across_sessions_is_refused(self) -> None:
        c = FakeCluster()
        client = c.client()
        with self.assertRaises(ValueError):
            client.batch([("session.get", {"session": "a"}), ("session.get", {"session": "b-other"})])
        answers = client.batch([("health", None), ("pool.stats", {})])
        self.assertEqual(len(answers), 2)

    def test_nodes_come_from_dns_and_a_vanished_one_stays_a_while(self) -> None:
        c = FakeCluster()
        listed = [sorted(c.nodes)]

        def resolver(name: str, port: int) -> List[str]:
            self.assertEqual((name, port), ("cubicle-nodes.cubicle.svc", 8080))
            return listed[0]

        transport = cluster.ClusterTransport(dns_name="cubicle-nodes.cubicle.svc", transport_factory=c.nodes.get,
                                             resolver=resolver, clock=lambda: c.now, sleep=c.sleep,
                                             refresh_s=5.0, failover_after_s=90.0)
        self.assertEqual(transport.nodes(), sorted(c.nodes))
        listed[0] = sorted(c.nodes)[:3]
        c.sleep(10.0)
        self.assertEqual(transport.nodes(), sorted(c.nodes))  # its pod may be restarting
        c.sleep(90.0)
        self.assertEqual(transport.nodes(), sorted(c.nodes)[:3])

    def test_the_resolver_real(self) -> None:
        nodes = cluster.ClusterTransport._resolve("localhost", 8080)
        self.assertTrue(nodes)
        self.assertTrue(all(n.endswith(":8080") for n in nodes))


# ---- two real daemons ------------------------------------------------------

class TwoDaemonsTest(unittest.TestCase):
    """A session lives on its node only; when that node goes away, the next
    node restores the session's last archive from a store both share."""

    def setUp(self) -> None:
        require_binary()
        require_root("sessions' workspaces are tmpfs mounts, and the shared store a bind mount")
        self.shared = tempfile.mkdtemp(prefix="itest-archives-")
        self.addCleanup(shutil.rmtree, self.shared)
        self.daemons: Dict[str, SocketDaemon] = {}
        for _ in range(2):
            workdir = Workdir(CONFIG)
            self.addCleanup(workdir.remove)
            os.mkdir(os.path.join(workdir.state, "archives"), 0o700)
            # The store both daemons share, where each looks for its own:
            # STATE/archives, bound from one directory in each daemon's
            # private mount namespace.
            prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                      'mount --bind "$1" "$2" && shift 2 && exec "$@"', "sh", self.shared,
                      os.path.join(workdir.state, "archives")]
            daemon = SocketDaemon(workdir, prefix=prefix)
            self.addCleanup(daemon.stop)
            self.daemons[f"127.0.0.1:{daemon.port}"] = daemon

    def test_affinity_then_node_loss(self) -> None:
        client = cubicle.connect_cluster(endpoints=list(self.daemons), api_key=ADMIN_KEY, timeout=60,
                                         failover_after_s=0.5, retry_interval_s=0.05, refresh_s=0.1)
        self.addCleanup(client.close)
        key = "conversation-node-loss"
        with client.session(key, profile="shell", idle_ttl_ms=1000, keep=True) as s:
            s.put_file("uploads/notes.txt", "kept by the shared store")
            self.assertEqual(s.exec(["cat", "uploads/notes.txt"]).stdout, "kept by the shared store")
        home = client.node_of(key)
        self.assertEqual(home, cluster.rank(list(self.daemons), cluster.session_route(key))[0])
        for node in self.daemons:
            listed = [i.session for i in client.node(node).list_sessions()]
            self.assertEqual(key in listed, node == home, node)
        # Reaped once idle (1 s): archived to the shared store.
        archive = os.path.join(self.shared, f"{key}.tar.zst")
        for _ in range(1000):  # at most 20 s
            if os.path.exists(archive) and key not in [i.session for i in client.node(home).list_sessions()]:
                break
            time.sleep(0.02)
        self.assertTrue(os.path.exists(archive), "the idle session was never archived")
        self.assertEqual(self.daemons[home].stop(), 0)  # the node goes away
        again = client.session(key, profile="shell")
        self.assertTrue(again.info.raw.get("restored"), again.info.raw)
        self.assertNotEqual(client.node_of(key), home)
        self.assertEqual(again.get_file("uploads/notes.txt"), b"kept by the shared store")
        again.destroy(archive=False)


if __name__ == "__main__":
    unittest.main()
