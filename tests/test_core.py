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


def test_a_vector_env_steps_only_its_active_worlds_and_restarts_them_when_active():
    """``step(actions, active)``: the paused worlds keep their observation, reward 0 and no end;
    an always-active world plays as in a batch where every world is; in NEXT_STEP a world that
    ended restarts on the next step it is active in, however long it was paused."""
    masks = [np.array(m, bool) for m in [[1, 0, 1]] * 4 + [[0, 1, 1]] * 2 + [[1, 1, 1]]]

    def run(masks):
        envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=3, vectorization_mode="vector_entry_point",
                            max_ticks=4)
        obs, _ = envs.reset(seed=7)
        envs.action_space.seed(1)
        steps = []
        for active in masks:
            before = {k: v.copy() for k, v in obs.items()}
            obs, reward, terminated, truncated, _ = envs.unwrapped.step(envs.action_space.sample(), active)
            steps.append((before, obs, reward, terminated | truncated, envs.unwrapped.state.tick.copy()))
        return steps

    masked = run(masks)
    for active, (before, obs, reward, ended, _) in zip(masks, masked, strict=True):
        assert not reward[~active].any() and not ended[~active].any()
        for key in obs:
            np.testing.assert_array_equal(obs[key][~active], before[key][~active])
    assert masked[3][3].tolist() == [True, False, True]  # worlds 0 and 2 end on their 4th tick
    assert [step[4].tolist() for step in masked[3:]] == [[4, 0, 4], [4, 1, 0], [4, 2, 1], [0, 3, 2]]
    for (_, obs_a, r_a, *_), (_, obs_m, r_m, *_) in zip(run([np.ones(3, bool)] * len(masks)), masked, strict=True):
        assert r_a[2] == r_m[2]
        for key in obs_a:
            np.testing.assert_array_equal(obs_a[key][2], obs_m[key][2])
