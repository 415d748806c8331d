"""The pools' smaller promises, each held by what a caller sees: which pool ``make_pool`` gives for
which ``env_cls`` (and the arguments it passes on), what a stateful tool's pool lends, what a
handle forwards (seeds, attributes), monitors and reprs, ``maybe_await``, and a ``ToolPool``
refusing calls from a second thread while its first thread's loop still runs."""

import asyncio
import functools
import threading

import pytest

import arena_envs  # noqa: F401
from arena_envs.tools import (
    ArenaHandle,
    Decision,
    EnvHandle,
    ResourcePool,
    StatefulToolPool,
    ToolCallError,
    ToolPool,
    make_pool,
    tool,
)
from arena_envs.tools.resource_pool import DEFAULT_POOL_SIZE, DEFAULT_TIMEOUT, maybe_await

IDLE = {"tool": "idle"}


class Tally:
    """A synchronous env that adds what it is given to a running total, from ``start``."""

    def __init__(self, start: int = 0):
        self.start = self.total = start
        self.resets: list[dict] = []

    def step(self, amount: int) -> int:
        self.total += amount
        return self.total

    def reset(self, seed=None, options=None):
        self.total = self.start
        self.resets.append({"seed": seed, "options": options})


# --- which pool for which env_cls -------------------------------------------------------------


def test_make_pool_gives_the_batched_pool_for_an_arena_scenario_with_its_size_timeout_and_arguments():
    pool = make_pool("foraging", size=3, timeout=7, num_resources=4)
    assert type(pool) is ToolPool and pool.env_id == "arena_envs/Foraging-v0"
    assert (pool.size, pool.timeout, pool.monitor()) == (3, 7, {"size": 3, "free": 3, "acquired": 0, "ids": {}})
    assert pool.scenario.params.num_resources == 4
    assert make_pool("arena_envs/Crafting-v0").size == DEFAULT_POOL_SIZE


def test_make_pool_makes_a_gymnasium_id_with_its_arguments_and_a_factory_with_its_own():
    async def main():
        by_id = make_pool("CartPole-v1", size=2, timeout=9, max_episode_steps=3)
        steps = [(await by_id.call(0, id="a"))[2:4] for _ in range(3)]
        by_factory = make_pool(Tally, size=2, start=10)
        total = await by_factory.call(5, id="a")
        await by_id.aclose()
        return by_id, steps, by_factory, total

    by_id, steps, by_factory, total = asyncio.run(main())
    assert type(by_id) is ResourcePool and (by_id.size, by_id.timeout) == (2, 9)
    assert steps[-1] == (False, True)  # made with max_episode_steps=3: truncated at the third step
    assert type(by_factory) is ResourcePool and by_factory.timeout == DEFAULT_TIMEOUT and total == 15
    assert make_pool(Tally).size == DEFAULT_POOL_SIZE


def test_make_pool_refuses_what_it_cannot_pool_and_says_why():
    with pytest.raises(ValueError, match=r"^unknown env id 'NoSuchEnv-v9': not registered with Gymnasium"):
        make_pool("NoSuchEnv-v9")
    with pytest.raises(TypeError, match=r"^expected an environment class, a factory, an env id or a stateful tool, "
                                        r"got 5$"):
        make_pool(5)

    @tool(env_cls=Tally, stateful=True, pool_size=2)
    def add(amount: int, env) -> int:
        return env.env.step(amount)

    with pytest.raises(TypeError, match=r"nowhere to go: \['start'\]"):
        make_pool(add, start=1)
    with pytest.raises(ValueError, match="^render is for the arena's 2D scenarios"):
        ToolPool("CartPole-v1", render=str)
    with pytest.raises(ValueError, match=r"'CartPole-v1' is not one of the arena's 2D scenarios"):
        ToolPool.__init__(object.__new__(ToolPool), "CartPole-v1")
    for size in (0, True, 2.0):
        with pytest.raises(ValueError, match=f"size must be a positive integer, got {size!r}"):
            ToolPool(size=size)


# --- a stateful tool's own pool ---------------------------------------------------------------


def test_a_stateful_tools_pool_runs_it_per_id_and_lends_acquires_releases_and_monitors_its_envs():
    @tool(env_cls=Tally, stateful=True, pool_size=3)
    async def add(amount: int, env) -> int:
        return await env.step(amount)

    async def main():
        pool = ToolPool(add)
        assert type(pool) is StatefulToolPool and pool.size == 3 and pool.envs.size == 3
        seen = [await pool.call({"amount": 3}, id="a"), await pool.call(Decision("add", {"amount": 2}), id="a"),
                await pool.call('{"tool": "add", "params": {"amount": 1}}', id="b")]
        handle = await pool.acquire("c", seed=4)
        async with pool.lease("a") as env:
            leased = env.total
        monitor = pool.monitor()
        shown = repr(pool)
        await pool.release("a")
        return seen, handle, leased, monitor, shown, pool.monitor()

    seen, handle, leased, monitor, shown, after = asyncio.run(main())
    assert seen == [3, 5, 1] and leased == 5
    assert isinstance(handle, EnvHandle) and handle.resets[-1] == {"seed": 4, "options": None}
    assert monitor == {"size": 3, "created": 3, "free": 0, "acquired": 3, "ids": {"a": 0, "b": 1, "c": 2}}
    assert shown == f"<StatefulToolPool 'add' {monitor}>"
    assert after["free"] == 1 and "a" not in after["ids"]
    assert make_pool(add, size=2).size == 2  # a size given wins over the tool's pool_size


def test_a_stateful_tools_pool_refuses_a_call_of_another_tool_or_a_reserved_argument():
    @tool(env_cls=Tally, stateful=True, pool_size=1)
    async def add(amount: int, env) -> int:
        return await env.step(amount)

    pool = ToolPool(add)

    async def refused(arguments):
        with pytest.raises(ToolCallError) as error:
            await pool.call(arguments, id="a")
        return error.value

    wrong = asyncio.run(refused(Decision("sub", {"amount": 1})))
    assert str(wrong).startswith("this pool runs the tool 'add', the call names 'sub'")
    assert (wrong.code, wrong.field) == ("NOT_FOUND", "tool")
    for reserved in ("env", "id"):
        error = asyncio.run(refused({"amount": 1, reserved: 2}))
        assert str(error).startswith(f"add: unexpected argument {reserved!r}") and error.field == reserved
    assert pool.monitor()["acquired"] == 0  # refused before any env was taken
    with pytest.raises(TypeError, match="^sub2 is not a stateful tool: call it directly, it needs no pool"):
        StatefulToolPool(tool(lambda x: x, name="sub2"))


# --- handles: what they forward -----------------------------------------------------------------


def test_a_generic_handle_forwards_attributes_and_reset_arguments_and_names_its_id():
    async def main():
        pool = ResourcePool(Tally, size=2)
        handle = await pool.acquire("a", seed=11)
        await handle.reset(seed=12, options={"x": 1})
        await handle.reset(13, {"y": 2})  # positional arguments reach the env's reset too
        shown = repr(pool)
        return pool, handle, shown

    pool, handle, shown = asyncio.run(main())
    assert handle.resets == [{"seed": 11, "options": None}, {"seed": 12, "options": {"x": 1}},
                             {"seed": 13, "options": {"y": 2}}]
    assert handle.total == 0 and handle.start == 0  # the env's own attributes, through the handle
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        handle.nothing  # noqa: B018
    assert repr(handle) == f"<EnvHandle id='a' env={handle.env!r}>"
    assert shown == "<ResourcePool 'Tally' " + repr({"size": 2, "created": 1, "free": 1, "acquired": 1,
                                                       "ids": {"a": 0}}) + ">"
    assert repr(ResourcePool(lambda: Tally(), size=1)).startswith("<ResourcePool '<lambda>' ")
    factory = functools.partial(Tally, 3)  # no __name__: the factory itself names the pool
    assert repr(ResourcePool(factory, size=1)).startswith(f"<ResourcePool {factory!r} ")


class Fragile(Tally):
    """An env whose reset with seed 13 fails; it notes being closed."""

    closed: list["Fragile"] = []

    def reset(self, seed=None, options=None):
        if seed == 13:
            raise RuntimeError("seed 13 breaks this env")
        super().reset(seed, options)

    def close(self):
        Fragile.closed.append(self)


def test_an_acquire_whose_seeded_reset_fails_takes_nothing_and_its_env_is_closed_and_never_lent_again():
    Fragile.closed = []

    async def main():
        pool = ResourcePool(Fragile, size=1)
        with pytest.raises(RuntimeError, match="seed 13 breaks this env"):
            await pool.acquire("a", seed=13)
        after = pool.monitor()
        fresh = await pool.acquire("b", seed=1)
        return after, fresh, pool.monitor()

    after, fresh, later = asyncio.run(main())
    assert after == {"size": 1, "created": 0, "free": 1, "acquired": 0, "ids": {}}  # nothing kept
    assert len(Fragile.closed) == 1 and fresh.env is not Fragile.closed[0]  # the broken env closed, not lent
    assert later["ids"] == {"b": 0} and later["created"] == 1


def test_an_arena_handle_resets_its_world_with_the_seed_it_is_given():
    async def main():
        pool = ToolPool(size=3)
        handle = ArenaHandle(pool, "a")
        first = await handle.reset(seed=5)
        again = await handle.reset(seed=5)
        other = await handle.reset(seed=6)
        fresh = await pool.acquire("b", seed=5)
        unseeded = await ArenaHandle(pool, "c").reset()
        return pool, handle, first, again, other, fresh, unseeded

    pool, handle, first, again, other, fresh, unseeded = asyncio.run(main())
    assert first.to_dict() == again.to_dict() == fresh.to_dict() != other.to_dict()
    assert unseeded.tick == 0 and pool.monitor()["ids"] == {"a": 0, "b": 1, "c": 2}
    assert repr(handle) == "<ArenaHandle id='a' pool='arena_envs/Foraging-v0'>"


def test_a_lease_of_the_batched_pool_lends_the_ids_handle_and_steps_its_world():
    async def main():
        pool = ToolPool(size=2)
        async with pool.lease("a") as env:
            assert isinstance(env, ArenaHandle) and env.id == "a"
            first = (await env.step(IDLE)).observation.tick
        async with pool.lease("a") as again:
            second = (await again.step(IDLE)).observation.tick
        return pool, again, first, second

    pool, again, first, second = asyncio.run(main())
    assert (first, second) == (1, 2) and again.id == "a"  # the id's world kept between leases
    assert again is pool.held_env("a") and pool.held_env("b") is None  # one handle lent per id, none for no world
    assert pool.monitor()["ids"] == {"a": 0}


# --- maybe_await ------------------------------------------------------------------------------


class AsyncCallable:
    async def __call__(self, x, *, y):
        return ("awaited", x, y, threading.current_thread() is threading.main_thread())


def test_maybe_await_awaits_async_callables_and_runs_plain_ones_in_a_worker_thread():
    def plain(x, *, y):
        return ("plain", x, y, threading.current_thread().name)

    async def coroutine_function(x, *, y):
        return ("coroutine", x, y, threading.current_thread() is threading.main_thread())

    def returns_a_coroutine(x, *, y):
        return coroutine_function(x, y=y)

    async def main():
        return [await maybe_await(f, 1, y=2) for f in (plain, coroutine_function, AsyncCallable(),
                                                          returns_a_coroutine)]

    plain_result, coroutine_result, callable_result, returned = asyncio.run(main())
    assert plain_result[:3] == ("plain", 1, 2) and plain_result[3].startswith("arena-pool")
    assert coroutine_result == ("coroutine", 1, 2, True) and callable_result == ("awaited", 1, 2, True)
    assert returned[:3] == ("coroutine", 1, 2)  # the coroutine a plain function returned, awaited


# --- one ToolPool, two threads, two loops --------------------------------------------------------


def test_a_call_from_a_second_thread_is_refused_while_the_first_threads_batch_waits_on_its_running_loop():
    pool = ToolPool(size=2)
    joined, tried = threading.Event(), threading.Event()
    outcome: dict[str, object] = {}

    async def first():
        await pool.acquire("a", seed=1)
        task = asyncio.ensure_future(pool.call(IDLE, id="a"))
        await asyncio.sleep(0)  # the call joined a batch, whose flush comes later on this (running) loop
        joined.set()
        tried.wait(30)  # the loop stays busy here until the other thread has tried
        outcome["first"] = (await task).observation.tick

    def second():
        joined.wait(30)
        try:
            asyncio.run(pool.call(IDLE, id="b"))
        except RuntimeError as error:
            outcome["second"] = str(error)
        finally:
            tried.set()

    other = threading.Thread(target=second)
    other.start()
    asyncio.run(first())
    other.join(30)
    assert outcome["first"] == 1  # the first thread's call went on unharmed
    assert outcome["second"].startswith("this ToolPool has calls in flight on an event loop running in another "
                                        "thread; use a pool from one thread at a time")


@pytest.mark.parametrize("first_act", ["another id's call", "a release of the stranded id"])
def test_a_call_left_waiting_on_a_stopped_loop_is_stepped_when_another_loop_uses_the_pool(first_act):
    pool = ToolPool(size=2)
    old = asyncio.new_event_loop()
    old.run_until_complete(pool.acquire("a", seed=4))

    async def join_then_stop():
        task = asyncio.ensure_future(pool.call(IDLE, id="a"))
        await asyncio.sleep(0)  # the call joined a batch; its flush is scheduled for the next turn
        asyncio.get_running_loop().stop()  # which never comes: the loop stops first
        await asyncio.Future()
        return task

    main = old.create_task(join_then_stop())
    with pytest.raises(RuntimeError, match="Event loop stopped before Future completed"):
        old.run_until_complete(main)
    assert pool._pending is not None and not pool._pending.flushed  # stranded on the stopped loop

    async def elsewhere():
        if first_act == "a release of the stranded id":
            await pool.release("a")  # waits for a's call: steps it first, since its loop will not
        await pool.acquire("b", seed=5)
        return await pool.call(IDLE, id="b")

    step = asyncio.run(elsewhere())  # the stranded batch is stepped first, then this call
    stranded = [t for t in asyncio.all_tasks(old) if t is not main]
    main.cancel()
    old.run_until_complete(asyncio.gather(*stranded, main, return_exceptions=True))
    old.close()
    assert step.observation.tick == 1
    assert [t.result().observation.tick for t in stranded] == [1]  # a's call ran, once


def test_an_arena_handle_of_an_id_without_a_world_takes_one_and_a_second_call_in_flight_is_refused():
    async def main():
        pool = ToolPool(size=2)
        handle = ArenaHandle(pool, "fresh")  # lent before its id holds a world
        first = await handle.step(IDLE)
        held = pool.monitor()["ids"]
        again = asyncio.ensure_future(handle.step(IDLE))
        await asyncio.sleep(0)  # joined its batch, not yet stepped
        with pytest.raises(RuntimeError, match=r"^id 'fresh' already has a call in flight$"):
            await handle.step(IDLE)
        return first, held, await again

    first, held, again = asyncio.run(main())
    assert (first.observation.tick, again.observation.tick) == (1, 2) and held == {"fresh": 0}


def test_an_acquire_of_an_id_with_a_call_in_flight_resets_its_world_after_that_call():
    async def main():
        pool = ToolPool(size=2)
        await pool.acquire("a", seed=1)
        call = asyncio.ensure_future(pool.call(IDLE, id="a"))
        await asyncio.sleep(0)  # in flight
        reset = await pool.acquire("a", seed=2)
        fresh = await pool.acquire("b", seed=2)
        return await call, reset, fresh, await pool.call(IDLE, id="a")

    step, reset, fresh, after = asyncio.run(main())
    assert step.observation.tick == 1  # the call ran on the old episode
    assert reset.to_dict() == fresh.to_dict() and reset.tick == 0  # then the world was reset with seed 2
    assert after.observation.tick == 1


def test_every_step_brings_its_worlds_info_whether_the_whole_pool_or_a_part_of_it_stepped():
    async def main():
        pool = ToolPool(size=2)
        await pool.acquire("a", seed=1)
        await pool.acquire("b", seed=2)
        together = await asyncio.gather(pool.call(IDLE, id="a"), pool.call(IDLE, id="b"))  # the whole batch
        alone = await pool.call(IDLE, id="a")  # a part of it
        return [*together, alone]

    for step in asyncio.run(main()):
        observation, reward, terminated, truncated, info = step  # five fields, as a Gymnasium step
        assert {"success", "score"} <= set(info) and info is step.info
        assert type(reward) is float and type(terminated) is bool and type(truncated) is bool
        assert observation is step.observation


def test_the_garbage_collector_runs_again_after_every_batched_step_and_a_pool_waits_30_s_by_default():
    import gc

    async def main():
        pool = ToolPool(size=2)
        await pool.acquire("a", seed=1)
        await asyncio.gather(pool.call(IDLE, id="a"), pool.call(IDLE, id="b"))
        await asyncio.sleep(0)  # a resume the loop was asked to make, made
        return pool, gc.isenabled()

    pool, enabled = asyncio.run(main())
    assert enabled and gc.isenabled()  # paused for the batch only
    assert pool.timeout == 30.0


def test_a_failed_seeded_reset_of_an_id_that_already_held_its_env_leaves_it_held():
    Fragile.closed = []

    async def main():
        pool = ResourcePool(Fragile, size=1)
        held = await pool.acquire("a")
        with pytest.raises(RuntimeError, match="seed 13 breaks this env"):
            await pool.acquire("a", seed=13)
        return pool.monitor(), held, await pool.acquire("a")

    monitor, held, again = asyncio.run(main())
    assert monitor == {"size": 1, "created": 1, "free": 0, "acquired": 1, "ids": {"a": 0}}
    assert again.env is held.env and Fragile.closed == []  # the id keeps its env; nothing was closed
