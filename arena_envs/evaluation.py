"""Evaluate a tool-calling agent over seeded episodes, many at once through a :class:`ToolPool`.

    from arena_envs import evaluate

    def decide(obs):                      # or `async def`, or a class with a `decide` method
        ...
        return Decision(tool="move_to", params={"target": [1, 0, 2]})

    report = evaluate(decide, "arena_envs/Foraging-v0", episodes=32, concurrency=16)
    report["aggregate"]  # success_rate, mean_score, mean_return, mean_steps, errors by code

Episodes run concurrently (``concurrency`` worlds); the agent's calls from all running
episodes advance together in one batched step. A class (rather than a function) gets
one fresh instance per episode, so agents that remember things stay apart.
"""

from __future__ import annotations

import asyncio
import inspect
from collections import Counter
from collections.abc import Sequence
from typing import Any

from arena_envs.tools.pool import ToolPool


async def _episode(pool: ToolPool, agent: Any, episode: int, seed: int) -> dict[str, Any]:
    decide = agent().decide if inspect.isclass(agent) else getattr(agent, "decide", agent)
    obs = await pool.acquire(episode, seed=seed)
    total, steps, errors = 0.0, 0, Counter()
    try:
        while True:
            decision = decide(obs)
            if inspect.isawaitable(decision):
                decision = await decision
            obs, reward, terminated, truncated, info = await pool.call(decision, id=episode)
            total += reward
            steps += 1
            result = obs.last_action_result
            if result is not None and not result.success:
                errors[result.error_code] += 1
            if terminated or truncated:
                break
    finally:
        await pool.release(episode)
    return {"seed": seed, "success": bool(info["success"]), "score": float(info.get("score", total)),
            "return": total, "steps": steps, "errors": dict(errors)}


async def evaluate_async(agent: Any, env_id: str = "arena_envs/Foraging-v0", episodes: int = 10,
                         seeds: Sequence[int] | None = None, concurrency: int = 16,
                         **env_kwargs: Any) -> dict[str, Any]:
    """The coroutine behind :func:`evaluate`, for callers already inside an event loop (Jupyter)."""
    seeds = list(range(episodes)) if seeds is None else list(seeds)
    if len(seeds) != episodes:
        raise ValueError(f"got {len(seeds)} seeds for {episodes} episodes")
    pool = ToolPool(env_id, size=max(1, min(concurrency, episodes)), timeout=float("inf"), **env_kwargs)
    results = await asyncio.gather(*(_episode(pool, agent, i, seed) for i, seed in enumerate(seeds)))
    errors = Counter()
    for r in results:
        errors.update(r["errors"])
    n = max(len(results), 1)
    return {
        "episodes": results,
        "aggregate": {
            "episodes": len(results),
            "success_rate": sum(r["success"] for r in results) / n,
            "mean_score": sum(r["score"] for r in results) / n,
            "mean_return": sum(r["return"] for r in results) / n,
            "mean_steps": sum(r["steps"] for r in results) / n,
            "errors": dict(errors),
        },
    }


def evaluate(agent: Any, env_id: str = "arena_envs/Foraging-v0", episodes: int = 10,
             seeds: Sequence[int] | None = None, concurrency: int = 16, **env_kwargs: Any) -> dict[str, Any]:
    """Run ``agent`` (a ``decide(observation)`` callable, sync or async, or a class with
    ``decide``) on seeded episodes; per-episode results and their aggregate.

    Episode ``i`` is seeded ``seeds[i]`` (default ``i``), so a run is reproducible.
    """
    return asyncio.run(evaluate_async(agent, env_id, episodes, seeds, concurrency, **env_kwargs))
