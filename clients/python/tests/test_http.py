"""The HTTP front from the client: bearer keys and their scopes, keep-alive,
statuses that are not JSON-RPC replies, and what a dead port looks like."""
from __future__ import annotations

import http.client
import json
import socket
import time
import unittest
from unittest import mock

import cubicle
from cubicle import http_transport
from daemon_fixture import (ADMIN_KEY, CONFIG, HEALTH_KEY, SIGNING_NAME, SIGNING_SECRET, SocketDaemon, Workdir,
                            require_binary)

DAEMON: SocketDaemon
WORKDIR: Workdir
WAIT = 60.0


def setUpModule() -> None:
    global DAEMON, WORKDIR
    require_binary()
    # A short line timeout, so that the daemon closes idle kept-alive
    # connections soon (the reconnect case below).
    WORKDIR = Workdir({**CONFIG, "connections": {"line_timeout_ms": 300}})
    DAEMON = SocketDaemon(WORKDIR)


def tearDownModule() -> None:
    status = DAEMON.stop()
    WORKDIR.remove()
    assert status == 0, f"the daemon exited with status {status}"


def pool_requests(client: cubicle.Client) -> int:
    """Sandboxes asked for so far (hits + misses of every pool)."""
    return sum(p.hits + p.misses for p in client.pool_stats().values())


class HttpAuthTest(unittest.TestCase):
    def admin(self) -> cubicle.Client:
        client = cubicle.connect_http(DAEMON.url, api_key=ADMIN_KEY, timeout=WAIT)
        self.addCleanup(client.close)
        return client

    def test_a_bearer_key_runs(self) -> None:
        self.assertEqual(self.admin().run(["echo", "over http"]).stdout, "over http\n")

    def test_no_key_or_a_wrong_key_is_auth_error_and_nothing_runs(self) -> None:
        admin = self.admin()
        before = pool_requests(admin)
        for key in (None, ADMIN_KEY + "x", ADMIN_KEY[1:]):
            with self.subTest(key=key and key[:8]):
                client = cubicle.connect_http(DAEMON.url, api_key=key, timeout=WAIT)
                with self.assertRaises(cubicle.AuthError) as caught:
                    client.run(["true"])
                client.close()
                self.assertEqual(caught.exception.status, 401)
                self.assertIn("bearer key", caught.exception.message)
        self.assertEqual(pool_requests(admin), before, "a refused request ran")

    def test_a_key_scoped_to_health_is_forbidden_the_rest(self) -> None:
        client = cubicle.connect_http(DAEMON.url, api_key=HEALTH_KEY, timeout=WAIT)
        self.addCleanup(client.close)
        self.assertEqual(client.health().status, "ok")
        with self.assertRaises(cubicle.AuthError) as caught:
            client.run(["true"])
        self.assertEqual(caught.exception.status, 403)
        self.assertIn("sandbox.run", caught.exception.message)

    def test_a_notification_is_answered_with_nothing(self) -> None:
        client = self.admin()
        self.assertIsNone(client.notify("health"))
        self.assertEqual(client.health().status, "ok", "the connection serves on")


class HmacSigningTest(unittest.TestCase):
    """Requests signed with a key's secret (X-Cubicle-Signature), which never
    crosses the wire."""

    def signed(self, secret: str = SIGNING_SECRET, name: str = SIGNING_NAME) -> cubicle.Client:
        client = cubicle.connect_http(DAEMON.url, key_name=name, secret=secret, timeout=WAIT)
        self.addCleanup(client.close)
        return client

    def test_a_signed_request_runs(self) -> None:
        client = self.signed()
        self.assertEqual(client.run(["echo", "signed"]).stdout, "signed\n")
        self.assertEqual(client.health().status, "ok", "each request is signed afresh")

    def test_a_wrong_secret_or_an_unknown_name_is_auth_error(self) -> None:
        for name, secret in ((SIGNING_NAME, SIGNING_SECRET + "x"), ("nobody", SIGNING_SECRET)):
            with self.subTest(name=name):
                with self.assertRaises(cubicle.AuthError) as caught:
                    self.signed(secret, name).health()
                self.assertEqual(caught.exception.status, 401)

    def test_a_timestamp_off_the_servers_clock_is_refused(self) -> None:
        for skew in (-120, 120):
            with self.subTest(skew=skew):
                with mock.patch.object(http_transport, "_now", lambda: time.time() + skew):
                    with self.assertRaises(cubicle.AuthError) as caught:
                        self.signed().health()
                self.assertEqual(caught.exception.status, 401)
        with mock.patch.object(http_transport, "_now", lambda: time.time() - 5):
            self.assertEqual(self.signed().health().status, "ok", "a small skew is within the window")

    def test_a_replayed_or_altered_request_is_refused(self) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": time.monotonic_ns(), "method": "health"}).encode()
        timestamp = str(int(time.time()))
        headers = {"Content-Type": "application/json", "X-Cubicle-Key-Name": SIGNING_NAME,
                   "X-Cubicle-Timestamp": timestamp,
                   "X-Cubicle-Signature": cubicle.signature(SIGNING_SECRET, timestamp, "POST", "/rpc", body)}
        statuses = []
        for sent in (body, body, body.replace(b"health", b"pool.stats")):
            conn = http.client.HTTPConnection("127.0.0.1", DAEMON.port, timeout=WAIT)
            conn.request("POST", "/rpc", body=sent, headers=headers)
            response = conn.getresponse()
            response.read()
            statuses.append(response.status)
            conn.close()
        self.assertEqual(statuses, [200, 401, 401], "signed once; replayed; the body changed under the signature")


class HttpConnectionTest(unittest.TestCase):
    def test_calls_in_a_row_reuse_one_connection(self) -> None:
        client = cubicle.connect_http(DAEMON.url, api_key=ADMIN_KEY, timeout=WAIT)
        self.addCleanup(client.close)
        client.health()
        first = client.transport._idle[0]
        for _ in range(3):
            client.health()
        self.assertEqual(client.transport._idle, [first])

    def test_a_connection_the_daemon_closed_while_idle_is_replaced(self) -> None:
        client = cubicle.connect_http(DAEMON.url, api_key=ADMIN_KEY, timeout=WAIT)
        self.addCleanup(client.close)
        client.health()
        idle = client.transport._idle[0]
        self.assertTrue(closed_by_peer(idle.sock), "the daemon never closed the idle connection")
        self.assertEqual(client.run(["echo", "again"]).stdout, "again\n")
        self.assertIsNot(client.transport._idle[0], idle)

    def test_a_wrong_path_is_an_http_error(self) -> None:
        client = cubicle.connect_http(DAEMON.url + "/elsewhere", api_key=ADMIN_KEY, timeout=WAIT)
        self.addCleanup(client.close)
        with self.assertRaises(cubicle.HttpError) as caught:
            client.health()
        self.assertEqual(caught.exception.status, 404)
        self.assertIsInstance(caught.exception, cubicle.TransportError)

    def test_a_port_nobody_listens_on_is_a_transport_error(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]  # free again once closed, and nobody listens
        client = cubicle.connect_http(f"http://127.0.0.1:{port}", api_key=ADMIN_KEY, timeout=WAIT)
        with self.assertRaises(cubicle.TransportError):
            client.health()
        client.close()


def closed_by_peer(sock: socket.socket, tries: int = 500) -> bool:
    """Whether the peer closes `sock` (EOF readable), asking every 20 ms at most
    `tries` times (a bound for failures)."""
    for _ in range(tries):
        try:
            if sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b"":
                return True
        except BlockingIOError:
            pass
        except OSError:
            return True
        time.sleep(0.02)
    return False


if __name__ == "__main__":
    unittest.main()
