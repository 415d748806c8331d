"""Stateful tools on pools (issue 13): any env class, ids, release, exhaustion, isolation, slow envs."""

import asyncio
import threading

import gymnasium as gym
import pytest

import arena_envs  # noqa: F401
from arena_envs.envs import ArenaEnv
from arena_envs.tools import (
    ArenaHandle,
    EnvHandle,
    PoolExhaustedError,
    PythonSandboxEnv,
    ResourcePool,
    ToolPool,
    make_pool,
    tool,
)
from arena_envs.wrappers import ToolCallWrapper

# --- a non-arena env class: the Python sandbox, 256 ids on 16 sessions ---------------------------


def program(n):
    """What id ``n`` runs: state that builds up over its calls, different for every id."""
    return [f"total = {n}", "import math\nhistory = [total]",
            *[f"total = (total * 31 + {k}) % 1000003\nhistory.append(total)" for k in range(3)],
            "print(total, len(history), sum(history) % 97)"]


def solo_sandbox(n):
    env = PythonSandboxEnv()
    try:
        return [env.run(code) for code in program(n)]
    finally:
        env.close()


def test_256_ids_on_16_sandboxes_match_solo_runs_and_never_see_each_other():
    pool = ResourcePool(PythonSandboxEnv, size=16, timeout=120)
    peak = []

    async def episode(n):
        outputs = []
        for code in program(n):
            outputs.append(await pool.call(code, id=f"id-{n}"))
            peak.append(pool.monitor()["acquired"])
        leaked = await pool.call("print(sorted(k for k in dir() if not k.startswith('_')))", id=f"id-{n}")
        await pool.release(f"id-{n}")
        return outputs, leaked

    async def main():
        results = await asyncio.gather(*(episode(n) for n in range(256)))
        monitor = pool.monitor()
        await pool.aclose()
        return results, monitor

    results, monitor = asyncio.run(main())
    for n in (0, 1, 15, 16, 100, 255):
        assert results[n][0] == solo_sandbox(n), f"id {n} diverged from its solo run"
    for _, leaked in results:
        assert leaked == "['history', 'math', 'total']\n"  # only its own names: nothing from another id
    assert len({outputs[-1] for outputs, _ in results}) == 256
    assert max(peak) == 16
    assert monitor == {"size": 16, "created": 16, "free": 16, "acquired": 0, "ids": {}}


# --- an arena scenario as env_cls: the same stateful-tool API, batched steps ---------------------


@tool(env_cls="arena_envs/Foraging-v0", name="arena_act", stateful=True, pool_size=16)
async def arena_act(call: dict, env):
    """Carry out one universal tool call in the id's world.

    Args:
        call: The tool call, {"tool": ..., "params": {...}}.
    """
    step = await env.step(call)
    return step.observation, step.reward


def policy(obs, i):
    if i % 4 == 0:
        return {"tool": "query_world", "params": {"radius": 30}}
    if obs.nearby_resources:
        nearest = min(obs.nearby_resources, key=lambda r: r.distance)
        if nearest.distance < 2.0:
            return {"tool": "collect", "params": {"target_name": nearest.name}}
        return {"tool": "move_to", "params": {"target": list(nearest.position), "speed": 1.5}}
    return {"tool": "move_to", "params": {"target": [8, 0, -8]}}


def key(obs, reward):
    return obs.tick, obs.position, [r.name for r in obs.nearby_resources], obs.health, round(reward, 6)


def solo_arena(seed, calls=8):
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0"))
    obs, _ = env.reset(seed=seed)
    keys = []
    for i in range(calls):
        obs, reward, *_ = env.step(policy(obs, i))
        keys.append(key(obs, reward))
    return keys


def test_256_ids_on_16_arena_worlds_through_a_stateful_tool_batch_and_match_solo_runs():
    pool = arena_act.pool
    assert isinstance(pool, ToolPool) and pool.size == 16
    stepped = []
    original = pool.scenario.step

    def counting(state, actions, active=None):
        stepped.append(state.batch_size if active is None else int(active.sum()))  # worlds stepped
        return original(state, actions, active)

    pool.scenario.step = counting

    async def episode(seed):
        obs = await pool.acquire(seed, seed=seed)
        keys = []
        for i in range(8):
            obs, reward = await arena_act(policy(obs, i), id=seed)
            keys.append(key(obs, reward))
        await arena_act.release(id=seed)
        return keys

    async def main():
        return await asyncio.gather(*(episode(seed) for seed in range(256)))

    try:
        results = asyncio.run(main())
    finally:
        pool.scenario.step = original
    for seed in (0, 15, 16, 255):
        assert results[seed] == solo_arena(seed), f"id {seed} diverged from its solo run"
    assert max(stepped) == 16  # calls of many ids shared batched steps
    assert sum(stepped) == 256 * 8 and len(stepped) <= 256 * 8 / 4
    assert pool.monitor()["free"] == 16


def test_an_arena_handle_resets_and_steps_its_own_world():
    @tool(env_cls="arena_envs/Crafting-v0", stateful=True, pool_size=2)
    async def craft_turn(call: dict, env, seed: int | None = None):
        assert isinstance(env, ArenaHandle)
        if seed is not None:
            await env.reset(seed=seed)
        return (await env.step(call)).observation.tick

    async def main():
        first = await craft_turn({"tool": "idle"}, id="a", seed=3)
        second = await craft_turn({"tool": "idle"}, id="a")
        again = await craft_turn({"tool": "idle"}, id="a", seed=3)
        return first, second, again

    assert asyncio.run(main()) == (1, 2, 1)


@pytest.mark.parametrize("env_cls", ["arena_envs/Foraging-v0", "foraging", ArenaEnv])
def test_an_arena_env_id_name_or_class_gets_the_batched_pool(env_cls):
    assert isinstance(ToolPool(env_cls, size=2), ToolPool)
    assert isinstance(make_pool(env_cls, size=2), ToolPool)


def test_any_other_gymnasium_env_id_gets_the_generic_pool_of_made_envs():
    async def main():
        pool = ToolPool("CartPole-v1", size=2)
        assert isinstance(pool, ResourcePool)
        handle = await pool.acquire("a", seed=0)
        obs, reward, terminated, truncated, info = await pool.call(0, id="a")
        await pool.release("a")
        return handle, reward

    handle, reward = asyncio.run(main())
    assert isinstance(handle, EnvHandle) and reward == 1.0
    with pytest.raises(ValueError, match="not registered"):
        make_pool("NoSuchEnv-v9")


# --- the generic pool's rules -----------------------------------------------------------------


class Counter:
    """A synchronous env that counts, with a log of what happened to it."""

    made = 0

    def __init__(self):
        Counter.made += 1
        self.number, self.count, self.log = Counter.made, 0, []

    def step(self, amount):
        self.count += amount
        self.log.append(("step", threading.current_thread().name))
        return self.count

    def reset(self):
        self.count = 0
        self.log.append(("reset", None))


def test_same_id_same_instance_new_id_a_free_one_release_resets_and_reuses():
    async def main():
        pool = ResourcePool(Counter, size=2)
        assert pool.monitor()["created"] == 0  # made lazily
        a1 = await pool.call(5, id="a")
        a2 = await pool.call(2, id="a")
        b1 = await pool.call(1, id="b")
        env_a = (await pool.acquire("a")).env
        await pool.release("a")
        c1 = await pool.call(10, id="c")  # a's instance, reset
        env_c = (await pool.acquire("c")).env
        return pool, (a1, a2, b1, c1), env_a, env_c

    pool, counts, env_a, env_c = asyncio.run(main())
    assert counts == (5, 7, 1, 10)
    assert env_a is env_c and ("reset", None) in env_c.log
    assert all(name.startswith("arena-pool") for kind, name in env_c.log if kind == "step")  # off the loop
    assert pool.monitor()["created"] == 2


def test_exhaustion_raises_after_the_configured_timeout_and_a_release_serves_the_waiter():
    async def main():
        pool = ResourcePool(Counter, size=1, timeout=0.2)
        await pool.call(1, id="a")
        loop = asyncio.get_running_loop()
        start = loop.time()
        with pytest.raises(PoolExhaustedError, match=r"no free environment in the pool of 1 for id 'b' after 0.2 s"):
            await pool.call(1, id="b")
        waited = loop.time() - start
        waiter = asyncio.ensure_future(pool.call(3, id="b"))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        await pool.release("a")
        return waited, await waiter, pool.monitor()

    waited, b_count, monitor = asyncio.run(main())
    assert waited >= 0.19  # it did wait the configured time (no upper bound: machines are slow)
    assert b_count == 3 and monitor["ids"] == {"b": 0}


class Gate:
    """A sync env whose step for "slow" blocks until the test lets it go."""

    entered = threading.Event()
    go = threading.Event()

    def step(self, name):
        if name == "slow":
            Gate.entered.set()
            assert Gate.go.wait(30), "the test never let the slow step go"
        return name


def test_a_slow_synchronous_env_does_not_delay_another_ids_call():
    Gate.entered.clear()
    Gate.go.clear()
    order = []

    async def call(pool, name):
        result = await pool.call(name, id=name)
        order.append(result)

    async def main():
        pool = ResourcePool(Gate, size=2)
        slow = asyncio.ensure_future(call(pool, "slow"))
        while not Gate.entered.is_set():
            await asyncio.sleep(0.001)
        await call(pool, "fast")  # finishes while the slow step is still running in its thread
        assert not slow.done()
        Gate.go.set()
        await slow

    asyncio.run(main())
    assert order == ["fast", "slow"]


class Overlap:
    """An async env that notes whether two of its steps ever ran at once."""

    def __init__(self):
        self.running, self.overlapped, self.steps = 0, False, []

    async def step(self, label):
        self.running += 1
        self.overlapped |= self.running > 1
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.steps.append(label)
        self.running -= 1
        return label

    async def reset(self):
        self.steps.append("reset")


def test_calls_of_one_id_run_one_at_a_time_and_release_waits_for_them():
    async def main():
        pool = ResourcePool(Overlap, size=1)
        calls = [asyncio.ensure_future(pool.call(i, id="a")) for i in range(3)]
        await asyncio.sleep(0)
        await pool.release("a")  # after the calls in flight, never in their middle
        await asyncio.gather(*calls)
        env = (await pool.acquire("b")).env
        return env

    env = asyncio.run(main())
    assert not env.overlapped
    assert env.steps == [0, 1, 2, "reset"]


def test_a_cancelled_waiting_caller_frees_nothing_it_did_not_hold():
    async def main():
        pool = ResourcePool(Counter, size=1, timeout=5)
        await pool.call(1, id="a")
        waiting = asyncio.ensure_future(pool.call(1, id="b"))
        await asyncio.sleep(0.01)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        held = pool.monitor()
        await pool.release("a")
        return held, pool.monitor()

    held, after = asyncio.run(main())
    assert held["ids"] == {"a": 0} and held["free"] == 0
    assert after["ids"] == {} and after["free"] == 1


class BadReset(Counter):
    def reset(self):
        raise RuntimeError("cannot reset")


def test_an_env_that_cannot_reset_is_replaced_and_its_slot_freed():
    async def main():
        pool = ResourcePool(BadReset, size=1)
        await pool.call(1, id="a")
        with pytest.raises(RuntimeError, match="cannot reset"):
            await pool.release("a")
        return pool.monitor(), await pool.call(4, id="b")

    monitor, count = asyncio.run(main())
    assert monitor["free"] == 1 and monitor["created"] == 0
    assert count == 4  # a new instance, not the one that failed


def test_unhashable_ids_and_bad_sizes_are_refused_clearly():
    with pytest.raises(ValueError, match="size"):
        ResourcePool(Counter, size=0)
    with pytest.raises(TypeError, match="env_cls"):
        ResourcePool(3)

    async def main():
        pool = ResourcePool(Counter, size=1)
        with pytest.raises(TypeError, match="unhashable"):
            await pool.call(1, id=["a"])
        return pool.monitor()

    assert asyncio.run(main())["free"] == 1


def test_stateful_tool_arguments_are_checked_before_an_env_is_taken():
    @tool(env_cls=Counter, stateful=True, pool_size=1)
    def count(amount: int, env) -> int:
        return env.env.step(amount)

    async def main():
        with pytest.raises(ValueError, match="unexpected argument 'amout'; the arguments are amount"):
            await count(amout=3, id="a")
        held = count.pool.monitor()["acquired"]
        return held, await count(amount=3, id="a"), await count(amount=4, id="a")

    assert asyncio.run(main()) == (0, 3, 7)


class Holder:
    """Notes any id that gets this env while another id still holds it."""

    violations = []

    def __init__(self):
        self.holder = None

    async def step(self, id):
        if self.holder not in (None, id):
            Holder.violations.append((self.holder, id))
        self.holder = id
        await asyncio.sleep(0)
        return id

    def reset(self):
        self.holder = None


def test_one_generic_pool_serves_event_loops_in_two_threads_at_once():
    pool = ResourcePool(Holder, size=3, timeout=30)
    Holder.violations = []
    errors = []

    def thread_main(prefix):
        async def episode(n):
            id = f"{prefix}{n}"
            for _ in range(5):
                assert await pool.call(id, id=id) == id
            await pool.release(id)

        async def main():
            await asyncio.wait_for(asyncio.gather(*(episode(n) for n in range(20))), 60)

        try:
            asyncio.run(main())
        except BaseException as error:  # reported below, in the test's thread
            errors.append(error)

    threads = [threading.Thread(target=thread_main, args=(prefix,)) for prefix in "xy"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    assert not Holder.violations
    assert pool.monitor()["free"] == 3 and pool.monitor()["acquired"] == 0
