"""The fast path of stateful tools on the batched arena pool, and the pool's pause of the
garbage collector: what they change must not be visible beyond speed.

An id that already holds a world is lent its env without a lease; everything else (a new
id, arguments that do not fit, an id that cannot be looked up) takes the general path,
with the same results and errors, raised when the call is awaited.
"""

import asyncio
import gc

import gymnasium as gym
import pytest

import arena_envs  # noqa: F401
from arena_envs.tools import ToolCallError, ToolPool, tool
from arena_envs.wrappers import ToolCallWrapper

CALLS = [{"tool": "move_to", "params": {"target": [4, 0, 3]}}, None, {"tool": "query_inventory"},
         {"tool": "move_to", "params": {"target": [-6, 0, 1], "speed": 1.5}}, {"tool": "idle"}]


def make_tool(size=2):
    @tool(env_cls="arena_envs/Foraging-v0", stateful=True, pool_size=size)
    async def act(call, env, note: str = ""):
        """One tool call in the id's world."""
        step = await env.step(call)
        return step.observation.tick, step.observation.position, step.reward, note

    return act


def counting_leases(pool):
    leases = []
    lease = pool.lease

    def counted(id):
        leases.append(id)
        return lease(id)

    pool.lease = counted
    return leases


def solo(seed):
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0"))
    env.reset(seed=seed)
    out = []
    for call in CALLS:
        obs, reward, *_ = env.step(call)
        out.append((obs.tick, obs.position, reward, ""))
    return out


def test_an_id_holding_a_world_is_lent_it_without_a_lease_and_runs_as_alone():
    act = make_tool()
    leases = counting_leases(act.pool)

    async def main():
        await act.pool.acquire("a", seed=3)
        made = act(CALLS[0], id="a")
        assert made.cr_code is act.func.__code__  # the tool's own coroutine: nothing stands between
        first = [await made]
        after_first = len(leases)
        rest = [await act(call, id="a") for call in CALLS[1:]]
        return first + rest, after_first

    results, after_first = asyncio.run(main())
    assert results == solo(3)
    assert after_first == 0 and leases == []  # the id held its world from acquire on: no lease at all


def test_a_new_id_takes_its_world_through_a_lease_then_goes_fast():
    act = make_tool()
    leases = counting_leases(act.pool)

    async def main():
        await act({"tool": "idle"}, id="new")
        await act({"tool": "idle"}, id="new")
        return act.pool.monitor()

    monitor = asyncio.run(main())
    assert leases == ["new"]
    assert monitor["ids"] == {"new": 0}


@pytest.mark.parametrize(("args", "kwargs", "words"), [
    ((), {"note": "x"}, "missing a required argument: 'call'"),
    (({"tool": "idle"},), {"speed": 2}, "unexpected argument 'speed'"),
    (({"tool": "idle"},), {"call": {"tool": "idle"}}, "multiple values for argument 'call'"),
    (({"tool": "idle"}, "note"), {}, "multiple values for argument 'env'"),  # a positional one cannot fill env
])
def test_arguments_that_do_not_fit_fail_when_awaited_exactly_as_on_the_general_path(args, kwargs, words):
    act = make_tool()
    leases = counting_leases(act.pool)

    async def main():
        await act.pool.acquire("a", seed=1)
        made = act(*args, id="a", **kwargs)  # no error yet: a tool call is a coroutine
        with pytest.raises(ToolCallError, match=words) as fast:
            await made
        with pytest.raises(ToolCallError) as general:
            await act.acall(*args, id="a", **kwargs)
        tick = (await act({"tool": "idle"}, id="a"))[0]
        return str(fast.value), str(general.value), tick

    fast, general, tick = asyncio.run(main())
    assert fast == general
    assert tick == 1  # the refused calls never stepped the world
    assert leases == []  # refused before any env was lent


def test_an_id_that_cannot_be_looked_up_fails_when_awaited():
    act = make_tool()

    class Hostile:
        def __hash__(self):
            raise RuntimeError("no hash for you")

    async def main():
        await act.pool.acquire("a", seed=1)
        unhashable = act({"tool": "idle"}, id=["a"])
        hostile = act({"tool": "idle"}, id=Hostile())
        with pytest.raises(TypeError, match="unhashable"):
            await unhashable
        with pytest.raises(RuntimeError, match="no hash for you"):
            await hostile
        return act.pool.monitor()

    assert asyncio.run(main())["ids"] == {"a": 0}


def test_a_call_made_before_its_id_is_released_and_awaited_after_takes_a_world_anew():
    act = make_tool(size=1)

    async def main():
        await act.pool.acquire("a", seed=2)
        await act({"tool": "idle"}, id="a")
        made = act({"tool": "idle"}, id="a")  # lent its handle now, while "a" holds its world
        await act.release(id="a")
        tick = (await made)[0]
        return tick, act.pool.monitor()

    tick, monitor = asyncio.run(main())
    assert tick == 1  # a fresh world, as the general path gives (the released one was reset)
    assert monitor["ids"] == {"a": 0} and monitor["free"] == 0


def test_a_handle_kept_past_a_release_steps_whichever_world_its_id_holds_and_no_other():
    act = make_tool(size=2)
    kept = []

    @tool(env_cls="arena_envs/Foraging-v0", stateful=True)
    async def keep(env):
        kept.append(env)
        return env

    keep.pool = act.pool

    async def main():
        await act.pool.acquire("a", seed=2)
        await keep(id="a")
        await act.release(id="a")
        await act.pool.acquire("b", seed=5)
        b_world = act.pool.monitor()["ids"]["b"]
        tick = (await kept[0].step({"tool": "idle"})).observation.tick
        b_tick = (await act({"tool": "idle"}, id="b"))[0]
        return tick, b_tick, b_world, act.pool.monitor()["ids"]

    tick, b_tick, b_world, ids = asyncio.run(main())
    assert tick == 1 and b_tick == 1  # "a" took a fresh world; b's world was not stepped by a's handle
    assert ids["a"] != b_world


def test_method_tools_on_an_arena_pool_go_through_the_fast_path_bound_to_their_agent():
    class Agent:
        def __init__(self, name):
            self.name = name

        @tool(env_cls="arena_envs/Foraging-v0", stateful=True, pool_size=2)
        async def act(self, call, env):
            return self.name, (await env.step(call)).observation.tick

    one, two = Agent("one"), Agent("two")
    leases = counting_leases(one.act.pool)

    async def main():
        await one.act.pool.acquire(1, seed=1)
        return [await one.act({"tool": "idle"}, id=1), await two.act({"tool": "idle"}, id=1)]

    assert asyncio.run(main()) == [("one", 1), ("two", 2)]  # one pool, shared by the bound copies
    assert leases == []


# --- the garbage collector ---------------------------------------------------------------------


def run_calls(pool, ids=("a", "b"), rounds=3):
    async def main():
        for id in ids:
            await pool.acquire(id, seed=1)
        for _ in range(rounds):
            await asyncio.gather(*(pool.call({"tool": "idle"}, id=id) for id in ids))

    asyncio.run(main())


def test_the_collector_is_on_again_after_the_pool_steps():
    assert gc.isenabled()
    run_calls(ToolPool("arena_envs/Foraging-v0", size=2))
    assert gc.isenabled()


def test_a_collector_the_user_turned_off_stays_off():
    gc.disable()
    try:
        run_calls(ToolPool("arena_envs/Foraging-v0", size=2))
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_loop_closed_before_it_resumed_the_collector_is_made_good_by_the_next_flush():
    pool = ToolPool("arena_envs/Foraging-v0", size=2)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(pool.acquire("a", seed=1))
        call = loop.create_task(pool.call({"tool": "idle"}, id="a"))
        # stop in the turn of the flush, so that the callbacks it queued never run
        loop.call_soon(loop.call_soon, loop.stop)
        loop.run_forever()
        assert call.done() is False
    finally:
        call.cancel()
        loop.close()
    try:
        assert not gc.isenabled()  # the flush paused it; its resume was dropped with the loop
        run_calls(pool, ids=("b",), rounds=1)
        assert gc.isenabled()
    finally:
        gc.enable()


def test_calls_stepped_for_a_stopped_loop_resume_the_collector_at_once():
    pool = ToolPool("arena_envs/Foraging-v0", size=2)
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(pool.acquire("a", seed=1))
        call = loop.create_task(pool.call({"tool": "idle"}, id="a"))
        loop.call_soon(loop.stop)  # the call is gathered, its loop stops before the flush
        loop.run_forever()
        asyncio.run(pool.release("a"))  # steps the call left behind, here, outside its loop
        assert gc.isenabled()
        assert pool.monitor()["free"] == 2
    finally:
        gc.enable()
        call.cancel()
        loop.close()
