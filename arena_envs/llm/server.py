"""A local OpenAI-compatible chat server whose "model" is a scripted policy: for tests, demos and benchmarks.

    with ScriptedModelServer() as server:                 # 127.0.0.1, a free port, its own thread
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="unused")
        reply = await client.chat.completions.create(model="scripted-hermes", messages=..., tools=...)

The model name picks how the policy writes its calls: ``scripted`` or ``scripted-openai``
(native ``tool_calls``), ``scripted-<format>`` for each text format of
:data:`~arena_envs.llm.parsers.FORMATS` (``scripted-hermes``, ``scripted-qwen3_xml``...).
The policy reads only the request's messages (see :mod:`arena_envs.llm.scripted`).

Faults for one conversation, chosen by its ``X-Arena-Episode`` header
(``server.faults[episode_id] = kind``):

| kind        | the server                                                        |
|-------------|-------------------------------------------------------------------|
| `500`       | answers HTTP 500                                                  |
| `429`       | answers HTTP 429 (rate limited)                                   |
| `429-once`  | answers 429 to the first request, then normally                   |
| `garbage`   | answers 200 with a body that is not JSON                          |
| `huge`      | answers a reply of 10 MB of text                                  |
| `hang`      | never answers (until ``hang_seconds``)                            |
| `invalid`   | the model's first reply is invalid calls (unknown tool, bad arguments), then it plays normally |

The server is as strict about the request as real ones: the messages must pass
:func:`~arena_envs.llm.validate_messages` (known roles, string content, every ``tool``
message answering a declared call, well-formed ``tool_calls``, the ``tools`` schemas), or
the answer is an OpenAI-style error, ``{"error": {"message", "type": "invalid_request_error",
"param", "code"}}``, with status ``validation_status``: 400 by default, as OpenAI's API
answers (llama-cpp-python's server answers such a request with 500: pass 500 to mirror it).
``null_content=False`` (the default) refuses ``content: null`` even beside ``tool_calls``, as
llama.cpp's server does ("Input should be a valid string"); OpenAI accepts it there
(``null_content=True``). ``strict=False`` turns the checks off. ``server.requests_seen``
keeps the last 1,000 accepted requests' parameters other than the messages (``tools``, ``tool_choice``,
extra body keys...), so a test can see what a client sent.
``slots=1`` answers one request at a time, as llama-cpp-python's server does (others wait their
turn), and ``delay`` adds seconds of "thinking" to every answer: together, a slow single-slot
model server for tests of concurrency advice.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import threading
import time
from collections import Counter, deque
from typing import Any

from aiohttp import web

from arena_envs.llm.parsers import FORMATS, format_reply
from arena_envs.llm.scripted import policy_for
from arena_envs.llm.transcripts import TranscriptError, validate_messages

EPISODE_HEADER = "X-Arena-Episode"
HUGE_REPLY_CHARS = 10 * 1024 * 1024
FAULTS = ("500", "429", "429-once", "garbage", "huge", "hang", "invalid")


class ScriptedModelServer:
    """An OpenAI-compatible ``/v1/chat/completions`` on 127.0.0.1, served from a background thread.

    ``cache=True`` remembers each answer by the exact request it answers, so a repeated run
    costs the policy nothing (what a benchmark of the chat path wants).
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, cache: bool = False,
                 hang_seconds: float = 30.0, strict: bool = True, null_content: bool = False,
                 validation_status: int = 400, slots: int | None = None, delay: float = 0.0):
        self.host, self.port, self.cache, self.hang_seconds = host, port, cache, hang_seconds
        self.strict, self.null_content, self.validation_status = strict, null_content, validation_status
        self.requests_seen: deque[dict[str, Any]] = deque(maxlen=1000)  # the last accepted requests, no messages
        self.slots, self.delay = slots, delay
        self._slots: asyncio.Semaphore | None = None  # made in the server's own loop
        self.faults: dict[str, str] = {}
        self.requests: Counter[str] = Counter()  # by episode id ("" when the header is missing)
        self.policy_seconds = 0.0  # time spent computing replies (not counting cached ones)
        self._cached: dict[str, bytes] = {}  # request body hash -> response body
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None
        self._hangs: set[asyncio.Task] = set()

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> ScriptedModelServer:
        ready = threading.Event()
        errors: list[BaseException] = []

        def serve() -> None:
            loop = self._loop = asyncio.new_event_loop()
            try:
                loop.run_until_complete(self._start())
            except BaseException as error:  # reported to start()'s caller
                errors.append(error)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._stop())
            loop.close()

        self._thread = threading.Thread(target=serve, name="scripted-model-server", daemon=True)
        self._thread.start()
        ready.wait(30)
        if errors:
            raise errors[0]
        return self

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    async def _start(self) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._serve)
        self._slots = asyncio.Semaphore(self.slots) if self.slots else None
        app.router.add_get("/v1/models", self._models)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the port the OS chose for port 0

    async def _stop(self) -> None:
        for task in list(self._hangs):
            task.cancel()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- the API --------------------------------------------------------------------------

    async def _models(self, request: web.Request) -> web.Response:
        names = ["scripted", *(f"scripted-{fmt}" for fmt in FORMATS)]
        return web.json_response({"object": "list", "data": [{"id": n, "object": "model"} for n in names]})

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        """A request waits for a free slot (if slots are limited), then takes ``delay`` to answer."""
        async with self._slots or contextlib.nullcontext():
            if self.delay:
                await asyncio.sleep(self.delay)
            return await self._complete(request)

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        episode = request.headers.get(EPISODE_HEADER, "")
        self.requests[episode] += 1
        fault = self.faults.get(episode)
        if fault == "500":
            return _error(500, "the scripted server failed on purpose", "server_error")
        if fault == "429" or (fault == "429-once" and self.requests[episode] == 1):
            return _error(429, "rate limited on purpose", "rate_limit_exceeded")
        if fault == "garbage":
            return web.Response(text="<html>certainly not JSON", content_type="application/json")
        if fault == "hang":
            task = asyncio.current_task()
            self._hangs.add(task)
            try:
                await asyncio.sleep(self.hang_seconds)
            finally:
                self._hangs.discard(task)
            return _error(504, "hung on purpose", "timeout")
        raw = await request.read()
        key = hashlib.sha1(raw).hexdigest() if self.cache and not fault else ""
        cached = self._cached.get(key) if key else None
        if cached is not None:  # the same request as before: the same answer, nothing parsed
            return web.Response(body=cached, content_type="application/json")
        try:
            body = json.loads(raw)
            messages, model = body["messages"], str(body.get("model", "scripted"))
        except (ValueError, KeyError, TypeError, UnicodeDecodeError) as error:
            return _error(400, f"bad request: {error}", "invalid_request_error")
        if self.strict:
            try:
                validate_messages(messages, body.get("tools"), null_content=self.null_content)
            except TranscriptError as error:
                param = "tools" if error.index is None and error.rule == "tools" else \
                    "messages" if error.index is None else f"messages.[{error.index}]"
                return _error(self.validation_status, str(error), "invalid_request_error", param)
        self.requests_seen.append({key: value for key, value in body.items() if key != "messages"})
        fmt = model.removeprefix("scripted").lstrip("-") or "openai"
        if fmt not in FORMATS:
            return _error(404, f"unknown model {model!r}; models: scripted, scripted-<format> for {FORMATS}",
                          "model_not_found")
        if fault == "huge":
            message: dict[str, Any] = {"role": "assistant", "content": "x" * HUGE_REPLY_CHARS}
        elif fault == "invalid" and self.requests[episode] == 1:
            message = format_reply([("teleport", {"where": "treasure"}), ("cat", {"file": 42})],
                                   "openai" if fmt == "bare_name" else fmt)
        else:
            try:
                message = self._reply(messages, fmt)
            except (ValueError, KeyError, TypeError, IndexError) as error:
                return _error(400, f"the scripted model cannot answer this conversation: {error}",
                              "invalid_request_error")
        answer = json.dumps(_completion(model, message, messages)).encode()
        if key:
            self._cached[key] = answer
        return web.Response(body=answer, content_type="application/json")

    def _reply(self, messages: list[dict[str, Any]], fmt: str) -> dict[str, Any]:
        start = time.perf_counter()
        calls = policy_for(messages)(messages)
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        if fmt == "bare_name" and any(arguments for _, arguments in calls):
            fmt = "json"  # a bare name cannot carry arguments: written as JSON instead
        message = format_reply(calls, fmt, id_prefix=f"call_{turn}")
        self.policy_seconds += time.perf_counter() - start
        return message


def _completion(model: str, message: dict[str, Any], messages: list[dict[str, Any]]) -> dict[str, Any]:
    prompt = sum(len(str(m.get("content") or "")) for m in messages) // 4 + 1
    completion = len(json.dumps(message)) // 4 + 1
    return {
        "id": f"chatcmpl-{time.monotonic_ns()}", "object": "chat.completion", "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message,
                     "finish_reason": "tool_calls" if message.get("tool_calls") else "stop", "logprobs": None}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }


def _error(status: int, message: str, kind: str, param: str | None = None) -> web.Response:
    return web.json_response({"error": {"message": message, "type": kind, "param": param, "code": kind}},
                             status=status)


def main(argv: list[str] | None = None) -> None:
    """``python -m arena_envs.llm.server``: serve the scripted model until interrupted."""
    import argparse

    parser = argparse.ArgumentParser(description="A local OpenAI-compatible server whose model is a scripted policy")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0: any free port")
    parser.add_argument("--cache", action="store_true", help="remember replies by conversation")
    parser.add_argument("--lenient", action="store_true", help="accept requests whose messages are invalid")
    parser.add_argument("--null-content", action="store_true",
                        help="accept content null beside tool_calls (as OpenAI does; llama.cpp refuses it)")
    parser.add_argument("--validation-status", type=int, default=400,
                        help="HTTP status of an invalid request (400 as OpenAI; 500 as llama-cpp-python)")
    parser.add_argument("--slots", type=int, default=None, help="requests answered at once (default: no limit)")
    parser.add_argument("--delay", type=float, default=0.0, help="seconds each answer takes")
    args = parser.parse_args(argv)
    server = ScriptedModelServer(args.host, args.port, cache=args.cache, strict=not args.lenient,
                                 null_content=args.null_content, validation_status=args.validation_status,
                                 slots=args.slots, delay=args.delay).start()
    print(f"serving the scripted model on {server.base_url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":
    main()
