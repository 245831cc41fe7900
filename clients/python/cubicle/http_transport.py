"""JSON-RPC over the HTTP front (`cubicle serve --listen`): POST /rpc.

Connections are kept alive and reused (http.client, one per request in
flight, pooled). Credentials are a bearer key or an HMAC signature of each
request with a key's secret (docs/protocol.md, "Authentication"): the
secret itself never crosses the wire. A streamed call asks for
`application/x-ndjson` and reads the notifications and then the reply as
lines of the chunked response.
"""
from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import socket
import ssl
import threading
import time
import urllib.parse
from typing import Any, Dict, Iterator, List, Optional, Tuple

from .errors import AuthError, CallTimeout, HttpError, TransportError
from .transport import Exchange, Message

NDJSON = "application/x-ndjson"
SIGNATURE_SCHEME = "CUBICLE-HMAC-SHA256"

# The clock signatures are stamped with (tests move it).
_now = time.time


def signature(secret: str, timestamp: str, method: str, target: str, body: bytes) -> str:
    """The X-Cubicle-Signature of one request: lowercase hex HMAC-SHA256,
    keyed with the secret's bytes, of the scheme, the timestamp, the HTTP
    method, the request target as sent and the body's SHA-256, one a line."""
    message = "\n".join([SIGNATURE_SCHEME, timestamp, method, target, hashlib.sha256(body).hexdigest()])
    return hmac.new(secret.encode("utf-8"), message.encode("utf-8"), hashlib.sha256).hexdigest()


def _error_text(body: bytes) -> str:
    """The front's {"error": "..."} or {"error": {"message"}}, else the body."""
    try:
        error = json.loads(body).get("error")
    except (ValueError, AttributeError):
        return body.decode("utf-8", errors="replace").strip()
    if isinstance(error, dict):
        return str(error.get("message", error))
    return str(error)


class _DoneExchange(Exchange):
    """A reply read whole."""

    def __init__(self, reply: Message) -> None:
        self._reply = reply

    def messages(self, timeout: Optional[float] = None) -> Iterator[Message]:
        yield self._reply


class _NdjsonExchange(Exchange):
    """A chunked response: one message a line, the reply last."""

    def __init__(self, transport: "HttpTransport", conn: http.client.HTTPConnection,
                 response: http.client.HTTPResponse) -> None:
        self._transport = transport
        self._conn = conn
        self._response = response
        self._done = False

    def messages(self, timeout: Optional[float] = None) -> Iterator[Message]:
        self._transport._set_timeout(self._conn, timeout)
        try:
            while True:
                try:
                    line = self._response.readline()
                except socket.timeout:
                    raise CallTimeout(f"no line within {timeout} s") from None
                except (OSError, http.client.HTTPException) as e:
                    raise TransportError(f"{self._transport.where}: read: {e}") from e
                if not line:
                    raise TransportError(f"{self._transport.where}: the response ended without a reply")
                if not line.strip():
                    continue
                try:
                    message = json.loads(line)
                except ValueError as e:
                    raise TransportError(f"{self._transport.where}: not JSON: {line[:200]!r}") from e
                if not (isinstance(message, dict) and "method" in message and "id" not in message):
                    self._response.read()  # the end of the chunked body: the connection can serve again
                    self._done = True
                yield message
                if self._done:
                    return
        finally:
            self.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is None:
            return
        if self._done and not self._response.will_close:
            self._transport._checkin(conn)
        else:
            conn.close()  # abandoned mid-stream: the rest cannot be told from the next response


class HttpTransport:
    """POST /rpc on `url` (http:// or https://, with an optional path prefix)."""

    def __init__(self, url: str, *, api_key: Optional[str] = None, key_name: Optional[str] = None,
                 secret: Optional[str] = None, timeout: Optional[float] = None,
                 ssl_context: Optional[ssl.SSLContext] = None, connect_timeout: float = 10.0) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.hostname:
            raise ValueError(f"{url}: an http:// or https:// URL is expected")
        if api_key is not None and (key_name is not None or secret is not None):
            raise ValueError("either api_key (a bearer key) or key_name and secret (HMAC signing), not both")
        if (key_name is None) != (secret is None):
            raise ValueError("HMAC signing needs both key_name and secret")
        self.where = url
        self._https = parsed.scheme == "https"
        self._host = parsed.hostname
        self._port = parsed.port
        self._prefix = parsed.path.rstrip("/")
        self._api_key = api_key
        self._key_name = key_name
        self._secret = secret
        self._timeout = timeout
        self._connect_timeout = connect_timeout
        self._ssl_context = ssl_context
        self._lock = threading.Lock()
        self._idle: List[http.client.HTTPConnection] = []
        self._closed = False

    @property
    def signs(self) -> bool:
        """Whether requests are signed: then no two may be byte-for-byte equal
        within the replay window, so request ids must not repeat across clients."""
        return self._secret is not None

    def open(self, message: Message, *, route: Optional[str] = None, stream: bool = False,
             timeout: Optional[float] = None) -> Optional[Exchange]:
        del route  # the response carries only this request's notifications
        body = json.dumps(message, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if stream:
            headers["Accept"] = NDJSON
        conn, response = self._send("POST", "/rpc", body, headers, timeout)
        if response.status == 204:
            self._finish(conn, response)
            return None
        if response.status == 200 and response.getheader("Content-Type", "").startswith(NDJSON):
            return _NdjsonExchange(self, conn, response)
        data = self._finish(conn, response)
        if response.status != 200:
            raise HttpError(response.status, _error_text(data), data)
        try:
            return _DoneExchange(json.loads(data))
        except ValueError as e:
            raise TransportError(f"{self.where}: the reply is not JSON: {data[:200]!r}") from e

    def get(self, path: str, timeout: Optional[float] = None) -> Tuple[int, bytes]:
        """GET `path` (/healthz, /readyz, /metrics): the status and the body."""
        conn, response = self._send("GET", path, b"", {}, timeout)
        return response.status, self._finish(conn, response)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def _send(self, method: str, path: str, body: bytes, headers: Dict[str, str],
              timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """The request sent and its response's head read. A kept-alive connection
        the server closed while idle is replaced once: the request never reached it."""
        target = self._prefix + path
        for attempt in range(2):
            conn, reused = self._checkout()
            try:
                self._set_timeout(conn, timeout)
                conn.request(method, target, body=body, headers={**headers, **self._credentials(method, target, body)})
                response = conn.getresponse()
            except socket.timeout:
                conn.close()
                raise CallTimeout(f"{self.where}: {method} {target}: timed out") from None
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError) as e:
                conn.close()
                if reused and attempt == 0:
                    continue
                raise TransportError(f"{self.where}: {method} {target}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                raise TransportError(f"{self.where}: {method} {target}: {e}") from e
            if response.status in (401, 403):
                raise AuthError(response.status, _error_text(self._finish(conn, response)))
            return conn, response
        raise AssertionError("unreachable")

    def _credentials(self, method: str, target: str, body: bytes) -> Dict[str, str]:
        if self._api_key is not None:
            return {"Authorization": f"Bearer {self._api_key}"}
        if self._secret is not None:
            timestamp = str(int(_now()))
            return {"X-Cubicle-Key-Name": self._key_name or "", "X-Cubicle-Timestamp": timestamp,
                    "X-Cubicle-Signature": signature(self._secret, timestamp, method, target, body)}
        return {}

    def _checkout(self) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._closed:
                raise TransportError(f"{self.where}: the client is closed")
            if self._idle:
                return self._idle.pop(), True
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self._connect_timeout,
                                               context=self._ssl_context), False
        return http.client.HTTPConnection(self._host, self._port, timeout=self._connect_timeout), False

    def _checkin(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed:
                self._idle.append(conn)
                return
        conn.close()

    def _finish(self, conn: http.client.HTTPConnection, response: http.client.HTTPResponse) -> bytes:
        """The whole body; the connection back in the pool when it stays open."""
        try:
            data = response.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise TransportError(f"{self.where}: read: {e}") from e
        if response.will_close:
            conn.close()
        else:
            self._checkin(conn)
        return data

    def _set_timeout(self, conn: http.client.HTTPConnection, timeout: Optional[float]) -> None:
        """Connected (within the connect timeout), then the wait for this
        request's reply set: None waits as long as the run takes."""
        if conn.sock is None:
            conn.connect()
        conn.sock.settimeout(timeout if timeout is not None else self._timeout)
