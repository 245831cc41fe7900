"""Skill sessions and streamed progress (docs/skills.md, "Skill sessions"
and "Progress"): a conversational skill kept open, and skill.call with
its skill.progress notifications handed to a callback as they come."""
from __future__ import annotations

import itertools
from typing import Any, Callable, Dict, Optional

from .errors import NotFoundError
from .results import SkillResult
from .rpc import RpcClient, result_of
from .transport import is_notification

Progress = Callable[[Dict[str, Any]], None]

_tokens = itertools.count(1)


def call_skill_streamed(client: RpcClient, request: Dict[str, Any], on_progress: Optional[Progress],
                        timeout: Optional[float]) -> SkillResult:
    """skill.call with `request`; each skill.progress's params to `on_progress`, in order, before the result."""
    if on_progress is None:
        return SkillResult.from_json(client.call("skill.call", request, timeout=timeout))
    token = f"progress-{id(client):x}-{next(_tokens)}"
    request = dict(request, progress_token=token)
    wait = client.timeout if timeout is None else timeout
    exchange = client.open_stream("skill.call", request, route=token, timeout=wait)
    for message in exchange.messages(wait):
        if is_notification(message):
            if message.get("method") == "skill.progress" and isinstance(message.get("params"), dict):
                on_progress(message["params"])
            continue
        return SkillResult.from_json(result_of(message))
    raise RuntimeError("skill.call ended without a reply")


class SkillSession:
    """One skill process answering a conversation's calls in turn
    (skill.session.open). As a context manager it is closed on exit."""

    def __init__(self, client: RpcClient, info: Dict[str, Any]) -> None:
        self.client = client
        self.info = info
        self.key: str = info["skill_session"]
        self.ended: Optional[Dict[str, Any]] = None  # skill.session.close's `ended`

    def call(self, method: str, params: Any = None, *, timeout_ms: Optional[int] = None,
             on_progress: Optional[Progress] = None, timeout: Optional[float] = None) -> SkillResult:
        """One request to the session's skill. A call it does not answer
        (SkillFailed) closes the session."""
        request: Dict[str, Any] = {"skill_session": self.key, "method": method}
        if params is not None:
            request["params"] = params
        if timeout_ms is not None:
            request["timeout_ms"] = timeout_ms
        return call_skill_streamed(self.client, request, on_progress, timeout)

    def close(self) -> Optional[Dict[str, Any]]:
        """skill.session.close; how the process ended. Closed already (by its
        idle timeout, or a failed call): None."""
        try:
            self.ended = self.client.call("skill.session.close", {"skill_session": self.key})["ended"]
        except NotFoundError:
            return None
        return self.ended

    def __enter__(self) -> "SkillSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
