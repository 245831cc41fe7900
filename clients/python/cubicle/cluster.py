"""Many daemons, one client: session affinity by rendezvous hashing.

A session's workspace lives on one node (a tmpfs its daemon mounted), so
every call on the session must reach that node. With one `cubicle serve`
per node (deploy/kubernetes) the client picks it: the nodes are the
addresses a headless Service's name resolves to (or a list given), and
each session key ranks them by rendezvous (highest random weight)
hashing: score(node, key) = the first 8 bytes of SHA-256(node | key),
highest first. Every client that sees the same nodes ranks them the same
way with nothing shared, and a node that leaves moves only its own
sessions (each to its next node), one that joins takes only the sessions
it now ranks first for.

What goes where:
- session.*, files.*, exec.start and exec.list with a `session`: to the
  node that holds the session. The client asks the session's first
  `probe_depth` nodes, in rank order, which holds it (`session.get`), so a
  session made before the nodes changed is still found; a session that no
  node holds is made on the first that answers. It remembers the answer.
- exec.status, exec.wait, exec.follow, exec.logs, exec.cancel: to the node
  that ran the execution. Ids the client makes itself (it gives every
  exec.start one) carry the route they were sent by, so another client
  process finds them at once; other ids are looked for on every node.
- everything else (sandbox.run, skill.call, health, pool.*, ...): to any
  node, ranked by a random key; a node that cannot take it is skipped.

When a node cannot take a request that was never run there — the
connection cannot be made, or it answers -32005 because it drains — a
session's calls wait for it, retrying every `retry_interval_s`, for up to
`failover_after_s` (a rolling upgrade replaces a daemon in well under
that, and the session's live workspace is there). Past it the node counts
as gone: its sessions go to their next node, where `session.create`
restores the last archive if the archive store is shared
(docs/operations.md, "When a node goes away"). Stateless calls go to the
next node at once. A request that reached a daemon and then lost its
connection is never sent again (it may have run): TransportError.
"""
from __future__ import annotations

import collections
import hashlib
import re
import secrets
import socket
import threading
import time
import urllib.parse
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from .client import Client
from .errors import ConnectError, HttpError, NotFoundError, TransportError
from .http_transport import HttpTransport
from .rpc import result_of
from .transport import Exchange, Message

SESSION_METHODS = frozenset({"session.create", "session.get", "session.exec", "session.destroy", "files.put",
                             "files.get", "files.list", "files.stat", "files.delete"})
EXEC_ID_METHODS = frozenset({"exec.status", "exec.wait", "exec.follow", "exec.logs", "exec.cancel"})
SHUTTING_DOWN = -32005

# An exec_id this client made: "r", the 16 hex digits of its route, "-", random.
_MINTED_EXEC_ID = re.compile(r"^r([0-9a-f]{16})-[0-9a-z]+$")
_CACHE_ENTRIES = 100_000


def session_route(key: str) -> str:
    """The route a session key is ranked by: 16 hex digits."""
    return hashlib.sha256(b"session\0" + key.encode("utf-8")).hexdigest()[:16]


def exec_route(exec_id: str) -> str:
    """The route of an execution id: the one it carries, when this client made it."""
    minted = _MINTED_EXEC_ID.match(exec_id)
    if minted:
        return minted.group(1)
    return hashlib.sha256(b"exec\0" + exec_id.encode("utf-8")).hexdigest()[:16]


def score(node: str, route: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{node}|{route}".encode("utf-8")).digest()[:8], "big")


def rank(nodes: Sequence[str], route: str) -> List[str]:
    """The nodes in rendezvous order for `route`: the first is its home."""
    return sorted(set(nodes), key=lambda n: (-score(n, route), n))


def node_name(host: str, port: int) -> str:
    """host:port, with an IPv6 literal in brackets: a node's identity and its URL's authority."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _parse_endpoint(endpoint: str, default_port: int) -> str:
    parsed = urllib.parse.urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
    if not parsed.hostname:
        raise ValueError(f"{endpoint}: expected host, host:port or [IPv6]:port")
    return node_name(parsed.hostname, parsed.port or default_port)


class _Unavailable(Exception):
    """The node did not take the request, and nothing ran there."""


class _Wait(Exception):
    """A node that may hold what the call needs is unavailable, not yet for long."""


class _Answered(Exchange):
    def __init__(self, reply: Message) -> None:
        self._reply = reply

    def messages(self, timeout: Optional[float] = None) -> Iterator[Message]:
        yield self._reply


class _Lru(collections.OrderedDict):
    def remember(self, key: str, value: str) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > _CACHE_ENTRIES:
            self.popitem(last=False)


def _declines(reply: Any) -> bool:
    """A reply saying the daemon drains and refused the request: it never ran."""
    return isinstance(reply, dict) and isinstance(reply.get("error"), dict) and \
        reply["error"].get("code") == SHUTTING_DOWN


class ClusterTransport:
    """HTTP to a set of `cubicle serve --listen` daemons, one per node, each
    request sent to the node it belongs on (the module's doc). The nodes
    are `endpoints` (host:port each), or what `dns_name` resolves to on
    `port`, looked up again every `refresh_s`; a node that stops being
    listed stays a member for `failover_after_s` (its pod may be
    restarting). Credentials as for connect_http, the same on every node."""

    def __init__(self, *, endpoints: Optional[Sequence[str]] = None, dns_name: Optional[str] = None, port: int = 8080,
                 scheme: str = "http", api_key: Optional[str] = None, key_name: Optional[str] = None,
                 secret: Optional[str] = None, timeout: Optional[float] = None, ssl_context: Any = None,
                 connect_timeout: float = 5.0, refresh_s: float = 5.0, failover_after_s: float = 90.0,
                 retry_interval_s: float = 1.0, probe_depth: int = 3,
                 resolver: Optional[Callable[[str, int], List[str]]] = None,
                 transport_factory: Optional[Callable[[str], Any]] = None,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
        if (endpoints is None) == (dns_name is None):
            raise ValueError("give either endpoints or dns_name")
        if scheme not in ("http", "https"):
            raise ValueError(f"scheme {scheme!r}: http or https")
        if probe_depth < 1:
            raise ValueError("probe_depth must be at least 1")
        self._static = None if endpoints is None else sorted({_parse_endpoint(e, port) for e in endpoints})
        if self._static is not None and not self._static:
            raise ValueError("endpoints is empty")
        self._dns_name = dns_name
        self._port = port
        self.where = dns_name or ",".join(self._static or [])
        self._refresh_s = refresh_s
        self.failover_after_s = failover_after_s
        self.retry_interval_s = retry_interval_s
        self.probe_depth = probe_depth
        self._resolver = resolver or self._resolve
        self._factory = transport_factory or (lambda node: HttpTransport(
            f"{scheme}://{node}", api_key=api_key, key_name=key_name, secret=secret, timeout=timeout,
            ssl_context=ssl_context, connect_timeout=connect_timeout))
        self._signs = secret is not None
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._transports: Dict[str, Any] = {}
        self._listed: Dict[str, float] = {}    # node -> when DNS last listed it
        self._resolved_at: Optional[float] = None
        self._down: Dict[str, float] = {}      # node -> since when it takes nothing
        self._tried: Dict[str, float] = {}     # node -> the last try while down
        self._homes = _Lru()                   # session key -> node
        self._ran_on = _Lru()                  # exec_id -> node
        self._closed = False

    # ---- the nodes ---------------------------------------------------------

    @property
    def signs(self) -> bool:
        return self._signs

    def nodes(self) -> List[str]:
        """The members now: listed, or listed within failover_after_s."""
        if self._static is not None:
            return list(self._static)
        with self._lock:
            now = self._clock()
            due = self._resolved_at is None or now - self._resolved_at >= self._refresh_s
            if due:
                self._resolved_at = now
        if due:
            try:
                listed = self._resolver(self._dns_name or "", self._port)
            except OSError as e:
                listed = []
                with self._lock:
                    if not self._listed:
                        raise TransportError(f"{self._dns_name}: {e}") from e
            with self._lock:
                for node in listed:
                    self._listed[node] = now
        with self._lock:
            now = self._clock()
            for node in [n for n, t in self._listed.items() if now - t > self.failover_after_s]:
                del self._listed[node]
            if not self._listed:
                raise TransportError(f"{self._dns_name}: no node listed")
            return sorted(self._listed)

    @staticmethod
    def _resolve(name: str, port: int) -> List[str]:
        found = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        return sorted({node_name(sockaddr[0], port) for _, _, _, _, sockaddr in found})

    def node_of(self, session: str) -> str:
        """The node the session's calls go to now (asking, and waiting, as a call would)."""
        return self._with_waits(lambda: self._locate_session(session, create=False), f"session {session}")

    def transport_for(self, node: str) -> Any:
        with self._lock:
            if self._closed:
                raise TransportError(f"{self.where}: the client is closed")
            t = self._transports.get(node)
            if t is None:
                t = self._transports[node] = self._factory(node)
            return t

    def close(self) -> None:
        with self._lock:
            self._closed = True
            transports, self._transports = list(self._transports.values()), {}
        for t in transports:
            t.close()

    # ---- health of nodes ---------------------------------------------------

    def _mark_down(self, node: str) -> None:
        with self._lock:
            now = self._clock()
            self._down.setdefault(node, now)
            self._tried[node] = now

    def _mark_up(self, node: str) -> None:
        with self._lock:
            self._down.pop(node, None)
            self._tried.pop(node, None)

    def _gone(self, node: str) -> bool:
        """Down for failover_after_s: its sessions go elsewhere."""
        with self._lock:
            since = self._down.get(node)
            return since is not None and self._clock() - since >= self.failover_after_s

    def _skip(self, node: str) -> bool:
        """Gone, and tried again within refresh_s: not worth a connect now."""
        with self._lock:
            since = self._down.get(node)
            if since is None or self._clock() - since < self.failover_after_s:
                return False
            return self._clock() - self._tried.get(node, since) < self._refresh_s

    # ---- sending -----------------------------------------------------------

    def _send(self, node: str, message: Message, *, route: Optional[str], stream: bool,
              timeout: Optional[float]) -> Optional[Exchange]:
        """The request sent to `node`; _Unavailable when it did not run there."""
        if self._skip(node):
            raise _Unavailable(f"{node}: down")
        try:
            exchange = self.transport_for(node).open(message, route=route, stream=stream, timeout=timeout)
        except ConnectError as e:
            self._mark_down(node)
            raise _Unavailable(str(e)) from e
        except HttpError as e:
            if e.status == 503:  # out of connections, before anything ran
                raise _Unavailable(str(e)) from e
            raise
        self._mark_up(node)
        if exchange is None or stream:
            return exchange
        reply = exchange.reply(timeout)
        if _declines(reply):
            self._mark_down(node)
            raise _Unavailable(f"{node}: draining")
        return _Answered(reply)

    def _probe(self, node: str, method: str, params: Dict[str, Any]) -> bool:
        """Whether `node` knows the thing (NotFound: no); _Unavailable when it cannot say."""
        exchange = self._send(node, {"jsonrpc": "2.0", "id": 0, "method": method, "params": params},
                              route=None, stream=False, timeout=None)
        assert exchange is not None
        try:
            result_of(exchange.reply())
        except NotFoundError:
            return False
        return True

    def _locate(self, route: str, method: str, params: Dict[str, Any], depth: int) -> Tuple[str, bool]:
        """The first of the route's first `depth` nodes that knows the thing
        (found: True), else the first of them that answered, else the first
        further down that is not gone. _Wait when one that did not answer
        might hold it and is not gone yet."""
        ranked = rank(self.nodes(), route)
        free = waiting = None
        for node in ranked[:depth]:
            if self._skip(node):
                continue
            try:
                if self._probe(node, method, params):
                    return node, True
                free = free or node
            except _Unavailable as e:
                if not self._gone(node):
                    waiting = waiting or e
        if waiting is not None:
            raise _Wait(str(waiting))
        if free is not None:
            return free, False
        for node in ranked[depth:]:
            if not self._skip(node):
                return node, False
        raise _Wait("no node answered")

    def _locate_session(self, key: str, *, create: bool) -> str:
        """Where the session's calls go: where it lives, or where it would be made."""
        with self._lock:
            cached = self._homes.get(key)
        if cached is not None and not create and not self._gone(cached) and cached in self.nodes():
            return cached
        node, found = self._locate(session_route(key), "session.get", {"session": key}, self.probe_depth)
        if found:
            with self._lock:
                self._homes.remember(key, node)
        return node

    def _with_waits(self, attempt: Callable[[], Any], what: str) -> Any:
        """attempt() until it does not ask to wait; bounded by failover_after_s
        and two lookups, after which every node that did not answer is gone."""
        deadline = self._clock() + self.failover_after_s + 2 * self._refresh_s + self.retry_interval_s
        while True:
            try:
                return attempt()
            except (_Wait, _Unavailable) as e:
                if self._clock() >= deadline:
                    raise TransportError(f"{self.where}: {what}: no node took it within "
                                         f"{self.failover_after_s:g} s: {e}") from None
                self._sleep(self.retry_interval_s)

    def _at_home(self, locate: Callable[[], str], message: Message, *, route: Optional[str], stream: bool,
                 timeout: Optional[float], what: str) -> Tuple[str, Optional[Exchange]]:
        """Sent where locate() says, waiting while that node cannot take it."""
        def attempt() -> Tuple[str, Optional[Exchange]]:
            node = locate()
            return node, self._send(node, message, route=route, stream=stream, timeout=timeout)
        return self._with_waits(attempt, what)

    def _anywhere(self, message: Message, *, route: str, stream: bool,
                  timeout: Optional[float]) -> Tuple[str, Optional[Exchange]]:
        """Sent to the first node, in `route`'s order, that takes it."""
        errors = []
        for node in rank(self.nodes(), route):
            try:
                return node, self._send(node, message, route=None, stream=stream, timeout=timeout)
            except _Unavailable as e:
                errors.append(str(e))
        raise TransportError(f"{self.where}: no node took the call: {'; '.join(errors)}")

    # ---- routing -----------------------------------------------------------

    def open(self, message: Message, *, route: Optional[str] = None, stream: bool = False,
             timeout: Optional[float] = None) -> Optional[Exchange]:
        if isinstance(message, list):
            message = [dict(m) if isinstance(m, dict) else m for m in message]
        else:
            message = dict(message)
        plans = {self._plan(m) for m in (message if isinstance(message, list) else [message]) if isinstance(m, dict)}
        if len(plans) > 1:
            raise ValueError("a batch whose calls belong on different nodes cannot be sent as one; send them apart")
        kind, key = plans.pop() if plans else ("any", None)
        first = message[0] if isinstance(message, list) else message
        if kind == "session":
            create = isinstance(first, dict) and first.get("method") == "session.create"
            node, exchange = self._at_home(lambda: self._locate_session(key, create=create), message, route=route,
                                           stream=stream, timeout=timeout, what=f"session {key}")
            self._after_session_call(key, node, first, exchange)
        elif kind == "exec":
            node, exchange = self._at_home(lambda: self._locate_exec(key), message, route=route, stream=stream,
                                           timeout=timeout, what=f"execution {key}")
        else:
            node, exchange = self._anywhere(message, route=key or secrets.token_hex(8), stream=stream,
                                            timeout=timeout)
        if isinstance(first, dict) and first.get("method") == "exec.start":
            exec_id = (first.get("params") or {}).get("exec_id")
            if exec_id:
                with self._lock:
                    self._ran_on.remember(exec_id, node)
        return exchange

    def _plan(self, m: Dict[str, Any]) -> Tuple[str, Optional[str]]:
        """How a call is routed: ("session", key), ("exec", exec_id) or ("any", route or None).
        Fills in the keys the daemon would otherwise make, so that they route."""
        method = m.get("method")
        params = m.get("params")
        params = dict(params) if isinstance(params, dict) else params
        if params is not None:
            m["params"] = params
        session = params.get("session") if isinstance(params, dict) else None
        if method == "session.create" and session is None:
            session = "s" + secrets.token_hex(13)  # as the daemon's: [A-Za-z0-9._-]
            m["params"] = params = {**(params or {}), "session": session}
        if method == "exec.start" and isinstance(params, dict) and not params.get("exec_id"):
            route = session_route(session) if isinstance(session, str) else secrets.token_hex(8)
            params["exec_id"] = f"r{route}-{secrets.token_hex(10)}"
        if isinstance(session, str) and (method in SESSION_METHODS or method in ("exec.start", "exec.list")):
            return "session", session
        if method in EXEC_ID_METHODS and isinstance(params, dict) and isinstance(params.get("exec_id"), str):
            return "exec", params["exec_id"]
        if method == "exec.start" and isinstance(params, dict):
            return "any", exec_route(params["exec_id"])
        return "any", None

    def _after_session_call(self, key: str, node: str, call: Any, exchange: Optional[Exchange]) -> None:
        if not isinstance(exchange, _Answered) or not isinstance(call, dict):
            return
        reply = exchange._reply
        ok = isinstance(reply, dict) and "result" in reply
        with self._lock:
            if ok and call.get("method") == "session.destroy":
                self._homes.pop(key, None)
            elif ok:
                self._homes.remember(key, node)

    def _locate_exec(self, exec_id: str) -> str:
        """The node that ran the execution: asked of every node, in its route's order."""
        with self._lock:
            cached = self._ran_on.get(exec_id)
        if cached is not None and not self._gone(cached) and cached in self.nodes():
            return cached
        node, found = self._locate(exec_route(exec_id), "exec.status", {"exec_id": exec_id}, len(self.nodes()))
        if found:
            with self._lock:
                self._ran_on.remember(exec_id, node)
        return node


class _OneNode:
    """One node's transport, borrowed: closing it leaves it to the cluster's."""

    def __init__(self, cluster: ClusterTransport, node: str) -> None:
        self._transport = cluster.transport_for(node)
        self.signs = cluster.signs
        self.where = node

    def open(self, message: Message, **kwargs: Any) -> Optional[Exchange]:
        return self._transport.open(message, **kwargs)

    def get(self, path: str, timeout: Optional[float] = None) -> Tuple[int, bytes]:
        return self._transport.get(path, timeout)

    def close(self) -> None:
        pass


class ClusterClient(Client):
    """A Client over every node (connect_cluster): the same methods, each call
    sent where it belongs; and the nodes themselves, for what is per node
    (health, pool.stats, session.list)."""

    transport: ClusterTransport

    def nodes(self) -> List[str]:
        """The nodes now, as host:port."""
        return self.transport.nodes()

    def node_of(self, session: str) -> str:
        """The node the session's calls go to now."""
        return self.transport.node_of(session)

    def node(self, node: str) -> Client:
        """A client of one node alone (sharing this one's connections; closing it closes nothing)."""
        return Client(_OneNode(self.transport, node), timeout=self.timeout)
