"""The flat encoding of observations and tool actions (arena_envs.wrappers.flatten)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from conftest import TOOLS, World, assert_tree_equal, make_single, make_vec, policy_actions
from crafting_helpers import STATIONS, CraftWorld

from arena_envs import team_capture_v0
from arena_envs.world import COLLECT, MOVE_TO, NOT_FOUND, OUT_OF_RANGE, SEND_MESSAGE, TOOL_NAMES
from arena_envs.wrappers import FlatEncoding, FlatEnv
from arena_envs.wrappers.flatten import merge_agents, split_agents

STATIONS_KINDS = {name: k for k, name in enumerate(STATIONS)}
ALL_TOOLS = dict(directions=8, step=5.0, speeds=(1.0, 2.0), targets=4)


def visited_observations(batches: int = 6, worlds: int = 32, seed: int = 0):
    """Raw observation batches along seeded trajectories (queries, moves, collects, hazards)."""
    envs = make_vec(worlds)
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    seen = []
    for t in range(batches * 8):
        obs, *_ = envs.step(policy_actions(rng, obs))
        if t % 8 == 7:
            seen.append(obs)
    envs.close()
    return envs, seen


def shown_count(obs) -> np.ndarray:
    table = obs["resources"]
    return ((table[..., 0] > 0) | (table[..., 1] > 0)).sum(1)


def canonical(enc: FlatEncoding, flat: np.ndarray, obs) -> np.ndarray:
    """What encode(decode(flat)) must give: unused components 0, a move to an unshown target
    read as the first unshown one."""
    want = np.zeros_like(flat)
    tool = enc.tool_ids[flat[:, 0]]
    want[:, 0] = flat[:, 0]
    c = enc.components.index
    moving = tool == MOVE_TO
    move = flat[:, c("move")]
    first_unshown = enc.directions + shown_count(obs)
    want[:, c("move")] = np.where(moving, np.where(move >= first_unshown, first_unshown, move), 0)
    want[:, c("speed")] = np.where(moving, flat[:, c("speed")], 0)
    want[:, c("collect")] = np.where(tool == COLLECT, flat[:, c("collect")], 0)
    want[:, c("token")] = np.where(tool == SEND_MESSAGE, flat[:, c("token")], 0)
    return want


def test_decode_then_encode_is_exact_on_visited_states():
    envs, seen = visited_observations()
    enc = FlatEncoding.for_env(envs, **ALL_TOOLS)
    assert enc.components == ("tool", "move", "speed", "collect", "recipe", "station", "token")
    rng = np.random.default_rng(1)
    room = enc.params.half_size - enc.params.agent_radius
    checked = 0
    for obs in seen:
        for _ in range(20):
            flat = rng.integers(0, enc.action_space.nvec, (len(obs["agent"]), len(enc.components)))
            structured = enc.decode(flat, obs)
            assert envs.action_space.contains(structured)
            again = enc.encode(structured, obs)
            assert_tree_equal(enc.decode(again, obs), structured)
            # away from the walls no two flat actions decode alike
            inside = (np.abs(obs["agent"][:, :2]) < room).all(1)
            np.testing.assert_array_equal(again[inside], canonical(enc, flat, obs)[inside])
            checked += inside.sum()
    assert checked > 1000


def test_direction_moves_walk_step_units_that_way():
    w = World(num_envs=1, resources=1, hazards=0, obstacles=0)
    w.resource(0, 0, -20.0, -20.0)  # a world without resources is over
    enc = FlatEncoding.for_env(w.envs, **ALL_TOOLS)
    obs, *_ = w.step()
    for d in range(8):
        flat = np.zeros((1, len(enc.components)), np.int64)
        flat[0, :2] = [TOOL_NAMES.index("move_to"), d]
        target = enc.decode(flat, obs)["move_to"][0]
        angle = 2 * np.pi * d / 8
        np.testing.assert_allclose(target, [5 * np.cos(angle), 5 * np.sin(angle), 1.0], atol=1e-5)
    flat[0, 1] = 2  # +z
    obs, *_ = w.step(enc.decode(flat, obs))
    assert obs["agent"][0, 0] == pytest.approx(0.0, abs=1e-6) and obs["agent"][0, 1] == pytest.approx(0.5)


def test_direction_moves_are_shortened_along_the_ray_at_the_wall():
    w = World(num_envs=1, resources=1, hazards=0, obstacles=0)
    w.agent(0, 22.0, -23.0)
    w.resource(0, 0, -20.0, 20.0)
    enc = FlatEncoding.for_env(w.envs, **ALL_TOOLS)
    obs, *_ = w.step()
    room = w.params.half_size - w.params.agent_radius
    for d in range(8):
        flat = np.zeros((1, len(enc.components)), np.int64)
        flat[0, :2] = [TOOL_NAMES.index("move_to"), d]
        tx, tz, _ = enc.decode(flat, obs)["move_to"][0]
        dx, dz = tx - 22.0, tz + 23.0
        assert max(abs(tx), abs(tz)) <= room + 1e-5
        assert 0 < np.hypot(dx, dz) <= 5 + 1e-5
        angle = 2 * np.pi * d / 8
        assert dx * np.sin(angle) - dz * np.cos(angle) == pytest.approx(0, abs=1e-5)  # still on the ray
    flat[0, 1] = 0  # +x: 2.5 units of room left
    assert enc.decode(flat, obs)["move_to"][0, 0] == pytest.approx(room)


def test_collect_and_move_address_the_nearest_shown_resources():
    w = World(num_envs=1, resources=4, hazards=0, obstacles=0)
    w.resource(0, 0, 1.9, 0.0)
    w.resource(0, 1, -1.0, 0.0)
    w.resource(0, 2, 0.0, 5.0)
    w.resource(0, 3, 5.0, 24.0)  # out of sight, never shown
    enc = FlatEncoding.for_env(w.envs, **ALL_TOOLS)
    obs, *_ = w.step()
    c = enc.components.index
    # the encoded table lists the shown rows nearest first
    table = FlatEncoding.for_env(w.envs, dict_obs=True).observe(obs)["resources"][0].reshape(4, 8)
    np.testing.assert_allclose(table[:, 4], [0.1, 0.19, 0.5, 0.0], atol=1e-6)

    flat = np.zeros((1, len(enc.components)), np.int64)
    flat[0, c("tool")], flat[0, c("move")] = TOOL_NAMES.index("move_to"), 8 + 2
    np.testing.assert_allclose(enc.decode(flat, obs)["move_to"][0, :2], [0.0, 5.0], atol=1e-6)
    flat[0, c("move")] = 8 + 3  # only three are shown: the fourth nearest means "stay"
    np.testing.assert_array_equal(enc.decode(flat, obs)["move_to"][0, :2], obs["agent"][0, :2])

    flat[0, c("tool")], flat[0, c("collect")] = TOOL_NAMES.index("collect"), 0
    assert enc.decode(flat, obs)["collect"][0] == 1
    obs, reward, *_ = w.step(enc.decode(flat, obs))
    assert reward[0] == 1.0 and not w.state.ent_alive[0, 1] and w.state.ent_alive[0, 0]
    flat[0, c("collect")] = 3  # an unshown row: the env refuses it
    obs, reward, *_ = w.step(enc.decode(flat, obs))
    assert reward[0] == 0.0 and obs["last_action"][0, 1] in (OUT_OF_RANGE, NOT_FOUND)


@pytest.mark.parametrize("dict_obs", [False, True])
def test_encoded_observations_lie_in_the_space_and_tables_are_nearest_first(dict_obs):
    envs, seen = visited_observations(batches=3)
    enc = FlatEncoding.for_env(envs, dict_obs=dict_obs)
    for obs in seen:
        encoded = enc.observe(obs)
        for b in range(len(obs["agent"])):
            row = {k: v[b] for k, v in encoded.items()} if dict_obs else encoded[b]
            assert enc.observation_space.contains(row)
        for key in ("resources", "hazards"):
            raw = obs[key]
            table = encoded[key].reshape(raw.shape) if dict_obs else None
            ordered = np.take_along_axis(raw, enc.row_order(raw, key)[..., None], 1)
            shown = (ordered[..., 0] > 0) | (ordered[..., 1] > 0)
            assert (np.diff(shown.astype(int), axis=1) <= 0).all()  # shown rows first
            dist = np.where(shown, ordered[..., 4], 1e9)
            assert (np.diff(dist, axis=1)[shown[:, 1:]] >= 0).all()  # nearest first
            if dict_obs:
                np.testing.assert_allclose(table[..., 4], ordered[..., 4] / 10.0, rtol=1e-6)


def test_encode_rejects_actions_the_encoding_cannot_express():
    envs, seen = visited_observations(batches=1, worlds=2)
    enc = FlatEncoding.for_env(envs, tools=("move_to", "collect", "query_world", "idle"), speeds=(1.0,))
    obs = seen[0]
    base = enc.decode(np.zeros((2, len(enc.components)), np.int64), obs)
    for change in (lambda a: a["tool"].__setitem__(0, TOOLS["craft"]),
                   lambda a: a["move_to"].__setitem__(0, (3.3, 1.1, 1.0)),
                   lambda a: a["move_to"].__setitem__((0, 2), 1.5),
                   lambda a: (a["tool"].__setitem__(0, TOOLS["query_world"]),
                              a["query_world"]["radius"].__setitem__(0, 10.0))):
        action = {k: ({kk: vv.copy() for kk, vv in v.items()} if isinstance(v, dict) else v.copy())
                  for k, v in base.items()}
        change(action)
        with pytest.raises(ValueError, match="flat encoding"):
            enc.encode(action, obs)


def test_decode_rejects_malformed_flat_actions():
    envs, seen = visited_observations(batches=1, worlds=2)
    enc = FlatEncoding.for_env(envs)
    with pytest.raises(ValueError, match="shape"):
        enc.decode(np.zeros((3, len(enc.components)), np.int64), seen[0])
    bad = np.zeros((2, len(enc.components)), np.int64)
    bad[1, 0] = enc.action_space.nvec[0]
    with pytest.raises(ValueError, match="lie in"):
        enc.decode(bad, seen[0])
    with pytest.raises(ValueError, match="tools"):
        FlatEncoding.for_env(envs, tools=("fly",))


def test_flat_env_steps_exactly_like_the_raw_env_given_the_decoded_action():
    flat_env, raw_env = FlatEnv(make_single(), **ALL_TOOLS), make_single()
    flat_obs, _ = flat_env.reset(seed=4)
    raw_obs, _ = raw_env.reset(seed=4)
    flat_env.action_space.seed(4)
    enc = flat_env.encoding
    for _ in range(300):
        np.testing.assert_array_equal(flat_obs, enc.observe({k: np.asarray(v)[None] for k, v in raw_obs.items()})[0])
        action = flat_env.action_space.sample()
        structured = enc.decode(action[None], {k: np.asarray(v)[None] for k, v in raw_obs.items()})
        flat_obs, flat_r, flat_te, flat_tr, flat_info = flat_env.step(action)
        raw_obs, raw_r, raw_te, raw_tr, raw_info = raw_env.step({k: (v[0] if not isinstance(v, dict) else
                                                                    {kk: vv[0] for kk, vv in v.items()})
                                                                for k, v in structured.items()})
        assert (flat_r, flat_te, flat_tr, flat_info) == (raw_r, raw_te, raw_tr, raw_info)
        if flat_te or flat_tr:
            break


def test_crafting_moves_by_kind_and_crafts_at_the_nearest_station_of_the_recipes_type():
    w = CraftWorld(num_envs=1)  # classic stations: Anvil (5, -5), Furnace (5, 0), Workbench (5, 5)
    w.resource(0, 0, -6.0, 0.0, "iron_ore")
    w.resource(0, 1, 0.0, 3.0, "coal")
    w.resource(0, 2, -2.0, 0.0, "iron_ore")
    enc = FlatEncoding.for_env(w.envs, tools=("move_to", "collect", "craft"), targets_by_kind=True)
    assert enc.components == ("tool", "move", "speed", "collect", "recipe")  # the station follows the recipe
    assert enc.move_targets == {"resources": 5, "stations": 3}  # a kind each: ore, coal, wood, stone, berry; stations
    obs, *_ = w.step()
    c = enc.components.index

    def decoded(tool, **parts):
        flat = np.zeros((1, len(enc.components)), np.int64)
        flat[0, 0] = enc.tools.index(tool)
        for name, value in parts.items():
            flat[0, c(name)] = value
        return enc.decode(flat, obs)

    np.testing.assert_allclose(decoded("move_to", move=8 + 0)["move_to"][0, :2], [-2.0, 0.0])  # the nearer ore
    np.testing.assert_allclose(decoded("move_to", move=8 + 1)["move_to"][0, :2], [0.0, 3.0])  # coal
    np.testing.assert_array_equal(decoded("move_to", move=8 + 2)["move_to"][0, :2], [0.0, 0.0])  # no wood: stay
    np.testing.assert_allclose(decoded("move_to", move=8 + 5 + 1)["move_to"][0, :2], [5.0, 0.0])  # the furnace
    slots = w.slots.st.start
    furnace, anvil = (int(np.flatnonzero(w.state.ent_kind[0, slots:slots + 3] == STATIONS_KINDS[s])[0])
                      for s in ("furnace", "anvil"))
    assert decoded("craft", recipe=0)["craft"][0].tolist() == [0, furnace]  # iron_ingot at the furnace
    assert decoded("craft", recipe=1)["craft"][0].tolist() == [1, anvil]  # iron_rod at the anvil
    for action in (decoded("craft", recipe=3), decoded("move_to", move=8 + 5 + 2), decoded("collect", collect=1)):
        assert_tree_equal(enc.decode(enc.encode(action, obs), obs), action)
    wrong = decoded("craft", recipe=0)
    wrong["craft"][0, 1] = anvil
    with pytest.raises(ValueError, match="station"):
        enc.encode(wrong, obs)


@pytest.mark.parametrize("scenario", ["crafting", "team_capture"])
def test_decode_then_encode_is_exact_in_the_other_scenarios(scenario):
    if scenario == "crafting":
        envs = gym.make_vec("arena_envs/Crafting-v0", num_envs=16, layout="random")
        enc = FlatEncoding.for_env(envs, targets_by_kind=True)
        agents = None
    else:
        envs = team_capture_v0.vector_env(num_envs=4, agents_per_team=2)
        enc = FlatEncoding.for_env(envs)
        agents = 4
    assert "move" in enc.components and enc.move_targets
    rng = np.random.default_rng(0)
    obs, _ = envs.reset(seed=0)
    for _ in range(60):
        rows = merge_agents(obs, agents)
        flat = rng.integers(0, enc.action_space.nvec, (len(rows["agent"]), len(enc.components)))
        structured = enc.decode(flat, rows)
        assert_tree_equal(enc.decode(enc.encode(structured, rows), rows), structured)
        assert envs.unwrapped.scenario.action_space.contains({k: (v[0] if not isinstance(v, dict) else
                                                                  {kk: vv[0] for kk, vv in v.items()})
                                                              for k, v in structured.items()})
        obs, *_ = envs.step(split_agents(structured, agents))


def test_detour_walks_around_a_shown_hazard_in_the_way_and_straight_otherwise():
    w = World(num_envs=2, resources=1, hazards=1, obstacles=0)
    for b in range(2):
        w.resource(b, 0, 8.0, 0.0)
    w.hazard(0, 0, 4.0, 0.3, kind=0)  # a pit on the way in world 0, none in world 1
    enc = FlatEncoding.for_env(w.envs, directions=8, targets=1, detour=True)
    straight = FlatEncoding.for_env(w.envs, directions=8, targets=1)
    obs, *_ = w.step()
    flat = np.zeros((2, len(enc.components)), np.int64)
    flat[:, enc.components.index("move")] = 8  # to the nearest resource
    target = enc.decode(flat, obs)["move_to"][:, :2]
    np.testing.assert_allclose(straight.decode(flat, obs)["move_to"][:, :2], [[8.0, 0.0]] * 2, atol=1e-6)
    np.testing.assert_allclose(target[1], [8.0, 0.0], atol=1e-6)
    # world 0: a waypoint beside the pit (away from the side it leans to), clear of its radius
    radius = w.envs.unwrapped.scenario.params.hazard_radius
    assert target[0, 1] < 0 and np.hypot(target[0, 0] - 4.0, target[0, 1] - 0.3) > radius
    damage = np.zeros(2)
    for _ in range(60):  # walk: to the waypoint, then on to the resource
        obs, _, _, _, info = w.step(enc.decode(flat, obs))
        damage += info["damage_taken"] if "damage_taken" in info else 0
    assert (obs["agent"][:, 0] > 7.0).all() and w.state.damage_taken[:, 0].max() == 0


def test_without_a_compass_every_move_goes_to_a_capture_point():
    """``directions: 0`` (the league's encoding): ``move`` k walks to capture point k, nothing else;
    with no targets either, ``move_to`` has nothing to name and the encoding is refused."""
    envs = team_capture_v0.vector_env(num_envs=2, agents_per_team=2)
    enc = FlatEncoding.for_env(envs, tools=["move_to", "idle"], directions=0, agent_index=True)
    points = len(envs.unwrapped.scenario.params.capture_points)
    assert enc.components == ("tool", "move", "speed") and enc.action_space.nvec.tolist() == [2, points, 1]
    obs, _ = envs.reset(seed=0)
    rows = merge_agents(obs, 4)
    for k in range(points):
        structured = enc.decode(np.tile([0, k, 0], (8, 1)), rows)
        np.testing.assert_allclose(structured["move_to"][:, 0], rows["agent"][:, 0] + rows["points"][:, k, 0])
        np.testing.assert_allclose(structured["move_to"][:, 1], rows["agent"][:, 1] + rows["points"][:, k, 1])
        np.testing.assert_array_equal(enc.encode(structured, rows), np.tile([0, k, 0], (8, 1)))
    with pytest.raises(ValueError, match="directions >= 1 or targets"):
        FlatEncoding.for_env(envs, tools=["move_to"], directions=0, move_to_targets=False)
