"""A client for `cubicle serve`, the cubicle sandbox daemon (docs/protocol.md).

Standard library only. Three ways to reach a daemon, one API:

    import cubicle
    with cubicle.connect_unix("/run/cubicle.sock") as client:      # --socket
        print(client.run(["echo", "hi"]).stdout)
    with cubicle.spawn(["--state-dir", "/tmp/state"]) as client:   # a child on stdio
        with client.session() as s:
            s.put_file("uploads/a.txt", "1 2 3")
            print(s.exec(["sh", "-c", "wc -w uploads/a.txt"]).stdout)
    client = cubicle.connect_http("http://127.0.0.1:8080", api_key="...")  # --listen
    client = cubicle.connect_cluster(dns_name="cubicle-nodes.cubicle.svc", api_key="...")  # one daemon per node
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Dict, Optional, Sequence

from .client import Client, ExecStream, Session
from .skill_session import SkillSession
from .cluster import ClusterClient, ClusterTransport
from .errors import (AuthError, BusyError, CallTimeout, Conflict, ConnectError, CubicleError, Forbidden, HttpError,
                     InternalError, InvalidParams, InvalidRequest, LimitExceeded, LineTooLong, MethodNotFound,
                     NotFoundError, ParseError, RequirementsNotMet, RpcError, SetupError, ShuttingDown,
                     SkillAnswerError, SkillFailed, StaticPolicyDenied, TransportError)
from .http_transport import HttpTransport, signature
from .results import (ExecInfo, ExecList, ExecStatus, FileInfo, Health, LogPage, OutputChunk, OutputFile, PoolStats,
                      RunResult, SessionInfo, SkillResult)
from .transport import StdioTransport, UnixTransport

__version__ = "0.1.0"


def connect_unix(path: str, *, timeout: Optional[float] = None) -> Client:
    """A client on `cubicle serve --socket PATH`. TransportError when nothing answers there."""
    return Client(UnixTransport(path), timeout=timeout)


def spawn(args: Sequence[str] = (), *, binary: Optional[str] = None, prefix: Sequence[str] = (),
          stderr: Any = None, env: Optional[Dict[str, str]] = None, timeout: Optional[float] = None,
          close_timeout: float = 60.0) -> Client:
    """Starts `BINARY serve ARGS...` as a child speaking on its stdin/stdout and
    returns a client on it; close() ends it (EOF, then SIGTERM and SIGKILL
    after `close_timeout` seconds each). The daemon also ends when this
    process does. `binary` defaults to $CUBICLE_BIN, then `cubicle` on PATH;
    `prefix` runs it under another command (e.g. `unshare -m`); `stderr` is
    where its JSON log lines go (inherited by default)."""
    program = binary or os.environ.get("CUBICLE_BIN") or shutil.which("cubicle") or "cubicle"
    argv = [*prefix, program, "serve", *args]
    return Client(StdioTransport(argv, stderr=stderr, env=env, close_timeout=close_timeout), timeout=timeout)


def connect_http(url: str, *, api_key: Optional[str] = None, key_name: Optional[str] = None,
                 secret: Optional[str] = None, timeout: Optional[float] = None, ssl_context: Any = None) -> Client:
    """A client on `cubicle serve --listen`, e.g. "http://127.0.0.1:8080".
    Credentials: `api_key` (sent as a bearer key), or `key_name` and `secret`
    (each request signed with HMAC-SHA256; the secret is never sent)."""
    return Client(HttpTransport(url, api_key=api_key, key_name=key_name, secret=secret, timeout=timeout,
                                ssl_context=ssl_context), timeout=timeout)


def connect_cluster(*, dns_name: Optional[str] = None, endpoints: Optional[Sequence[str]] = None, port: int = 8080,
                    scheme: str = "http", api_key: Optional[str] = None, key_name: Optional[str] = None,
                    secret: Optional[str] = None, timeout: Optional[float] = None, ssl_context: Any = None,
                    failover_after_s: float = 90.0, **options: Any) -> ClusterClient:
    """A client of many daemons, one per node (deploy/kubernetes): `dns_name`,
    a headless Service's name, resolved to the nodes' addresses on `port`
    (again every few seconds), or `endpoints` ("host:port" each). Each
    session's calls go to the node its key hashes to (rendezvous hashing),
    and wait up to `failover_after_s` for that node while it cannot take
    them (an upgrade restarting it) before the session moves to its next
    node (clients/python/README.md, "Many nodes"). Credentials as for
    connect_http. `options`: ClusterTransport's (refresh_s, probe_depth,
    retry_interval_s, connect_timeout)."""
    transport = ClusterTransport(endpoints=endpoints, dns_name=dns_name, port=port, scheme=scheme, api_key=api_key,
                                 key_name=key_name, secret=secret, timeout=timeout, ssl_context=ssl_context,
                                 failover_after_s=failover_after_s, **options)
    return ClusterClient(transport, timeout=timeout)


__all__ = [
    "connect_unix", "spawn", "connect_http", "connect_cluster", "signature",
    "Client", "ClusterClient", "ClusterTransport", "Session", "ExecStream", "SkillSession",
    "RunResult", "SkillResult", "ExecStatus", "ExecInfo", "ExecList", "LogPage", "OutputChunk", "OutputFile",
    "SessionInfo", "FileInfo", "Health", "PoolStats",
    "CubicleError", "RpcError", "TransportError", "ConnectError", "CallTimeout", "HttpError", "AuthError",
    "ParseError", "InvalidRequest", "MethodNotFound", "InvalidParams", "InternalError", "BusyError", "SetupError",
    "LimitExceeded", "Conflict", "NotFoundError", "ShuttingDown", "LineTooLong", "SkillFailed", "Forbidden",
    "StaticPolicyDenied", "RequirementsNotMet", "SkillAnswerError",
]
