"""``arena-bench`` rows of the chat path: chat steps/s of many concurrent sessions and the share
of that time spent in the environment.

Two passes over the same seeded episodes, replies cached so the "model" costs (almost)
nothing: through a local OpenAI-compatible server in another process with the real
``openai`` client (what a user's run costs besides the model), and with the replies handed
over in-process (the chat environment alone: parsing, ticks, observations, messages).
The second rate over the first is the environment's share of the time of a chat step.

One more row: the parser's time on a 1 MB reply of adversarial braces (the worst of
:data:`ADVERSARIAL_REPLIES`) over its time on a same-length reply of well-formed JSON: the
search for a call in prose is linear, so this stays a small constant.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from typing import Any

from arena_envs.llm.agents import AgentReply, OpenAIChatAgent, ScriptedChatAgent
from arena_envs.llm.chat import ChatPool

ENV_ID = "arena_envs/Foraging-v0"
WAIT_TICKS = 50
REPLY_BYTES = 1_000_000

ADVERSARIAL_REPLIES = {  # how to make n characters of it (cut to length)
    "deep unclosed arrays (issue 23)": lambda n: '{"a":[' * 199 + "1," * n,
    "unclosed braces": lambda n: "{" * n,
    "many small objects": lambda n: '{"a":1} ' * n,
    "single-quoted calls": lambda n: "{'name': 'x', " * n,
    "fences": lambda n: "```json\n{" * n,
}


def well_formed_reply(size: int = REPLY_BYTES) -> str:
    """A reply of ``size`` characters that is one well-formed JSON call with as many braces as the
    adversarial ones: the yardstick of the parser's time."""
    data = json.dumps([{"k": i % 10} for i in range((size - 100) // 10)])
    text = '{"name": "send_message", "arguments": {"message": "notes", "data": ' + data + "}}"
    return text + " " * (size - len(text))


def adversarial_reply(kind: str, size: int = REPLY_BYTES) -> str:
    return ADVERSARIAL_REPLIES[kind](size)[:size]


def parse_seconds(text: str, repeat: int = 1) -> float:
    """The best time of ``repeat`` parses of ``text`` (its length not refused)."""
    from arena_envs.llm import parsers

    limit, parsers.MAX_REPLY_CHARS = parsers.MAX_REPLY_CHARS, max(parsers.MAX_REPLY_CHARS, len(text))
    try:
        best = float("inf")
        for _ in range(repeat):
            start = time.perf_counter()
            parsers.parse_reply(text, ["send_message"])
            best = min(best, time.perf_counter() - start)
        return best
    finally:
        parsers.MAX_REPLY_CHARS = limit


def parser_rows() -> list[tuple[str, float, str]]:
    baseline = parse_seconds(well_formed_reply(), repeat=2)
    worst = max(parse_seconds(adversarial_reply(kind)) for kind in ADVERSARIAL_REPLIES)
    return [("Parser: 1 MB adversarial reply / same-length well-formed JSON (worst case)", worst / baseline, "x")]


class _Replay:
    """Replies looked up by (seed, turn): the in-process "model" with nothing left to compute."""

    def __init__(self, replies: dict[tuple[str, int], dict[str, Any]]):
        self.replies = replies

    async def reply(self, messages, tools, episode=None) -> AgentReply:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        return AgentReply(self.replies[episode, turn])

    async def close(self) -> None:
        pass


class _Recorder:
    """Wraps an agent and keeps its replies by (episode, turn)."""

    def __init__(self, agent):
        self.agent, self.replies = agent, {}

    async def reply(self, messages, tools, episode=None) -> AgentReply:
        reply = await self.agent.reply(messages, tools, episode)
        self.replies[episode, sum(1 for m in messages if m["role"] == "assistant")] = reply.message
        return reply

    async def close(self) -> None:
        await self.agent.close()


async def _pass(agent, sessions: int) -> tuple[int, float]:
    """Every session plays one seeded episode at once; (chat steps, seconds)."""
    from arena_envs.llm.runner import run_episodes

    pool = ChatPool(ENV_ID, size=sessions, wait_ticks=WAIT_TICKS)
    start = time.perf_counter()
    records = await run_episodes(pool, agent, range(sessions), concurrency=sessions)
    elapsed = time.perf_counter() - start
    errors = [r.error for r in records if r.error]
    if errors:
        raise RuntimeError(f"chat bench episodes failed: {errors[:3]}")
    return sum(r.turns for r in records), elapsed


def chat_rows(seconds: float, sessions: int = 256) -> list[tuple[str, float, str]]:
    server = subprocess.Popen([sys.executable, "-m", "arena_envs.llm.server", "--port", "0", "--cache"],
                              stdout=subprocess.PIPE, text=True)
    try:
        base_url = server.stdout.readline().strip().rsplit(" ", 1)[-1]

        async def measure() -> tuple[float, float]:
            recorder = _Recorder(ScriptedChatAgent("hermes"))
            await _pass(recorder, sessions)  # the replies, for the in-process pass
            client = OpenAIChatAgent(base_url, "scripted-hermes", timeout=600)
            await _pass(client, sessions)  # warms the server's cache
            served = local = 0.0
            deadline = time.perf_counter() + seconds
            while True:  # best of at least two timed passes of each
                steps, elapsed = await _pass(client, sessions)
                served = max(served, steps / elapsed)
                steps, elapsed = await _pass(_Replay(recorder.replies), sessions)
                local = max(local, steps / elapsed)
                if time.perf_counter() > deadline and served and local:
                    break
            await client.close()
            return served, local

        served, local = asyncio.run(measure())
    finally:
        server.terminate()
        server.wait(30)
    return [(f"Chat: {sessions} sessions via local OpenAI server (cached replies)", served, "chat-steps/s"),
            (f"Chat: {sessions} sessions, environment only", local, "chat-steps/s"),
            ("Chat: share of a chat step spent in the environment", 100.0 * served / local, "%"),
            *parser_rows()]
