"""The same rules on every array library (DESIGN §19): numpy against torch on the CPU.

The numpy env keeps its sparse rules (:mod:`arena_envs.tick`, :mod:`arena_envs.perception`);
the device env runs the dense ones (:mod:`arena_envs.dense`). With the counter generator
on both, every step of a random game must agree: integers exactly, floats within 1e-6.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import arena_envs  # noqa: F401
from arena_envs.xp import CounterGenerator, hash32, uniforms, world_keys

torch = pytest.importorskip("torch")

FORAGING = "arena_envs/Foraging-v0"
SMALL = dict(half_size=8.0, num_resources=3, num_hazards=2, num_obstacles=4, max_ticks=40)


def numpy_of(tree):
    if isinstance(tree, dict):
        return {k: numpy_of(v) for k, v in tree.items()}
    if isinstance(tree, tuple):
        return tuple(numpy_of(v) for v in tree)
    return tree.detach().cpu().numpy() if hasattr(tree, "detach") else np.asarray(tree)


def assert_same(np_tree, torch_tree, where=""):
    """Integers and booleans exactly, floats within 1e-6: every key of both."""
    torch_tree = numpy_of(torch_tree)
    if isinstance(np_tree, dict):
        assert set(np_tree) == set(torch_tree), where
        for k in np_tree:
            assert_same(np_tree[k], torch_tree[k], f"{where}/{k}")
        return
    if isinstance(np_tree, tuple):
        assert len(np_tree) == len(torch_tree), where
        for i, (a, b) in enumerate(zip(np_tree, torch_tree, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
        return
    a, b = np.asarray(np_tree), np.asarray(torch_tree)
    assert a.shape == b.shape, f"{where}: shape {a.shape} != {b.shape}"
    if a.dtype.kind == "f" or b.dtype.kind == "f":
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-6, err_msg=where)
    else:
        np.testing.assert_array_equal(b, a, err_msg=where)


def random_actions(space, rng: np.random.Generator, n: int, bad_share: float = 0.1) -> dict:
    """A batch of actions of ``space`` (one agent's), a share of them broken (NaN, out of range)."""
    space.seed(int(rng.integers(2**31)))
    batch = [space.sample() for _ in range(n)]
    out = {k: np.stack([a[k] for a in batch]) for k in ("tool", "move_to", "collect", "craft", "send_message")}
    out["query_world"] = {"radius": np.stack([a["query_world"]["radius"] for a in batch]),
                          "filter": np.stack([a["query_world"]["filter"] for a in batch])}
    out["tool"] = rng.choice([0, 0, 0, 1, 1, 2, 3, 4, 5, 6], size=n)  # mostly moves and collects
    broken = rng.random(n) < bad_share
    out["move_to"][broken, 2] = np.nan
    out["collect"] = np.where(rng.random(n) < bad_share, 99, out["collect"])
    out["tool"] = np.where(rng.random(n) < bad_share / 2, 7, out["tool"])
    return out


def pair(num_envs: int, autoreset_mode: str = "NextStep", **kwargs):
    numpy_env = gym.make_vec(FORAGING, num_envs=num_envs, rng="counter", autoreset_mode=autoreset_mode, **kwargs)
    torch_env = gym.make_vec(FORAGING, num_envs=num_envs, device="cpu", autoreset_mode=autoreset_mode, **kwargs)
    return numpy_env, torch_env


@pytest.mark.parametrize("kwargs", [SMALL, dict(layout="classic", max_ticks=50), dict(max_ticks=70)],
                         ids=["small-random", "classic", "default-random"])
def test_foraging_numpy_and_torch_cpu_agree_over_200_steps(kwargs):
    """Random actions (some invalid), autoreset, a partial reset and a paused subset: the same game."""
    numpy_env, torch_env = pair(12, **kwargs)
    obs_np, info_np = numpy_env.reset(seed=3)
    obs_t, info_t = torch_env.reset(seed=3)
    assert_same(obs_np, obs_t, "reset")
    assert_same(info_np, info_t, "reset info")
    rng = np.random.default_rng(0)
    ends = 0
    for step in range(200):
        actions = random_actions(numpy_env.single_action_space, rng, 12)
        if step == 90:  # a partial reset, half of the worlds with new seeds
            mask = np.arange(12) % 2 == 0
            obs_np, info_np = numpy_env.reset(seed=100, options={"reset_mask": mask})
            obs_t, info_t = torch_env.reset(seed=100, options={"reset_mask": torch.as_tensor(mask)})
            assert_same(obs_np, obs_t, "partial reset")
            assert_same(info_np, info_t, "partial reset info")
            continue
        active = rng.random(12) < 0.8 if 120 <= step < 130 else None
        out_np = numpy_env.step(actions, active)
        out_t = torch_env.step(actions, None if active is None else torch.as_tensor(active))
        for name, a, b in zip(("obs", "reward", "terminated", "truncated", "info"), out_np, out_t, strict=True):
            assert_same(a, b, f"step {step} {name}")
        ends += int(np.count_nonzero(out_np[2] | out_np[3]))
    assert ends >= 12  # autoreset ran, in every world


def test_foraging_same_step_autoreset_agrees():
    numpy_env, torch_env = pair(6, autoreset_mode="SameStep", **SMALL)
    numpy_env.reset(seed=5)
    torch_env.reset(seed=5)
    rng = np.random.default_rng(1)
    finals = 0
    for step in range(100):
        actions = random_actions(numpy_env.single_action_space, rng, 6)
        obs_np, r_np, te_np, tr_np, info_np = numpy_env.step(actions)
        obs_t, r_t, te_t, tr_t, info_t = torch_env.step(actions)
        assert_same(obs_np, obs_t, f"step {step}")
        assert_same((r_np, te_np, tr_np), (numpy_of(r_t), numpy_of(te_t), numpy_of(tr_t)))
        np.testing.assert_array_equal(numpy_of(info_t["_final_obs"]), info_np.get("_final_obs", np.zeros(6, bool)))
        for i in np.flatnonzero(info_np.get("_final_obs", np.zeros(6, bool))):
            assert_same(info_np["final_obs"][i], {k: v[i] for k, v in info_t["final_obs"].items()})
            assert_same({k: v[i] for k, v in info_np["final_info"].items() if not k.startswith("_")},
                        {k: v[i] for k, v in info_t["final_info"].items() if not k.startswith("_")})
            finals += 1
    assert finals >= 6


def test_torch_batch_is_batch_invariant_and_deterministic():
    """World i of a batch seeded s plays as a batch of one seeded s + i; the same seed, the same game."""
    big = gym.make_vec(FORAGING, num_envs=4, device="cpu", **SMALL)
    again = gym.make_vec(FORAGING, num_envs=4, device="cpu", **SMALL)
    singles = [gym.make_vec(FORAGING, num_envs=1, device="cpu", **SMALL) for _ in range(4)]
    obs = big.reset(seed=20)[0]
    assert_same(numpy_of(obs), again.reset(seed=20)[0])
    for i, env in enumerate(singles):
        assert_same({k: v[i:i + 1] for k, v in numpy_of(obs).items()}, env.reset(seed=20 + i)[0])
    rng = np.random.default_rng(2)
    for step in range(80):
        actions = random_actions(big.single_action_space, rng, 4)
        out, out_again = big.step(actions), again.step(actions)
        for a, b in zip(out, out_again, strict=True):
            assert_same(numpy_of(a), b, f"step {step}: determinism")
        for i, env in enumerate(singles):
            one = env.step({k: ({q: w[i:i + 1] for q, w in v.items()} if isinstance(v, dict) else v[i:i + 1])
                            for k, v in actions.items()})
            assert_same({k: v[i:i + 1] for k, v in numpy_of(out[0]).items()}, one[0], f"step {step}: world {i}")
            assert_same(numpy_of(out[1])[i:i + 1], one[1])


def test_counter_generator_is_pinned_and_the_same_for_a_world_and_a_batch():
    """Known values (a change of the generator changes every world: it must be deliberate), and
    one world's generator gives the rows of a batch's."""
    x = np.arange(4, dtype=np.int64)
    np.testing.assert_array_equal(hash32(np, x), [0, 1753845952, 3507691905, 1408362973])
    keys = world_keys(np, np.array([7, 8], np.int64), np.array([0, 0], np.int64))
    batch = uniforms(np, keys, 5)
    for row, seed in zip(batch, (7, 8), strict=True):
        np.testing.assert_array_equal(CounterGenerator(seed).random(5), row)
    assert batch.dtype == np.float32 and (batch >= 0).all() and (batch < 1).all()
    import array_api_compat.torch as xp_torch

    torch_keys = world_keys(xp_torch, torch.tensor([7, 8]), torch.tensor([0, 0]))
    np.testing.assert_array_equal(uniforms(xp_torch, torch_keys, 5).numpy(), batch)
    big = CounterGenerator(2**70 + 5)  # any Python int seeds: its low 64 bits key the world
    np.testing.assert_array_equal(big.random(3), CounterGenerator(5).random(3))


def test_the_dense_rules_run_on_array_api_strict():
    """The dense step, reset and observation name no library: they run on the strict namespace."""
    xps = pytest.importorskip("array_api_strict")
    from arena_envs.foraging import Foraging

    rules = Foraging(**SMALL)
    state = rules.init_state(3)
    for name, value in list(vars(state).items()):
        if name != "extra":
            setattr(state, name, xps.asarray(value))
    mask = xps.asarray([True, True, True])
    keys = world_keys(xps, xps.asarray([1, 2, 3], dtype=xps.int64), xps.asarray([0, 0, 0], dtype=xps.int64))
    rules.dense_reset(state, mask, keys)
    numpy_env = gym.make_vec(FORAGING, num_envs=3, rng="counter", **SMALL)
    obs_np, _ = numpy_env.reset(seed=1)
    obs = rules.dense_observe(state)
    for k in obs_np:
        np.testing.assert_allclose(np.asarray(obs[k]), obs_np[k], rtol=1e-6, atol=1e-6)
    from arena_envs.dense import decode

    rng = np.random.default_rng(3)
    for _ in range(30):
        actions = random_actions(numpy_env.single_action_space, rng, 3)
        reward, terminated, truncated = rules.dense_step(
            state, decode(actions, (3,), rules.action_space, rules.params, state.x))
        _, reward_np, *_ = numpy_env.step(actions)
        np.testing.assert_allclose(np.asarray(reward), reward_np, rtol=1e-6, atol=1e-6)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: device='cuda' works here")
def test_device_cuda_without_a_gpu_is_a_clear_error_at_construction():
    with pytest.raises(ValueError, match="needs a CUDA GPU.*device='cpu'"):
        gym.make_vec(FORAGING, num_envs=4, device="cuda")


def test_bad_device_and_workers_are_clear_errors():
    with pytest.raises(ValueError, match="device must be"):
        gym.make_vec(FORAGING, num_envs=4, device="tpu")
    with pytest.raises(ValueError, match="num_workers"):
        gym.make_vec(FORAGING, num_envs=4, device="cpu", num_workers=2)


def test_device_env_takes_tensor_actions_and_rejects_malformed_batches():
    env = gym.make_vec(FORAGING, num_envs=4, device="cpu", **SMALL)
    obs, _ = env.reset(seed=0)
    assert all(isinstance(v, torch.Tensor) for v in obs.values())
    assert env.observation_space["agent"].shape == (4, 7)  # the spaces stay Gymnasium's
    tool = torch.full((4,), 6)  # idle, as a tensor
    obs, reward, terminated, truncated, info = env.step({"tool": tool})
    assert reward.dtype == torch.float32 and terminated.dtype == torch.bool
    assert (obs["last_action"][:, 0] == 6).all() and (obs["last_action"][:, 1] == 0).all()
    obs, *_ = env.step({"tool": torch.full((4,), 1)})  # collect without its entry: INVALID_PARAMS
    assert (obs["last_action"][:, 1] == 4).all()
    with pytest.raises(ValueError, match="shape"):
        env.step({"tool": torch.zeros(3, dtype=torch.int64)})
    with pytest.raises(ValueError, match="numeric"):
        env.step({"tool": torch.zeros(4, dtype=torch.bool)})
    with pytest.raises(ValueError, match="unknown action keys"):
        env.step({"tool": tool, "fly": tool})


TEAM = dict(agents_per_team=2, num_obstacles=4, max_cycles=60, half_size=12.0, capture_ticks=5,
            message_drop_prob=0.3, spawn_distance=8.0,
            capture_points=((-6.0, -6.0), (6.0, -6.0), (0.0, 0.0), (-6.0, 6.0), (6.0, 6.0)))


def team_actions(env, rng: np.random.Generator) -> dict:
    """Random (B, A) actions of every agent, many of them messages and moves to the points."""
    B, A = env.num_envs, len(env.agents)
    flat = random_actions(env.scenario.action_space, rng, B * A)
    out = {k: (v.reshape(B, A, *v.shape[1:]) if not isinstance(v, dict)
               else {q: w.reshape(B, A, *w.shape[1:]) for q, w in v.items()}) for k, v in flat.items()}
    out["tool"] = rng.choice([0, 0, 0, 5, 5, 3, 6, 1, 2], size=(B, A))
    out["move_to"][..., :2] = rng.choice([-6.0, 0.0, 6.0], size=(B, A, 2)) + rng.normal(0, 1, (B, A, 2))
    return out


@pytest.mark.parametrize("kwargs", [TEAM, dict(TEAM, num_obstacles=0, agents_per_team=3)], ids=["2v2-obstacles", "3v3"])
def test_team_capture_numpy_and_torch_cpu_agree_over_200_steps(kwargs):
    from arena_envs import team_capture_v0

    numpy_env = team_capture_v0.vector_env(num_envs=8, rng="counter", **kwargs)
    torch_env = team_capture_v0.vector_env(num_envs=8, device="cpu", **kwargs)
    assert_same(numpy_env.reset(seed=11), torch_env.reset(seed=11), "reset")
    rng = np.random.default_rng(4)
    captures = delivered = ends = 0
    for step in range(200):
        actions = team_actions(numpy_env, rng)
        if step == 100:
            mask = np.arange(8) % 3 == 0
            assert_same(numpy_env.reset(seed=50, options={"reset_mask": mask}),
                        torch_env.reset(seed=50, options={"reset_mask": torch.as_tensor(mask)}), "partial reset")
            continue
        out_np, out_t = numpy_env.step(actions), torch_env.step(actions)
        for name, a, b in zip(("obs", "reward", "terminated", "truncated", "info"), out_np, out_t, strict=True):
            assert_same(a, b, f"step {step} {name}")
        captures += int(np.count_nonzero(out_np[4]["blue_points"] + out_np[4]["red_points"]))
        delivered += int(np.count_nonzero(out_np[0]["messages"][..., 0] * (out_np[0]["messages"][..., 2] == 0)))
        ends += int(np.count_nonzero(out_np[2][:, 0] | out_np[3][:, 0]))
    assert captures and delivered and ends >= 8  # points changed hands, messages arrived, worlds restarted
