"""The shared core: active-mask stepping, the scripted forager, the bench CLI."""

import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np

import arena_envs  # noqa: F401
from arena_envs import bench
from arena_envs.actions import decode_actions
from arena_envs.foraging import Foraging, ForagingParams
from arena_envs.scripted import ScriptedForager
from arena_envs.world import MOVE_TO


def _batch(scenario, batch, seed):
    state = scenario.init_state(batch)
    rngs = [np.random.default_rng(seed + i) for i in range(batch)]
    scenario.reset(state, np.arange(batch), rngs)
    return state


def _moves(scenario, batch, seed):
    space = gym.vector.utils.batch_space(scenario.action_space, batch)
    space.seed(seed)
    action = space.sample()
    action["tool"][:] = MOVE_TO
    return decode_actions(action, (batch,), scenario.action_space, scenario.params)


def test_active_mask_advances_only_the_chosen_worlds():
    scenario = Foraging()
    state = _batch(scenario, 6, seed=3)
    actions = _moves(scenario, 6, seed=4)
    active = np.array([True, False, True, False, False, True])
    before = state.copy()
    reward, terminated, truncated = scenario.step(state, actions, active)

    alone = before.take(np.flatnonzero(active))
    expected = scenario.step(alone, actions.take(np.flatnonzero(active)))
    for (name, got), (_, was), (_, want) in zip(state.arrays(), before.arrays(), alone.arrays(), strict=True):
        np.testing.assert_array_equal(got[~active], was[~active], err_msg=name)
        np.testing.assert_array_equal(got[active], want, err_msg=name)
    assert (state.tick == before.tick + active).all()
    np.testing.assert_array_equal(reward[active], expected[0])
    assert not reward[~active].any() and not terminated[~active].any() and not truncated[~active].any()


def test_scripted_forager_collects_everything_on_the_classic_layout():
    env = gym.make("arena_envs/Foraging-v0", layout="classic")
    forager = ScriptedForager(env.unwrapped.scenario.params)
    obs, info = env.reset(seed=0)
    for _ in range(600):
        obs, _, terminated, truncated, info = env.step(forager.act(obs))
        if terminated or truncated:
            break
    assert terminated and info["resources_collected"] == 7 and info["score"] == 100.0


def test_scripted_forager_clears_most_random_worlds_in_a_batch():
    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=64)
    forager = ScriptedForager(envs.unwrapped.scenario.params)
    obs, _ = envs.reset(seed=100)
    finished = np.zeros(64, bool)
    cleared = np.zeros(64, bool)
    while not finished.all():
        obs, _, terminated, truncated, info = envs.step(forager.act(obs))
        ended = (terminated | truncated) & ~finished
        cleared[ended] = info["resources_remaining"][ended] == 0
        finished |= ended
    assert cleared.mean() >= 0.9


def test_bench_prints_a_table_with_ratios(capsys):
    rows = bench.run(["--seconds", "0.01", "--only", "reference"])
    assert rows and rows[0][1] > 0
    table = bench.format_table([("Foraging native batch B=4096", 10.0, "env-steps/s"),
                                ("Foraging SyncVectorEnv of 64 single envs", 2.0, "env-steps/s")])
    assert "5x" in table
    assert "CartPole" in capsys.readouterr().out


def test_bench_tool_call_rows_measure_both_ways_of_calling():
    pool, loop = bench.tool_call_rows(0.03, sessions=4)
    assert pool[0] == "Tool calls: ToolPool, 4 async sessions" and pool[1] > 0
    assert loop[0] == "Tool calls: ToolCallWrapper loop over 4 single envs" and loop[1] > 0


def test_bench_tool_reset_rows_reset_the_pool_and_the_loop(monkeypatch):
    from arena_envs.tools import ToolPool

    restarted = []
    batched = ToolPool._restarted
    monkeypatch.setattr(ToolPool, "_restarted", lambda self, restarts: restarted.append(len(restarts))
                        or batched(self, restarts))
    pool, loop = bench.tool_reset_rows(0.03, sessions=4)
    assert pool[0] == "Tool resets: ToolPool, 4 ids at once" and pool[1] > 0
    assert loop[0] == "Tool resets: ToolCallWrapper loop over 4 single envs" and loop[1] > 0
    assert restarted and set(restarted) == {4}  # every round: the 4 ids in one batch


def test_arena_bench_console_script_exits_zero():
    script = Path(sys.executable).with_name("arena-bench")
    done = subprocess.run([str(script), "--seconds", "0.01", "--only", "reference"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "CartPole" in done.stdout


def test_foraging_params_reject_nonsense():
    for bad in ({"layout": "maze"}, {"num_resources": 0}, {"max_ticks": 0}, {"num_hazards": -1}):
        try:
            ForagingParams(**bad)
        except ValueError as err:
            assert str(err)
        else:
            raise AssertionError(f"{bad} accepted")


def test_core_and_tool_layer_agree_on_names_and_codes():
    from arena_envs import tools, world

    assert world.TOOL_NAMES == tools.TOOL_NAMES
    assert world.RESULT_CODES[1:] == tuple(code.value for code in tools.ErrorCode)
