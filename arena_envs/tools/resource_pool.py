"""Pools of environments for stateful tools, keyed by id (AgentFly's resource system).

    pool = ResourcePool(PythonSandboxEnv, size=16, timeout=60)
    output = await pool.call("x = 2; print(x + 1)", id="episode-7")   # env.step(code) on id's env
    await pool.release("episode-7")                                   # resets the env, frees it
    pool.monitor()        # {"size": 16, "created": 1, "free": 16, "acquired": 0, "ids": {}}

The rules every pool here follows:

* an id keeps one environment until it is released: same id, same instance; a new id
  takes a free one, and nothing one id does is visible to another;
* instances are created lazily, up to ``size``; when all are taken a new id waits for a
  release, up to ``timeout`` seconds, then gets :class:`PoolExhaustedError`;
* calls for one id run one at a time; calls for different ids run concurrently, and a
  synchronous ``step`` runs in one of the pool's own worker threads (:class:`Workers`), so
  one slow environment never stalls the event loop, the other ids or another pool;
* ids are compared by type and value: ``1``, ``1.0`` and ``True`` are three ids;
* a seed is checked (:func:`check_seed`) before anything changes;
* ``release(id)`` waits for that id's call in flight, resets its environment and frees it,
  in one step nobody can observe half done;
* nothing is bound to an event loop: a pool can be used from one loop, then another
  (``asyncio.run`` twice), or from several threads.

:func:`~arena_envs.tools.pool.make_pool` picks the pool for an ``env_cls``: an arena scenario (its
env id or env class, :func:`arena_scenario`) gets a :class:`~arena_envs.tools.pool.ToolPool`,
whose calls from many ids advance in one batched numpy step; anything else gets a
:class:`ResourcePool`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import math
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

import numpy as np

from arena_envs.observations import short_repr

DEFAULT_POOL_SIZE = 16
DEFAULT_TIMEOUT = 60.0
MAX_THREADS = 64
"""Worker threads of one pool at most (threads are made on demand, up to the pool's size)."""
SEED_LIMIT = 2**64
"""Seeds are below this: the numpy generators behind every world take a seed as one 64-bit word."""


class PoolExhaustedError(TimeoutError):
    """Every slot of a pool stayed taken for longer than the pool's timeout."""


def check_seed(seed: Any) -> int | None:
    """``seed`` as an int (None stays None), or ValueError worded as Gymnasium's
    ``seeding.np_random`` words it. Gymnasium's rule (a non-negative integer; numpy integers
    too, bool never) with an upper bound, :data:`SEED_LIMIT`, where Gymnasium has none:
    a seed of ``2**200`` is one nobody means, and one the core's 64-bit generators would fold."""
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"Seed must be a python integer, actual type: {type(seed)}")
    seed = int(seed)
    if seed < 0:
        raise ValueError(f"Seed must be greater or equal to zero, actual value: {seed}")
    if seed >= SEED_LIMIT:
        raise ValueError(f"Seed must be less than 2**64, actual value: {short_repr(seed)}")
    return seed


def id_key(id: Hashable) -> Hashable:
    """The key a pool files ``id`` under: its type and value, so ``1``, ``1.0`` and ``True``
    (equal to Python, one dict key) are three ids, and so are ``(1,)`` and ``(True,)``."""
    kind = type(id)
    if kind is str:  # the usual id: kept as it is (no other id's key is a str)
        return id
    if kind is tuple:
        return kind, tuple(map(id_key, id))
    if kind is frozenset:
        return kind, frozenset(map(id_key, id))
    hash(id)  # an unhashable id fails here, before anything changes
    return kind, id


class Workers:
    """The worker threads of one pool, for its synchronous steps and resets.

    Every pool has its own, at most ``threads``: one pool's slow steps can hold up only
    that pool's calls, never another pool's (the threads are made on demand and belong to
    no event loop: the loop's default executor has only a handful, and dies with its loop).
    """

    def __init__(self, threads: int, name: str = "arena-pool") -> None:
        self.threads, self.name = threads, name
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        if self._executor is None:
            with self._lock:
                if self._executor is None:
                    self._executor = concurrent.futures.ThreadPoolExecutor(self.threads, thread_name_prefix=self.name)
        return self._executor

    async def run(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``function(*args, **kwargs)`` in one of these threads, awaited from any event loop."""
        future = self._pool().submit(function, *args, **kwargs)
        try:
            return await asyncio.wrap_future(future)
        except asyncio.CancelledError:
            # A running thread cannot be stopped: the caller waits for it before it goes, so
            # the environment it works on is never lent again while it still runs.
            while not future.done():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await asyncio.shield(asyncio.wrap_future(future))
            raise

    async def maybe_await(self, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``function``: awaited if it is async, in one of these threads if it is not."""
        if inspect.iscoroutinefunction(function) or inspect.iscoroutinefunction(type(function).__call__):
            return await function(*args, **kwargs)
        result = await self.run(function, *args, **kwargs)
        if inspect.isawaitable(result):  # a plain function that returned a coroutine
            result = await result
        return result

    def shutdown(self) -> None:
        """Let the threads end once their work is done (a later call starts new ones)."""
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)


_shared = Workers(MAX_THREADS)  # for callers that belong to no pool


async def run_in_thread(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``function(*args, **kwargs)`` in a worker thread shared by callers outside any pool."""
    return await _shared.run(function, *args, **kwargs)


async def maybe_await(function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``function``: awaited if it is async, in a shared worker thread if it is not."""
    return await _shared.maybe_await(function, *args, **kwargs)


# --- waiting from any event loop ------------------------------------------------------------


class _Waiter:
    """One coroutine waiting for something another one hands it (a slot, a gate)."""

    __slots__ = ("loop", "future", "handed")

    def __init__(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.future: asyncio.Future[None] = self.loop.create_future()
        self.handed = False  # set under the owner's lock: what was waited for now belongs to the waiter

    def wake(self) -> None:
        """Resolve the future, from whichever thread and loop we are on."""
        with contextlib.suppress(RuntimeError):  # the waiter's loop is closed: nobody to wake
            if _running_loop() is self.loop:
                _resolve(self.future)
            else:
                self.loop.call_soon_threadsafe(_resolve, self.future)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class _Gate:
    """A first-come first-served mutex that works from any event loop and thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = False
        self._waiters: deque[_Waiter] = deque()

    async def acquire(self) -> None:
        with self._lock:
            if not self._held:
                self._held = True
                return
            waiter = _Waiter()
            self._waiters.append(waiter)
        try:
            await waiter.future
        except BaseException:
            with self._lock:
                if waiter.handed:  # handed the gate just as we were cancelled: pass it on
                    self._pass_on()
                else:
                    self._waiters.remove(waiter)
            raise

    def release(self) -> None:
        with self._lock:
            self._pass_on()

    def _pass_on(self) -> None:
        if self._waiters:
            waiter = self._waiters.popleft()
            waiter.handed = True
            waiter.wake()
        else:
            self._held = False

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        await self.acquire()
        try:
            yield
        finally:
            self.release()


class _Want:
    """The callers waiting for a slot for one id (two ``acquire("c")`` share one slot)."""

    __slots__ = ("id", "waiters", "slot", "claimed")

    def __init__(self, id: Hashable) -> None:
        self.id = id
        self.waiters: list[_Waiter] = []
        self.slot: int | None = None  # the slot handed to this id, once one is
        self.claimed = False  # whether a caller has seen that slot (if nobody has, it can be taken back)


class Slots:
    """Which id holds which of ``size`` slots, with waiting for a free one.

    Every change is one transition under a lock (so ``free + acquired == size`` always
    holds and a slot has at most one owner), and a freed slot is handed straight to the
    id that waited longest, so a waiter that is woken can never lose its slot to a
    newcomer, and a waiter that is cancelled after being handed one gives it back.
    Ids are compared by type and value (see :func:`id_key`).
    """

    def __init__(self, size: int, what: str = "slot") -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"size must be a positive integer, got {size!r}")
        self.size, self.what = size, what
        self._lock = threading.Lock()
        self._owner: dict[Hashable, int] = {}  # id key -> slot
        self._ids: dict[Hashable, Hashable] = {}  # id key -> the id as its owner gave it
        self._free: deque[int] = deque(range(size))
        self._wanted: dict[Hashable, _Want] = {}  # id keys waiting for a slot, longest first
        self._handed: dict[Hashable, _Want] = {}  # id keys handed a slot that no caller has seen yet

    def held(self, id: Hashable) -> int | None:
        """The slot ``id`` holds, or None."""
        key = id_key(id)
        with self._lock:
            slot = self._owner.get(key)
            if slot is not None and self._handed:  # (this runs for every call: nothing handed, nothing to claim)
                self._claim(key)
            return slot

    def peek(self, id: Hashable) -> int | None:
        """The slot ``id`` holds, or None, read without the lock and claiming nothing: for a
        guess that whoever acts on it checks again with :meth:`held` or :meth:`take`."""
        return self._owner.get(id_key(id))

    def owners(self) -> dict[Hashable, int]:
        """``{id: slot}`` (ids a dict merges, such as ``1`` and ``True``, show as one entry:
        ``counts`` still counts both)."""
        with self._lock:
            return {self._ids[key]: slot for key, slot in self._owner.items()}

    def counts(self) -> tuple[int, int]:
        """``(free, acquired)``, read together."""
        with self._lock:
            return len(self._free), len(self._owner)

    async def take(self, id: Hashable, timeout: float | None) -> tuple[int, bool]:
        """The slot of ``id``, taking a free one (waiting up to ``timeout`` s) for a new id.

        Returns ``(slot, new)``: ``new`` is true for the caller that made ``id`` the slot's
        owner (for a slot handed to ``id`` while it waited, the first caller of ``id`` to see
        it, one of those waiters or a newcomer). Raises :class:`PoolExhaustedError` when no
        slot came free in time.
        """
        key = id_key(id)  # an unhashable id fails here, before anything changes
        if timeout is not None and math.isinf(timeout):
            timeout = None
        while True:
            with self._lock:
                slot = self._owner.get(key)
                if slot is not None:
                    # handed to this id's waiters, none of them awake yet: this caller sees it first
                    first = key in self._handed
                    self._claim(key)
                    return slot, first
                if self._free:
                    slot = self._free.popleft()
                    self._own(key, id, slot)
                    return slot, True
                want = self._wanted.setdefault(key, _Want(id))
                waiter = _Waiter()
                want.waiters.append(waiter)
            try:
                await asyncio.wait_for(waiter.future, timeout)
            except BaseException as error:
                with self._lock:
                    want.waiters.remove(waiter)
                    if waiter.handed and isinstance(error, TimeoutError) and self._owner.get(key) == want.slot:
                        first = not want.claimed  # the slot came at the last moment: take it after all
                        self._claim(key)
                        return want.slot, first  # type: ignore[return-value]
                    self._give_up(key, want)
                if isinstance(error, TimeoutError):
                    raise PoolExhaustedError(
                        f"no free {self.what} in the pool of {self.size} for id {id!r} after {timeout:g} s; "
                        f"release ids you are done with or make the pool larger") from None
                raise
            with self._lock:
                want.waiters.remove(waiter)
                if self._owner.get(key) == want.slot:  # else: released again before we woke; start over
                    first = not want.claimed
                    self._claim(key)
                    return want.slot, first  # type: ignore[return-value]

    def give_back(self, id: Hashable) -> int | None:
        """Free ``id``'s slot (handing it to the longest waiter); the slot, or None for an unknown id."""
        key = id_key(id)
        with self._lock:
            slot = self._owner.pop(key, None)
            if slot is not None:
                del self._ids[key]
                self._handed.pop(key, None)
                self._put(slot)
            return slot

    def _own(self, key: Hashable, id: Hashable, slot: int) -> None:
        self._owner[key], self._ids[key] = slot, id

    def _claim(self, key: Hashable) -> None:
        want = self._handed.pop(key, None)
        if want is not None:
            want.claimed = True

    def _give_up(self, key: Hashable, want: _Want) -> None:
        """A waiter left without its slot; when it was the id's last, undo what it asked for."""
        if want.waiters:
            return
        if want.slot is None:
            if self._wanted.get(key) is want:
                del self._wanted[key]
        elif not want.claimed and self._handed.get(key) is want:
            # handed a slot that no caller of this id will ever see: give it to the next one
            del self._handed[key]
            del self._owner[key]
            del self._ids[key]
            self._put(want.slot)

    def _put(self, slot: int) -> None:
        while self._wanted:
            key = next(iter(self._wanted))
            want = self._wanted.pop(key)
            if not want.waiters:
                continue
            want.slot = slot
            self._own(key, want.id, slot)
            self._handed[key] = want
            for waiter in want.waiters:
                waiter.handed = True
                waiter.wake()
            return
        self._free.append(slot)


# --- environments for stateful tools -----------------------------------------------------------


class EnvHandle:
    """What a stateful tool receives as ``env``: its id's environment, with ``step`` and
    ``reset`` always awaitable (a synchronous one runs in a worker thread).

    Every other attribute is the environment's own; ``handle.env`` is the instance itself.
    """

    def __init__(self, env: Any, id: Hashable, workers: Workers = _shared) -> None:
        self.env, self.id, self.workers = env, id, workers

    async def step(self, *args: Any, **kwargs: Any) -> Any:
        return await self.workers.maybe_await(self.env.step, *args, **kwargs)

    async def reset(self, *args: Any, **kwargs: Any) -> Any:
        return await self.workers.maybe_await(self.env.reset, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def __repr__(self) -> str:
        return f"<EnvHandle id={self.id!r} env={self.env!r}>"


class ResourcePool:
    """Up to ``size`` instances of ``env_cls`` (a class or any factory), lent out by id.

    ``env_cls()`` makes an instance when a new id finds no idle one. Its ``step`` (sync or
    async) serves :meth:`call`; its ``reset`` (optional, sync or async) runs when an id
    releases it. A Gymnasium env is also reset when it is made, since it cannot step before.
    """

    def __init__(self, env_cls: Callable[[], Any], size: int = DEFAULT_POOL_SIZE,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        if not callable(env_cls):
            raise TypeError(f"env_cls must be a class or a factory, got {env_cls!r}")
        self.env_cls, self.timeout = env_cls, timeout
        self._slots = Slots(size, "environment")
        self.size = size
        self._envs: list[Any] = [None] * size
        self._gates = [_Gate() for _ in range(size)]
        self._used = [False] * size  # lent since its last reset
        self.workers = Workers(min(size, MAX_THREADS), f"arena-pool-{getattr(env_cls, '__name__', 'env')}")

    @contextlib.asynccontextmanager
    async def lease(self, id: Hashable) -> AsyncIterator[EnvHandle]:
        """``id``'s environment for the duration of the block, which no other call of ``id`` shares."""
        async with self._lease(id) as (env, _):
            yield env

    @contextlib.asynccontextmanager
    async def _lease(self, id: Hashable) -> AsyncIterator[tuple[EnvHandle, bool]]:
        """:meth:`lease`, and whether this lease made ``id`` the owner of its slot (a new id)."""
        while True:
            slot, new = await self._slots.take(id, self.timeout)
            lent = False
            try:
                async with self._gates[slot].held():
                    if self._slots.held(id) != slot:
                        continue  # released while we waited for the gate: take a slot anew
                    env = self._envs[slot]
                    if env is None:
                        env = self._envs[slot] = await self._make()
                    elif new and self._used[slot] and callable(getattr(env, "reset", None)):
                        await self.workers.maybe_await(env.reset)  # a new id never gets what another id left behind
                    self._used[slot] = True
                    lent = True
                    yield EnvHandle(env, id, self.workers), new
                    return
            except BaseException:
                # cancelled (or failed to make the env) before the id ever had it: nothing is kept
                if new and not lent and self._slots.held(id) == slot:
                    self._slots.give_back(id)
                raise

    async def acquire(self, id: Hashable, seed: int | None = None) -> EnvHandle:
        """Take an environment for ``id`` (waiting while none is free) and return it;
        with ``seed``, reset it with that seed first. If that fails (or is cancelled), a
        new id is left holding nothing. Step it through :meth:`call` or a stateful tool,
        which keep one call per id at a time. A bad seed raises ValueError (see
        :func:`check_seed`) and takes nothing."""
        seed = check_seed(seed)
        async with self._lease(id) as (env, new):
            if seed is not None:
                try:
                    await env.reset(seed=seed)
                except BaseException:
                    # A failed acquire takes nothing. Whether the id is new is known only once
                    # its lease took the slot: another acquire of the same id may have failed
                    # and given its slot back in the meantime.
                    slot = self._slots.held(id)
                    if new and slot is not None:
                        # its reset did not finish: the env is not lent again, the next id gets a new one
                        dropped, self._envs[slot] = self._envs[slot], None
                        self._slots.give_back(id)
                        await self._close(dropped)
                    raise
            return env

    async def call(self, action: Any, id: Hashable) -> Any:
        """``env.step(action)`` on ``id``'s environment (taking a free one for a new id)."""
        async with self.lease(id) as env:
            return await env.step(action)

    async def release(self, id: Hashable) -> None:
        """Wait for ``id``'s call in flight, reset its environment and free it (no-op for an unknown id)."""
        slot = self._slots.held(id)
        if slot is None:
            return
        async with self._gates[slot].held():
            if self._slots.held(id) != slot:
                return  # released by someone else meanwhile
            env = self._envs[slot]
            try:
                if env is not None and callable(getattr(env, "reset", None)):
                    await self.workers.maybe_await(env.reset)
                    self._used[slot] = False
            except BaseException:
                # an env that cannot reset is not lent again: the next id gets a new one
                self._envs[slot] = None
                await self._close(env)
                raise
            finally:
                self._slots.give_back(id)

    def monitor(self) -> dict[str, Any]:
        """How many environments exist, how many are free and which ids hold the others."""
        free, acquired = self._slots.counts()
        return {"size": self.size, "created": sum(env is not None for env in self._envs), "free": free,
                "acquired": acquired, "ids": self._slots.owners()}

    async def aclose(self) -> None:
        """Close every environment made (their ``close``/``aclose``, when they have one)."""
        envs, self._envs = self._envs, [None] * self.size
        for env in envs:
            if env is not None:
                await self._close(env)
        self.workers.shutdown()

    def __repr__(self) -> str:
        return f"<ResourcePool {getattr(self.env_cls, '__name__', self.env_cls)!r} {self.monitor()}>"


    async def _make(self) -> Any:
        env = await self.workers.run(self.env_cls)  # making one (a process, a container) may take a while
        if _is_gym_env(env):
            await self.workers.run(env.reset)
        return env

    async def _close(self, env: Any) -> None:
        close = getattr(env, "aclose", None) or getattr(env, "close", None)
        if callable(close):
            with contextlib.suppress(Exception):
                await self.workers.maybe_await(close)


def _is_gym_env(env: Any) -> bool:
    import gymnasium as gym

    return isinstance(env, gym.Env)


# --- which pool for which env_cls -------------------------------------------------------------


def arena_scenario(env_cls: Any) -> tuple[str, dict[str, Any], str] | None:
    """``(scenario name, registered kwargs, env id)`` when ``env_cls`` is one of the arena's
    single-agent 2D scenarios (its env id, its name or the arena env class), else None."""
    import gymnasium as gym

    from arena_envs.envs import SCENARIOS, ArenaEnv, make_vector_env
    from arena_envs.names import find

    registry = gym.envs.registration.registry
    if isinstance(env_cls, type) and issubclass(env_cls, ArenaEnv):
        env_cls = "foraging"  # the class's default scenario
    if not isinstance(env_cls, str):
        return None
    named = find(env_cls)
    if named is not None and named.key in SCENARIOS:  # any spelling of a 2D scenario's name: its env id
        env_cls = named.env_id
    if env_cls in SCENARIOS:
        ids = [i for i, spec in registry.items() if spec.kwargs.get("scenario") == env_cls]
        name, kwargs, env_id = env_cls, {}, ids[0] if ids else env_cls
    else:
        spec = registry.get(env_cls)
        if spec is None or spec.vector_entry_point not in ("arena_envs.envs:make_vector_env", make_vector_env):
            return None
        kwargs = dict(spec.kwargs)
        name, env_id = kwargs.pop("scenario", "foraging"), env_cls
    if name not in SCENARIOS or SCENARIOS[name].multi_agent:
        return None
    return name, kwargs, env_id
