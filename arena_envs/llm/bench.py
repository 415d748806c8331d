"""``arena-bench`` rows of the chat path: chat steps/s of many concurrent sessions and the share
of that time spent in the environment.

Two passes over the same seeded episodes, replies cached so the "model" costs (almost)
nothing: through a local OpenAI-compatible server in another process with the real
``openai`` client (what a user's run costs besides the model), and with the replies handed
over in-process (the chat environment alone: parsing, ticks, observations, messages).
The second rate over the first is the environment's share of the time of a chat step.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from typing import Any

from arena_envs.llm.agents import AgentReply, OpenAIChatAgent, ScriptedChatAgent
from arena_envs.llm.chat import ChatPool

ENV_ID = "arena_envs/Foraging-v0"
WAIT_TICKS = 50


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
            ("Chat: share of a chat step spent in the environment", 100.0 * served / local, "%")]
