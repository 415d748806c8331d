"""ToolPool: isolation by id, one batched step for concurrent calls, exhaustion, release."""

import asyncio

import gymnasium as gym
import numpy as np
import pytest

import arena_envs  # noqa: F401
from arena_envs.tools import Decision, PoolExhaustedError, ToolPool
from arena_envs.wrappers import ToolCallWrapper

CALLS = 12


def policy(obs, step):
    """A deterministic agent whose calls depend on what it observes."""
    if step % 5 == 0:
        return {"tool": "query_world", "params": {"radius": 30}}
    if obs.nearby_resources:
        nearest = min(obs.nearby_resources, key=lambda r: r.distance)
        if nearest.distance < 2.0:
            return Decision(tool="collect", params={"target_name": nearest.name})
        return Decision(tool="move_to", params={"target": list(nearest.position), "speed": 1.5})
    return '{"tool": "move_to", "params": {"target": [10, 0, -10]}}'


def trajectory_key(step):
    obs = step.observation if hasattr(step, "observation") else step[0]
    return (obs.tick, obs.position, [r.name for r in obs.nearby_resources], obs.health,
            obs.last_action_result.success if obs.last_action_result else None, round(float(step[1]), 6))


def solo(seed):
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0"))
    obs, _ = env.reset(seed=seed)
    keys = []
    for i in range(CALLS):
        step = env.step(policy(obs, i))
        obs = step[0]
        keys.append(trajectory_key(step))
    return keys


def test_256_concurrent_ids_on_64_worlds_match_solo_runs():
    async def episode(pool, seed):
        obs = await pool.acquire(f"id-{seed}", seed=seed)
        keys = []
        for i in range(CALLS):
            step = await pool.call(policy(obs, i), id=f"id-{seed}")
            obs = step.observation
            keys.append(trajectory_key(step))
        await pool.release(f"id-{seed}")
        return keys

    async def main():
        pool = ToolPool("arena_envs/Foraging-v0", size=64, timeout=60)
        steps = []
        original = pool.scenario.step

        def counting_step(state, actions, active=None):
            steps.append(state.batch_size if active is None else int(active.sum()))  # worlds stepped
            return original(state, actions, active)

        pool.scenario.step = counting_step
        results = await asyncio.gather(*(episode(pool, seed) for seed in range(256)))
        return pool, results, steps

    pool, results, steps = asyncio.run(main())
    for seed in (0, 1, 63, 64, 200, 255):
        assert results[seed] == solo(seed), f"id {seed} diverged from its solo run"
    assert len({repr(r) for r in results}) > 200  # different seeds, different episodes
    assert max(steps) == 64  # concurrent calls share one batched step
    assert sum(steps) == 256 * CALLS and len(steps) <= 256 * CALLS / 8  # about 8+ calls per step
    assert pool.monitor()["free"] == 64 and pool.monitor()["acquired"] == 0


def test_acquires_gathered_together_reset_in_one_batch_as_alone():
    """Ids acquiring together (one id resetting again, another stepping meanwhile) are reset
    in one batched reset, and each gets the first observation it gets acquiring alone."""
    seeds = [3, 11, 7, 5]

    def first_alone(seed):
        return ToolCallWrapper(gym.make("arena_envs/Foraging-v0")).reset(seed=seed)[0]

    async def main():
        pool = ToolPool("arena_envs/Foraging-v0", size=6)
        await pool.acquire("again", seed=1)
        await pool.acquire("stepping", seed=2)
        resets = []
        reset = pool.scenario.reset
        pool.scenario.reset = lambda state, index, *rest: resets.append(list(index)) or reset(state, index, *rest)
        *firsts, again, step = await asyncio.gather(*(pool.acquire(seed, seed=seed) for seed in seeds),
                                                    pool.acquire("again", seed=9),
                                                    pool.call({"tool": "idle"}, id="stepping"))
        assert len(resets) == 1 and len(resets[0]) == len(seeds) + 1
        assert step.observation.tick == 1  # stepped in the same flush, its world not reset
        return firsts, again

    firsts, again = asyncio.run(main())
    for seed, obs in zip([*seeds, 9], [*firsts, again], strict=True):
        assert obs.to_dict() == first_alone(seed).to_dict(), f"seed {seed} got another world's reset"


@pytest.mark.parametrize("size", [4, 6])
def test_calls_joining_in_any_order_get_their_own_worlds_step(size):
    """The ids' calls join each batched step in a shuffled order (the pool full, size 4, or
    with idle worlds, size 6): every id still gets its own world's observation, reward and
    episode end, as in a solo run of the same seed, till its episode ends (max_ticks=40)."""
    seeds = [3, 11, 7, 5]

    def solo_run(seed):
        env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0", max_ticks=40))
        obs, _ = env.reset(seed=seed)
        keys = []
        for i in range(45):
            step = env.step(policy(obs, i))
            obs = step[0]
            keys.append((*trajectory_key(step), step[2], step[3]))
            if step[2] or step[3]:
                break
        return keys

    async def main():
        pool = ToolPool("arena_envs/Foraging-v0", size=size, max_ticks=40)
        obs = {seed: await pool.acquire(seed, seed=seed) for seed in seeds}
        keys = {seed: [] for seed in seeds}
        order = np.random.default_rng(0)
        for i in range(45):
            running = [seed for seed in seeds if not keys[seed] or not any(keys[seed][-1][-2:])]
            if not running:
                break
            running = [running[k] for k in order.permutation(len(running))]
            steps = await asyncio.gather(*(pool.call(policy(obs[seed], i), id=seed) for seed in running))
            for seed, step in zip(running, steps, strict=True):
                obs[seed] = step.observation
                keys[seed].append((*trajectory_key(step), step.terminated, step.truncated))
        return keys

    keys = asyncio.run(main())
    for seed in seeds:
        assert keys[seed] == solo_run(seed), f"seed {seed} got another world's step"
    assert any(key[-1] for seed in seeds for key in keys[seed])  # episodes did end
    assert any(key[-3] != 0.0 for seed in seeds for key in keys[seed])  # and rewards came


def test_a_world_nobody_calls_does_not_advance():
    async def main():
        pool = ToolPool(size=4)
        await pool.acquire("a", seed=1)
        await pool.acquire("b", seed=2)
        before = pool.state.copy()
        await pool.call({"tool": "move_to", "params": {"target": [0, 0, 0]}}, id="a")
        return pool, before

    pool, before = asyncio.run(main())
    a, b = pool.monitor()["ids"]["a"], pool.monitor()["ids"]["b"]
    assert pool.state.tick[a] == before.tick[a] + 1
    for name, array in pool.state.arrays():
        np.testing.assert_array_equal(array[b], dict(before.arrays())[name][b], err_msg=name)


def test_exhausted_pool_times_out_with_a_clear_error_then_reuses_released_worlds():
    async def main():
        pool = ToolPool(size=2, timeout=0.05)
        await pool.call({"tool": "idle"}, id="x")
        await pool.call({"tool": "idle"}, id="y")
        with pytest.raises(PoolExhaustedError, match="no free world in the pool of 2"):
            await pool.call({"tool": "idle"}, id="z")
        world = pool.monitor()["ids"]["x"]
        waiter = asyncio.ensure_future(pool.call({"tool": "idle"}, id="z"))
        await asyncio.sleep(0.01)
        await pool.release("x")
        step = await waiter
        assert pool.monitor()["ids"]["z"] == world
        assert step.observation.tick == 1  # a fresh episode, not x's
        assert pool.monitor() == {"size": 2, "free": 0, "acquired": 2,
                                  "ids": {"y": pool.monitor()["ids"]["y"], "z": world}}

    asyncio.run(main())


def test_bad_calls_in_a_batch_do_not_touch_other_sessions():
    async def main():
        pool = ToolPool(size=3)
        for i in range(3):
            await pool.acquire(i, seed=10 + i)
        return pool, await asyncio.gather(
            pool.call("not json at all", id=0),
            pool.call({"tool": "move_to", "params": {"target": [float("nan"), 0, 1]}}, id=1),
            pool.call({"tool": "move_to", "params": {"target": [5, 0, 5]}}, id=2))

    pool, (bad, nan, good) = asyncio.run(main())
    assert bad.observation.last_action_result.error_code == "INVALID_PARAMS"
    assert nan.observation.last_action_result.error_code == "INVALID_PARAMS"
    assert good.observation.last_action_result.success
    env = ToolCallWrapper(gym.make("arena_envs/Foraging-v0"))
    env.reset(seed=12)
    alone = env.step({"tool": "move_to", "params": {"target": [5, 0, 5]}})[0]
    assert alone.position == good.observation.position


def test_a_cancelled_caller_leaves_the_rest_of_its_batch_alone():
    async def main():
        pool = ToolPool("arena_envs/Foraging-v0", size=3)
        for i in range(3):
            await pool.acquire(i, seed=i)
        calls = [asyncio.ensure_future(pool.call({"tool": "query_world", "params": {"radius": 30}}, id=i))
                 for i in range(3)]
        await asyncio.sleep(0)  # all three are now waiting on the same batch
        calls[1].cancel()
        results = await asyncio.gather(*calls, return_exceptions=True)
        again = await pool.call({"tool": "idle", "params": {}}, id=1)  # the cancelled id goes on
        return results, again

    results, again = asyncio.run(main())
    assert isinstance(results[1], asyncio.CancelledError)
    for step in (results[0], results[2]):
        assert step.observation.last_action_result.success
        assert step.observation.query_result["entities"]
    assert again.observation.last_action_result.success
    assert again.observation.tick == 2  # the cancelled call's step still happened


def test_a_failing_batch_reaches_every_caller_and_the_pool_goes_on():
    async def main():
        pool = ToolPool("arena_envs/Foraging-v0", size=2)
        for i in range(2):
            await pool.acquire(i, seed=i)
        original = pool.scenario.step

        def broken(*args):
            raise RuntimeError("the core broke")

        pool.scenario.step = broken
        results = await asyncio.gather(*(pool.call({"tool": "idle", "params": {}}, id=i) for i in range(2)),
                                       return_exceptions=True)
        pool.scenario.step = original
        after = await pool.call({"tool": "idle", "params": {}}, id=0)
        return results, after

    results, after = asyncio.run(main())
    assert [str(r) for r in results] == ["the core broke"] * 2
    assert after.observation.last_action_result.success


def test_render_gives_each_calls_step_its_rendering_of_the_same_observation():
    """``ToolPool(render=...)``: every call's step carries what ``render`` made of the very
    Observation an unrendered pool gives for the same calls; ``acquire`` still gives the Observation."""
    from arena_envs.observations import Observation

    def rendering(observation):
        return observation.to_text(), observation.to_dict()

    calls = [{"tool": "query_world", "params": {"radius": 30}}, {"tool": "move_to", "params": {"target": [5, 0, 5]}},
             {"tool": "collect", "params": {"target_name": "Nope"}}, {"tool": "no_such_tool"}, None]

    async def play(pool):
        first = [await pool.acquire(name, seed=seed) for name, seed in (("a", 3), ("b", 8))]
        steps = []
        for call in calls:  # both ids in each batch
            steps += await asyncio.gather(pool.call(call, id="a"), pool.call(call, id="b"))
        return first, steps

    plain_first, plain = asyncio.run(play(ToolPool("arena_envs/Foraging-v0", size=3)))
    rendered_first, rendered = asyncio.run(play(ToolPool("arena_envs/Foraging-v0", size=3, render=rendering)))
    assert all(isinstance(obs, Observation) for obs in rendered_first)
    assert [obs.to_dict() for obs in rendered_first] == [obs.to_dict() for obs in plain_first]
    for step, reference in zip(rendered, plain, strict=True):
        assert step.observation == rendering(reference.observation)
        assert step[1:] == reference[1:]
    with pytest.raises(ValueError, match="render"):
        ToolPool("CartPole-v1", size=1, render=rendering)
