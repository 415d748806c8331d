"""ShardedVectorEnv: a batch split over worker processes plays exactly as the unsharded batch."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, VectorWrapper
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arena_envs  # noqa: F401
from arena_envs import team_capture_v0
from arena_envs.envs import ArenaVectorEnv
from arena_envs.sharded import ShardedVectorEnv, make_native_env, shard_bounds

MODES = (AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP)
SHORT = {"max_ticks": 25}  # episodes end often, so autoreset is exercised


def assert_tree_equal(a, b, where=""):
    if isinstance(a, dict):
        assert set(a) == set(b), f"{where}: keys {sorted(a)} != {sorted(b)}"
        for key in a:
            assert_tree_equal(a[key], b[key], f"{where}/{key}")
    else:
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype, f"{where}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if a.dtype == object:
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                assert (x is None) == (y is None), f"{where}[{i}]"
                if x is not None:
                    assert_tree_equal(x, y, f"{where}[{i}]")
        else:
            np.testing.assert_array_equal(a, b, err_msg=where)


def assert_info_equal(native: dict, sharded: dict, where="info"):
    """Equal wherever an entry is reported (its ``_key`` mask is true), and the same masks."""
    assert set(native) == set(sharded), f"{where}: keys {sorted(native)} != {sorted(sharded)}"
    for key, value in native.items():
        if key.startswith("_"):
            np.testing.assert_array_equal(value, sharded[key], err_msg=f"{where}/{key}")
            continue
        mask = native.get("_" + key, np.ones(len(value), bool))
        if isinstance(value, dict):
            assert_info_equal(value, sharded[key], f"{where}/{key}")
        else:
            assert_tree_equal(np.asarray(value)[mask], np.asarray(sharded[key])[mask], f"{where}/{key}")


def assert_same_step(native_result, sharded_result):
    for i, name in enumerate(("obs", "reward", "terminated", "truncated")):
        assert_tree_equal(native_result[i], sharded_result[i], name)
    assert_info_equal(native_result[4], sharded_result[4])


def play_both(native, sharded, steps: int, seed: int, action_seed: int = 0):
    assert_tree_equal(native.reset(seed=seed)[0], sharded.reset(seed=seed)[0], "reset obs")
    native.action_space.seed(action_seed)
    for _ in range(steps):
        actions = native.action_space.sample()
        assert_same_step(native.step(actions), sharded.step(actions))


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists (a zombie not yet reaped counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_foraging_trajectories_equal_unsharded(mode, workers):
    native = ArenaVectorEnv(7, "foraging", autoreset_mode=mode, **SHORT)
    sharded = ShardedVectorEnv(7, workers, scenario="foraging", autoreset_mode=mode, **SHORT)
    try:
        assert sharded.metadata["autoreset_mode"] == mode
        play_both(native, sharded, 60, seed=11)
    finally:
        sharded.close()


@pytest.mark.parametrize("mode", MODES)
def test_team_capture_trajectories_equal_unsharded(mode):
    native = team_capture_v0.vector_env(num_envs=5, agents_per_team=2, max_cycles=20, autoreset_mode=mode)
    sharded = ShardedVectorEnv(5, 2, env_id="team_capture_v0", agents_per_team=2, max_cycles=20, autoreset_mode=mode)
    try:
        assert sharded.agents == native.agents
        assert sharded.single_action_space == native.single_action_space
        play_both(native, sharded, 45, seed=3)
    finally:
        sharded.close()


def test_team_capture_vector_env_with_workers():
    native = team_capture_v0.vector_env(num_envs=4, agents_per_team=1, max_cycles=15)
    sharded = team_capture_v0.vector_env(num_envs=4, num_workers=2, agents_per_team=1, max_cycles=15)
    try:
        assert isinstance(sharded, ShardedVectorEnv) and sharded.agents == native.agents
        play_both(native, sharded, 30, seed=2)
    finally:
        sharded.close()


def test_crafting_through_make_vec_with_workers():
    """``gym.make_vec(id, num_envs=N, num_workers=W)`` is the sharded batch, equal to the native one."""
    native = gym.make_vec("arena_envs/Crafting-v0", num_envs=6, max_ticks=30)
    sharded = gym.make_vec("arena_envs/Crafting-v0", num_envs=6, num_workers=2, max_ticks=30)
    try:
        assert isinstance(sharded.unwrapped, ShardedVectorEnv)
        play_both(native, sharded, 40, seed=0)
    finally:
        sharded.close()


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_world_i_of_seed_s_is_a_single_world_of_seed_s_plus_i(workers):
    sharded = ShardedVectorEnv(4, workers, scenario="foraging", **SHORT)
    try:
        obs, _ = sharded.reset(seed=100)
        for i in range(4):
            single = gym.make("arena_envs/Foraging-v0", **SHORT)
            alone, _ = single.reset(seed=100 + i)
            for key in alone:
                np.testing.assert_array_equal(obs[key][i], alone[key], err_msg=f"world {i} {key}")
    finally:
        sharded.close()


def test_seed_lists_and_reset_masks_as_unsharded():
    native = ArenaVectorEnv(6, "foraging", **SHORT)
    sharded = ShardedVectorEnv(6, 3, scenario="foraging", **SHORT)
    try:
        seeds = [5, None, 7, 8, None, 1]
        play_both(native, sharded, 10, seed=0)
        assert_tree_equal(native.reset(seed=seeds)[0], sharded.reset(seed=seeds)[0])
        mask = np.array([False, True, False, False, False, True])  # the middle worker resets nothing
        a, b = native.reset(seed=40, options={"reset_mask": mask}), sharded.reset(seed=40, options={"reset_mask": mask})
        assert_tree_equal(a[0], b[0], "obs")
        assert_info_equal(a[1], b[1])
        native.action_space.seed(2)
        for _ in range(30):
            actions = native.action_space.sample()
            assert_same_step(native.step(actions), sharded.step(actions))
    finally:
        sharded.close()


@contextlib.contextmanager
def reset_pair(seed: int):
    """A native batch of 4 Foraging worlds and the same batch on 2 workers, both reset with ``seed``."""
    native = ArenaVectorEnv(4, "foraging")
    sharded = ShardedVectorEnv(4, 2, scenario="foraging")
    try:
        native.reset(seed=seed)
        sharded.reset(seed=seed)
        yield native, sharded
    finally:
        sharded.close()


def test_bad_input_is_refused_before_any_world_moves():
    with reset_pair(seed=1) as (native, sharded):
        with pytest.raises(ValueError, match="seeds"):
            sharded.reset(seed=[1, 2, 3])
        with pytest.raises(ValueError, match="reset_mask"):
            sharded.reset(options={"reset_mask": np.zeros(4, bool)})
        with pytest.raises(ValueError, match="reset_mask"):
            sharded.reset(options={"reset_mask": np.ones(3, bool)})
        with pytest.raises(ValueError):
            sharded.step({"tool": np.zeros(3, np.int64)})  # a batch of 3 for 4 worlds
        native.action_space.seed(0)
        for _ in range(5):  # still in step with the native batch: nothing above moved a world
            actions = native.action_space.sample()
            assert_same_step(native.step(actions), sharded.step(actions))


def test_out_of_range_values_reach_the_native_env_unchanged():
    """Values the shared buffers cannot hold exactly (floats for an int tool) travel by pipe, so
    every world answers them as the unsharded batch does."""
    with reset_pair(seed=9) as (native, sharded):
        native.action_space.seed(0)
        actions = native.action_space.sample()
        actions["tool"] = np.array([0, 99, -1, 6])  # 99 and -1: INVALID_PARAMS for those worlds only
        actions["move_to"] = actions["move_to"].astype(np.float64)
        actions["move_to"][0, 0] = np.nan
        assert_same_step(native.step(actions), sharded.step(actions))


def test_actions_shaped_unlike_the_buffers_are_judged_by_the_native_env():
    """An unknown key, a missing query_world entry, a list: what the shared buffers cannot take
    as it is goes to the workers' native batches, which answer it as the unsharded batch does."""
    with reset_pair(seed=3) as (native, sharded):
        native.action_space.seed(5)
        actions = native.action_space.sample()
        with pytest.raises(ValueError, match="unknown action keys"):
            sharded.step({**actions, "bogus": np.zeros(4)})
        with pytest.raises(ValueError, match="unknown query_world keys"):
            sharded.step({**actions, "query_world": {**actions["query_world"], "bogus": np.zeros(4)}})
        partial = {**actions, "query_world": {"radius": actions["query_world"]["radius"]}}
        assert_same_step(native.step(partial), sharded.step(partial))
        as_lists = {**actions, "tool": actions["tool"].tolist()}
        assert_same_step(native.step(as_lists), sharded.step(as_lists))


def test_observations_are_copies_unless_asked():
    sharded = ShardedVectorEnv(4, 2, scenario="foraging")
    views = ShardedVectorEnv(4, 2, scenario="foraging", copy=False)
    try:
        obs, _ = sharded.reset(seed=0)
        kept = {k: v.copy() for k, v in obs.items()}
        view, _ = views.reset(seed=0)
        sharded.action_space.seed(0)
        actions = sharded.action_space.sample()
        actions["tool"][:] = 0
        actions["move_to"][:, :2] = 20.0
        actions["move_to"][:, 2] = 1.0
        new, *_ = sharded.step(actions)
        views.step(actions)
        assert_tree_equal(obs, kept)  # the copy did not change
        np.testing.assert_array_equal(view["agent"], new["agent"])  # the view shows the new step
    finally:
        sharded.close()
        views.close()


def test_observations_kept_across_steps_never_change():
    """copy=True hands out sets of shared arrays in turn, never one the caller still holds: whole
    observations, a single entry, or only a view of one stay as they were, step after step."""
    native = ArenaVectorEnv(6, "foraging", **SHORT)
    sharded = ShardedVectorEnv(6, 2, scenario="foraging", **SHORT)
    try:
        first, _ = sharded.reset(seed=4)
        expected_first = native.reset(seed=4)[0]
        native.action_space.seed(1)
        kept, agent_only, column_only = [], [], []
        for t in range(40):
            actions = native.action_space.sample()
            expected = native.step(actions)[0]
            obs = sharded.step(actions)[0]
            assert_tree_equal(expected, obs, f"step {t}")
            if t % 3 == 0:
                kept.append((obs, {k: v.copy() for k, v in expected.items()}))
            elif t % 3 == 1:
                agent_only.append((obs["agent"], expected["agent"].copy()))
            else:
                column_only.append((obs["resources"][:, :, 4], expected["resources"][:, :, 4].copy()))
            del obs
        assert_tree_equal(first, expected_first, "the reset's observation")
        for obs, want in kept:
            assert_tree_equal(obs, want)
        for got, want in agent_only + column_only:
            np.testing.assert_array_equal(got, want)
    finally:
        sharded.close()


@pytest.mark.parametrize("copy", [True, False])
def test_a_kept_view_or_result_never_changes(copy):
    """What the caller keeps of a step stays as it was, each kind alone (so that the sets are
    not all held at once): a view of one observation column (copy=True), the rewards, episode
    ends and info entries (always)."""
    native = ArenaVectorEnv(6, "foraging", **SHORT)
    sharded = ShardedVectorEnv(6, 2, scenario="foraging", copy=copy, **SHORT)
    try:
        sharded.reset(seed=3)
        native.reset(seed=3)
        native.action_space.seed(2)
        kept = []
        for t in range(60):
            actions = native.action_space.sample()
            expected = native.step(actions)
            got = sharded.step(actions)
            assert_same_step(expected, got)
            if t % 10 == 0:  # one kept thing at a time, dropped after a few steps
                kept = []
            if t % 10 == 1 and copy:
                kept.append((got[0]["agent"][:, 0], expected[0]["agent"][:, 0].copy()))
            elif t % 10 == 2:
                kept.append((got[1], expected[1].copy()))
            elif t % 10 == 3:
                kept.append((got[2] | got[3], expected[2] | expected[3]))
                kept.append((got[4]["score"][1:], expected[4]["score"][1:].copy()))
            del got
            for value, want in kept:
                np.testing.assert_array_equal(value, want, err_msg=f"step {t}")
    finally:
        sharded.close()


def test_observations_outlive_the_env():
    """Arrays handed out of shared memory stay readable after close (their memory is not unmapped
    under them): in a child process, since reading unmapped memory would crash this one."""
    import subprocess
    import sys

    script = (
        "import numpy as np\n"
        "from arena_envs.sharded import ShardedVectorEnv\n"
        "for copy in (True, False):\n"
        "    envs = ShardedVectorEnv(4, 2, scenario='foraging', copy=copy)\n"
        "    obs, _ = envs.reset(seed=0)\n"
        "    step = envs.step(envs.action_space.sample())[0]\n"
        "    want = {k: v.copy() for k, v in obs.items()}\n"
        "    envs.close()\n"
        "    assert all(np.array_equal(obs[k], want[k]) for k in obs) or not copy\n"
        "    print(float(obs['agent'].sum() + step['agent'].sum()))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split()) == 2


def test_close_leaves_no_process_behind():
    sharded = ShardedVectorEnv(6, 3, scenario="foraging")  # this process and 2 workers
    pids = [p.pid for p in sharded._processes.values()]
    assert len(pids) == 2 and all(alive(pid) for pid in pids)
    sharded.reset(seed=0)
    sharded.close()
    assert not any(alive(pid) for pid in pids)
    sharded.close()  # twice is fine
    with pytest.raises(RuntimeError, match="closed"):
        sharded.reset()


def test_a_killed_worker_is_an_error_not_a_hang():
    sharded = ShardedVectorEnv(6, 3, scenario="foraging")
    pids = [p.pid for p in sharded._processes.values()]
    sharded.reset(seed=0)
    os.kill(sharded._processes[1].pid, signal.SIGKILL)
    with pytest.raises(RuntimeError, match=r"worker 1 \(worlds 2\.\.3\) died"):
        sharded.step(sharded.action_space.sample())
    assert not any(alive(pid) for pid in pids)  # the others were stopped with it
    with pytest.raises(RuntimeError, match="died"):
        sharded.step(sharded.action_space.sample())
    sharded.close()


class DiesOnStep(VectorWrapper):
    """Exits its worker process in the middle of its third step (in this process, it lives on)."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, actions):
        self.steps += 1
        if self.steps == 3 and mp.parent_process() is not None:
            os._exit(7)
        return super().step(actions)


def dies_on_step(num_envs: int):
    return DiesOnStep(make_native_env("arena_envs/Foraging-v0", num_envs))


def fails_to_build(num_envs: int):
    raise ValueError("no such world")


def test_a_worker_dying_mid_step_is_an_error_not_a_hang():
    sharded = ShardedVectorEnv(4, 2, make_native=dies_on_step)
    pids = [p.pid for p in sharded._processes.values()]
    sharded.reset(seed=0)
    actions = sharded.action_space.sample()
    sharded.step(actions)
    sharded.step(actions)
    with pytest.raises(RuntimeError, match=r"worker 1 \(worlds 2\.\.3\) died: .*\(exit code 7\)"):
        sharded.step(actions)
    assert not any(alive(pid) for pid in pids)


def test_a_worker_that_cannot_build_its_batch_raises_its_error():
    with pytest.raises(ValueError, match="no such world"):
        ShardedVectorEnv(4, 2, make_native=fails_to_build)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="num_workers"):
        ShardedVectorEnv(2, 3, scenario="foraging")
    with pytest.raises(ValueError, match="exactly one"):
        ShardedVectorEnv(2, 1, scenario="foraging", env_id="arena_envs/Foraging-v0")
    with pytest.raises(ValueError, match="make_native"):
        ShardedVectorEnv(2, 1, make_native=dies_on_step, max_ticks=3)


@pytest.mark.parametrize(("num_envs", "workers"), [(1, 1), (7, 2), (8, 3), (5, 5)])
def test_shards_cover_the_batch_in_order(num_envs, workers):
    bounds = shard_bounds(num_envs, workers)
    assert bounds[0][0] == 0 and bounds[-1][1] == num_envs
    assert all(a[1] == b[0] for a, b in zip(bounds, bounds[1:], strict=False))
    sizes = [hi - lo for lo, hi in bounds]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1


# a random programme of steps and (partial, seeded or unseeded) resets: the sharded batch
# stays in step with the native one whatever the sizes and the interleaving of calls
operation = st.one_of(
    st.tuples(st.just("step"), st.integers(0, 2**16)),
    st.tuples(st.just("reset"), st.one_of(st.none(), st.integers(0, 1000)), st.lists(st.booleans(), min_size=6,
                                                                                      max_size=6)),
)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workers=st.integers(1, 3), mode=st.sampled_from(MODES), programme=st.lists(operation, min_size=1, max_size=25))
def test_any_programme_of_calls_matches_the_native_batch(workers, mode, programme):
    native = ArenaVectorEnv(6, "foraging", autoreset_mode=mode, max_ticks=6)
    sharded = ShardedVectorEnv(6, workers, scenario="foraging", autoreset_mode=mode, max_ticks=6)
    try:
        assert_tree_equal(native.reset(seed=0)[0], sharded.reset(seed=0)[0])
        for op in programme:
            if op[0] == "step":
                native.action_space.seed(op[1])
                actions = native.action_space.sample()
                assert_same_step(native.step(actions), sharded.step(actions))
            else:
                mask = np.array(op[2])
                options = {"reset_mask": mask} if mask.any() else None
                a, b = native.reset(seed=op[1], options=options), sharded.reset(seed=op[1], options=options)
                assert_tree_equal(a[0], b[0], "obs")
                assert_info_equal(a[1], b[1])
    finally:
        sharded.close()


def test_bench_rows_measure_one_and_two_workers():
    from arena_envs import bench

    rows = bench.sharded_rows(0.05, num_envs=16)
    assert [name for name, _, _ in rows] == ["Foraging B=16, num_workers=1 (the native batch)",
                                             "Foraging B=16, num_workers=2",
                                             "Foraging B=16, num_workers=2, copy=False"]
    assert all(rate > 0 and unit == "env-steps/s" for _, rate, unit in rows)


def test_let_go_arrays_are_written_again_while_warm():
    """A caller who lets go of a step's observations and results gets the same shared memory
    at the next step (still in the caches), and a different set while holding them."""
    sharded = ShardedVectorEnv(6, 2, scenario="foraging", **SHORT)
    try:
        sharded.reset(seed=0)
        actions = sharded.action_space.sample()

        def addresses(result):
            obs, reward, _, _, info = result
            return obs["agent"].ctypes.data, reward.ctypes.data, info["score"].ctypes.data

        first = addresses(sharded.step(actions))
        assert addresses(sharded.step(actions)) == first  # nothing held: the same sets again
        held = sharded.step(actions)
        assert all(a != b for a, b in zip(addresses(sharded.step(actions)), addresses(held), strict=True))
    finally:
        sharded.close()


def test_messages_read_straight_off_the_pipe_are_whole():
    """A step's messages are read with one system call; longer ones (pickled commands and
    replies, also over 16 KiB, which Connection writes in two parts) still arrive whole and in
    order, and a closed pipe reads as EOFError."""
    from arena_envs.shard_worker import _framed, _read_message

    reader, writer = mp.Pipe(duplex=False)
    big = bytes(range(256)) * 100  # 25,600 bytes
    messages = [b"s\x01\x02", b"k" + big, b"i", b"e" * 40, b"s\x00\x00"]
    for message in messages:
        if len(message) <= 3:
            os.write(writer.fileno(), _framed(message))
        else:
            writer.send_bytes(message)
        assert _read_message(reader.fileno(), 3) == message
        assert not reader.poll()  # nothing of the message was left behind, nothing more was taken
    writer.send_bytes(b"i")
    writer.send_bytes(b"s\x01\x01")  # two waiting messages: the first read takes only the first
    assert _read_message(reader.fileno(), 1) == b"i"
    assert reader.recv_bytes() == b"s\x01\x01"
    writer.close()
    with pytest.raises(EOFError):
        _read_message(reader.fileno(), 3)
