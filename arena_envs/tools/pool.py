"""``ToolPool``: many tool-calling sessions over one native batch, stepped together.

    pool = ToolPool("arena_envs/Foraging-v0", size=64)
    observation = await pool.acquire("episode-7", seed=7)       # optional: choose the seed
    step = await pool.call({"tool": "move_to", "params": {"target": [3, 0, 4]}}, id="episode-7")
    step.observation, step.reward, step.terminated
    await pool.release("episode-7")                              # frees the world for another id

An id keeps its world until it is released (AgentFly's isolation by id). A new id takes a
free world, waiting up to ``timeout`` seconds when every world is taken. Calls that arrive
together, from any number of ids, advance in one batched step of the numpy core
(:class:`~arena_envs.batch.Batch`); worlds nobody called stay exactly where they were.

Each call is read and checked by its own caller before it joins the batch, so a call that
cannot be read fails alone. Acquiring and releasing are single transitions that leave
nothing half done: a bad seed takes no world, and a release waits for the id's call in
flight, so a world never changes hands under a call. The pool is bound to no event loop:
``asyncio.run`` it once, then again.

``ToolPool`` is for the arena's 2D scenarios. Given anything else, an environment class
(``ToolPool(PythonSandboxEnv)``), another Gymnasium env id or a stateful tool
(``ToolPool(code_interpreter)``), it returns the generic pool for it (see
:mod:`arena_envs.tools.resource_pool`), with the same ``acquire``/``call``/``release``/``monitor``:
:func:`make_pool` picks it, a :class:`StatefulToolPool` for a stateful tool.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
from collections.abc import Callable, Hashable
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from arena_envs.batch import Batch
from arena_envs.observations import Observation
from arena_envs.tools.errors import ToolCallError
from arena_envs.tools.resource_pool import (
    DEFAULT_POOL_SIZE,
    DEFAULT_TIMEOUT,
    PoolExhaustedError,
    ResourcePool,
    Slots,
    arena_scenario,
    check_seed,
)
from arena_envs.tools.session import ToolSession
from arena_envs.world import NO_TOOL, OK, ToolActions, WorldState

__all__ = ["ArenaHandle", "PoolExhaustedError", "PoolStep", "ToolPool"]


_resume_owed = False  # a flush paused the collector and left resuming it to a callback not yet run


def _pause_collector() -> bool:
    """Hold Python's cyclic garbage collector off while a batch is stepped and observed;
    returns whether :func:`_resume_collector` is to turn it back on.

    A flush builds thousands of small objects that all stay alive until their callers take
    them, so collections in the middle of it find nothing to free, and one right after it
    only walks them all to promote them (measured: a tenth of the pool's time). The
    objects hold no reference cycles: reference counting frees them.
    """
    resume = gc.isenabled() or _resume_owed  # a flush whose resume is still due: this one resumes too
    gc.disable()
    return resume


def _resume_collector(loop: asyncio.AbstractEventLoop | None) -> None:
    """Turn the collector back on once the callers woken by the flush have run, when the
    flush ran on ``loop``, the running loop (most callers drop or read their results at
    once, and reference counting frees them: the collector then finds little to walk);
    at once otherwise. A later flush resumes it should ``loop`` close before it gets to it.
    """
    global _resume_owed
    if loop is not None:
        try:
            loop.call_soon(_resume_owed_collector)  # queued behind the callers' wake-ups
            _resume_owed = True
            return
        except RuntimeError:  # the loop is closed
            pass
    _resume_owed = False
    gc.enable()


def _resume_owed_collector() -> None:
    global _resume_owed
    if _resume_owed:
        _resume_owed = False
        gc.enable()


class _Done(asyncio.Future):
    """The one future that every call of a flush awaits (one future per call costs more).

    A caller that is cancelled must not cancel the batch for the others: refusing here
    makes asyncio cancel that caller alone, as soon as the batch is done.
    """

    def cancel(self, msg: Any = None) -> bool:
        return False


class _PendingBatch:
    """The calls gathered for the next batched step, on the event loop that will flush them."""

    __slots__ = ("loop", "done", "actions", "worlds", "restarts", "flushed")

    def __init__(self, loop: asyncio.AbstractEventLoop, size: int) -> None:
        self.loop = loop
        self.done = _Done(loop=loop)
        self.actions = ToolActions.none((size, 1))  # rows of worlds nobody called are never read
        self.worlds: list[int] = []  # the worlds to step
        self.restarts: dict[int, int | None] = {}  # the worlds to reset (acquired), with their seeds
        self.flushed = False


class PoolStep(NamedTuple):
    observation: Observation
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class ArenaHandle:
    """What a stateful tool on an arena scenario receives as ``env``: its id's world.

    ``await env.step(tool_call)`` is ``pool.call(tool_call, id)`` (batched with every other
    id's call), ``await env.reset(seed=...)`` is ``pool.acquire(id, seed)``. It names the id,
    not a world: it steps whichever world the id holds when it steps.
    """

    __slots__ = ("pool", "id")

    def __init__(self, pool: ToolPool, id: Hashable) -> None:
        self.pool, self.id = pool, id

    async def step(self, tool_call: Any) -> PoolStep:
        # pool.call(tool_call, id), written out: one coroutine less for every stateful-tool call
        pool, id = self.pool, self.id
        world = pool._slots.held(id)
        if world is None:
            world = await pool._ensure(id)
        return (await pool._join(world, tool_call, id).done)[world]

    async def reset(self, seed: int | None = None) -> Observation:
        return await self.pool.acquire(self.id, seed=seed)

    def __repr__(self) -> str:
        return f"<ArenaHandle id={self.id!r} pool={self.pool.env_id!r}>"


class _Lease:
    """What ``ToolPool.lease`` returns (a class, not a generator: it is made for every call)."""

    __slots__ = ("pool", "id")

    def __init__(self, pool: ToolPool, id: Hashable) -> None:
        self.pool, self.id = pool, id

    async def __aenter__(self) -> ArenaHandle:
        env = self.pool.held_env(self.id)
        if env is None:
            await self.pool._ensure(self.id)
            env = ArenaHandle(self.pool, self.id)
        return env

    async def __aexit__(self, *exc_info: Any) -> None:
        return None


class ToolPool:
    """A fixed number of worlds shared by tool-calling sessions, keyed by id."""

    def __new__(cls, env_id: Any = "arena_envs/Foraging-v0", size: int | None = None,
                timeout: float | None = 30.0, *, render: Callable[[Observation], Any] | None = None,
                **env_kwargs: Any) -> Any:
        if cls is ToolPool and arena_scenario(env_id) is None:
            if render is not None:
                raise ValueError("render is for the arena's 2D scenarios, whose steps are Observations")
            # not a 2D scenario: the generic pool for it, so ToolPool(PythonSandboxEnv) works
            return make_pool(env_id, size, timeout, **env_kwargs)
        return super().__new__(cls)

    def __init__(self, env_id: Any = "arena_envs/Foraging-v0", size: int | None = 64,
                 timeout: float | None = 30.0, *, render: Callable[[Observation], Any] | None = None,
                 **env_kwargs: Any):
        """``render``, when given, is applied to each call's Observation inside the batched
        step, and ``PoolStep.observation`` is what it returns (``acquire`` still returns the
        Observation). For a caller that turns every observation into something else at
        once, such as a server rendering text and JSON: done there, right after the
        observation is built and with the collector paused (see :func:`_pause_collector`),
        it measured 7-15 us a step against 21-25 us once the caller had resumed (a server
        at 256 sessions), when the whole batch's observations have gone cold.
        It runs for the whole batch, so it must not raise.
        """
        size = 64 if size is None else size
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        found = arena_scenario(env_id)
        if found is None:
            raise ValueError(f"{env_id!r} is not one of the arena's 2D scenarios")
        from arena_envs.envs import build

        name, registered, self.env_id = found
        rules, _, _ = build(name, **{**registered, **env_kwargs})
        self.size, self.timeout, self.render = size, timeout, render
        self.batch = Batch(rules, size)
        self.scenario, self.state = rules, self.batch.state
        self.sessions = [ToolSession(self.scenario, self.state, world=i) for i in range(size)]
        self._slots = Slots(size, "world")
        self._pending: _PendingBatch | None = None
        self._inflight: dict[int, _PendingBatch] = {}  # world -> the batch its call waits in
        self._handles: list[ArenaHandle | None] = [None] * size  # the last handle lent for each world
        self._orphans: set[int] = set()  # worlds whose taking acquire failed, left to a second one (see _drop)

    # -- slots ---------------------------------------------------------------------------

    async def acquire(self, id: Hashable, seed: int | None = None) -> Observation:
        """Take a world for ``id`` (waiting while none is free), reset it, and return its first observation.

        An id that already holds a world gets it reset with ``seed`` (after its call in
        flight, if any). A bad seed raises ValueError and takes nothing.
        """
        seed = check_seed(seed)
        while True:
            world, new = await self._slots.take(id, _timeout(self.timeout))
            try:
                await self._settle(world)
                if self._slots.held(id) != world:
                    continue  # released while its last call finished: take a world anew
                observation = (await self._join_restart(world, seed).done)[world]
                self._orphans.discard(world)  # an acquire of the id succeeded: the id keeps it
                return observation
            except BaseException:
                if self._slots.held(id) == world and (new or world in self._orphans):
                    self._drop(id, world)
                raise

    async def call(self, tool_call: Any, id: Hashable) -> PoolStep:
        """Carry out one tool call in ``id``'s world (taking a free world for a new id).

        ``tool_call`` None gives no new command: the agent carries on with its last one.
        A call that cannot even be read raises ToolCallError for its caller alone.
        """
        world = self._slots.held(id)
        if world is None:
            world = await self._ensure(id)
        return (await self._join(world, tool_call, id).done)[world]  # (ArenaHandle.step is the same)

    def _join(self, world: int, tool_call: Any, id: Hashable) -> _PendingBatch:
        """Read ``id``'s call into the next batch, for its world ``world``; the batch to await."""
        if world in self._inflight:
            raise RuntimeError(f"id {id!r} already has a call in flight")
        batch = self._open_batch()
        try:
            self.sessions[world].encode(tool_call, batch.actions)
        except Exception as err:  # read before the batch, so the others never see it
            batch.actions.tool[world], batch.actions.failure[world] = NO_TOOL, OK
            raise ToolCallError(f"the tool call could not be read: {type(err).__name__}: {err}") from err
        batch.worlds.append(world)
        self._inflight[world] = batch
        return batch

    def _join_restart(self, world: int, seed: int | None) -> _PendingBatch:
        """Put ``world``'s reset (an acquire's) into the next batch: the sessions that reset
        together, as at the start of every group of rollouts, are reset and observed as one
        batch (256 at once: 120-128 -> 27 ms, the rest being each world's own layout and names)."""
        batch = self._open_batch()
        batch.restarts[world] = seed
        self._inflight[world] = batch
        return batch

    def _drop(self, id: Hashable, world: int) -> None:
        """The acquire that took ``world`` for ``id`` failed: a failed acquire takes nothing,
        but another caller of ``id`` may be using the world by now. A call keeps it; a second
        acquire, resetting it, decides in turn (the world is an orphan until one succeeds)."""
        batch = self._inflight.get(world)
        if batch is None:
            self._orphans.discard(world)
            self._slots.give_back(id)
        elif world in batch.restarts:
            self._orphans.add(world)
        else:
            self._orphans.discard(world)

    async def release(self, id: Hashable) -> None:
        """Let ``id``'s call in flight finish, then reset its world and give it back to the
        pool in one step (a no-op for an unknown id)."""
        while True:
            world = self._slots.held(id)
            if world is None:
                return
            if world not in self._inflight:
                break
            await self._settle(world)
        self._restart([world], [None])
        self._orphans.discard(world)
        self._slots.give_back(id)

    def lease(self, id: Hashable) -> _Lease:
        """``async with pool.lease(id) as env``: ``id``'s world as the ``env`` of a stateful
        tool (taking a world for a new id)."""
        return _Lease(self, id)

    def held_env(self, id: Hashable) -> ArenaHandle | None:
        """``id``'s handle when ``id`` already holds a world, else None (without waiting).

        What ``lease(id)`` would lend, for the stateful tools' fast path: a lease of this
        pool holds nothing for the length of its block (calls queue by world, see
        :meth:`call`), so an id that holds a world needs none.
        """
        # A peek will do: the handle names the id, not the world, and its step looks the
        # world up again under the slots' lock (claiming it if need be), as call does.
        world = self._slots.peek(id)
        if world is None:
            return None
        handle = self._handles[world]
        if handle is None or handle.id is not id:  # by identity: an equal id of another object gets its own
            handle = self._handles[world] = ArenaHandle(self, id)
        return handle

    def monitor(self) -> dict[str, Any]:
        """How many worlds are free and which ids hold the others."""
        free, acquired = self._slots.counts()
        return {"size": self.size, "free": free, "acquired": acquired, "ids": self._slots.owners()}

    async def _ensure(self, id: Hashable) -> int:
        """``id``'s world, taking and resetting a free one for a new id."""
        world, new = await self._slots.take(id, _timeout(self.timeout))
        if new:
            try:
                self._restart([world], [None])
            except BaseException:
                self._slots.give_back(id)
                raise
        return world

    async def _settle(self, world: int) -> None:
        """Wait until ``world`` has no call in flight."""
        while (batch := self._inflight.get(world)) is not None:
            if batch.loop is _running_loop():
                with contextlib.suppress(Exception):  # the call's failure is its caller's to see
                    await batch.done
            else:
                self._flush_foreign(batch)

    def _restart(self, worlds: list[int], seeds: list[int | None]) -> None:
        """Start new episodes in ``worlds`` (``seeds`` theirs), in one batched reset."""
        self.batch.reset(np.array(worlds), seeds)
        for world in worlds:
            self.sessions[world].begin()

    def _restarted(self, restarts: dict[int, int | None]) -> dict[int, Observation]:
        """Reset the worlds of ``restarts`` (world -> seed) in one batch; their first observations."""
        worlds = list(restarts)
        self._restart(worlds, list(restarts.values()))
        return dict(zip(worlds, self._observations(worlds, first=True)[0], strict=True))

    # -- the batched step --------------------------------------------------------------

    def _open_batch(self) -> _PendingBatch:
        """The batch the next call joins, on the running loop (the first call schedules its flush)."""
        loop = asyncio.get_running_loop()
        batch = self._pending
        if batch is not None and batch.loop is not loop:
            self._flush_foreign(batch)
            batch = None
        if batch is None:
            batch = self._pending = _PendingBatch(loop, self.size)
            loop.call_soon(self._flush, batch)
        return batch

    def _flush_foreign(self, batch: _PendingBatch) -> None:
        """Deal with calls gathered on another event loop: step them now if that loop is
        stopped or closed (its flush would come late or never), refuse if it is running."""
        if batch.loop.is_running():
            raise RuntimeError("this ToolPool has calls in flight on an event loop running in another thread; "
                               "use a pool from one thread at a time")
        self._flush(batch)

    def _flush(self, batch: _PendingBatch) -> None:
        """Step every world with a call waiting, all in one batched step, and reset every
        world an acquire is waiting for, in one batched reset."""
        if batch.flushed:
            return
        batch.flushed = True
        if self._pending is batch:
            self._pending = None
        outcome: dict[int, PoolStep] | BaseException
        resume = _pause_collector()
        later = batch.loop if batch.loop is _running_loop() else None  # see _resume_collector
        try:
            outcome = self._advance(batch.worlds, batch.actions) if batch.worlds else {}
            if batch.restarts:
                outcome.update(self._restarted(batch.restarts))
        except Exception as err:
            outcome = err
        except BaseException:
            outcome = RuntimeError("the pool's batched step was interrupted")
            later = None  # the loop may never get to a callback
            raise
        finally:
            try:
                for world in (*batch.worlds, *batch.restarts):
                    self._inflight.pop(world, None)
                # Callers wait on the batch even when cancelled (see _Done), so it must always end.
                with contextlib.suppress(RuntimeError):  # its loop is closed: nobody is waiting
                    if not batch.done.done():
                        if isinstance(outcome, BaseException):
                            batch.done.set_exception(outcome)
                        else:
                            batch.done.set_result(outcome)
            finally:
                if resume:
                    _resume_collector(later)

    def _advance(self, worlds: list[int], actions: ToolActions) -> dict[int, PoolStep]:
        """The step of every world in ``worlds`` (their calls already in ``actions``), keyed by world.

        Fewer worlds than the pool holds (a server's pool, mostly idle) are stepped and observed
        as one copy of their rows, put back after the step: one copy, where stepping the subset
        (``Batch.step``) and then observing it took two (a lone session's step 373 -> 335 us in process).
        """
        rows = np.array(worlds)
        if len(rows) == self.size:
            reward, terminated, truncated = (value[rows] for value in self.batch.step(actions))
            observations, infos = self._observations(worlds)
        else:
            part = self.state.take(rows)
            reward, terminated, truncated = self.scenario.step(part, actions.take(rows))
            self.state.put(rows, part)
            observations, infos = self._observed(part, worlds)
        if self.render is not None:
            observations = list(map(self.render, observations))
        # tuple.__new__ makes each PoolStep without the Python-level __new__ of a NamedTuple
        steps = map(tuple.__new__, repeat(PoolStep), zip(observations, reward.tolist(), terminated.tolist(),
                                                         truncated.tolist(), infos, strict=True))
        return dict(zip(worlds, steps, strict=True))

    def _observations(self, worlds: list[int], first: bool = False) -> tuple[list[Observation], list[dict]]:
        """The observations and infos of ``worlds``, built together from the batch's arrays."""
        if len(worlds) == self.size:
            rows = np.array(worlds)
            arrays = {k: v[rows] for k, v in self.scenario.observe(self.state).items()}
            columns = {k: v[rows].tolist() for k, v in self.scenario.info(self.state).items()}
            return self._built(worlds, arrays, columns, first)
        # observe a copy of these worlds only: a server's pool holds many more, mostly idle
        return self._observed(self.state.take(np.array(worlds)), worlds, first)

    def _observed(self, part: WorldState, worlds: list[int],
                  first: bool = False) -> tuple[list[Observation], list[dict]]:
        """The observations and infos of ``worlds`` from ``part``, a copy of their rows in that order."""
        columns = {k: v.tolist() for k, v in self.scenario.info(part).items()}
        return self._built(worlds, self.scenario.observe(part), columns, first)

    def _built(self, worlds: list[int], arrays: dict[str, np.ndarray], columns: dict[str, list[Any]],
               first: bool) -> tuple[list[Observation], list[dict]]:
        infos = _records(columns)
        sessions = [self.sessions[world] for world in worlds]
        return ToolSession.observations(sessions, arrays, infos, first), infos


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _timeout(timeout: float | None) -> float | None:
    return None if timeout is None or math.isinf(timeout) else timeout


def _records(columns: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """One dict per row from equal-length columns: ``{"a": [1, 2]}`` gives ``[{"a": 1}, {"a": 2}]``
    (built by ``map`` rather than a comprehension: this runs for every call of a batch)."""
    return list(map(dict, map(zip, repeat(tuple(columns)), zip(*columns.values(), strict=True))))


# --- which pool for which env_cls -------------------------------------------------------------


def make_pool(env_cls: Any, size: int | None = None, timeout: float | None = DEFAULT_TIMEOUT,
              **env_kwargs: Any) -> Any:
    """The pool for ``env_cls``: a batched ``ToolPool`` for an arena scenario, a
    :class:`ResourcePool` for anything else (a Gymnasium env id is made with ``gym.make``),
    a :class:`StatefulToolPool` for a stateful tool."""
    if _is_tool(env_cls):
        if env_kwargs:
            raise TypeError(f"a tool brings its own env_cls; these arguments have nowhere to go: {sorted(env_kwargs)}")
        return StatefulToolPool(env_cls, size, timeout)
    size = DEFAULT_POOL_SIZE if size is None else size
    if arena_scenario(env_cls) is not None:
        return ToolPool(env_cls, size=size, timeout=timeout, **env_kwargs)
    if isinstance(env_cls, str):
        import gymnasium as gym

        if env_cls not in gym.envs.registration.registry:
            raise ValueError(f"unknown env id {env_cls!r}: not registered with Gymnasium "
                             f"(a stateful tool's env_cls is an env id or a class)")
        return ResourcePool(lambda: gym.make(env_cls, **env_kwargs), size, timeout)
    if not callable(env_cls):
        raise TypeError(f"expected an environment class, a factory, an env id or a stateful tool, got {env_cls!r}")
    if env_kwargs:
        factory = env_cls
        return ResourcePool(lambda: factory(**env_kwargs), size, timeout)
    return ResourcePool(env_cls, size, timeout)


class StatefulToolPool:
    """A stateful tool on a pool of its own (what ``ToolPool(code_interpreter)`` gives):
    ``await pool.call({"code": "print(1)"}, id="a")`` runs the tool in ``a``'s environment.

    The arguments are a dict (or a Decision / tool call naming this tool). ``acquire``,
    ``release``, ``lease`` and ``monitor`` are those of the environments' pool, :attr:`envs`.
    """

    def __init__(self, tool: Any, size: int | None = None, timeout: float | None = DEFAULT_TIMEOUT) -> None:
        if not tool.stateful:
            raise TypeError(f"{tool.name} is not a stateful tool: call it directly, it needs no pool")
        self.tool = tool
        self.envs = make_pool(tool.env_cls, size or tool.pool_size or DEFAULT_POOL_SIZE, timeout)
        self.size = self.envs.size

    async def call(self, arguments: Any, id: Hashable) -> Any:
        """Run the tool with ``arguments`` in ``id``'s environment (taking one for a new id)."""
        arguments = self._arguments(arguments)
        return await self.tool._run_in(self.envs, id, (), arguments)

    async def acquire(self, id: Hashable, seed: int | None = None) -> Any:
        return await self.envs.acquire(id, seed=seed)

    async def release(self, id: Hashable) -> None:
        await self.envs.release(id)

    def lease(self, id: Hashable) -> Any:
        return self.envs.lease(id)

    def monitor(self) -> dict[str, Any]:
        return self.envs.monitor()

    def _arguments(self, arguments: Any) -> dict[str, Any]:
        from .decision import Decision, parse_decision
        from .errors import ToolCallError

        if not isinstance(arguments, dict):
            decision = arguments if isinstance(arguments, Decision) else parse_decision(arguments)
            if decision.tool != self.tool.name:
                raise ToolCallError(f"this pool runs the tool {self.tool.name!r}, the call names {decision.tool!r}",
                                    code="NOT_FOUND", field="tool")
            arguments = decision.params
        for reserved in ("env", "id"):
            if reserved in arguments:
                raise ToolCallError(f"{self.tool.name}: unexpected argument {reserved!r}", field=reserved)
        return arguments

    def __repr__(self) -> str:
        return f"<StatefulToolPool {self.tool.name!r} {self.monitor()}>"


def _is_tool(env_cls: Any) -> bool:
    """Whether ``env_cls`` is a tool (a :class:`~arena_envs.tools.function_tools.BaseTool`), known by
    the method its pool runs it with: function_tools makes its tools' pools here, so this module
    does not import it."""
    return not isinstance(env_cls, type) and callable(getattr(env_cls, "_run_in", None))
