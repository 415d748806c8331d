"""The limits a public server needs, as one ASGI middleware in front of OpenEnv's app.

* API key (optional) on every route, HTTP and WebSocket: ``Authorization: Bearer KEY`` or
  ``X-API-Key: KEY``, compared in constant time.
* Request size: HTTP bodies and WebSocket frames above ``max_message_bytes`` are refused
  (413, or an error frame; the session goes on).
* Rate: HTTP requests per client address, WebSocket frames per connection (token buckets);
  over the limit gets 429 or an error frame.
* Malformed frames (binary, not JSON, nested too deeply, not an object) get an error frame
  and never reach the app, so the session goes on.
* Idle WebSocket sessions are closed (code 4408) after ``idle_timeout`` seconds without a
  frame; OpenEnv then closes the session's environment, which frees its world.
* Attaching to a session by id (``/ws?session_id=...``) is refused: every WebSocket is its
  own session and no id is ever needed or accepted.
* Shutdown: :meth:`Guard.drain` refuses new work and waits until every frame received has
  been answered.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

IDLE_CLOSE_CODE = 4408
"""WebSocket close code of a session reclaimed for idleness."""


@dataclass
class Limits:
    """The server's limits (see the module docstring). ``None`` turns a limit off."""

    api_key: str | None = None
    max_message_bytes: int = 64 * 1024
    http_rate: float | None = 100.0  # requests per second per client address
    http_burst: int = 200
    ws_rate: float | None = 1000.0  # frames per second per connection
    ws_burst: int = 2000
    idle_timeout: float | None = 300.0  # seconds without a frame before a session is closed

    def __post_init__(self) -> None:
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must not be empty (leave it out to serve without a key)")
        if self.max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be at least 1024, got {self.max_message_bytes}")
        for name in ("http_rate", "ws_rate", "idle_timeout"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive or None, got {value}")


class _Bucket:
    """A token bucket: ``rate`` tokens a second, at most ``burst`` saved up."""

    __slots__ = ("rate", "burst", "tokens", "stamp")

    def __init__(self, rate: float, burst: int) -> None:
        self.rate, self.burst, self.tokens, self.stamp = rate, burst, float(burst), time.monotonic()

    def take(self) -> bool:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return True
        return False


@dataclass(eq=False)
class _Connection:
    send: Any
    bucket: _Bucket | None
    last_active: float = field(default_factory=time.monotonic)
    waiting: int = 0  # frames passed to the app and not answered yet
    closed: bool = False


def _error_frame(message: str, code: str) -> dict[str, Any]:
    text = json.dumps({"type": "error", "data": {"message": message, "code": code}})
    return {"type": "websocket.send", "text": text}


class Guard:
    """ASGI middleware applying :class:`Limits` (install with ``app.add_middleware(Guard, limits=...)``)."""

    def __init__(self, app: Any, limits: Limits, monitor: GuardMonitor | None = None) -> None:
        self.app, self.limits = app, limits
        self.monitor = monitor or GuardMonitor()
        self._key = limits.api_key.encode() if limits.api_key else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    def _authorized(self, scope: dict) -> bool:
        if self._key is None:
            return True
        headers = dict(scope.get("headers") or ())
        given = headers.get(b"x-api-key")
        if given is None:
            scheme, _, token = headers.get(b"authorization", b"").partition(b" ")
            given = token.strip() if scheme.lower() == b"bearer" else b""
        return hmac.compare_digest(given, self._key)

    # -- HTTP ----------------------------------------------------------------------------

    async def _http(self, scope: dict, receive: Any, send: Any) -> None:
        monitor, limits = self.monitor, self.limits
        if monitor.draining:
            return await _respond(send, 503, "the server is shutting down")
        if not self._authorized(scope):
            return await _respond(send, 401, "missing or wrong API key (send 'Authorization: Bearer KEY')",
                                  {"www-authenticate": "Bearer"})
        if limits.http_rate is not None:
            if len(monitor.http_buckets) > 10_000:  # forget addresses not seen lately
                monitor.http_buckets.clear()
            client = (scope.get("client") or ("?", 0))[0]
            bucket = monitor.http_buckets.get(client)
            if bucket is None:
                bucket = monitor.http_buckets[client] = _Bucket(limits.http_rate, limits.http_burst)
            if not bucket.take():
                return await _respond(send, 429, f"rate limit: at most {limits.http_rate:g} requests a second")
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > limits.max_message_bytes):
            return await _respond(send, 413, f"request body over {limits.max_message_bytes} bytes")
        body, more = b"", True
        while more:  # read it all (it is small) so an over-long chunked body is refused before the app runs
            message = await receive()
            if message["type"] != "http.request":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limits.max_message_bytes:
                return await _respond(send, 413, f"request body over {limits.max_message_bytes} bytes")
        replayed = False

        async def replay() -> dict:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        monitor.http_in_flight += 1
        try:
            await self.app(scope, replay, send)
        finally:
            monitor.http_in_flight -= 1

    # -- WebSocket -----------------------------------------------------------------------

    async def _websocket(self, scope: dict, receive: Any, send: Any) -> None:
        monitor = self.monitor
        if monitor.draining or not self._authorized(scope):
            return await send({"type": "websocket.close", "code": 1013 if monitor.draining else 1008})
        if "session_id" in parse_qs(scope.get("query_string", b"").decode("latin-1")):
            # OpenEnv could attach this socket to another session by id: not here
            return await send({"type": "websocket.close", "code": 1008})
        limits = self.limits
        bucket = _Bucket(limits.ws_rate, limits.ws_burst) if limits.ws_rate is not None else None
        connection = _Connection(send, bucket)
        monitor.connections.add(connection)
        monitor.start_reaper(limits.idle_timeout)

        async def guarded_receive() -> dict:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive":
                    return message
                connection.last_active = time.monotonic()
                problem = self._frame_problem(message, connection)
                if problem is None:
                    connection.waiting += 1
                    return message
                if not connection.closed:
                    await send(_error_frame(*problem))

        async def guarded_send(message: dict) -> None:
            if message["type"] == "websocket.send":
                connection.waiting = max(0, connection.waiting - 1)
                connection.last_active = time.monotonic()
                if connection.closed:  # reclaimed: the client was told and the socket is closing
                    return
            elif message["type"] == "websocket.close":
                if connection.closed:
                    return
                connection.closed = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        finally:
            connection.closed = True
            monitor.connections.discard(connection)

    def _frame_problem(self, message: dict, connection: _Connection) -> tuple[str, str] | None:
        """Why a frame is refused (message, code), or None to pass it to the app."""
        if self.monitor.draining:
            return "the server is shutting down; no new calls", "SHUTTING_DOWN"
        if connection.bucket is not None and not connection.bucket.take():
            return f"rate limit: at most {self.limits.ws_rate:g} messages a second", "RATE_LIMITED"
        text = message.get("text")
        if text is None:
            return "binary frames are not accepted: send JSON text", "INVALID_JSON"
        if len(text) > self.limits.max_message_bytes:
            return f"message over {self.limits.max_message_bytes} bytes", "MESSAGE_TOO_LARGE"
        try:  # read here too: OpenEnv ends the session on JSON it cannot take (too deep, not an object)
            frame = json.loads(text)
        except (ValueError, RecursionError) as err:
            return f"invalid JSON: {str(err)[:200]}", "INVALID_JSON"
        if not isinstance(frame, dict):
            return 'expected a JSON object such as {"type": "step", "data": {...}}', "INVALID_JSON"
        return None


class GuardMonitor:
    """The guard's live state: connections, buckets, draining (one per server)."""

    def __init__(self) -> None:
        self.connections: set[_Connection] = set()
        self.http_buckets: dict[str, _Bucket] = {}
        self.http_in_flight = 0
        self.draining = False
        self.reclaimed = 0
        self._reaper: asyncio.Task | None = None

    def start_reaper(self, idle_timeout: float | None) -> None:
        if idle_timeout is not None and (self._reaper is None or self._reaper.done()):
            self._reaper = asyncio.ensure_future(self._reap(idle_timeout))

    async def _reap(self, idle_timeout: float) -> None:
        """Close WebSocket sessions idle for longer than ``idle_timeout`` (checked often
        enough to be late by at most a quarter of it, or one second)."""
        while True:
            await asyncio.sleep(min(idle_timeout / 4, 1.0))
            now = time.monotonic()
            for connection in list(self.connections):
                if not connection.closed and connection.waiting == 0 and now - connection.last_active > idle_timeout:
                    await self._evict(connection, f"session reclaimed after {idle_timeout:g} s without a message")

    async def _evict(self, connection: _Connection, reason: str) -> None:
        connection.closed = True
        self.reclaimed += 1
        try:
            await connection.send(_error_frame(reason, "SESSION_RECLAIMED"))
            await connection.send({"type": "websocket.close", "code": IDLE_CLOSE_CODE, "reason": reason[:120]})
        except Exception:  # the client is already gone: the app sees the disconnect itself
            pass

    async def drain(self, timeout: float = 10.0) -> bool:
        """Refuse new work, then wait up to ``timeout`` s for every call received to be
        answered. True when everything in flight finished."""
        self.draining = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.http_in_flight == 0 and not any(c.waiting for c in self.connections):
                return True
            await asyncio.sleep(0.01)
        return False

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.cancel()

    def stats(self) -> dict[str, Any]:
        return {"connections": len(self.connections), "reclaimed": self.reclaimed,
                "in_flight": self.http_in_flight + sum(c.waiting for c in self.connections),
                "draining": self.draining}


async def _respond(send: Any, status: int, detail: str, headers: dict[str, str] | None = None) -> None:
    body = json.dumps({"detail": detail}).encode()
    raw = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    raw += [(k.encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})
