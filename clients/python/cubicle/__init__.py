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
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Dict, Optional, Sequence

from .client import Client, ExecStream, Session
from .errors import (AuthError, BusyError, CallTimeout, Conflict, CubicleError, Forbidden, HttpError, InternalError,
                     InvalidParams, InvalidRequest, LimitExceeded, LineTooLong, MethodNotFound, NotFoundError,
                     ParseError, RpcError, SetupError, ShuttingDown, SkillAnswerError, SkillFailed, TransportError)
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


__all__ = [
    "connect_unix", "spawn", "connect_http", "signature",
    "Client", "Session", "ExecStream",
    "RunResult", "SkillResult", "ExecStatus", "ExecInfo", "ExecList", "LogPage", "OutputChunk", "OutputFile",
    "SessionInfo", "FileInfo", "Health", "PoolStats",
    "CubicleError", "RpcError", "TransportError", "CallTimeout", "HttpError", "AuthError",
    "ParseError", "InvalidRequest", "MethodNotFound", "InvalidParams", "InternalError", "BusyError", "SetupError",
    "LimitExceeded", "Conflict", "NotFoundError", "ShuttingDown", "LineTooLong", "SkillFailed", "Forbidden",
    "SkillAnswerError",
]
