"""``arena-bench --only mcp``: episodes/s through the MCP door against our own runner, on the same episodes.

The same seeded Treasure Hunts (easy), solved by the same policy (the oracle's calls: the
scripted agent of :mod:`arena_envs.llm.scripted` writes them into the chat path), played

* through the MCP door: an ``arena-serve treasure_hunt`` process, and OpenEnv's
  ``MCPToolClient`` sessions in this process (``reset`` over the WebSocket, each call a
  ``tools/call`` over ``POST /mcp``), :data:`CONCURRENCY` at once;
* by our runner: :func:`arena_envs.llm.runner.run_episodes` on a ``ChatPool`` in this process,
  the scripted chat agent, the same concurrency.

Both finish every episode; the rows are episodes/s over the whole set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

CONCURRENCY = 8
EPISODES = 64


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def _server() -> Iterator[str]:
    """``arena-serve treasure_hunt`` in its own process, with limits wide enough for the benchmark's clients."""
    import requests

    port = _free_port()
    argv = [sys.executable, "-m", "arena_envs.serve", "treasure_hunt", "--port", str(port), "--log-level", "warning",
            "--env-kwarg", "difficulty=easy", "--max-sessions", str(2 * CONCURRENCY), "--http-rate", "1000000",
            "--http-sessions-per-client", str(2 * CONCURRENCY), "--max-http-sessions", str(2 * CONCURRENCY)]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=os.environ.copy())
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if requests.get(url + "/health", timeout=2).ok:
                    break
            except requests.ConnectionError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"arena-serve did not start: {process.stderr.read().decode()[-2000:]}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


async def _mcp_episodes(url: str, seeds: list[int]) -> list[bool]:
    """Each seed's hunt through OpenEnv's MCP client; whether each was won."""
    from openenv.core.mcp_client import MCPToolClient

    from arena_envs.treasure_hunt import OracleAgent

    won: list[bool] = []

    async def worker(mine: list[int]) -> None:
        async with MCPToolClient(base_url=url) as env:
            for seed in mine:
                agent = OracleAgent()
                text = (await env.reset(seed=seed)).observation.metadata["text"]
                while True:
                    call = agent.act(text)
                    answer = await env.call_tool(call.pop("tool"), **call)
                    text = answer["text"]
                    if answer["done"]:
                        won.append(bool(answer["info"]["success"]))
                        break

    await asyncio.gather(*(worker(seeds[k::CONCURRENCY]) for k in range(CONCURRENCY)))
    return won


async def _runner_episodes(seeds: list[int]) -> list[bool]:
    from arena_envs.llm.agents import ScriptedChatAgent
    from arena_envs.llm.chat import ChatPool
    from arena_envs.llm.runner import run_episodes

    pool = ChatPool("arena_envs/TreasureHunt-v0", size=CONCURRENCY, difficulty="easy")
    records = await run_episodes(pool, ScriptedChatAgent("json"), seeds, concurrency=CONCURRENCY)
    return [record.success for record in records]


def mcp_rows(seconds: float = 2.0) -> list[tuple[str, float, str]]:
    """Episodes/s of :data:`EPISODES` Treasure Hunts through the MCP door and through our runner."""
    try:
        import openenv  # noqa: F401
    except ImportError:
        print("mcp: skipped (pip install arena-envs[serve])", file=sys.stderr)
        return []
    seeds = list(range(EPISODES))
    rates = {}
    with _server() as url:
        for name, play in (("MCP door (arena-serve, OpenEnv MCPToolClient)", lambda: _mcp_episodes(url, seeds)),
                           ("our runner (run_episodes, ChatPool)", lambda: _runner_episodes(seeds))):
            start = time.perf_counter()
            won = asyncio.run(play())
            elapsed = time.perf_counter() - start
            if len(won) != EPISODES or not all(won):
                raise RuntimeError(f"{name}: {sum(won)} of {EPISODES} hunts won, expected all")
            rates[name] = EPISODES / elapsed
    return [(f"Treasure Hunt {EPISODES} oracle episodes, {CONCURRENCY} at once: {name}", rate, "episodes/s")
            for name, rate in rates.items()]
