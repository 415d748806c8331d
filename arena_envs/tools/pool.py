"""``ToolPool``: many tool-calling sessions over one native batch, stepped together.

    pool = ToolPool("arena_envs/Foraging-v0", size=64)
    observation = await pool.acquire("episode-7", seed=7)       # optional: choose the seed
    step = await pool.call({"tool": "move_to", "params": {"target": [3, 0, 4]}}, id="episode-7")
    step.observation, step.reward, step.terminated
    await pool.release("episode-7")                              # frees the world for another id

An id keeps its world until it is released (AgentFly's isolation by id). A new id takes a
free world, waiting up to ``timeout`` seconds when every world is taken. Calls that arrive
together, from any number of ids, advance in one batched step of the numpy core; worlds
nobody called stay exactly where they were.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from itertools import repeat
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
from gymnasium.utils import seeding

from arena_envs.observations import Observation
from arena_envs.tools.session import ToolSession
from arena_envs.world import ToolActions


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold Python's cyclic garbage collector off while a batch of observations is built.

    A flush builds thousands of small objects that all stay alive until their callers take
    them, so collections in the middle of it find nothing to free, promote everything and
    soon trigger full collections (measured: a fifth of the pool's time, halved by the
    pause). The objects hold no reference cycles: reference counting frees them.
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class _Batch(asyncio.Future):
    """The one future that every call of a flush awaits (one future per call costs more).

    A caller that is cancelled must not cancel the batch for the others: refusing here
    makes asyncio cancel that caller alone, as soon as the batch is done.
    """

    def cancel(self, msg: Any = None) -> bool:
        return False


class PoolStep(NamedTuple):
    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class PoolExhaustedError(TimeoutError):
    """Every world of the pool stayed taken for longer than the pool's timeout."""


class ToolPool:
    """A fixed number of worlds shared by tool-calling sessions, keyed by id."""

    def __init__(self, env_id: str = "arena_envs/Foraging-v0", size: int = 64, timeout: float = 30.0,
                 **env_kwargs: Any):
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.env_id, self.size, self.timeout = env_id, size, timeout
        self.envs = gym.make_vec(env_id, num_envs=size, **env_kwargs).unwrapped
        self.scenario, self.state = self.envs.scenario, self.envs.state
        self.sessions = [ToolSession(self.scenario, self.state, world=i) for i in range(size)]
        self._rngs: list[np.random.Generator | None] = [None] * size
        self._owner: dict[Any, int] = {}
        self._free = list(range(size))
        self._freed = asyncio.Condition()
        self._pending: dict[int, Any] = {}  # world -> the tool call waiting for the next flush
        self._batch: _Batch | None = None

    # -- slots ---------------------------------------------------------------------------

    async def acquire(self, id: Any, seed: int | None = None) -> Observation:
        """Take a world for ``id`` (waiting while none is free), reset it, and return its first observation.

        An id that already holds a world gets it reset with ``seed``.
        """
        world = self._owner.get(id)
        if world is None:
            world = await self._take(id)
        return self._reset(world, seed)

    async def call(self, tool_call: Any, id: Any) -> PoolStep:
        """Carry out one tool call in ``id``'s world (taking a free world for a new id)."""
        world = self._owner.get(id)
        if world is None:
            await self.acquire(id)
            world = self._owner[id]
        if world in self._pending:
            raise RuntimeError(f"id {id!r} already has a call in flight")
        if not self._pending:  # the first call of a batch schedules its flush
            loop = asyncio.get_running_loop()
            self._batch = _Batch(loop=loop)
            loop.call_soon(self._flush, self._batch)
        batch = self._batch
        self._pending[world] = tool_call
        return (await batch)[world]

    async def release(self, id: Any) -> None:
        """Reset ``id``'s world and give it back to the pool (a no-op for an unknown id)."""
        world = self._owner.pop(id, None)
        if world is None:
            return
        self._reset(world, None)
        async with self._freed:
            self._free.append(world)
            self._freed.notify()

    def monitor(self) -> dict[str, Any]:
        """How many worlds are free and which ids hold the others."""
        return {"size": self.size, "free": len(self._free), "acquired": len(self._owner),
                "ids": dict(self._owner)}

    async def _take(self, id: Any) -> int:
        if not self._free:  # only wait when we must: waiting costs loop turns and splits batches
            async with self._freed:
                try:
                    await asyncio.wait_for(self._freed.wait_for(lambda: self._free), self.timeout)
                except asyncio.TimeoutError:
                    raise PoolExhaustedError(
                        f"no free world in the pool of {self.size} for id {id!r} after {self.timeout:g} s; "
                        f"release ids you are done with or make the pool larger") from None
        world = self._free.pop(0)
        self._owner[id] = world
        return world

    def _reset(self, world: int, seed: int | None) -> Observation:
        if seed is not None or self._rngs[world] is None:
            self._rngs[world], _ = seeding.np_random(seed)
        self.scenario.reset(self.state, np.array([world]), [self._rngs[world]])
        session = self.sessions[world]
        session.begin()
        return self._observations([world], first=True)[0][0]

    # -- the batched step --------------------------------------------------------------

    def _flush(self, batch: _Batch) -> None:
        """Step every world with a call waiting, all in one batched step."""
        pending, self._pending = self._pending, {}
        try:
            with _collector_paused():
                batch.set_result(self._advance(pending))
        except Exception as err:
            batch.set_exception(err)
        finally:
            # Callers wait on the batch even when cancelled (see _Batch), so it must always
            # end, even when a KeyboardInterrupt or the like goes through.
            if not batch.done():
                batch.set_exception(RuntimeError("the pool's batched step was interrupted"))

    def _advance(self, pending: dict[int, Any]) -> dict[int, PoolStep]:
        """The step of every world in ``pending`` (world -> its tool call), keyed by world."""
        worlds = list(pending)
        actions = ToolActions.idle((self.size, 1))
        for world, tool_call in pending.items():
            self.sessions[world].encode(tool_call, actions)
        active = np.zeros(self.size, bool)
        active[worlds] = True
        reward, terminated, truncated = self.scenario.step(self.state, actions, active)
        observations, infos = self._observations(worlds)
        steps = map(PoolStep, observations, reward[worlds].tolist(), terminated[worlds].tolist(),
                    truncated[worlds].tolist(), infos)
        return dict(zip(worlds, steps, strict=True))

    def _observations(self, worlds: list[int], first: bool = False) -> tuple[list[Observation], list[dict]]:
        """The observations and infos of ``worlds``, built together from the batch's arrays."""
        rows = np.array(worlds)
        arrays = {k: v[rows] for k, v in self.scenario.observe(self.state).items()}
        columns = {k: v[rows].tolist() for k, v in self.scenario.info(self.state).items()}
        infos = _records(columns)
        sessions = [self.sessions[world] for world in worlds]
        return ToolSession.observations(sessions, arrays, infos, first), infos


def _records(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """One dict per row from equal-length columns: ``{"a": [1, 2]}`` gives ``[{"a": 1}, {"a": 2}]``
    (built by ``map`` rather than a comprehension: this runs for every call of a batch)."""
    return list(map(dict, map(zip, repeat(tuple(columns)), zip(*columns.values(), strict=True))))
