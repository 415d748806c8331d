"""Property tests of the pools under random interleavings of acquire, call, release and cancel.

Calls go to the pool directly or through a stateful tool on it (``await t(..., id=...)``,
whose fast path lends an id that holds a world its env without a lease).

Each example is a program of operations on a few ids, started with random delays (loop
turns), some cancelled part way, run half on one event loop and half on a second one
(``asyncio.run`` twice, the same pool). Invariants, checked at every loop turn and at the end:

* ``free + acquired == size`` and no world (environment) has two owners;
* a world is stepped only while an id owns it, and an environment is never used by a
  second id without a reset in between (nothing of one id reaches another);
* every caller gets an answer: its result, or its own clear exception (exhausted pool,
  its cancellation, a second call of an id already in flight) -- never a hang;
* once every id is released, every world is free.
"""

import asyncio
import os

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import arena_envs  # noqa: F401
from arena_envs.tools import PoolExhaustedError, ResourcePool, ToolPool, tool
from arena_envs.tools.resource_pool import id_key

IDS = ["a", "b", 1, True]  # 1 and True are equal to Python, and two ids to a pool
SIZE = 2

operation = st.tuples(
    st.sampled_from(["acquire", "call", "call", "tool call", "release", "bad call", "bad tool call", "bad acquire"]),
    st.sampled_from(IDS),
    st.integers(0, 4),  # loop turns before it starts
    st.one_of(st.none(), st.integers(0, 3)),  # loop turns before it is cancelled (None: never)
)
programs = st.lists(operation, min_size=1, max_size=14)


class CheckedToolPool(ToolPool):
    """The arena pool, noting any world stepped while nobody owns it."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.violations = []

    def _advance(self, worlds, actions):
        owned = set(owners(self).values())
        if not set(worlds) <= owned:
            self.violations.append(f"stepped worlds {worlds} while owned were {owned}")
        return super()._advance(worlds, actions)


class TrackingEnv:
    """A generic env that notes an id using it after another id without a reset between."""

    violations: list = []

    def __init__(self):
        self.holder = None

    async def step(self, id):
        if isinstance(id, list):  # a hostile payload: the env refuses it, as a real env would
            raise ValueError("unreadable call")
        if self.holder is not None and id_key(self.holder) != id_key(id):
            TrackingEnv.violations.append(f"{id!r} got the env of {self.holder!r} without a reset")
        self.holder = id
        await asyncio.sleep(0)
        return id

    def reset(self, seed=None):
        if seed is not None and seed < 0:  # as Gymnasium's envs do
            raise ValueError(f"seed must be >= 0, got {seed}")
        self.holder = None


def make(kind):
    if kind == "arena":
        pool = CheckedToolPool("arena_envs/Foraging-v0", size=SIZE, timeout=0.02)
        return pool, pool.violations
    TrackingEnv.violations = []
    return ResourcePool(TrackingEnv, size=SIZE, timeout=0.02), TrackingEnv.violations


def owners(pool):
    """{id key: world} (the monitor's ``ids`` is a dict of ids, where 1 and True are one key)."""
    return dict(pool._slots._owner)


def check(pool, problems):
    monitor = pool.monitor()
    if monitor["free"] + monitor["acquired"] != pool.size:
        problems.append(f"free + acquired != size: {monitor}")
    worlds = list(owners(pool).values())
    if len(worlds) != len(set(worlds)) or len(worlds) != monitor["acquired"]:
        problems.append(f"a world with two owners: {owners(pool)}")


def stateful_tool(pool):
    """A stateful tool whose calls run on ``pool``: one step of the id's env."""

    @tool(env_cls="arena_envs/Foraging-v0", stateful=True)
    async def step(call, env):
        return await env.step(call)

    step.pool = pool
    return step


async def run_part(pool, kind, part, problems, served):
    act = stateful_tool(pool)

    async def start(op):
        what, id, delay, _ = op
        for _ in range(delay):
            await asyncio.sleep(0)
        if what == "acquire":
            return await pool.acquire(id, seed=len(str(id)))
        if what == "release":
            return await pool.release(id)
        if what == "bad acquire":  # refused before any world changes hands
            return await pool.acquire(id, seed=-1)
        if what == "bad call":  # a circular thought, or a payload the generic env refuses
            thought: list = []
            thought.append(thought)
            return await pool.call({"tool": "idle", "params": {}, "thought": thought} if kind == "arena"
                                   else [thought], id=id)
        if what == "bad tool call":  # arguments that do not fit: refused before any env is lent
            return await act({"tool": "idle"}, id=id, speed=2)
        call = {"tool": "idle", "params": {}} if kind == "arena" else id
        if what == "tool call":
            return await act(call, id=id)
        return await pool.call(call, id=id)

    async def watch():
        while True:
            check(pool, problems)
            await asyncio.sleep(0)

    watcher = asyncio.ensure_future(watch())
    tasks = [asyncio.ensure_future(start(op)) for op in part]

    async def cancel(task, after):
        for _ in range(after):
            await asyncio.sleep(0)
        task.cancel()

    cancellers = [asyncio.ensure_future(cancel(t, op[3])) for t, op in zip(tasks, part, strict=True)
                  if op[3] is not None]
    try:
        results = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 20)
    except TimeoutError:
        problems.append("a caller never got an answer")
        results = []
    await asyncio.gather(*cancellers)
    watcher.cancel()
    for op, result in zip(part, results, strict=False):
        if not isinstance(result, BaseException) and op[0] not in ("release", "bad acquire") or (
                op[0] in ("call", "tool call", "bad call") and isinstance(result, asyncio.CancelledError | ValueError)):
            served.add(id_key(op[1]))  # it may hold a world (a call cancelled while it ran, or refused, was served)
        if isinstance(result, (PoolExhaustedError, asyncio.CancelledError)):
            continue
        if op[0].startswith("bad") and isinstance(result, ValueError | gym.error.Error):
            continue  # the bad caller's own clear error (ToolCallError is a ValueError)
        if isinstance(result, RuntimeError) and "already has a call in flight" in str(result):
            continue
        if isinstance(result, BaseException):
            problems.append(f"{op} raised {result!r}")
    check(pool, problems)
    unexplained = set(owners(pool)) - served
    if unexplained:
        problems.append(f"ids {unexplained} hold a world although none of their calls was served")


@pytest.mark.parametrize("kind", ["arena", "generic"])
@settings(max_examples=int(os.environ.get("ARENA_FUZZ_EXAMPLES", "40")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(program=programs, split=st.integers(0, 14))
# found by this test: two failing acquires of one new id leaked a world; a cancelled acquire
# gave back an env that another id then got without a reset
@example(program=[("bad acquire", "a", 0, None), ("bad acquire", "a", 0, None)], split=0)
@example(program=[("acquire", "a", 0, None), ("acquire", 1, 0, 0), ("acquire", 1, 0, 2), ("call", 1, 0, None),
                  ("release", "a", 0, None), ("call", "a", 0, None)], split=0)
# a world handed to the waiters of c, first seen by a newcomer acquire of c: nobody took it as
# new, so neither the failed acquire nor the cancelled one gave it back
@example(program=[("acquire", "a", 0, None), ("acquire", "b", 0, 0), ("acquire", True, 2, 2),
                  ("bad acquire", True, 0, None)], split=0)
# ids equal to Python but of two types: each its own world, neither freed by the other's release
@example(program=[("acquire", 1, 0, None), ("acquire", True, 0, None), ("call", 1, 0, None),
                  ("release", True, 0, None), ("call", 1, 0, None), ("call", True, 1, None)], split=3)
# a stateful tool's fast path (an id holding a world) must still refuse arguments that do not fit,
# and a call made while its id is released takes a world anew
@example(program=[("acquire", "a", 0, None), ("bad tool call", "a", 0, None), ("tool call", "a", 0, None),
                  ("release", "a", 0, None), ("tool call", "a", 1, None)], split=0)
# found by the soak (500 examples): an acquire cancelled after a call of its id joined a
# batch gave the world back under that call; one cancelled after a second acquire of its
# id took the world anew gave back the world the second one was resetting
@example(program=[("acquire", "a", 0, None), ("call", "b", 1, None), ("acquire", "b", 0, 0)], split=0)
@example(program=[("acquire", 1, 2, None), ("acquire", "a", 0, None), ("call", "b", 2, None),
                  ("acquire", 1, 0, 0)], split=0)
@example(program=[("acquire", "a", 2, 2), ("acquire", "a", 0, 0)], split=0)  # both fail: the world is freed
def test_random_interleavings_keep_the_pool_consistent(kind, program, split):
    pool, violations = make(kind)
    problems, served = [], set()
    asyncio.run(run_part(pool, kind, program[:split], problems, served))  # first event loop
    asyncio.run(run_part(pool, kind, program[split:], problems, served))  # second event loop, same pool

    async def release_all():
        for id in IDS:
            await pool.release(id)

    asyncio.run(release_all())
    assert not problems, problems  # among them: a good caller that got another caller's failure
    assert not violations, violations
    monitor = pool.monitor()
    assert monitor["free"] == SIZE and monitor["acquired"] == 0, monitor
