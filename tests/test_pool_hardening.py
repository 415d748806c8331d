"""ToolPool under hostile and badly timed use (issue 16): each case failed before the fix."""

import asyncio

import numpy as np
import pytest

import arena_envs  # noqa: F401
from arena_envs.tools import PoolExhaustedError, ToolCallError, ToolPool

IDLE = {"tool": "idle", "params": {}}


def circular_thought():
    loop = []
    loop.append(loop)
    return {"tool": "idle", "params": {}, "thought": loop}


DEEP_JSON = '{"tool": "idle", "thought": ' + "[" * 985 + "]" * 985 + "}"


def assert_consistent(pool):
    monitor = pool.monitor()
    assert monitor["free"] + monitor["acquired"] == pool.size
    worlds = list(monitor["ids"].values())
    assert len(worlds) == len(set(worlds)), f"a world has two owners: {monitor['ids']}"


@pytest.mark.parametrize("bad", [circular_thought(), DEEP_JSON], ids=["circular", "deep-json"])
def test_one_unreadable_call_does_not_fail_its_batch_mates(bad):
    async def main():
        pool = ToolPool(size=4)
        for i in range(4):
            await pool.acquire(i, seed=i)
        calls = [bad, IDLE, {"tool": "move_to", "params": {"target": [3, 0, 3]}}, IDLE]
        return pool, await asyncio.gather(*(pool.call(c, id=i) for i, c in enumerate(calls)), return_exceptions=True)

    pool, results = asyncio.run(main())
    # the bad call gets its own answer: a clear error, or the INVALID_PARAMS result of a readable-but-wrong call
    if isinstance(results[0], BaseException):
        assert isinstance(results[0], ToolCallError), repr(results[0])
    else:
        assert results[0].observation.last_action_result.error_code == "INVALID_PARAMS"
    for step in results[1:]:
        assert step.observation.last_action_result.success, step
        assert step.observation.tick == 1
    assert_consistent(pool)


class Hostile:
    """A call object whose reading fails with an error no parser expects."""

    def to_dict(self):
        raise RuntimeError("hostile to_dict")

    def model_dump(self):
        raise RuntimeError("hostile model_dump")


def test_a_call_whose_reading_raises_fails_alone_with_a_clear_error():
    async def main():
        pool = ToolPool(size=3)
        for i in range(3):
            await pool.acquire(i, seed=i)
        results = await asyncio.gather(pool.call(IDLE, id=0), pool.call(Hostile(), id=1), pool.call(IDLE, id=2),
                                       return_exceptions=True)
        again = await pool.call(IDLE, id=1)  # the id goes on
        return pool, results, again

    pool, (first, bad, last), again = asyncio.run(main())
    assert isinstance(bad, ToolCallError), repr(bad)
    assert str(bad).startswith("the tool call could not be read: "), str(bad)  # and what went wrong, by its type
    assert type(bad.__cause__).__name__ in str(bad) and "NoneType" not in str(bad)
    assert first.observation.last_action_result.success and last.observation.last_action_result.success
    assert again.observation.tick == 1  # the unreadable call did not step its world
    assert_consistent(pool)


def test_a_bad_seed_takes_no_world_and_the_next_batch_runs():
    async def main():
        pool = ToolPool(size=2)
        for seed in (-1, 1.5, True, "7"):
            with pytest.raises(ValueError, match="(?i)seed"):
                await pool.acquire("s", seed=seed)
            assert pool.monitor() == {"size": 2, "free": 2, "acquired": 0, "ids": {}}
        await pool.acquire("t", seed=3)
        return await asyncio.gather(pool.call(IDLE, id="t"), pool.call(IDLE, id="s"))

    first, second = asyncio.run(main())
    assert first.observation.last_action_result.success and second.observation.last_action_result.success


def test_a_held_world_keeps_its_episode_when_a_reset_with_a_bad_seed_is_refused():
    async def main():
        pool = ToolPool(size=2)
        await pool.acquire("s", seed=5)
        await pool.call({"tool": "move_to", "params": {"target": [5, 0, 5]}}, id="s")
        before = pool.state.copy()
        with pytest.raises(ValueError):
            await pool.acquire("s", seed=-3)
        return pool, before

    pool, before = asyncio.run(main())
    for name, array in pool.state.arrays():
        np.testing.assert_array_equal(array, dict(before.arrays())[name], err_msg=name)


def test_concurrent_acquires_of_one_new_id_on_an_exhausted_pool_leak_no_world():
    async def main():
        pool = ToolPool(size=2, timeout=5)
        await pool.acquire("a")
        await pool.acquire("b")
        waiting = [asyncio.ensure_future(pool.acquire("c")) for _ in range(2)]
        await asyncio.sleep(0.01)
        await pool.release("a")
        await asyncio.gather(*waiting)
        held = pool.monitor()
        for id in ("a", "b", "c"):
            await pool.release(id)
        return held, pool.monitor()

    held, after = asyncio.run(main())
    assert held["ids"] == {"b": 1, "c": 0} and held["free"] == 0
    assert after == {"size": 2, "free": 2, "acquired": 0, "ids": {}}


def test_release_during_an_in_flight_call_never_steps_another_ids_world():
    async def main():
        pool = ToolPool(size=1, timeout=5)
        await pool.acquire("a", seed=1)
        in_flight = asyncio.ensure_future(pool.call({"tool": "move_to", "params": {"target": [9, 0, 9]}}, id="a"))
        await asyncio.sleep(0)  # a's call now waits for the batched step
        await pool.release("a")  # before the batched step has run
        first = await pool.acquire("c", seed=2)
        a_step = await in_flight
        c_step = await pool.call(IDLE, id="c")
        return first, a_step, c_step

    first, a_step, c_step = asyncio.run(main())
    assert a_step.observation.tick == 1 and a_step.observation.last_action_result.success  # completed
    assert first.tick == 0  # c starts a fresh episode...
    assert c_step.observation.tick == 1  # ...that a's call never stepped
    assert c_step.observation.last_action_result.tool == "idle"


def test_the_pool_works_from_a_second_event_loop():
    pool = ToolPool(size=2, timeout=0.05)

    async def use(id):
        await pool.acquire(id, seed=1)
        step = await pool.call(IDLE, id=id)
        with pytest.raises(PoolExhaustedError):  # waiting works on this loop too
            await asyncio.gather(pool.acquire("x"), pool.acquire("y"))
        for other in ("x", "y", id):
            await pool.release(other)
        return step

    first = asyncio.run(use("a"))
    second = asyncio.run(use("b"))
    assert first.observation.position == second.observation.position
    assert pool.monitor()["free"] == 2


def test_calls_left_on_a_stopped_loop_are_stepped_before_a_new_loop_uses_the_pool():
    pool = ToolPool(size=2)
    old = asyncio.new_event_loop()
    old.run_until_complete(pool.acquire("a", seed=4))
    stranded = old.create_task(pool.call(IDLE, id="a"))
    old.run_until_complete(asyncio.sleep(0))  # the call joined a batch whose flush has not run yet

    async def main():
        await pool.release("a")  # must not wait forever for the stopped loop
        await pool.acquire("b", seed=5)
        return await pool.call(IDLE, id="b")

    step = asyncio.run(main())
    old.run_until_complete(stranded)
    old.close()
    assert stranded.result().observation.tick == 1
    assert step.observation.tick == 1
    assert_consistent(pool)


def test_a_cancelled_waiter_frees_nothing_it_did_not_hold():
    async def main():
        pool = ToolPool(size=1, timeout=5)
        await pool.acquire("a")
        waiter = asyncio.ensure_future(pool.acquire("b"))
        await asyncio.sleep(0.01)
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        held = pool.monitor()
        await pool.release("a")
        return held, pool.monitor()

    held, after = asyncio.run(main())
    assert held == {"size": 1, "free": 0, "acquired": 1, "ids": {"a": 0}}
    assert after == {"size": 1, "free": 1, "acquired": 0, "ids": {}}


def test_a_waiter_cancelled_just_after_being_handed_a_world_passes_it_on():
    async def main():
        pool = ToolPool(size=1, timeout=5)
        await pool.acquire("a")
        first = asyncio.ensure_future(pool.acquire("b"))
        second = asyncio.ensure_future(pool.acquire("c"))
        await asyncio.sleep(0.01)
        await pool.release("a")  # hands the world to b ...
        first.cancel()  # ... which is cancelled before it runs
        (outcome,) = await asyncio.gather(first, return_exceptions=True)
        if not isinstance(outcome, asyncio.CancelledError):
            await pool.release("b")  # the cancellation came too late: b got its world, and gives it back
        await second  # either way c gets the world, not a timeout
        return pool.monitor()

    assert asyncio.run(main())["ids"] == {"c": 0}


# -- issue 24: pools apart, ids by type, seeds by Gymnasium's rule --------------------------------

class SlowSyncEnv:
    """A synchronous env whose step blocks its thread for a while (a real sandbox, a browser)."""

    def step(self, action):
        import time

        time.sleep(1.0)
        return action


class QuickSyncEnv:
    def step(self, action):
        return action

    def reset(self, seed=None):
        self.seed = seed


def test_slow_synchronous_steps_in_one_pool_do_not_delay_a_quick_call_in_another():
    """64 blocking steps fill the slow pool's threads; another pool's call still runs at once
    (all pools once shared one 64-thread executor: the quick call waited 2.7 s)."""
    import time

    from arena_envs.tools import ResourcePool

    async def main():
        slow, quick = ResourcePool(SlowSyncEnv, size=64), ResourcePool(QuickSyncEnv, size=1)
        await quick.call("warm", id="q")  # its env is made before the clock starts
        busy = [asyncio.ensure_future(slow.call(k, id=k)) for k in range(64)]
        await asyncio.sleep(0.2)  # every slow step is running, each holding a thread
        start = time.perf_counter()
        assert await quick.call("now", id="q") == "now"
        waited = time.perf_counter() - start
        assert sorted(await asyncio.gather(*busy)) == list(range(64))
        await slow.aclose()
        await quick.aclose()
        return waited

    waited = asyncio.run(main())
    assert waited < 0.25, f"the quick call waited {waited:.2f} s behind another pool's steps"


@pytest.mark.parametrize("kind", ["arena", "generic"])
def test_ids_are_compared_by_type_and_value(kind):
    """``1``, ``1.0`` and ``True`` are equal to Python (one dict key), but three ids here."""
    from arena_envs.tools import ResourcePool

    ids = [1, True, 1.0, (1,), (True,), "1"]

    async def main():
        pool = ToolPool(size=8) if kind == "arena" else ResourcePool(QuickSyncEnv, size=8)
        for id in ids:
            await pool.acquire(id, seed=0)
        assert pool.monitor()["acquired"] == len(ids)  # six worlds, one per id
        await pool.release(True)
        await pool.release((True,))
        assert pool.monitor()["acquired"] == len(ids) - 2
        for id in (1, 1.0, (1,), "1"):  # untouched by the release of their equals
            if kind == "arena":
                assert (await pool.call(IDLE, id=id)).observation.tick == 1
            else:
                assert await pool.call("still here", id=id) == "still here"
        with pytest.raises(TypeError):  # an unhashable id is refused before anything changes
            await pool.acquire([1])
        assert pool.monitor()["acquired"] == len(ids) - 2

    asyncio.run(main())


@pytest.mark.parametrize("seed", [-1, 1.5, "7", True, 2**64, 2**200, np.float64(3.0)])
def test_a_seed_outside_gymnasiums_rule_or_over_64_bits_is_refused_by_every_pool(seed):
    from gymnasium.utils import seeding

    from arena_envs.tools import ResourcePool

    async def main():
        for pool in (ToolPool(size=2), ResourcePool(QuickSyncEnv, size=2)):
            with pytest.raises(ValueError, match="(?i)seed must be") as refused:
                await pool.acquire("a", seed=seed)
            assert pool.monitor()["acquired"] == 0  # took nothing
            await pool.acquire("a", seed=2**64 - 1)  # the largest seed is fine
            if not isinstance(seed, (bool, int)) or seed < 0:  # Gymnasium's own refusal, in its words
                with pytest.raises(Exception) as gymnasium_refused:
                    seeding.np_random(seed)
                assert str(refused.value) == str(gymnasium_refused.value)

    asyncio.run(main())
