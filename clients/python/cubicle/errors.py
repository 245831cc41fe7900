"""What can go wrong, as exceptions.

Three kinds, one base (CubicleError):
- RpcError: the daemon answered with a JSON-RPC error. One subclass per code
  of docs/protocol.md ("Error codes"), so that a caller can catch
  BusyError and retry without comparing numbers;
- TransportError: no answer came (the daemon could not be reached, the
  connection broke, an HTTP status that carries no JSON-RPC reply);
- AuthError: the HTTP front refused the credentials (401) or the key's
  scope (403); nothing ran.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Type


class CubicleError(Exception):
    """Every error this client raises."""


class TransportError(CubicleError):
    """The daemon could not be reached, or the connection ended without a reply."""


class ConnectError(TransportError):
    """No connection could be made (refused, unreachable, the connect timed
    out): the request was never sent, so nothing ran and it may be sent
    elsewhere."""


class CallTimeout(TransportError):
    """No reply came within the client-side timeout (the call may still run)."""


class HttpError(TransportError):
    """The HTTP front answered with a status that is not a JSON-RPC reply."""

    def __init__(self, status: int, message: str, body: bytes = b"") -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message
        self.body = body


class AuthError(CubicleError):
    """HTTP 401 (no key, an unknown key, a bad or replayed signature) or 403
    (the key's methods or profiles leave the call out). Nothing ran."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status = status
        self.message = message


class RpcError(CubicleError):
    """A JSON-RPC error reply: `code`, `message` and the optional `data`."""

    code: Optional[int] = None

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"{message} ({code})")
        self.code = code
        self.message = message
        self.data = data

    @staticmethod
    def from_error(error: Any) -> "RpcError":
        """The exception for a reply's `error` member, of the subclass its code names."""
        if not isinstance(error, dict):
            return RpcError(-32603, f"malformed error member: {error!r}")
        code = error.get("code")
        message = str(error.get("message", ""))
        cls = _BY_CODE.get(code, RpcError) if isinstance(code, int) else RpcError
        return cls(code if isinstance(code, int) else -32603, message, error.get("data"))


class ParseError(RpcError):
    """-32700: the request was not JSON, not UTF-8, or nested too deep."""
    code = -32700


class InvalidRequest(RpcError):
    """-32600: not a JSON-RPC 2.0 request; or sessions used without a state directory."""
    code = -32600


class MethodNotFound(RpcError):
    """-32601: no such method."""
    code = -32601


class InvalidParams(RpcError):
    """-32602: a bad param; the message names its JSON path."""
    code = -32602


class InternalError(RpcError):
    """-32603: the daemon failed, or ran out of a resource (`data["resource"]`)."""
    code = -32603


class BusyError(RpcError):
    """-32000: every slot and queue place is taken, a pool is full, or a
    session is held by another execution. Retry later."""
    code = -32000


class SetupError(RpcError):
    """-32001: the sandbox could not be set up (an accelerator chip that is gone...)."""
    code = -32001


class LimitExceeded(RpcError):
    """-32002: a limit above its ceiling, too many sessions, a file too big, a full workspace."""
    code = -32002


class Conflict(RpcError):
    """-32003: a duplicate idempotency key or exec_id; `data["exec_id"]` names the first."""
    code = -32003


class NotFoundError(RpcError):
    """-32004: an unknown profile, execution, session, file, skill or environment."""
    code = -32004


class ShuttingDown(RpcError):
    """-32005: the daemon is draining and refuses new work."""
    code = -32005


class LineTooLong(RpcError):
    """-32006: the request was longer than the daemon's line limit."""
    code = -32006


class SkillFailed(RpcError):
    """-32007: skill.call's skill ended, timed out or wrote an over-long line
    without answering; `data` has `reason`, `status` and output tails."""
    code = -32007


class Forbidden(RpcError):
    """-32008: the caller's key or uid entry (a keys file's scope) leaves this
    method or profile out; nothing ran. Over HTTP the front says 403 (AuthError)."""
    code = -32008


class RequirementsNotMet(RpcError):
    """-32009: a skill's `requires` are not met where it would run (its
    environment, or the host's interpreter); `data["unmet"]` lists each, and
    the message says them ("package numpy not available (need >= 1.10, have
    1.9)"). Nothing ran."""
    code = -32009


class StaticPolicyDenied(RpcError):
    """-32010: skill.call's skill is denied by its profile's static policy;
    `data["violations"]` lists what the check found (rule, what, line, col).
    Nothing ran."""
    code = -32010


class SkillAnswerError(RpcError):
    """The skill itself answered with a JSON-RPC error (SkillResult.unwrap)."""


_BY_CODE: Dict[int, Type[RpcError]] = {
    cls.code: cls
    for cls in (ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError, BusyError, SetupError,
                LimitExceeded, Conflict, NotFoundError, ShuttingDown, LineTooLong, SkillFailed, Forbidden,
                RequirementsNotMet, StaticPolicyDenied)
}
