"""The JSON-RPC 2.0 layer, the same over every transport: request ids,
replies turned into results or RpcError, batches, and streamed calls whose
notifications come to the caller that made them."""
from __future__ import annotations

import itertools
import secrets
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from .errors import RpcError, TransportError
from .transport import Exchange, Message


def result_of(reply: Any) -> Any:
    """A reply's result; its error raised as the RpcError subclass of its code."""
    if not isinstance(reply, dict) or ("result" not in reply and "error" not in reply):
        raise TransportError(f"not a JSON-RPC reply: {str(reply)[:200]}")
    if "error" in reply:
        raise RpcError.from_error(reply["error"])
    return reply["result"]


class RpcClient:
    """Calls over one transport. Thread-safe: calls from several threads may be
    in flight at once (on the socket and stdio they share the connection; over
    HTTP each takes a pooled connection of its own)."""

    def __init__(self, transport: Any, *, timeout: Optional[float] = None) -> None:
        self.transport = transport
        self.timeout = timeout  # the default client-side wait for a reply; None: as long as the call takes
        # Signed HTTP requests must never repeat byte for byte within the
        # replay window, which equal ids from two clients would make likely.
        self._ids = itertools.count(secrets.randbits(40) if getattr(transport, "signs", False) else 1)

    def call(self, method: str, params: Optional[Union[Dict[str, Any], List[Any]]] = None, *,
             timeout: Optional[float] = None) -> Any:
        """One request; its result, or its error raised."""
        wait = self._wait(timeout)
        exchange = self.transport.open(self._request(method, params), timeout=wait)
        return result_of(exchange.reply(wait))

    def notify(self, method: str, params: Optional[Dict[str, Any]] = None) -> None:
        """A notification: sent, never answered."""
        message: Dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.transport.open(message)

    def batch(self, calls: Sequence[Tuple[str, Optional[Dict[str, Any]]]], *,
              timeout: Optional[float] = None) -> List[Any]:
        """Several calls in one message; for each, in order, its result or its RpcError (not raised)."""
        if not calls:
            raise ValueError("an empty batch is not a request")
        requests = [self._request(method, params) for method, params in calls]
        wait = self._wait(timeout)
        exchange = self.transport.open(requests, timeout=wait)
        reply = exchange.reply(wait)
        if isinstance(reply, dict):  # the whole batch refused (an id-null error)
            result_of(reply)
        by_id = {r.get("id"): r for r in reply if isinstance(r, dict)}
        answers: List[Any] = []
        for request in requests:
            try:
                answers.append(result_of(by_id.get(request["id"])))
            except RpcError as e:
                answers.append(e)
        return answers

    def open_stream(self, method: str, params: Dict[str, Any], *, route: str,
                    timeout: Optional[float] = None) -> Exchange:
        """A request whose notifications for `route` (an exec_id) come to the
        returned exchange before its reply."""
        exchange = self.transport.open(self._request(method, params), route=route, stream=True,
                                       timeout=self._wait(timeout))
        assert exchange is not None
        return exchange

    def close(self) -> None:
        self.transport.close()

    def __enter__(self) -> "RpcClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _request(self, method: str, params: Optional[Union[Dict[str, Any], List[Any]]]) -> Message:
        message: Dict[str, Any] = {"jsonrpc": "2.0", "id": next(self._ids), "method": method}
        if params is not None:
            message["params"] = params
        return message

    def _wait(self, timeout: Optional[float]) -> Optional[float]:
        return self.timeout if timeout is None else timeout
