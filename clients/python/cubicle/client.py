"""The client: one method per daemon method (docs/protocol.md), typed
results, sessions as context managers, and streamed executions."""
from __future__ import annotations

import base64
import time
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

from .errors import BusyError
from .results import (ExecInfo, ExecList, ExecStatus, FileInfo, Health, LogPage, OutputChunk, PoolStats, RunResult,
                      SessionInfo, SkillResult)
from .rpc import RpcClient, result_of
from .skill_session import Progress, SkillSession, call_skill_streamed
from .transport import Exchange, is_notification

Data = Union[bytes, str]


def _params(**fields: Any) -> Dict[str, Any]:
    """The fields that were given (None: left to the daemon's default)."""
    return {k: v for k, v in fields.items() if v is not None}


def _stdin_param(stdin: Optional[Data]) -> Dict[str, str]:
    """`stdin` as text when it is UTF-8, else `stdin_base64` (sandbox.run only)."""
    if stdin is None:
        return {}
    if isinstance(stdin, str):
        return {"stdin": stdin}
    try:
        return {"stdin": stdin.decode("utf-8")}
    except UnicodeDecodeError:
        return {"stdin_base64": base64.b64encode(stdin).decode("ascii")}


def _run_params(argv: Sequence[str], stdin: Optional[Data] = None, **fields: Any) -> Dict[str, Any]:
    more = fields.pop("more", None) or {}
    return {"argv": list(argv), **_params(**fields), **_stdin_param(stdin), **more}


class Client(RpcClient):
    """A connection to `cubicle serve`; make one with connect_unix, spawn or
    connect_http. `timeout` bounds the wait for each reply client-side
    (None: as long as the call takes; the daemon bounds runs itself)."""

    # ---- runs --------------------------------------------------------------

    def run(self, argv: Sequence[str], *, profile: Optional[str] = None, env: Optional[Dict[str, str]] = None,
            cwd: Optional[str] = None, stdin: Optional[Data] = None, timeout_ms: Optional[int] = None,
            output_bytes: Optional[int] = None, limits: Optional[Dict[str, Any]] = None,
            workspace: Optional[str] = None, network: Any = None, environment: Optional[str] = None,
            timeout: Optional[float] = None, **more: Any) -> RunResult:
        """sandbox.run: `argv` in a fresh sandbox of `profile`, once it has ended;
        with `environment` ("sci" or "sci@3", docs/skills.md) its prefix is at /env.
        Fields this client does not name go in `more`, as the daemon spells them."""
        params = _run_params(argv, stdin, profile=profile, env=env, cwd=cwd, timeout_ms=timeout_ms,
                             output_bytes=output_bytes, limits=limits, workspace=workspace, network=network,
                             environment=environment, more=more)
        return RunResult.from_json(self.call("sandbox.run", params, timeout=timeout))

    def skill_call(self, argv: Sequence[str], method: str, params: Any = None, *, profile: Optional[str] = None,
                   env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None, timeout_ms: Optional[int] = None,
                   output_bytes: Optional[int] = None, limits: Optional[Dict[str, Any]] = None,
                   workspace: Optional[str] = None, timeout: Optional[float] = None, **more: Any) -> SkillResult:
        """skill.call: the skill `argv` receives one request (`method`, `params`);
        its answer. A skill that never answers raises SkillFailed."""
        request = _run_params(argv, profile=profile, env=env, cwd=cwd, timeout_ms=timeout_ms,
                              output_bytes=output_bytes, limits=limits, workspace=workspace, more=more)
        request.update(_params(method=method, params=params))
        return SkillResult.from_json(self.call("skill.call", request, timeout=timeout))

    def call_skill(self, skill: str, method: str, params: Any = None, *, env: Optional[Dict[str, str]] = None,
                   timeout_ms: Optional[int] = None, limits: Optional[Dict[str, Any]] = None,
                   breakers: Optional[Dict[str, Any]] = None, network: Any = None,
                   environment: Optional[str] = None, timeout: Optional[float] = None,
                   on_progress: Optional[Progress] = None, **more: Any) -> SkillResult:
        """skill.call by name from the daemon's skills directory (docs/skills.md):
        `skill` is "name", "name@1.2.0" or "name@^1.2". The result's `skill`
        says which version ran and its id. `environment` ("sci", "sci@3") runs
        it there, for a skill whose manifest names none; requirements not met
        raise RequirementsNotMet before anything runs. `on_progress` gets each
        skill.progress's params as the skill sends them."""
        request = _params(skill=skill, method=method, params=params, env=env, timeout_ms=timeout_ms, limits=limits,
                          breakers=breakers, network=network, environment=environment)
        request.update(more)
        return call_skill_streamed(self, request, on_progress, timeout)

    def skill_session(self, skill: Optional[str] = None, *, argv: Optional[Sequence[str]] = None,
                      profile: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                      timeout_ms: Optional[int] = None, idle_timeout_ms: Optional[int] = None,
                      limits: Optional[Dict[str, Any]] = None, environment: Optional[str] = None,
                      **more: Any) -> SkillSession:
        """skill.session.open: a skill (by name, or `argv` in `profile`) kept
        open, answering a conversation's calls in turn (docs/skills.md,
        "Skill sessions"). Use it as a context manager to close it."""
        request = _params(skill=skill, argv=list(argv) if argv is not None else None, profile=profile, env=env,
                          timeout_ms=timeout_ms, idle_timeout_ms=idle_timeout_ms, limits=limits,
                          environment=environment)
        request.update(more)
        return SkillSession(self, self.call("skill.session.open", request))

    def skill_sessions(self) -> List[Dict[str, Any]]:
        """skill.session.list: the open skill sessions."""
        return self.call("skill.session.list", {})["skill_sessions"]

    def skill_list(self) -> Dict[str, Any]:
        """skill.list: the skills by name with their versions, and the manifests left out (`errors`)."""
        return self.call("skill.list", {})

    def skill_describe(self, name: str, version: Optional[str] = None) -> Dict[str, Any]:
        return self.call("skill.describe", _params(name=name, version=version))

    def environment_list(self) -> Dict[str, Any]:
        """environment.list: the environments by name with their revisions, the
        folders left out (`errors`), and what the host's own Python looks like."""
        return self.call("environment.list", {})

    def environment_describe(self, name: str, revision: Optional[int] = None) -> Dict[str, Any]:
        """environment.describe: one revision (default: the highest), its packages
        with their versions, its python folders and interpreter."""
        return self.call("environment.describe", _params(name=name, revision=revision))

    def audit_query(self, *, skill: Optional[str] = None, request_id: Optional[str] = None, since: Any = None,
                    until: Any = None, limit: Optional[int] = None) -> List[Dict[str, Any]]:
        """audit.query: the skill calls' audit lines, newest first (`since`/`until`:
        RFC 3339 text or Unix milliseconds)."""
        return self.call("audit.query", _params(skill=skill, request_id=request_id, since=since, until=until,
                                                limit=limit))["entries"]

    # ---- managed executions ------------------------------------------------

    def exec_start(self, argv: Sequence[str], *, session: Optional[str] = None, key: Optional[str] = None,
                   exec_id: Optional[str] = None, profile: Optional[str] = None, env: Optional[Dict[str, str]] = None,
                   cwd: Optional[str] = None, stdin: Optional[str] = None, timeout_ms: Optional[int] = None,
                   output_bytes: Optional[int] = None, limits: Optional[Dict[str, Any]] = None,
                   workspace: Optional[str] = None, network: Any = None, wait: Optional[bool] = None,
                   environment: Optional[str] = None, **more: Any) -> ExecStatus:
        """exec.start: queued at once; its id and state. In a `session` it runs
        in the session's profile and workspace (`wait`: False refuses at once,
        BusyError, when another execution holds the session)."""
        params = _run_params(argv, stdin, session=session, key=key, exec_id=exec_id, profile=profile, env=env,
                             cwd=cwd, timeout_ms=timeout_ms, output_bytes=output_bytes, limits=limits,
                             workspace=workspace, network=network, wait=wait, environment=environment, more=more)
        return ExecStatus.from_json(self.call("exec.start", params))

    def exec_status(self, exec_id: str) -> ExecStatus:
        return ExecStatus.from_json(self.call("exec.status", {"exec_id": exec_id}))

    def exec_wait(self, exec_id: str, timeout_ms: Optional[int] = None) -> ExecStatus:
        """exec.wait: once it has ended, or at the daemon-side `timeout_ms` (then with the state it has)."""
        return ExecStatus.from_json(self.call("exec.wait", _params(exec_id=exec_id, timeout_ms=timeout_ms)))

    def exec_cancel(self, exec_id: str) -> ExecStatus:
        return ExecStatus.from_json(self.call("exec.cancel", {"exec_id": exec_id}))

    def exec_list(self, session: Optional[str] = None, limit: Optional[int] = None,
                  before: Optional[str] = None) -> ExecList:
        raw = self.call("exec.list", _params(session=session, limit=limit, before=before))
        return ExecList([ExecInfo.from_json(e) for e in raw.get("executions", [])], raw.get("next_before"), raw)

    def exec_logs(self, exec_id: str, stream: str = "stdout", offset: int = 0,
                  max_bytes: Optional[int] = None) -> LogPage:
        raw = self.call("exec.logs", _params(exec_id=exec_id, stream=stream, offset=offset, max_bytes=max_bytes))
        return LogPage(raw.get("data", ""), int(raw.get("offset", 0)), int(raw.get("next_offset", 0)),
                       bool(raw.get("eof", False)), raw)

    def stream(self, argv: Sequence[str], *, session: Optional[str] = None, timeout: Optional[float] = None,
               **start: Any) -> "ExecStream":
        """exec.start, then exec.follow: iterate for the output as it comes;
        `.status` and `.result` hold the end. Takes exec_start's fields."""
        started = self.exec_start(argv, session=session, **start)
        return self.follow(started.exec_id, timeout=timeout)

    def follow(self, exec_id: str, *, stdout_offset: int = 0, stderr_offset: int = 0,
               timeout: Optional[float] = None) -> "ExecStream":
        """exec.follow of a managed execution, from these offsets of its output."""
        params = {"exec_id": exec_id, "stdout_offset": stdout_offset, "stderr_offset": stderr_offset}
        return ExecStream(self, exec_id, self.open_stream("exec.follow", params, route=exec_id, timeout=timeout),
                          self._wait(timeout))

    # ---- sessions ----------------------------------------------------------

    def session(self, key: Optional[str] = None, *, profile: Optional[str] = None,
                idle_ttl_ms: Optional[int] = None, workspace_bytes: Optional[int] = None, keep: bool = False,
                archive: bool = False) -> "Session":
        """session.create (a live session of `key` is taken as it is). As a
        context manager the session is destroyed on exit unless `keep`; its
        workspace is archived then only with `archive`."""
        raw = self.call("session.create", _params(session=key, profile=profile, idle_ttl_ms=idle_ttl_ms,
                                                  workspace_bytes=workspace_bytes))
        return Session(self, SessionInfo.from_json(raw), keep=keep, archive=archive)

    def get_session(self, key: str) -> SessionInfo:
        return SessionInfo.from_json(self.call("session.get", {"session": key}))

    def list_sessions(self) -> List[SessionInfo]:
        return [SessionInfo.from_json(s) for s in self.call("session.list", {}).get("sessions", [])]

    def destroy_session(self, key: str, *, archive: Optional[bool] = None, busy_retry_s: float = 5.0) -> Dict[str, Any]:
        """session.destroy. A session is briefly still held just after an
        execution's reply (its lease is let go off the reply path), so
        BusyError is retried for up to `busy_retry_s` seconds."""
        deadline = time.monotonic() + busy_retry_s
        while True:
            try:
                return self.call("session.destroy", _params(session=key, archive=archive))
            except BusyError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.02)

    def session_exec(self, key: str, argv: Sequence[str], *, env: Optional[Dict[str, str]] = None,
                     cwd: Optional[str] = None, stdin: Optional[str] = None, timeout_ms: Optional[int] = None,
                     output_bytes: Optional[int] = None, limits: Optional[Dict[str, Any]] = None, network: Any = None,
                     wait: Optional[bool] = None, collect_outputs: Optional[bool] = None,
                     timeout: Optional[float] = None, **more: Any) -> RunResult:
        params = _run_params(argv, stdin, session=key, env=env, cwd=cwd, timeout_ms=timeout_ms,
                             output_bytes=output_bytes, limits=limits, network=network, wait=wait,
                             collect_outputs=collect_outputs, more=more)
        return RunResult.from_json(self.call("session.exec", params, timeout=timeout))

    # ---- files -------------------------------------------------------------

    def put_file(self, session: str, path: str, data: Data, *, mode: Optional[int] = None,
                 overwrite: Optional[bool] = None, wait: Optional[bool] = None) -> int:
        """files.put; the bytes written."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        params = _params(session=session, path=path, data=base64.b64encode(raw).decode("ascii"), mode=mode,
                         overwrite=overwrite, wait=wait)
        return int(self.call("files.put", params).get("size", len(raw)))

    def get_file(self, session: str, path: str) -> bytes:
        return base64.b64decode(self.call("files.get", {"session": session, "path": path}).get("data", ""))

    def list_files(self, session: str, path: Optional[str] = None, *, recursive: bool = False) -> List[FileInfo]:
        """files.list of `path` (the workspace root when None)."""
        raw = self.call("files.list", _params(session=session, path=path, recursive=recursive or None))
        return [FileInfo.from_json(e) for e in raw.get("entries", [])]

    def stat(self, session: str, path: str, *, sha256: bool = False) -> FileInfo:
        return FileInfo.from_json(self.call("files.stat", _params(session=session, path=path, sha256=sha256 or None)))

    def delete_file(self, session: str, path: str, *, recursive: bool = False, wait: Optional[bool] = None) -> None:
        self.call("files.delete", _params(session=session, path=path, recursive=recursive or None, wait=wait))

    # ---- the daemon --------------------------------------------------------

    def health(self) -> Health:
        return Health.from_json(self.call("health"))

    def pool_stats(self) -> Dict[str, PoolStats]:
        return {name: PoolStats.from_json(p) for name, p in self.call("pool.stats", {}).get("pools", {}).items()}

    def pool_warm(self, profile: Optional[str] = None, count: Optional[int] = None,
                  timeout_ms: Optional[int] = None) -> Dict[str, Any]:
        """pool.warm: {"profile", "warm", "idle", "min_idle"} once warm or at the timeout."""
        return self.call("pool.warm", _params(profile=profile, count=count, timeout_ms=timeout_ms))


class Session:
    """A session's workspace and the calls on it. `with client.session() as s:`
    destroys it on exit unless it was made with keep=True."""

    def __init__(self, client: Client, info: SessionInfo, *, keep: bool = False, archive: bool = False) -> None:
        self.client = client
        self.info = info
        self.id = info.session
        self.keep = keep
        self.archive = archive

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        if not self.keep:
            self.destroy(archive=self.archive)

    def __repr__(self) -> str:
        return f"Session({self.id!r}, profile={self.info.profile!r})"

    def refresh(self) -> SessionInfo:
        """session.get: the record now."""
        self.info = self.client.get_session(self.id)
        return self.info

    def destroy(self, *, archive: Optional[bool] = None) -> Dict[str, Any]:
        return self.client.destroy_session(self.id, archive=archive)

    def exec(self, argv: Sequence[str], **fields: Any) -> RunResult:
        """session.exec: a fresh sandbox with this workspace at /workspace."""
        return self.client.session_exec(self.id, argv, **fields)

    def stream(self, argv: Sequence[str], **start: Any) -> "ExecStream":
        """exec.start in this session, followed."""
        return self.client.stream(argv, session=self.id, **start)

    def put_file(self, path: str, data: Data, **options: Any) -> int:
        return self.client.put_file(self.id, path, data, **options)

    def get_file(self, path: str) -> bytes:
        return self.client.get_file(self.id, path)

    def list_files(self, path: Optional[str] = None, *, recursive: bool = False) -> List[FileInfo]:
        return self.client.list_files(self.id, path, recursive=recursive)

    def stat(self, path: str, *, sha256: bool = False) -> FileInfo:
        return self.client.stat(self.id, path, sha256=sha256)

    def delete_file(self, path: str, *, recursive: bool = False, wait: Optional[bool] = None) -> None:
        self.client.delete_file(self.id, path, recursive=recursive, wait=wait)

    def executions(self, limit: Optional[int] = None) -> ExecList:
        return self.client.exec_list(session=self.id, limit=limit)


class ExecStream:
    """A followed execution: iterating yields OutputChunk as the daemon sends
    them; once the iteration ends, `status` (exec.status's result) and
    `result` (the run's) are set and `stdout`/`stderr` hold all that came.
    Closing it early stops following; the execution runs on (cancel() ends it)."""

    def __init__(self, client: Client, exec_id: str, exchange: Exchange, timeout: Optional[float]) -> None:
        self.client = client
        self.exec_id = exec_id
        self.status: Optional[ExecStatus] = None
        self._exchange = exchange
        self._timeout = timeout
        self._out = {"stdout": bytearray(), "stderr": bytearray()}

    def __iter__(self) -> Iterator[OutputChunk]:
        if self.status is not None:
            return
        for message in self._exchange.messages(self._timeout):
            if is_notification(message):
                if message.get("method") == "exec.output" and isinstance(message.get("params"), dict):
                    chunk = OutputChunk.from_json(message["params"])
                    self._out.setdefault(chunk.stream, bytearray()).extend(chunk.data)
                    yield chunk
                continue
            self.status = ExecStatus.from_json(result_of(message))

    def wait(self) -> ExecStatus:
        """Reads to the end; the final status."""
        for _ in self:
            pass
        assert self.status is not None
        return self.status

    @property
    def result(self) -> Optional[RunResult]:
        return self.status.result if self.status is not None else None

    @property
    def stdout(self) -> bytes:
        return bytes(self._out["stdout"])

    @property
    def stderr(self) -> bytes:
        return bytes(self._out["stderr"])

    def cancel(self) -> ExecStatus:
        """exec.cancel; the stream then ends with the killed run's status."""
        return self.client.exec_cancel(self.exec_id)

    def close(self) -> None:
        self._exchange.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

