"""Transports that carry JSON-RPC lines: the Unix socket and stdio.

Both are one byte stream each way with one JSON value per line
(docs/protocol.md). Replies may come in any order, so a reader thread reads
every line and hands each to the exchange waiting for it: a reply by its
`id`, an `exec.output` notification by its `exec_id` to the exchange that
follows that execution. A caller blocks only on its own exchange's queue,
so calls from several threads share one connection.
"""
from __future__ import annotations

import json
import queue
import socket
import subprocess
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Union

from .errors import CallTimeout, TransportError

Message = Union[Dict[str, Any], List[Any]]


def is_notification(message: Any) -> bool:
    """A message the daemon sends unasked (no `id`), e.g. exec.output."""
    return isinstance(message, dict) and "method" in message and "id" not in message


def request_ids(message: Message) -> List[Any]:
    """The ids a request (or batch) will be answered under; none for notifications."""
    elements = message if isinstance(message, list) else [message]
    return [m["id"] for m in elements if isinstance(m, dict) and "id" in m]


def route_of(notification: Dict[str, Any]) -> Optional[str]:
    """Which streamed request a notification belongs to."""
    params = notification.get("params")
    if not isinstance(params, dict):
        return None
    # exec.follow's chunks name their execution; skill.progress the call's own token.
    route = params.get("exec_id", params.get("progress_token"))
    return route if isinstance(route, str) else None


class Exchange:
    """One request in flight. Iterating `messages()` yields the notifications
    routed to it, then its reply (a dict, or a list for a batch), and ends."""

    def messages(self, timeout: Optional[float] = None) -> Iterator[Message]:
        raise NotImplementedError

    def close(self) -> None:
        """Stops waiting; a reply or notification that comes later is dropped."""

    def reply(self, timeout: Optional[float] = None) -> Message:
        """The reply, skipping notifications."""
        for message in self.messages(timeout):
            if not is_notification(message):
                return message
        raise TransportError("the exchange ended without a reply")


class _Closed:
    """Put in every queue when the connection ends."""

    def __init__(self, error: TransportError) -> None:
        self.error = error


class _LineExchange(Exchange):
    def __init__(self, transport: "LineTransport", ids: List[Any], route: Optional[str]) -> None:
        self._transport = transport
        self._ids = ids
        self._route = route
        self.inbox: "queue.Queue[Any]" = queue.Queue()

    def messages(self, timeout: Optional[float] = None) -> Iterator[Message]:
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                try:
                    item = self.inbox.get(timeout=remaining)
                except queue.Empty:
                    raise CallTimeout(f"no reply within {timeout} s") from None
                if isinstance(item, _Closed):
                    raise item.error
                yield item
                if not is_notification(item):
                    return
        finally:
            self.close()

    def close(self) -> None:
        self._transport.forget(self)


class LineTransport:
    """Newline-delimited JSON-RPC over a pair of byte streams."""

    def __init__(self, read_line: Callable[[], bytes], write: Callable[[bytes], None], where: str) -> None:
        self._read_line = read_line
        self._write = write
        self.where = where
        self._lock = threading.Lock()        # the tables below, and `_closed`
        self._write_lock = threading.Lock()  # one line at a time on the wire
        self._pending: Dict[Any, _LineExchange] = {}
        self._routes: Dict[str, _LineExchange] = {}
        self._closed: Optional[TransportError] = None
        self._reader = threading.Thread(target=self._read_all, name=f"cubicle-reader {where}", daemon=True)

    def start(self) -> None:
        self._reader.start()

    def open(self, message: Message, *, route: Optional[str] = None, stream: bool = False,
             timeout: Optional[float] = None) -> Optional[Exchange]:
        """Sends `message`; its exchange (None for notifications). With `route`,
        notifications for that execution come to this exchange too."""
        del stream, timeout  # notifications always come on a line transport; waits are the exchange's
        ids = request_ids(message)
        exchange = _LineExchange(self, ids, route) if ids else None
        with self._lock:
            if self._closed is not None:
                raise self._closed
            if exchange is not None:
                for i in ids:
                    self._pending[i] = exchange
                if route is not None:
                    self._routes[route] = exchange
        line = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
        try:
            with self._write_lock:
                self._write(line)
        except OSError as e:
            if exchange is not None:
                exchange.close()
            raise TransportError(f"{self.where}: write: {e}") from e
        return exchange

    def forget(self, exchange: _LineExchange) -> None:
        with self._lock:
            for i in exchange._ids:
                if self._pending.get(i) is exchange:
                    del self._pending[i]
            if exchange._route is not None and self._routes.get(exchange._route) is exchange:
                del self._routes[exchange._route]

    def _read_all(self) -> None:
        why = "the daemon closed the connection"
        try:
            while True:
                line = self._read_line()
                if not line:
                    break
                try:
                    message = json.loads(line)
                except ValueError:
                    continue  # the daemon writes only replies there; anything else is not ours
                self._dispatch(message)
        except (OSError, ValueError) as e:
            why = f"read: {e}"
        self._end(TransportError(f"{self.where}: {self.ended(why)}"))

    def ended(self, why: str) -> str:
        """What to say once the connection has ended (stdio adds the exit status)."""
        return why

    def _dispatch(self, message: Any) -> None:
        with self._lock:
            target = self._target(message)
        if target is not None:
            target.inbox.put(message)

    def _target(self, message: Any) -> Optional[_LineExchange]:
        if is_notification(message):
            route = route_of(message)
            return self._routes.get(route) if route is not None else None
        ids = request_ids(message)
        if not ids:
            return None
        target = next((self._pending[i] for i in ids if i is not None and i in self._pending), None)
        if target is None and all(i is None for i in ids):
            # A reply the daemon could not give an id (a line too long, say):
            # it can only be the request in flight when there is one.
            waiting = {id(e): e for e in self._pending.values()}
            target = next(iter(waiting.values())) if len(waiting) == 1 else None
        if target is not None:
            for i in target._ids:
                self._pending.pop(i, None)
        return target

    def _end(self, error: TransportError) -> None:
        with self._lock:
            self._closed = error
            waiting = {id(e): e for e in list(self._pending.values()) + list(self._routes.values())}
            self._pending.clear()
            self._routes.clear()
        for exchange in waiting.values():
            exchange.inbox.put(_Closed(error))

    def join_reader(self, timeout: float) -> None:
        if self._reader.is_alive() and self._reader is not threading.current_thread():
            self._reader.join(timeout)


class UnixTransport(LineTransport):
    """`cubicle serve --socket PATH`."""

    def __init__(self, path: str, connect_timeout: Optional[float] = 10.0) -> None:
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.settimeout(connect_timeout)
            self._sock.connect(path)
            self._sock.settimeout(None)
        except OSError as e:
            self._sock.close()
            raise TransportError(f"connect {path}: {e.strerror or e}") from e
        self._file = self._sock.makefile("rb")
        super().__init__(self._file.readline, self._sock.sendall, path)
        self.start()

    def close(self) -> None:
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the daemon closed it first
        self.join_reader(10.0)
        self._file.close()
        self._sock.close()


class StdioTransport(LineTransport):
    """A `cubicle serve` child of this process, spoken to on its stdin/stdout.
    It ends when its stdin closes (after in-flight work drains) or when this
    process exits."""

    def __init__(self, argv: Sequence[str], *, stderr: Any = None, env: Optional[Dict[str, str]] = None,
                 close_timeout: float = 60.0) -> None:
        try:
            self.process = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                                            env=env)
        except OSError as e:
            raise TransportError(f"start {argv[0]}: {e.strerror or e}") from e
        self._close_timeout = close_timeout
        super().__init__(self.process.stdout.readline, self._send, f"{argv[0]} (pid {self.process.pid})")
        self.start()

    def _send(self, line: bytes) -> None:
        self.process.stdin.write(line)
        self.process.stdin.flush()

    def ended(self, why: str) -> str:
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return why
        return f"{why}: cubicle serve exited with status {status}"

    def close(self) -> None:
        """EOF on the daemon's stdin: it drains and exits. SIGTERM if it has not
        within `close_timeout` seconds, SIGKILL after as long again."""
        try:
            self.process.stdin.close()
        except OSError:
            pass  # it is gone already
        try:
            self.process.wait(timeout=self._close_timeout)
        except subprocess.TimeoutExpired:
            self.process.terminate()
            try:
                self.process.wait(timeout=self._close_timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.join_reader(10.0)
        self.process.stdout.close()
