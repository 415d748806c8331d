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
import os
import random
from dataclasses import dataclass, field
from typing import Any

from arena_envs.llm.parsers import FORMATS, MAX_REPLY_CHARS, format_reply
from arena_envs.llm.scripted import policy_for
from arena_envs.tools import BaseAgent

EPISODE_HEADER = "X-Arena-Episode"


@dataclass(slots=True)
class AgentReply:
    """One answer: the assistant message (None when the call failed), its token usage, how
    many retries it took, and the error that ended the attempt, if any."""

    message: dict[str, Any] | None
    usage: dict[str, int] = field(default_factory=dict)
    retries: int = 0
    error: str | None = None


class OpenAIChatAgent(BaseAgent):
    """Drives any OpenAI-compatible chat endpoint (vLLM, llama.cpp server, Ollama, OpenAI) with the
    official async client, offering the scenario's tools as ``tools=``.

    A reply without ``tool_calls`` (a server without a tool parser returns the model's raw
    text) is passed on as text: the chat environment parses it. Retries with exponential
    backoff (and jitter) on 429 and 5xx answers and on dropped connections, up to
    ``max_retries``; a timeout, a 4xx or an unreadable answer ends the attempt with its error.

    | argument          | meaning                                                          |
    |-------------------|------------------------------------------------------------------|
    | `base_url`        | the endpoint, e.g. `http://127.0.0.1:8000/v1`                    |
    | `model`           | the model name the server knows                                  |
    | `api_key`         | defaults to `OPENAI_API_KEY` (a local server accepts anything)   |
    | `timeout`         | seconds for one request                                          |
    | `max_retries`     | retries of a request on 429/5xx/connection errors                |
    | `backoff`         | first retry delay in seconds, doubled each time                  |
    | `send_tools`      | send `tools=` (off for servers that reject it)                   |
    | `max_reply_chars` | a longer reply is an error (a runaway model would flood the transcript) |
    | `tools`           | the agent's own tools (BaseAgent), offered beside the environment's |
    | `sampling`        | extra arguments to `chat.completions.create` (temperature, tool_choice, extra_body...) |
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None, *, timeout: float = 120.0,
                 max_retries: int = 4, backoff: float = 0.5, send_tools: bool = True,
                 max_reply_chars: int = MAX_REPLY_CHARS, tools: Any = (), **sampling: Any):
        import openai

        super().__init__(tools=tools)
        self.openai = openai
        self.model, self.max_retries, self.backoff, self.send_tools = model, max_retries, backoff, send_tools
        self.max_reply_chars = max_reply_chars
        self.sampling = sampling
        key = api_key or os.environ.get("OPENAI_API_KEY") or "unused"  # local servers need none
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=key, timeout=timeout, max_retries=0)

    async def reply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                    episode: str | None = None) -> AgentReply:
        openai = self.openai
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
        retries = 0
        while True:
            try:
                completion = await self.client.chat.completions.create(**arguments, extra_headers=headers)
                break
            except (openai.RateLimitError, openai.InternalServerError, openai.APIConnectionError) as error:
                if isinstance(error, openai.APITimeoutError) or retries >= self.max_retries:
                    return AgentReply(None, retries=retries, error=_describe(error))
                await asyncio.sleep(self.backoff * 2 ** retries * (0.5 + random.random()))
                retries += 1
            except openai.APIStatusError as error:
                if error.status_code >= 500 and retries < self.max_retries:
                    await asyncio.sleep(self.backoff * 2 ** retries * (0.5 + random.random()))
                    retries += 1
                    continue
                return AgentReply(None, retries=retries, error=_describe(error))
            except (openai.OpenAIError, ValueError, TypeError) as error:  # garbage answers land here
                return AgentReply(None, retries=retries, error=_describe(error))
        usage = _usage(completion)
        if not getattr(completion, "choices", None):
            return AgentReply(None, usage, retries, "the server answered without choices")
        message = completion.choices[0].message
        data = message.model_dump(exclude_none=True)
        content = data.get("content")
        if isinstance(content, str) and len(content) > self.max_reply_chars:
            return AgentReply(None, usage, retries,
                              f"reply too long: {len(content)} characters (limit {self.max_reply_chars})")
        reply = {"role": "assistant", "content": content}
        if data.get("tool_calls"):
            reply["tool_calls"] = [{"id": c.get("id"), "type": "function",
                                    "function": {"name": c["function"].get("name"),
                                                 "arguments": c["function"].get("arguments")}}
                                   for c in data["tool_calls"] if isinstance(c.get("function"), dict)]
        if data.get("reasoning_content"):
            reply["reasoning_content"] = data["reasoning_content"]
        return AgentReply(reply, usage, retries)

    async def close(self) -> None:
        await self.client.close()


class ScriptedChatAgent(BaseAgent):
    """A scripted baseline through the chat path: it reads the transcript like a model and writes
    its calls in ``fmt`` (see :mod:`arena_envs.llm.scripted`)."""

    def __init__(self, fmt: str = "openai"):
        super().__init__()
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; formats: {', '.join(FORMATS)}")
        self.fmt = fmt

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


def _describe(error: BaseException) -> str:
    status = getattr(error, "status_code", None)
    text = f"{type(error).__name__}" + (f" (HTTP {status})" if status else "") + f": {error}"
    return text[:500]
