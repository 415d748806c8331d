"""Agents that answer a chat transcript: any OpenAI-compatible endpoint, or a scripted baseline.

    agent = OpenAIChatAgent(base_url="http://127.0.0.1:8000/v1", model="Qwen/Qwen3-8B")
    reply = await agent.reply(messages, tools, episode="seed-7/0")
    reply.message, reply.usage, reply.retries, reply.error

Both are :class:`~arena_envs.tools.BaseAgent` subclasses and speak the same small
interface, ``await agent.reply(messages, tools, episode=...)`` returning an
:class:`AgentReply`, so the runner treats a model and a script alike. The environment's
tools come with each call (``tools``); the agent's own ``@tool`` methods (BaseAgent's
``tool_schemas()``, none by default) are offered beside them and can be run with
``await agent.tool_messages(reply.message)`` by a caller that wants the agent to act locally.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any

from arena_envs.llm.parsers import FORMATS, MAX_REPLY_CHARS, format_reply
from arena_envs.llm.scripted import policy_for
from arena_envs.tools import BaseAgent

EPISODE_HEADER = "X-Arena-Episode"


#: Error classes of a failed request (``AgentReply.error_class``, ``EpisodeRecord.error_class``).
ERROR_CLASSES = ("connection", "timeout", "rate_limited", "server_error", "bad_request", "not_found",
                 "context_exceeded", "bad_response", "internal")
#: The classes a retry can cure: the server was away, busy or failed in passing.
RETRYABLE = frozenset({"connection", "rate_limited", "server_error"})
#: How much of an error text is kept: whole up to 4,000 characters, else its head (which names the
#: error) and its end. llama-cpp-python's answer to a null assistant content is 1,782 characters,
#: one entry per member of the message union, the cause in the middle: it is kept whole.
ERROR_HEAD_CHARS, ERROR_TAIL_CHARS = 1000, 3000

# A server's wording for "the conversation does not fit": OpenAI/vLLM/llama-cpp-python ("maximum
# context length", code context_length_exceeded), llama.cpp's llama-server (exceed_context_size_error),
# or llama-cpp-python's unmapped "Requested tokens (N) exceed context window of M".
_CONTEXT_EXCEEDED = re.compile(r"context[_ ]length[_ ]exceeded|maximum context length|exceed_context_size"
                               r"|exceeds? (?:the )?(?:available )?context (?:size|window|length)"
                               r"|exceed context window", re.IGNORECASE)
# A 5xx that is really a rejected request: llama-cpp-python answers HTTP 500 with the pydantic/FastAPI
# validation message of a bad body, or with the chat template's own exception. Resending never helps.
_REQUEST_REJECTED = re.compile(r"validation error|Input should be|Field required|errors\.pydantic\.dev"
                               r"|'loc': \('body'|TemplateError|raise_exception|roles must alternate",
                               re.IGNORECASE)


@dataclass(slots=True)
class AgentReply:
    """One answer: the assistant message (None when the call failed), its token usage, how
    many retries it took, the error that ended the attempt and its class (one of
    :data:`ERROR_CLASSES`), and one entry per HTTP request sent (``latency`` in seconds,
    ``finish_reason``, ``prompt_tokens``, ``completion_tokens``; failed attempts too)."""

    message: dict[str, Any] | None
    usage: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    error: str | None = None
    error_class: str | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)


class OpenAIChatAgent(BaseAgent):
    """Drives any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, OpenAI) with the
    official async client, offering the scenario's tools as ``tools=``.

    A reply without ``tool_calls`` (a server without a tool parser returns the model's raw
    text) is passed on as text: the chat environment parses it. Retries, with exponential
    backoff and jitter, only what a retry can cure (:data:`RETRYABLE`): a dropped or refused
    connection, 429, and a 5xx that is not a rejected request (llama-cpp-python answers 500
    to a body that fails validation). A timeout is not retried: the server may still be
    working on the request, and a second copy would queue behind it. Everything else ends
    the attempt at once with its class (:func:`classify_error`).

    At most ``max_in_flight`` requests are sent at once; the ``timeout`` of a request starts
    when it is sent, not while it waits for its turn here. ``request_log`` keeps the
    ``(sent, answered)`` times (``time.perf_counter``) of every answered request, the measurements
    :func:`~arena_envs.llm.runner.server_parallelism` reads.

    | argument          | meaning                                                          |
    |-------------------|------------------------------------------------------------------|
    | `base_url`        | the endpoint, e.g. `http://127.0.0.1:8000/v1`                    |
    | `model`           | the model name the server knows                                  |
    | `api_key`         | defaults to `OPENAI_API_KEY` (a local server accepts anything)   |
    | `timeout`         | seconds for one request, from when it is sent                    |
    | `max_retries`     | retries of a request on connection errors, 429 and retryable 5xx |
    | `backoff`         | first retry delay in seconds, doubled each time                  |
    | `max_in_flight`   | requests sent at once (None: no limit)                           |
    | `send_tools`      | send `tools=` (off for servers that reject it)                   |
    | `max_reply_chars` | a longer reply is an error (a runaway model would flood the transcript) |
    | `tools`           | the agent's own tools (BaseAgent), offered beside the environment's |
    | `sampling`        | extra arguments to `chat.completions.create` (temperature, tool_choice, extra_body...) |
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 120.0,
                 max_retries: int = 4, backoff: float = 0.5, max_in_flight: int | None = None,
                 send_tools: bool = True, max_reply_chars: int = MAX_REPLY_CHARS, tools: Any = (),
                 **sampling: Any):
        import openai

        super().__init__(tools=tools)
        self.openai = openai
        self.base_url, self.timeout = base_url, timeout
        self.model, self.max_retries, self.backoff, self.send_tools = model, max_retries, backoff, send_tools
        self.max_reply_chars = max_reply_chars
        self.sampling = sampling
        self.request_log: list[tuple[float, float]] = []
        self._slots = asyncio.Semaphore(max_in_flight) if max_in_flight else None
        key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"  # local servers need none
        # The client's own timeout is only a backstop (ours, in _send, is the rule); its connection
        # pool is never the queue, as the semaphore bounds what is sent.
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=key, timeout=timeout + 5, max_retries=0)

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                    episode: str | None = None) -> AgentReply:
        headers = {EPISODE_HEADER: episode} if episode else None
        # The transcript and tools go in ``extra_body``: they are plain JSON already, and the
        # SDK's walk of typed request parameters cost 70% of a chat step on long transcripts
        # (measured by arena-bench's chat rows); the request sent is the same.
        body: dict[str, Any] = {"messages": messages}
        offered = [*tools, *self.tool_schemas()]
        if self.send_tools and offered:
            body["tools"] = offered
        sampling = self.sampling if "tools" in body else \
            {k: v for k, v in self.sampling.items() if k != "tool_choice"}  # servers refuse it without tools
        arguments: dict[str, Any] = {"model": self.model, "messages": [], **sampling,
                                     "extra_body": {**self.sampling.get("extra_body", {}), **body}}
        requests: list[dict[str, Any]] = []
        retries = 0
        while True:
            try:
                completion = await self._send(arguments, headers, requests)
                break
            except Exception as error:  # every failure is classified; only what a retry cures is retried
                kind = classify_error(error)
                if kind not in RETRYABLE or retries >= self.max_retries:
                    return AgentReply(None, retries=retries, error=self._describe(error, kind), error_class=kind,
                                      requests=requests)
                await asyncio.sleep(self.backoff * 2 ** retries * (0.5 + random.random()))
                retries += 1
        usage = _usage(completion)
        choices = getattr(completion, "choices", None)
        if not choices:
            return AgentReply(None, usage, retries, "the server answered without choices", "bad_response", requests)
        requests[-1].update(finish_reason=getattr(choices[0], "finish_reason", None),
                            prompt_tokens=usage.get("prompt_tokens", 0),
                            completion_tokens=usage.get("completion_tokens", 0))
        data = choices[0].message.model_dump(exclude_none=True)
        content = data.get("content")
        if isinstance(content, str) and len(content) > self.max_reply_chars:
            return AgentReply(None, usage, retries,
                              f"reply too long: {len(content)} characters (limit {self.max_reply_chars})",
                              "bad_response", requests)
        reply = {"role": "assistant", "content": content}
        if data.get("tool_calls"):
            reply["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                    "function": {"name": c["function"].get("name"),
                                                 "arguments": c["function"].get("arguments")}}
                                   for c in data["tool_calls"] if isinstance(c.get("function"), dict)]
        if data.get("reasoning_content"):
            reply["reasoning_content"] = data["reasoning_content"]
        return AgentReply(reply, usage, retries, requests=requests)

    async def _send(self, arguments: dict[str, Any], headers: dict[str, str] | None,
                    requests: list[dict[str, Any]]) -> Any:
        """One request, timed from when it is sent: the wait for a free slot here is not counted."""
        async with self._slots or contextlib.nullcontext():
            start = time.perf_counter()
            entry: dict[str, Any] = {"latency": None, "finish_reason": None}
            requests.append(entry)
            try:
                completion = await asyncio.wait_for(  # (asyncio.timeout is Python 3.11+)
                    self.client.chat.completions.create(**arguments, extra_headers=headers), self.timeout)
            finally:
                entry["latency"] = round(time.perf_counter() - start, 6)
        self.request_log.append((start, start + entry["latency"]))
        return completion

    def _describe(self, error: BaseException, kind: str) -> str:
        if kind == "timeout":
            return f"timeout: no answer within {self.timeout:g} s of sending the request"
        text = describe_error(error)
        if kind == "connection":
            text += f" (nothing answered at {self.base_url}: is the server running?)"
        elif kind == "not_found":
            text += f" (is {self.model!r} a model the server serves, and {self.base_url} its API root?)"
        return text

    async def served_models(self, timeout: float = 5.0) -> list[str] | None:
        """The model names the server lists at ``/models``; None when it lists none or cannot say.

        Asked before a run because llama-cpp-python's server answers a request for a model it
        does not know with its default model: a misspelt name would otherwise play silently."""
        import openai

        try:
            page = await asyncio.wait_for(self.client.models.list(), timeout)
            names = [entry.id for entry in page.data if isinstance(getattr(entry, "id", None), str)]
        except (openai.OpenAIError, asyncio.TimeoutError, ValueError, TypeError, AttributeError):
            return None  # no such route, no server yet (the episodes report that), a foreign answer
        return names or None

    async def server_slots(self) -> int | None:
        """How many requests the server says it answers at once, from its documented behaviour:
        llama.cpp's llama-server reports ``total_slots`` at ``/props``; llama-cpp-python's server
        (its ``/v1/models`` entries are ``owned_by: "me"`` with ``permissions``) holds one lock
        around its model, so 1. None when unknown (any other server, or no answer)."""
        import httpx

        root = self.base_url.rstrip("/")
        async with httpx.AsyncClient(timeout=5.0) as http:
            try:
                props = await http.get(root.removesuffix("/v1") + "/props")
                if props.status_code == 200 and isinstance(props.json().get("total_slots"), int):
                    return int(props.json()["total_slots"])
                models = await http.get(root + "/models")
                entries = models.json().get("data", []) if models.status_code == 200 else []
                if entries and all(isinstance(e, dict) and e.get("owned_by") == "me" and "permissions" in e
                                   for e in entries):
                    return 1
            except (httpx.HTTPError, ValueError, AttributeError):
                return None
        return None

    async def close(self) -> None:
        await self.client.close()


def classify_error(error: BaseException) -> str:
    """The class (:data:`ERROR_CLASSES`) of a failed request, from the exception the client raised."""
    import openai

    if isinstance(error, (TimeoutError, asyncio.TimeoutError, openai.APITimeoutError)):  # distinct before 3.11
        return "timeout"
    if isinstance(error, openai.APIConnectionError):
        return "connection"
    if isinstance(error, openai.APIStatusError):
        text, status = describe_error(error), error.status_code
        if _CONTEXT_EXCEEDED.search(text):
            return "context_exceeded"
        if status == 429:
            return "rate_limited"
        if status == 404:
            return "not_found"
        if status >= 500:
            return "bad_request" if _REQUEST_REJECTED.search(text) else "server_error"
        return "bad_request"
    if isinstance(error, (openai.OpenAIError, ValueError, TypeError, KeyError)):  # an unreadable answer
        return "bad_response"
    return "internal"


def describe_error(error: BaseException) -> str:
    """``Type (HTTP status): message``, the server's own message when it sent one; a long text keeps
    its head and its end (where a validation error says which field and why)."""
    status = getattr(error, "status_code", None)
    body = getattr(error, "body", None)
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = body["error"].get("message", message)
    text = f"{type(error).__name__}" + (f" (HTTP {status})" if status else "") + f": {message or error}"
    if len(text) > ERROR_HEAD_CHARS + ERROR_TAIL_CHARS:
        text = f"{text[:ERROR_HEAD_CHARS]} [...] {text[-ERROR_TAIL_CHARS:]}"
    return text


class ScriptedChatAgent(BaseAgent):
    """A scripted baseline through the chat path: it reads the transcript like a model and writes
    its calls in ``fmt`` (see :mod:`arena_envs.llm.scripted`)."""

    def __init__(self, fmt: str = "openai"):
        super().__init__()
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
        self.fmt, self.model = fmt, f"scripted-{fmt}"

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                    episode: str | None = None) -> AgentReply:
        calls = policy_for(messages)(messages)
        fmt = "json" if self.fmt == "bare_name" and any(a for _, a in calls) else self.fmt
        turn = sum(1 for m in messages if m.get("role") == "assistant")
        return AgentReply(format_reply(calls, fmt, id_prefix=f"call_{turn}"))

    async def close(self) -> None:
        pass


def _usage(completion: Any) -> dict[str, int]:
    usage = getattr(completion, "usage", None)
    if usage is None:
        return {}
    return {key: int(getattr(usage, key, 0) or 0) for key in ("prompt_tokens", "completion_tokens", "total_tokens")}

