"""Typed views of the daemon's results (docs/protocol.md).

Each keeps the reply's dict as `raw`, so that a field this client does not
name yet is still at hand. Output comes as text (`stdout`) and as the exact
bytes (`stdout_data`): the daemon sends `stdout` when the output is valid
UTF-8 and `stdout_base64` otherwise.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional


def decode_output(raw: Dict[str, Any], name: str) -> bytes:
    """The bytes of `name` (e.g. "stdout"), from `name` or `name_base64`."""
    if isinstance(raw.get(name), str):
        return raw[name].encode("utf-8")
    if isinstance(raw.get(name + "_base64"), str):
        return base64.b64decode(raw[name + "_base64"])
    return b""


def _text(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


@dataclass
class OutputFile:
    """A file a session.exec made or changed under outputs/."""
    path: str
    size: int
    sha256: str


@dataclass
class RunResult:
    """sandbox.run's result (and session.exec's, exec.status's `result`)."""
    reason: str                      # exited | signaled | timeout | setup_failed | oom | killed | breaker_*
    exit_code: Optional[int]         # for `exited`
    signal: Optional[int]            # for `signaled` (9 for `timeout`)
    status: Optional[int]            # the exit status a shell would see (128+N for a signal)
    error: Optional[str]             # for `setup_failed`: the step and errno
    stdout: str
    stderr: str
    stdout_data: bytes = field(repr=False)
    stderr_data: bytes = field(repr=False)
    stdout_truncated: bool
    stderr_truncated: bool
    stdout_bytes: int                # written in all, past the budget too
    stderr_bytes: int
    wall_ms: Optional[float]
    setup_ms: Optional[float]
    profile: Optional[str]
    warm: bool
    exec_id: Optional[str]           # session.exec, exec.status
    session: Optional[str]           # session.exec
    outputs: List[OutputFile]        # session.exec: files made under outputs/
    outputs_refused: List[Dict[str, Any]]
    warnings: List[str]
    raw: Dict[str, Any] = field(repr=False)

    @property
    def ok(self) -> bool:
        """The payload exited with status 0."""
        return self.reason == "exited" and self.exit_code == 0

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "RunResult":
        stdout, stderr = decode_output(raw, "stdout"), decode_output(raw, "stderr")
        outputs = raw.get("outputs") or {}
        return cls(
            reason=raw.get("reason", ""), exit_code=raw.get("exit_code"), signal=raw.get("signal"),
            status=raw.get("status"), error=raw.get("error"),
            stdout=_text(stdout), stderr=_text(stderr), stdout_data=stdout, stderr_data=stderr,
            stdout_truncated=bool(raw.get("stdout_truncated", False)),
            stderr_truncated=bool(raw.get("stderr_truncated", False)),
            stdout_bytes=int(raw.get("stdout_bytes", len(stdout))), stderr_bytes=int(raw.get("stderr_bytes", len(stderr))),
            wall_ms=raw.get("wall_ms"), setup_ms=raw.get("setup_ms"), profile=raw.get("profile"),
            warm=bool(raw.get("warm", False)), exec_id=raw.get("exec_id"), session=raw.get("session"),
            outputs=[OutputFile(f["path"], f["size"], f["sha256"]) for f in outputs.get("files", [])],
            outputs_refused=list(outputs.get("refused", [])), warnings=list(raw.get("warnings") or []), raw=raw)


@dataclass
class SkillResult:
    """skill.call's result: the skill's own answer (`result` or `error`) and its logs."""
    result: Any
    error: Optional[Dict[str, Any]]  # the skill's JSON-RPC error, as it sent it
    logs: str                        # its stderr
    logs_truncated: bool
    stdout_logs: str                 # stdout lines that were not the response
    wall_ms: Optional[float]
    profile: Optional[str]
    raw: Dict[str, Any] = field(repr=False)
    skill: Optional[Dict[str, Any]] = None   # a call by name: {"name", "version", "id"}
    usage: Optional[Dict[str, Any]] = None   # what its sandbox used: user_ms, system_ms, ...

    @property
    def ok(self) -> bool:
        return self.error is None

    def unwrap(self) -> Any:
        """The skill's result; SkillAnswerError when it answered with an error."""
        if self.error is not None:
            from .errors import SkillAnswerError
            e = self.error if isinstance(self.error, dict) else {}
            raise SkillAnswerError(e.get("code", 0), str(e.get("message", self.error)), e.get("data"))
        return self.result

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "SkillResult":
        return cls(result=raw.get("result"), error=raw.get("error"), logs=raw.get("logs", ""),
                   logs_truncated=bool(raw.get("logs_truncated", False)), stdout_logs=raw.get("stdout_logs", ""),
                   wall_ms=raw.get("wall_ms"), profile=raw.get("profile"), raw=raw, skill=raw.get("skill"),
                   usage=raw.get("usage"))


@dataclass
class ExecStatus:
    """exec.status / exec.wait / exec.follow: a managed execution's state."""
    exec_id: str
    state: str                       # queued | running | done | cancelled | lost
    created_ms: Optional[int]
    result: Optional[RunResult]      # when done and it ran
    error: Optional[Dict[str, Any]]  # when done and it failed as a request would have
    output: Optional[Dict[str, Any]]  # while it runs: {"stdout", "stderr"} so far
    raw: Dict[str, Any] = field(repr=False)

    @property
    def ended(self) -> bool:
        return self.state in ("done", "cancelled", "lost")

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "ExecStatus":
        result = raw.get("result")
        error = result.get("error") if isinstance(result, dict) and "reason" not in result else None
        run = RunResult.from_json(result) if isinstance(result, dict) and error is None else None
        return cls(exec_id=raw.get("exec_id", ""), state=raw.get("state", ""), created_ms=raw.get("created_ms"),
                   result=run, error=error, output=raw.get("output"), raw=raw)


@dataclass
class ExecInfo:
    """One entry of exec.list."""
    exec_id: str
    state: str
    created_ms: Optional[int]
    finished_ms: Optional[int]
    session: Optional[str]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "ExecInfo":
        return cls(raw.get("exec_id", ""), raw.get("state", ""), raw.get("created_ms"), raw.get("finished_ms"),
                   raw.get("session"), raw)


@dataclass
class ExecList:
    executions: List[ExecInfo]
    next_before: Optional[str]       # the `before` of the next page, when this one is full
    raw: Dict[str, Any] = field(repr=False)


@dataclass
class LogPage:
    """exec.logs: a page of an execution's stdout or stderr."""
    data: str
    offset: int
    next_offset: int
    eof: bool
    raw: Dict[str, Any] = field(repr=False)


@dataclass
class OutputChunk:
    """One piece of a streamed execution's output (exec.output)."""
    stream: str                      # stdout | stderr
    offset: int                      # of this chunk's first byte in its stream
    data: bytes

    @property
    def text(self) -> str:
        return _text(self.data)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "OutputChunk":
        return cls(raw.get("stream", ""), int(raw.get("offset", 0)), decode_output(raw, "data"))


@dataclass
class SessionInfo:
    """session.create / session.get: a session's record."""
    session: str
    profile: str
    created_ms: Optional[int]
    last_used_ms: Optional[int]
    idle_ttl_ms: Optional[int]
    expires_ms: Optional[int]
    workspace_size_bytes: Optional[int]
    workspace_capped: Optional[bool]
    executing: int
    queued: int
    created: Optional[bool]          # session.create: made now (not found live)
    restored: Optional[bool]         # session.create: its archive was restored
    restore_error: Optional[str]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "SessionInfo":
        ws = raw.get("workspace") or {}
        return cls(session=raw.get("session", ""), profile=raw.get("profile", ""), created_ms=raw.get("created_ms"),
                   last_used_ms=raw.get("last_used_ms"), idle_ttl_ms=raw.get("idle_ttl_ms"),
                   expires_ms=raw.get("expires_ms"), workspace_size_bytes=ws.get("size_bytes"),
                   workspace_capped=ws.get("capped"), executing=int(raw.get("executing", 0)),
                   queued=int(raw.get("queued", 0)), created=raw.get("created"), restored=raw.get("restored"),
                   restore_error=raw.get("restore_error"), raw=raw)


@dataclass
class FileInfo:
    """files.stat, and each entry of files.list."""
    path: str
    type: str                        # file | directory | symlink | other
    size: int
    mode: int
    mtime_ns: int
    sha256: Optional[str]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "FileInfo":
        return cls(raw.get("path", ""), raw.get("type", ""), int(raw.get("size", 0)), int(raw.get("mode", 0)),
                   int(raw.get("mtime_ns", 0)), raw.get("sha256"), raw)


@dataclass
class Health:
    status: str                      # ok | draining
    version: str
    in_flight: int
    executions: Dict[str, int]       # running, queued, max_concurrent, max_queue
    pools: Dict[str, Any]
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "Health":
        return cls(raw.get("status", ""), raw.get("version", ""), int(raw.get("in_flight", 0)),
                   dict(raw.get("executions") or {}), dict(raw.get("pools") or {}), raw)


@dataclass
class PoolStats:
    """One profile's pool (pool.stats); the histograms stay in `raw`."""
    idle: int
    building: int
    in_use: int
    waiting: int
    hits: int
    misses: int
    hit_ratio: Optional[float]
    busy: int
    built: int
    build_failures: int
    last_error: str
    warm_interpreter: bool
    min_idle: int
    max_idle: int
    max_total: int
    raw: Dict[str, Any] = field(repr=False)

    @classmethod
    def from_json(cls, raw: Dict[str, Any]) -> "PoolStats":
        n = lambda k: int(raw.get(k, 0))  # noqa: E731
        return cls(n("idle"), n("building"), n("in_use"), n("waiting"), n("hits"), n("misses"), raw.get("hit_ratio"),
                   n("busy"), n("built"), n("build_failures"), raw.get("last_error", ""),
                   bool(raw.get("warm_interpreter", False)), n("min_idle"), n("max_idle"), n("max_total"), raw)
