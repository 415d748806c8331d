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


def assert_invariant(big, again, singles, actions_of, steps: int, rng: np.random.Generator) -> None:
    """Step ``big`` and ``again`` (the same seed) and ``singles`` (world i alone, seeded s + i) with the
    same actions: ``again`` gives the same results, and world i of ``big`` what ``singles[i]`` gives."""
    for step in range(steps):
        actions = actions_of(big, rng)
        out, out_again = big.step(actions), again.step(actions)
        assert_same(numpy_of(out), out_again, f"step {step}: determinism")
        for i, env in enumerate(singles):
            one = env.step({k: ({q: w[i:i + 1] for q, w in v.items()} if isinstance(v, dict) else v[i:i + 1])
                            for k, v in actions.items()})
            assert_same({k: v[i:i + 1] for k, v in numpy_of(out[0]).items()}, one[0], f"step {step}: world {i}")
            assert_same(numpy_of(out[1])[i:i + 1], one[1])


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
    assert_invariant(big, again, singles, lambda env, rng: random_actions(env.single_action_space, rng, 4), 80,
                     np.random.default_rng(2))


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
    with pytest.raises(ValueError, match="bool array of shape"):
        env.step({"tool": tool}, torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="reset_mask"):
        env.reset(options={"reset_mask": torch.ones(4)})
    with pytest.raises(gym.error.Error, match="Seed must be"):  # as the numpy env says it
        env.reset(seed=-1)
    obs, *_ = env.step({"tool": tool})  # the env is as good as before
    assert (obs["last_action"][:, 0] == 6).all()


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
        active = rng.random(8) < 0.7 if 150 <= step < 160 else None  # some worlds pause (a league's learner)
        out_np = numpy_env.step(actions, active)
        out_t = torch_env.step(actions, None if active is None else torch.as_tensor(active))
        for name, a, b in zip(("obs", "reward", "terminated", "truncated", "info"), out_np, out_t, strict=True):
            assert_same(a, b, f"step {step} {name}")
        captures += int(np.count_nonzero(out_np[4]["blue_points"] + out_np[4]["red_points"]))
        delivered += int(np.count_nonzero(out_np[0]["messages"][..., 0] * (out_np[0]["messages"][..., 2] == 0)))
        ends += int(np.count_nonzero(out_np[2][:, 0] | out_np[3][:, 0]))
    assert captures and delivered and ends >= 8  # points changed hands, messages arrived, worlds restarted


# -- Crafting: the crafting rules of arena_envs.dense against arena_envs.tick ---------------------

CRAFTING = "arena_envs/Crafting-v0"
# short crafts, one of them making two items, so that many start and finish within 200 steps
QUICK_RECIPES = (
    ("iron_ingot", {"iron_ore": 1, "coal": 1}, "furnace", 3),
    ("iron_rod", {"iron_ingot": 1}, "anvil", 2),
    ("plank", {"wood": 1}, "workbench", 2, "plank", 2),
    ("wooden_handle", {"plank": 2}, "workbench", 1),
    ("iron_sword", {"iron_rod": 2, "wooden_handle": 1}, "anvil", 4),  # a second rod: no intermediate reward
    ("torch", {"wood": 1, "stone": 1}, "workbench", 1),
)
QUICK_CRAFTING = dict(layout="random", half_size=10.0, max_ticks=70, recipes=QUICK_RECIPES, inventory_capacity=5,
                      resource_counts=(("iron_ore", 2), ("coal", 2), ("wood", 3), ("stone", 2)),
                      station_counts=(("anvil", 1), ("furnace", 1), ("workbench", 2)))
CRAFT_TOOL = 2  # TOOL_NAMES.index("craft")


def crafting_actions(env, crafter, obs: dict, rng: np.random.Generator, scripted_share: float = 0.7) -> dict:
    """The scripted crafter's actions (it walks, collects and crafts the goal's chain) in most worlds,
    random ones elsewhere: many crafts, also of what the chain does not need, while busy, at the
    wrong station or with broken rows."""
    n, recipes, state, st = env.num_envs, env.scenario.recipes, env.state, env.scenario.slots.st
    planned = crafter.act(obs)
    noise = random_actions(env.single_action_space, rng, n)
    noise["tool"] = rng.choice([0, 1, 2, 2, 2, 3, 6], size=n)
    # half of the random crafts: a recipe the inventory holds, at the nearest station of its type
    held = obs["craftable"] > 0
    recipe = np.where(held.any(1), (held * rng.random(held.shape)).argmax(1), noise["craft"][:, 0])
    right_kind = state.ent_kind[:, st] == recipes.station[recipe][:, None]
    far = np.where(right_kind, np.hypot(state.ent_x[:, st] - state.x, state.ent_z[:, st] - state.z), np.inf)
    sensible = rng.random(n) < 0.5
    noise["craft"][sensible] = np.stack([recipe, far.argmin(1)], 1)[sensible]
    noise["craft"][rng.random(n) < 0.1, 1] = 99  # no such station row: INVALID_PARAMS
    # and half of the random walks and collects: to the nearest resource left, whatever the chain needs
    res = env.scenario.slots.res
    near = np.where(state.ent_alive[:, res], np.hypot(state.ent_x[:, res] - state.x, state.ent_z[:, res] - state.z),
                    np.inf).argmin(1)
    rows = np.arange(n)
    sensible = rng.random(n) < 0.5
    noise["collect"] = np.where(sensible, near, noise["collect"])
    noise["move_to"][sensible, 0] = state.ent_x[rows, near][sensible]
    noise["move_to"][sensible, 1] = state.ent_z[rows, near][sensible]
    scripted = rng.random(n) < scripted_share
    out = {}
    for key, value in planned.items():
        if isinstance(value, dict):
            out[key] = {q: np.where(scripted.reshape(-1, *[1] * (w.ndim - 1)), w, noise[key][q])
                        for q, w in value.items()}
        else:
            out[key] = np.where(scripted.reshape(-1, *[1] * (value.ndim - 1)), value, noise[key])
    return out


def with_carry_on(numpy_env, torch_env, actions: dict, rng: np.random.Generator):
    """``actions`` decoded by each env, with no new command (NO_TOOL, as the tool layer sends) in some worlds."""
    from arena_envs.world import NO_TOOL

    carry = rng.random(numpy_env.num_envs) < 0.15
    decoded, on_device = numpy_env.decode(actions), torch_env.decode(actions)
    decoded.tool[carry, 0] = NO_TOOL
    on_device.tool = torch.where(torch.as_tensor(carry)[:, None], NO_TOOL, on_device.tool)
    return decoded, on_device


@pytest.mark.parametrize("kwargs", [dict(layout="classic", max_ticks=80), QUICK_CRAFTING],
                         ids=["classic", "random-quick-recipes"])
def test_crafting_numpy_and_torch_cpu_agree_over_200_steps(kwargs):
    """Crafts started, refused (every check) and finished, autoreset, a partial reset and a paused
    subset: numpy's sparse rules and the dense ones on torch play the same game."""
    from arena_envs.scripted import ScriptedCrafter

    B = 12
    numpy_env = gym.make_vec(CRAFTING, num_envs=B, rng="counter", **kwargs)
    torch_env = gym.make_vec(CRAFTING, num_envs=B, device="cpu", **kwargs)
    crafter = ScriptedCrafter(numpy_env.scenario.params)
    obs_np, info_np = numpy_env.reset(seed=7)
    obs_t, info_t = torch_env.reset(seed=7)
    assert isinstance(obs_t["crafting"], torch.Tensor)
    assert_same(obs_np, obs_t, "reset")
    assert_same(info_np, info_t, "reset info")
    rng = np.random.default_rng(5)
    codes, started, finished, ends = set(), 0, 0, 0
    for step in range(200):
        act_np, act_t = with_carry_on(numpy_env, torch_env, crafting_actions(numpy_env, crafter, obs_np, rng), rng)
        if step == 90:  # a partial reset, half of the worlds with new seeds
            mask = np.arange(B) % 2 == 1
            obs_np, info_np = numpy_env.reset(seed=300, options={"reset_mask": mask})
            obs_t, info_t = torch_env.reset(seed=300, options={"reset_mask": torch.as_tensor(mask)})
            assert_same(obs_np, obs_t, "partial reset")
            assert_same(info_np, info_t, "partial reset info")
            continue
        active = rng.random(B) < 0.7 if 130 <= step < 145 else None
        before = info_np["items_crafted"]
        out_np = numpy_env.step(act_np, active)
        out_t = torch_env.step(act_t, None if active is None else torch.as_tensor(active))
        for name, a, b in zip(("obs", "reward", "terminated", "truncated", "info"), out_np, out_t, strict=True):
            assert_same(a, b, f"step {step} {name}")
        obs_np, info_np = out_np[0], out_np[4]
        crafting = obs_np["last_action"][:, 0] == CRAFT_TOOL
        codes |= set(obs_np["last_action"][crafting, 1].tolist())
        started += int(np.count_nonzero(crafting & (obs_np["last_action"][:, 1] == 0)))
        finished += int(np.sum(np.maximum(info_np["items_crafted"] - before, 0)))
        ends += int(np.count_nonzero(out_np[2] | out_np[3]))
    # not vacuous: crafts began and delivered, and every refusal of craft was met
    assert started >= 10 and finished >= 10, (started, finished)
    assert {0, 1, 2, 3, 4, 5} <= codes, codes  # OK, OUT_OF_RANGE, NOT_FOUND, MISSING_MATERIALS, INVALID, BUSY
    assert ends >= B  # autoreset ran


def test_crafting_goal_and_same_step_autoreset_agree():
    """Quick recipes played to the goal: the sword's reward, termination, score and the final
    infos of SAME_STEP autoreset, the same on both backends."""
    from arena_envs.scripted import ScriptedCrafter

    B = 8
    kwargs = dict(QUICK_CRAFTING, half_size=7.0, max_ticks=150)
    numpy_env = gym.make_vec(CRAFTING, num_envs=B, rng="counter", autoreset_mode="SameStep", **kwargs)
    torch_env = gym.make_vec(CRAFTING, num_envs=B, device="cpu", autoreset_mode="SameStep", **kwargs)
    crafter = ScriptedCrafter(numpy_env.scenario.params)
    obs_np, _ = numpy_env.reset(seed=21)
    torch_env.reset(seed=21)
    rng = np.random.default_rng(6)
    goals = 0
    for step in range(200):
        actions = crafting_actions(numpy_env, crafter, obs_np, rng, scripted_share=0.9)
        obs_np, r_np, te_np, tr_np, info_np = numpy_env.step(actions)
        obs_t, r_t, te_t, tr_t, info_t = torch_env.step(actions)
        assert_same(obs_np, obs_t, f"step {step}")
        assert_same((r_np, te_np, tr_np), (numpy_of(r_t), numpy_of(te_t), numpy_of(tr_t)), f"step {step}")
        ended = info_np.get("_final_obs", np.zeros(B, bool))
        np.testing.assert_array_equal(numpy_of(info_t["_final_obs"]), ended)
        now = {k: v for k, v in info_np.items() if "final_" not in k}
        assert_same(now, {k: v for k, v in info_t.items() if "final_" not in k}, f"step {step} info")
        for i in np.flatnonzero(ended):
            assert_same({k: v[i] for k, v in info_np["final_info"].items() if not k.startswith("_")},
                        {k: v[i] for k, v in info_t["final_info"].items() if not k.startswith("_")})
        goals += int(np.count_nonzero(te_np))
    assert goals >= 5, goals  # the sword made, its reward paid and the world restarted


def test_dense_crafting_matches_tick_with_two_agents_at_the_stations():
    """Two agents a world by the stations with random inventories: a station taken by the other agent
    (BUSY), both starting at one station in a tick (the lower index wins), crafts and their outputs,
    every array after every tick the same (what the one-agent scenario cannot reach)."""
    from arena_envs import dense, tick
    from arena_envs.actions import decode_actions
    from arena_envs.crafting import Crafting
    from arena_envs.device_batch import state_to
    from arena_envs.world import WorldState

    B, A = 32, 2
    rules = Crafting(**dict(QUICK_CRAFTING, inventory_capacity=25))
    p, recipes, S = rules.params, rules.recipes, rules.slots.stations
    s = WorldState.zeros(B, A, rules.slots, 0, len(p.item_names))
    rules.reset(s, np.arange(B), [CounterGenerator(i) for i in range(B)])
    rng = np.random.default_rng(8)
    st = rules.slots.st
    home = rng.integers(0, S, (B, A))  # each agent next to a station, in half of the worlds the same one
    home[:B // 2, 1] = home[:B // 2, 0]
    s.x[:] = s.ent_x[np.arange(B)[:, None], st.start + home] + rng.uniform(-1.5, 1.5, (B, A)).astype(np.float32)
    s.z[:] = s.ent_z[np.arange(B)[:, None], st.start + home] + rng.uniform(-1.5, 1.5, (B, A)).astype(np.float32)
    s.target_x[:], s.target_z[:] = s.x, s.z
    s.inventory[:] = rng.integers(0, 3, s.inventory.shape)
    t = state_to(s, "cpu")
    space = rules.action_space
    lost = busy_other = started = finished = 0
    killed = False
    for step in range(60):
        if step % 10 == 0:  # new materials now and then, on both sides alike
            s.inventory += (rng.random(s.inventory.shape) < 0.3).astype(np.int32)
            t.inventory = torch.as_tensor(s.inventory.copy())
        if step >= 30 and not killed and np.count_nonzero(s.craft_left[:, 1] > 0) >= 2:
            killed = True  # some die, in the middle of a craft: a dead agent's craft stops
            s.alive[(s.craft_left[:, 1] > 0) | (rng.random(B) < 0.2), 1] = False
            t.alive = torch.as_tensor(s.alive.copy())
        actions = random_actions(space, rng, B * A)
        actions = {k: ({q: w.reshape(B, A, *w.shape[1:]) for q, w in v.items()} if isinstance(v, dict)
                       else v.reshape(B, A, *v.shape[1:])) for k, v in actions.items()}
        actions["tool"] = rng.choice([2, 2, 2, 2, 6, 0, 1], size=(B, A))
        near = np.stack([s.ent_x[np.arange(B)[:, None], st.start + home],  # walks stay by the home station
                         s.ent_z[np.arange(B)[:, None], st.start + home]], -1)
        actions["move_to"][..., :2] = near + rng.uniform(-2.5, 2.5, (B, A, 2))
        station = np.where(rng.random((B, A)) < 0.8, home, rng.integers(0, S, (B, A)))
        same = rng.random(B) < 0.5  # both agents at the first one's station
        station[same, 1] = station[same, 0]
        kind = s.ent_kind[np.arange(B)[:, None], st.start + station]
        fits = ((s.inventory[:, :, None, :] >= recipes.inputs).all(-1)  # (B, A, K): carried and of the station's type
                & (recipes.station == kind[..., None]))
        actions["craft"][..., 0] = np.where(fits.any(-1) & (rng.random((B, A)) < 0.8), fits.argmax(-1),
                                            rng.integers(0, recipes.size, (B, A)))
        actions["craft"][..., 1] = station
        act_np = decode_actions(actions, (B, A), space, p)
        act_t = dense.decode(actions, (B, A), space, p, t.x)
        working = (s.craft_left > 0).copy()
        ev_np = tick.apply_tools(p, rules.slots, s, act_np, recipes)
        ev_t = dense.apply_tools(p, rules.slots, t, act_t, recipes)
        code, tool = s.last_code, s.last_tool
        lost += int(np.count_nonzero((tool[:, 1] == 2) & (code[:, 1] == 5) & ~working.any(1)
                                     & (ev_np.craft_started[:, 0] >= 0)))
        busy_other += int(np.count_nonzero((tool == 2) & (code == 5) & ~working & working[:, ::-1]))
        tick.advance(p, rules.slots, s, ev_np, recipes)
        dense.advance(p, rules.slots, t, ev_t, recipes)
        started += int(np.count_nonzero(ev_np.craft_started >= 0))
        finished += int(np.count_nonzero(ev_np.crafted >= 0))
        for name in vars(ev_np):
            assert_same(getattr(ev_np, name), getattr(ev_t, name), f"step {step} events.{name}")
        for name, value in vars(s).items():
            if name != "extra":
                assert_same(value, getattr(t, name), f"step {step} state.{name}")
    assert killed
    assert lost >= 3 and busy_other >= 3 and started >= 50 and finished >= 50, (lost, busy_other, started, finished)


def test_the_dense_crafting_rules_run_on_array_api_strict():
    """Crafting's dense reset, step, observation and info name no library: with crafts under way
    they run on the strict namespace and give numpy's values."""
    xps = pytest.importorskip("array_api_strict")
    from arena_envs.crafting import Crafting
    from arena_envs.dense import decode
    from arena_envs.scripted import ScriptedCrafter

    B = 4
    rules = Crafting(**QUICK_CRAFTING)
    state = rules.init_state(B)
    for name, value in list(vars(state).items()):
        if name != "extra":
            setattr(state, name, xps.asarray(value))
    state.extra = {k: xps.asarray(v) for k, v in state.extra.items()}
    keys = world_keys(xps, xps.asarray(list(range(B)), dtype=xps.int64), xps.zeros(B, dtype=xps.int64))
    rules.dense_reset(state, xps.ones(B, dtype=xps.bool), keys)
    numpy_env = gym.make_vec(CRAFTING, num_envs=B, rng="counter", **QUICK_CRAFTING)
    obs_np, _ = numpy_env.reset(seed=0)
    crafter = ScriptedCrafter(numpy_env.scenario.params)
    rng = np.random.default_rng(9)
    crafted = 0
    for step in range(60):
        assert_same(obs_np, {k: np.asarray(v) for k, v in rules.dense_observe(state).items()}, f"step {step}")
        actions = crafting_actions(numpy_env, crafter, obs_np, rng, scripted_share=0.9)
        out = rules.dense_step(state, decode(actions, (B,), rules.action_space, rules.params, state.x))
        obs_np, *out_np, info_np = numpy_env.step(actions)
        assert_same(tuple(out_np), tuple(np.asarray(v) for v in out), f"step {step}")
        assert_same(info_np, {k: np.asarray(v) for k, v in rules.dense_info(state).items()} | {
            "_" + k: np.ones(B, bool) for k in rules.dense_info(state)}, f"step {step} info")
        crafted += int(np.sum(info_np["items_crafted"] > 0))
    assert crafted  # crafts were made on the strict namespace
    classic = Crafting(layout="classic")  # its layout is constants: the same on every backend
    state = classic.init_state(B)
    for name, value in list(vars(state).items()):
        if name != "extra":
            setattr(state, name, xps.asarray(value))
    state.extra = {k: xps.asarray(v) for k, v in state.extra.items()}
    classic.dense_reset(state, xps.ones(B, dtype=xps.bool), keys)
    obs_np, _ = gym.make_vec(CRAFTING, num_envs=B, layout="classic").reset(seed=0)
    assert_same(obs_np, {k: np.asarray(v) for k, v in classic.dense_observe(state).items()}, "classic")


def test_the_readmes_device_snippet_runs_here():
    """The README's ``device=`` example, at 64 worlds instead of 65,536 (on the CPU here)."""
    import re
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    blocks = [b for b in re.findall(r"```python\n(.*?)```", readme, re.S) if "device=device" in b]
    assert len(blocks) == 1
    namespace: dict = {"gym": gym}
    exec(blocks[0].replace("65536", "64"), namespace)  # noqa: S102 (our own README)
    assert namespace["obs"]["agent"].device == torch.device(namespace["device"])
    assert (namespace["obs"]["last_action"][:, 0] == 6).all()  # everyone idled, as asked


def test_torch_team_capture_is_batch_invariant_and_deterministic():
    """World i of a batch seeded s plays as a batch of one seeded s + i, messages and drops included."""
    from arena_envs import team_capture_v0

    big, again = (team_capture_v0.vector_env(num_envs=3, device="cpu", **TEAM) for _ in range(2))
    singles = [team_capture_v0.vector_env(num_envs=1, device="cpu", **TEAM) for _ in range(3)]
    assert_same(numpy_of(big.reset(seed=40)), again.reset(seed=40))
    for i, env in enumerate(singles):
        env.reset(seed=40 + i)
    assert_invariant(big, again, singles, team_actions, 80, np.random.default_rng(5))
