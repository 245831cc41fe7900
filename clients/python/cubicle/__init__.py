"""A client for `cubicle serve`, the cubicle sandbox daemon (docs/protocol.md).

Standard library only. Two ways to reach a daemon, one API:

    import cubicle
    with cubicle.connect_unix("/run/cubicle.sock") as client:      # --socket
        print(client.run(["echo", "hi"]).stdout)
    with cubicle.spawn(["--state-dir", "/tmp/state"]) as client:   # a child on stdio
        with client.session() as s:
            s.put_file("uploads/a.txt", "1 2 3")
            print(s.exec(["sh", "-c", "wc -w uploads/a.txt"]).stdout)
"""
from __future__ import annotations

import os
import shutil
from typing import Any, Dict, Optional, Sequence

from .client import Client, ExecStream, Session
from .errors import (BusyError, CallTimeout, Conflict, CubicleError, InternalError,
                     InvalidParams, InvalidRequest, LimitExceeded, LineTooLong, MethodNotFound, NotFoundError,
                     ParseError, RpcError, SetupError, ShuttingDown, SkillAnswerError, SkillFailed, TransportError)
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


__all__ = [
    "connect_unix", "spawn",
    "Client", "Session", "ExecStream",
    "RunResult", "SkillResult", "ExecStatus", "ExecInfo", "ExecList", "LogPage", "OutputChunk", "OutputFile",
    "SessionInfo", "FileInfo", "Health", "PoolStats",
    "CubicleError", "RpcError", "TransportError", "CallTimeout",
    "ParseError", "InvalidRequest", "MethodNotFound", "InvalidParams", "InternalError", "BusyError", "SetupError",
    "LimitExceeded", "Conflict", "NotFoundError", "ShuttingDown", "LineTooLong", "SkillFailed", "SkillAnswerError",
]
