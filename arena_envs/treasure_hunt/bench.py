"""Throughput of TreasureHunt-v0 for ``arena-bench``: tool calls per second of the batched env.

Two workloads drive every env of the batch:

* ``explorer``: a wandering agent that sends JSON tool calls as an LLM would (``ls``,
  then ``cat`` or ``cd`` on something it saw, sometimes ``cd ..`` or ``pwd``) and so
  plays out the 50-turn episodes; a new hunt every 50 calls.
* ``oracle``: ``OracleAgent``, which wins in ``depth + 3`` calls; the worst case for the
  env, with a new hunt generated every few calls.

Only ``step`` is timed, not the agents, and only real tool calls are counted, not the
autoreset steps of the next-step API. Hunt generation and resets are included.
"""

from __future__ import annotations

import json
import random
import time
from typing import Any

import numpy as np

from arena_envs.treasure_hunt.env import TreasureHuntVectorEnv
from arena_envs.treasure_hunt.oracle import OracleAgent

UNIT = "tool calls/s"


class _Explorer:
    """Wanders the tree: lists a directory, then reads or enters one of its entries."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed).random
        self._listed = False

    def act(self, observation: str) -> str:
        body = observation.rpartition("\n[turn ")[0]
        if self._listed and body and not body.startswith("Error"):
            entries = body.split("\n")
            entry = entries[int(self._random() * len(entries))]
            call: dict[str, Any] = (
                {"tool": "cd", "path": entry} if entry.endswith("/") else {"tool": "cat", "file": entry}
            )
            self._listed = False
        else:
            draw = self._random()
            call = {"tool": "ls"} if draw < 0.8 else {"tool": "cd", "path": ".."} if draw < 0.95 else {"tool": "pwd"}
            self._listed = draw < 0.8
        return json.dumps(call)


def tool_calls_per_second(
    workload: str = "explorer",
    backend: str = "memory",
    num_envs: int = 256,
    difficulty: str = "easy",
    seconds: float = 2.0,
) -> float:
    """Tool calls per second of ``num_envs`` hunts played by ``workload`` ("explorer" or "oracle")."""
    envs = TreasureHuntVectorEnv(num_envs=num_envs, backend=backend, difficulty=difficulty)
    try:
        observations, _ = envs.reset(seed=0)
        agents = [_Explorer(index) if workload == "explorer" else OracleAgent() for index in range(num_envs)]
        resetting = np.zeros(num_envs, dtype=np.bool_)
        calls = 0
        stepping = 0.0
        deadline = time.perf_counter() + seconds
        while calls == 0 or time.perf_counter() < deadline:
            actions = [agent.act(observation) for agent, observation in zip(agents, observations, strict=True)]
            start = time.perf_counter()
            observations, _, terminations, truncations, _ = envs.step(actions)
            stepping += time.perf_counter() - start
            calls += num_envs - int(resetting.sum())
            resetting = terminations | truncations
        return calls / stepping
    finally:
        envs.close()


def bench_rows(seconds: float = 2.0) -> list[tuple[str, float, str]]:
    """``(label, rate, unit)`` rows, each measured for about ``seconds``: the in-memory batched env
    and the disk backend, under both workloads."""
    cases = [("memory", 256, "explorer"), ("memory", 256, "oracle"), ("disk", 16, "explorer"), ("disk", 16, "oracle")]
    return [
        (
            f"TreasureHunt {backend}, batched B={num_envs}, easy, {workload}",
            tool_calls_per_second(workload, backend, num_envs, "easy", seconds),
            UNIT,
        )
        for backend, num_envs, workload in cases
    ]
