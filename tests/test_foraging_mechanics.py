"""Foraging-v0 rules, each checked in a hand-built situation on a real vector env.

Worlds are emptied and entities placed directly in the state arrays (see ``World`` in
conftest); every step goes through ``VectorEnv.step`` so decoding, the tick and the
observation are the real ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import TOOLS, World, make_vec

from arena_envs.foraging import CLASSIC_HAZARDS, CLASSIC_OBSTACLES, CLASSIC_RESOURCES, CLASSIC_SPAWN

OK, OUT_OF_RANGE, NOT_FOUND, INVALID_PARAMS, INVENTORY_FULL = 0, 1, 2, 4, 6
PIT, FIRE = 0, 1
BERRY, WOOD, STONE = 0, 1, 2


def far_resource(w: World, b: int = 0, row: int | None = None) -> None:
    """A resource nobody reaches, so that emptied worlds do not count as cleared."""
    w.resource(b, w.R - 1 if row is None else row, 20.0, -20.0, STONE)


# -- collect ------------------------------------------------------------------------------


@pytest.mark.parametrize("where", [(0.0, 0.0), (1.0, 0.5), (2.0, 0.0), (0.0, -2.0)])
def test_collect_within_range_gives_reward_and_item(world, where):
    w = world(2)
    for b in range(2):
        w.resource(b, 0, *where, kind=WOOD)
        far_resource(w, b)
    obs, reward, terminated, truncated, info = w.do(0, "collect", collect=0)
    assert obs["last_action"][0].tolist() == [TOOLS["collect"], OK]
    assert reward[0] == 1.0
    np.testing.assert_array_equal(obs["inventory"][0], [0, 1, 0])
    assert obs["resources"][0, 0].tolist() == [0.0] * 8  # gone from the table
    assert not w.state.ent_alive[0, 0]
    assert info["resources_collected"][0] == 1 and info["resources_remaining"][0] == 1
    assert w.state.last_value[0, 0] == pytest.approx(np.hypot(*where))
    assert not terminated[0] and not truncated[0]
    # the idle world next to it is untouched
    assert reward[1] == 0.0 and w.state.ent_alive[1, 0] and obs["inventory"][1].sum() == 0


@pytest.mark.parametrize("kind", [BERRY, WOOD, STONE])
def test_collected_kind_goes_to_its_inventory_column(world, kind):
    w = world(1)
    w.resource(0, 0, 1.0, 0.0, kind)
    far_resource(w)
    obs, *_ = w.do(0, "collect", collect=0)
    expected = np.zeros(3)
    expected[kind] = 1
    np.testing.assert_array_equal(obs["inventory"][0], expected)


@pytest.mark.parametrize("where", [(2.5, 0.0), (1.5, 2.0), (0.0, -2.01)])
def test_collect_out_of_range_reports_the_distance(world, where):
    w = world(1)
    w.resource(0, 0, *where, kind=BERRY)
    far_resource(w)
    obs, reward, *_ = w.do(0, "collect", collect=0)
    assert obs["last_action"][0].tolist() == [TOOLS["collect"], OUT_OF_RANGE]
    assert w.state.last_value[0, 0] == pytest.approx(float(np.hypot(*where)), abs=1e-5)
    assert w.state.last_index[0, 0] == 0
    assert reward[0] == 0.0 and obs["inventory"][0].sum() == 0 and w.state.ent_alive[0, 0]


def test_collect_at_exactly_two_point_five_is_out_of_range(world):
    w = world(1)
    w.resource(0, 0, 2.5, 0.0)
    far_resource(w)
    w.do(0, "collect", collect=0)
    assert w.state.last_code[0, 0] == OUT_OF_RANGE
    assert w.state.last_value[0, 0] == 2.5


def test_collecting_an_already_collected_row_is_not_found(world):
    w = world(1)
    w.resource(0, 0, 1.0, 0.0)
    far_resource(w)
    obs, reward, *_ = w.do(0, "collect", collect=0)
    assert reward[0] == 1.0
    obs, reward, _, _, info = w.do(0, "collect", collect=0)
    assert obs["last_action"][0].tolist() == [TOOLS["collect"], NOT_FOUND]
    assert reward[0] == 0.0
    assert obs["inventory"][0].sum() == 1 and info["resources_collected"][0] == 1
    assert w.state.collected[0, 0] == 1


def test_collecting_an_empty_padding_row_is_not_found(world):
    w = world(1, resources=3)
    far_resource(w, row=2)
    obs, reward, *_ = w.do(0, "collect", collect=1)  # row 1 never held a resource
    assert obs["last_action"][0, 1] == NOT_FOUND and reward[0] == 0.0


def test_inventory_full_at_capacity(world):
    w = world(1)
    w.resource(0, 0, 1.0, 0.0)
    w.resource(0, 1, -1.0, 0.0)
    far_resource(w)
    w.state.inventory[0, 0] = [20, 20, 9]  # 49: one more fits
    obs, reward, *_ = w.do(0, "collect", collect=0)
    assert obs["last_action"][0, 1] == OK and reward[0] == 1.0 and obs["inventory"][0].sum() == 50
    obs, reward, *_ = w.do(0, "collect", collect=1)
    assert obs["last_action"][0].tolist() == [TOOLS["collect"], INVENTORY_FULL]
    assert reward[0] == 0.0 and obs["inventory"][0].sum() == 50 and w.state.ent_alive[0, 1]


# -- move_to and energy -----------------------------------------------------------------------


@pytest.mark.parametrize("speed, per_tick", [(1.0, 0.5), (2.0, 1.0), (0.5, 0.25)])
def test_move_to_covers_five_units_per_second_times_speed(world, speed, per_tick):
    w = world(2)
    far_resource(w, 0)
    far_resource(w, 1)
    obs, *_ = w.move(0, 10.0, 0.0, speed)
    assert obs["last_action"][0].tolist() == [TOOLS["move_to"], OK]
    assert obs["agent"][0, 0] == pytest.approx(per_tick) and obs["agent"][0, 1] == 0.0
    assert obs["agent"][0, 4] == 1.0 and obs["agent"][0, 5:7].tolist() == [10.0, 0.0]
    for k in range(2, 5):  # the target persists: later steps need not repeat it
        obs, *_ = w.do(0, "query_inventory")
        assert obs["agent"][0, 0] == pytest.approx(k * per_tick, abs=1e-5)
    assert obs["agent"][1, :2].tolist() == [0.0, 0.0]


def test_move_to_diagonal_keeps_direction(world):
    w = world(1)
    far_resource(w)
    obs, *_ = w.move(0, 6.0, -8.0, 2.0)
    assert obs["agent"][0, 0] == pytest.approx(0.6) and obs["agent"][0, 1] == pytest.approx(-0.8)


def test_move_to_stops_within_half_a_unit_of_the_target(world):
    w = world(1)
    far_resource(w)
    obs, *_ = w.move(0, 5.2, 0.0, 1.0)
    ticks = 1
    while obs["agent"][0, 4] == 1.0:
        obs, *_ = w.do(0, "query_inventory")
        ticks += 1
        assert ticks < 50
    stop = obs["agent"][0, :2].copy()
    assert np.hypot(stop[0] - 5.2, stop[1]) < 0.5
    assert ticks == 10  # 0.5 per tick: at 5.0 the target is 0.2 away
    for _ in range(3):  # and it stays there
        obs, *_ = w.do(0, "query_inventory")
        np.testing.assert_array_equal(obs["agent"][0, :2], stop)


def test_idle_clears_the_movement_target(world):
    w = world(1)
    far_resource(w)
    w.move(0, 10.0, 0.0, 1.0)
    obs, *_ = w.do(0, "idle")
    assert obs["agent"][0, 4] == 0.0 and obs["last_action"][0].tolist() == [TOOLS["idle"], OK]
    x = obs["agent"][0, 0]
    obs, *_ = w.do(0, "query_inventory")
    assert obs["agent"][0, 0] == x


def test_positions_are_clamped_to_the_world(world):
    w = world(1)
    far_resource(w)
    w.agent(0, 24.0, -24.0)
    w.move(0, 25.0, -25.0, 2.0)
    for _ in range(5):
        obs, *_ = w.do(0, "query_inventory")
        assert np.abs(obs["agent"][0, :2]).max() <= 24.5


def test_energy_drains_above_speed_one_and_regenerates_below(world):
    w = world(1)
    far_resource(w)
    obs, *_ = w.move(0, 20.0, 0.0, 2.0)
    assert obs["agent"][0, 3] == pytest.approx(99.0)  # 10/s per unit of speed above 1, 0.1 s
    obs, *_ = w.move(0, 20.0, 0.0, 1.5)
    assert obs["agent"][0, 3] == pytest.approx(98.5)
    obs, *_ = w.move(0, 20.0, 0.0, 1.0)
    assert obs["agent"][0, 3] == pytest.approx(99.0)  # regains 5/s at speed 1
    obs, *_ = w.do(0, "idle")
    assert obs["agent"][0, 3] == pytest.approx(99.5)
    obs, *_ = w.do(0, "idle")
    assert obs["agent"][0, 3] == 100.0
    obs, *_ = w.do(0, "idle")
    assert obs["agent"][0, 3] == 100.0  # capped


def test_empty_energy_caps_speed_at_one(world):
    w = world(2)
    far_resource(w, 0)
    far_resource(w, 1)
    w.state.energy[0, 0] = 0.0
    action = w.actions(TOOLS["move_to"])
    action["move_to"][:] = (20.0, 0.0, 2.0)
    obs, *_ = w.step(action)
    assert obs["agent"][0, 0] == pytest.approx(0.5)  # empty: speed 1
    assert obs["agent"][1, 0] == pytest.approx(1.0)  # full: speed 2
    assert obs["agent"][0, 3] >= 0.0


def test_sprinting_never_drives_energy_below_zero(world):
    w = world(1)
    far_resource(w)
    w.state.energy[0, 0] = 0.3
    w.move(0, 24.0, 0.0, 2.0)
    for _ in range(10):
        obs, *_ = w.do(0, "query_inventory")
        assert 0.0 <= obs["agent"][0, 3] <= 1.0


# -- hazards, damage and death ---------------------------------------------------------------


def test_pit_deals_entry_damage_then_damage_per_tick(world):
    w = world(2)
    far_resource(w, 0)
    far_resource(w, 1)
    w.hazard(0, 0, 0.0, 0.0, PIT)
    w.agent(0, -3.2, 0.0)
    w.move(0, 0.0, 0.0, 1.0)  # x = -2.7
    damages, rewards = [], []
    for _ in range(8):  # x = -2.2, -1.7, then -1.2 enters the pit (radius 1.5); at 0 from the 6th on
        obs, reward, terminated, _, info = w.do(0, "query_inventory")
        damages.append(float(info["damage_taken"][0]))
        rewards.append(float(reward[0]))
        assert not terminated[0]
    steps = np.diff([0.0] + damages)
    # entering costs 25, plus the 0.5 of the tick spent inside (5/s × 0.1 s)
    np.testing.assert_allclose(steps, [0, 0, 25.5, 0.5, 0.5, 0.5, 0.5, 0.5], atol=1e-5)
    np.testing.assert_allclose(rewards, -0.01 * steps, atol=1e-6)
    assert info["health"][0] == pytest.approx(100 - damages[-1])
    assert obs["agent"][0, 2] == pytest.approx(100 - damages[-1])
    assert info["damage_taken"][1] == 0.0 and info["health"][1] == 100.0


def test_pit_entry_damage_applies_again_after_leaving(world):
    w = world(1)
    far_resource(w)
    w.hazard(0, 0, 0.0, 0.0, PIT)
    _, reward, *_ = w.move(0, 0.0, 0.0, 1.0)  # standing in the pit from the start: entered now
    assert reward[0] == pytest.approx(-0.255)
    w.move(0, 5.0, 0.0, 2.0)
    w.do(0, "query_inventory")  # at x = 2: out
    _, reward, _, _, info = w.move(0, 0.0, 0.0, 2.0)  # back to x = 1: in again
    assert reward[0] == pytest.approx(-0.255)
    assert info["damage_taken"][0] == pytest.approx(25.5 + 0.5 + 25.5)


def test_fire_deals_one_point_per_tick_and_no_entry_damage(world):
    w = world(1)
    far_resource(w)
    w.hazard(0, 1, 0.0, 0.0, FIRE)
    w.agent(0, -2.2, 0.0)
    _, _, _, _, info = w.move(0, 0.0, 0.0, 1.0)  # x = -1.7: outside
    assert info["damage_taken"][0] == 0.0
    damages, rewards = [], []
    for _ in range(5):  # x = -1.2, -0.7, -0.2, 0, 0
        _, reward, _, _, info = w.do(0, "query_inventory")
        damages.append(float(info["damage_taken"][0]))
        rewards.append(float(reward[0]))
    np.testing.assert_allclose(damages, [1.0, 2.0, 3.0, 4.0, 5.0], atol=1e-5)
    np.testing.assert_allclose(rewards, [-0.01] * 5, atol=1e-7)


def test_death_at_zero_health_terminates(world):
    w = world(2)
    for b in range(2):
        far_resource(w, b)
        w.hazard(b, 1, 0.0, 0.0, FIRE)
    w.state.health[:, 0] = [1.5, 50.0]
    obs, reward, terminated, truncated, info = w.do(0, "query_inventory")
    assert not terminated.any()
    obs, reward, terminated, truncated, info = w.do(0, "query_inventory")
    assert terminated.tolist() == [True, False] and not truncated.any()
    assert info["health"][0] == 0.0 and obs["agent"][0, 2] == 0.0  # never below 0
    assert info["damage_taken"][0] == pytest.approx(1.5)  # only what it had
    assert reward[0] == pytest.approx(-0.005)
    assert not w.state.alive[0, 0]


def test_damage_penalty_is_one_hundredth_per_point(world):
    w = world(1, damage_penalty=0.01)
    far_resource(w)
    w.hazard(0, 1, 0.0, 0.0, FIRE)
    w.hazard(0, 0, 0.5, 0.0, PIT)
    _, reward, _, _, info = w.do(0, "query_inventory")
    damage = float(info["damage_taken"][0])
    assert damage == pytest.approx(1.0 + 25.5)
    assert reward[0] == pytest.approx(-0.01 * damage)


# -- perception, query and obstacles ---------------------------------------------------------


def test_obstacle_hides_a_resource_that_query_world_still_shows(world):
    w = world(2)
    for b in range(2):
        w.resource(b, 0, 6.0, 0.0, WOOD)
        far_resource(w, b)
    w.obstacle(0, 0, 3.0, 0.0, 1.0)  # only world 0 has the obstacle in the way
    obs, *_ = w.step()
    assert obs["resources"][0, 0, 0] == 0.0 and obs["resources"][0, 0].tolist() == [0.0] * 8
    assert obs["resources"][1, 0, :5].tolist() == [1.0, 0.0, 6.0, 0.0, 6.0]  # control: seen
    assert obs["obstacles"][0, 0].tolist() == [1.0, 3.0, 0.0, 1.0]  # the obstacle itself is seen

    obs, *_ = w.do(0, "query_world", radius=[20.0], filter=0)
    assert obs["last_action"][0].tolist() == [TOOLS["query_world"], OK]
    row = obs["resources"][0, 0]
    assert row[0] == 0.0 and row[1] == 1.0  # not visible, but in the query result
    assert row[2:5].tolist() == [6.0, 0.0, 6.0] and row[5:].tolist() == [0.0, 1.0, 0.0]

    obs, *_ = w.do(0, "query_inventory")  # the result lasts one observation
    assert obs["resources"][0, 0].tolist() == [0.0] * 8


def test_query_world_radius_and_filter(world):
    w = world(1)
    w.resource(0, 0, 15.0, 0.0, BERRY)
    w.resource(0, 1, 30.0, 0.0, STONE)  # outside radius 20 (and outside the world's ±25)
    w.hazard(0, 0, -15.0, 0.0, PIT)
    far_resource(w)
    obs, *_ = w.do(0, "query_world", radius=[20.0], filter=1)  # resources only
    assert obs["resources"][0, :, 1].tolist() == [1.0, 0.0, 0.0]
    assert obs["hazards"][0, :, 1].tolist() == [0.0, 0.0]
    obs, *_ = w.do(0, "query_world", radius=[20.0], filter=2)  # hazards only
    assert obs["resources"][0, :, 1].tolist() == [0.0, 0.0, 0.0]
    assert obs["hazards"][0, 0].tolist() == [0.0, 1.0, -15.0, 0.0, 15.0, 1.0, 0.0]
    obs, *_ = w.do(0, "query_world", radius=[50.0], filter=0)
    assert obs["resources"][0, :, 1].tolist() == [1.0, 1.0, 1.0]
    obs, *_ = w.do(0, "query_world", radius=[14.0], filter=0)
    assert obs["resources"][0, :, 1].sum() == 0 and obs["hazards"][0, :, 1].sum() == 0


def test_perception_radius_is_ten(world):
    w = world(1)
    w.resource(0, 0, 10.0, 0.0)
    w.resource(0, 1, 0.0, -10.5)
    far_resource(w)
    obs, *_ = w.step()
    assert obs["resources"][0, :, 0].tolist() == [1.0, 0.0, 0.0]


def test_moving_at_an_obstacle_slides_around_it_to_a_target_behind(world):
    w = world(1)
    far_resource(w)
    w.obstacle(0, 0, 4.0, 0.0, 1.5)
    obs, *_ = w.move(0, 8.0, 0.0, 1.0)
    for tick in range(60):
        s = w.state
        clearance = np.hypot(s.x[0, 0] - 4.0, s.z[0, 0]) - (1.5 + 0.5)
        assert clearance >= -1e-4, f"tick {tick}: inside the obstacle by {-clearance}"
        if obs["agent"][0, 4] == 0.0:
            break
        obs, *_ = w.do(0, "query_inventory")
    assert obs["agent"][0, 4] == 0.0, "never arrived"
    assert np.hypot(obs["agent"][0, 0] - 8.0, obs["agent"][0, 1]) < 0.5
    assert tick < 40  # 8 units straight take 16 ticks; the detour adds a few


def test_agent_never_enters_a_gap_narrower_than_its_body(world):
    """Two obstacles 0.6 apart: an agent of radius 0.5 must not overlap either of them.

    The slide-then-push-out step pushes the agent out of both circles at once, which can
    push it into one of them; the agent then squeezes through the gap.
    """
    w = world(1)
    far_resource(w)
    w.obstacle(0, 0, 0.0, 1.3, 1.0)
    w.obstacle(0, 1, 0.0, -1.3, 1.0)
    w.agent(0, -3.0, 0.0)
    w.move(0, 3.0, 0.0, 2.0)
    s = w.state
    for tick in range(20):
        clearance = np.hypot(s.x[0, 0] - s.obst_x[0], s.z[0, 0] - s.obst_z[0]) - (s.obst_r[0] + 0.5)
        assert clearance.min() >= -1e-4, (f"tick {tick}: agent at ({s.x[0, 0]:.3f}, {s.z[0, 0]:.3f}) "
                                          f"overlaps an obstacle by {-clearance.min():.3f}")
        w.do(0, "query_inventory")


# -- tools without an effect in Foraging ---------------------------------------------------------


@pytest.mark.parametrize("message", [(0, 0), (15, 1), (3, 0)])
def test_send_message_succeeds_and_reaches_nobody(world, message):
    w = world(1)
    far_resource(w)
    before = w.state.x.copy()
    obs, reward, *_ = w.do(0, "send_message", send_message=message)
    assert obs["last_action"][0].tolist() == [TOOLS["send_message"], OK]
    assert reward[0] == 0.0 and (w.state.x == before).all()


def test_craft_is_not_found_without_stations(world):
    w = world(1)
    far_resource(w)
    w.state.inventory[0, 0] = [5, 5, 5]
    obs, reward, *_ = w.do(0, "craft", craft=(0, 0))
    assert obs["last_action"][0].tolist() == [TOOLS["craft"], NOT_FOUND]
    assert reward[0] == 0.0 and obs["inventory"][0].tolist() == [5, 5, 5]


def test_query_inventory_succeeds(world):
    w = world(1)
    far_resource(w)
    obs, *_ = w.do(0, "query_inventory")
    assert obs["last_action"][0].tolist() == [TOOLS["query_inventory"], OK]


# -- layout, score, episode end ---------------------------------------------------------------


def test_classic_layout_is_the_agent_arena_scene():
    envs = make_vec(3, layout="classic")
    obs, info = envs.reset(seed=123)
    s = envs.unwrapped.state
    apples = [(-5, 3), (4, -6), (-1, -5)]
    stones = [(7, 4), (-8, -3)]
    wood = [(9, -2), (-4, 8)]
    expected = {(float(x), float(z), kind) for kind, group in ((BERRY, apples), (WOOD, wood), (STONE, stones))
                for x, z in group}
    for b in range(3):
        got = {(float(s.ent_x[b, i]), float(s.ent_z[b, i]), int(s.ent_kind[b, i])) for i in range(7)}
        assert got == expected
        assert s.ent_alive[b, :7].all() and s.res_total[b] == 7
        pits = {(float(s.ent_x[b, 7 + i]), float(s.ent_z[b, 7 + i]), int(s.ent_kind[b, 7 + i])) for i in range(2)}
        assert pits == {(1.0, 1.0, PIT), (-3.0, -3.0, PIT)}
        assert (s.x[b, 0], s.z[b, 0]) == CLASSIC_SPAWN
        kinds = np.bincount(s.obst_kind[b], minlength=3)
        assert kinds.tolist() == [5, 3, 4]  # trees, rocks, bushes
        assert (s.obst_r[b] > 0).all()
    assert len(CLASSIC_RESOURCES) == 7 and len(CLASSIC_HAZARDS) == 2 and len(CLASSIC_OBSTACLES) == 12
    assert obs["resources"].shape == (3, 7, 8) and obs["hazards"].shape == (3, 2, 7)
    assert obs["obstacles"].shape == (3, 12, 4)
    assert info["resources_remaining"].tolist() == [7, 7, 7] and info["score"].tolist() == [0.0] * 3
    # the classic scene does not depend on the seed
    obs2, _ = envs.reset(seed=999)
    for k in obs:
        np.testing.assert_array_equal(obs[k], obs2[k])


def expected_score(collected, total, damage):
    return max(0.0, collected / total * 100.0 - min(damage, 100.0))


def test_score_follows_collection_and_damage(world):
    w = world(1, resources=3)
    w.resource(0, 0, 1.0, 0.0)
    w.resource(0, 1, -1.0, 0.0)
    w.resource(0, 2, 20.0, 20.0)
    w.hazard(0, 1, 0.0, 1.0, FIRE)
    _, _, _, _, info = w.do(0, "collect", collect=0)
    assert info["damage_taken"][0] == pytest.approx(1.0)
    assert info["score"][0] == pytest.approx(expected_score(1, 3, 1.0), rel=1e-6)
    _, _, _, _, info = w.do(0, "collect", collect=1)
    assert info["score"][0] == pytest.approx(expected_score(2, 3, 2.0), rel=1e-6)
    for _ in range(3):
        _, _, _, _, info = w.do(0, "idle")
    assert info["score"][0] == pytest.approx(expected_score(2, 3, 5.0), rel=1e-6)


@pytest.mark.parametrize("collected, total, damage", [
    (0, 7, 0.0), (7, 7, 0.0), (3, 7, 10.0), (1, 9, 50.0), (9, 9, 150.0), (5, 9, 99.5), (2, 2, 100.0)])
def test_score_formula(world, collected, total, damage):
    w = world(1, resources=9)
    for row in range(total):
        w.resource(0, row, 15.0, float(row))
    s = w.state
    s.ent_alive[0, :collected] = False  # as if collected
    s.collected[0, 0] = collected
    s.damage_taken[0, 0] = damage
    s.health[0, 0] = 100.0
    _, _, terminated, _, info = w.do(0, "idle")
    assert terminated[0] == (collected == total)
    assert info["score"][0] == pytest.approx(expected_score(collected, total, damage), abs=1e-4)
    assert info["resources_collected"][0] == collected
    assert info["resources_remaining"][0] == total - collected


def test_truncation_at_max_ticks(world):
    w = world(2, max_ticks=5)
    far_resource(w, 0)
    far_resource(w, 1)
    for tick in range(1, 6):
        obs, reward, terminated, truncated, info = w.step()
        assert obs["time_left"][:, 0].tolist() == [5 - tick] * 2
        assert truncated.tolist() == [tick == 5] * 2 and not terminated.any()


def test_default_truncation_is_600_ticks():
    envs = make_vec(1)
    obs, _ = envs.reset(seed=0)
    assert obs["time_left"][0, 0] == 600.0
    assert envs.unwrapped.scenario.params.max_ticks == 600


def test_termination_when_every_resource_is_collected(world):
    w = world(2, resources=2)
    for b in range(2):
        w.resource(b, 0, 1.0, 0.0, BERRY)
        w.resource(b, 1, 0.0, 1.5, STONE)
    _, reward, terminated, truncated, info = w.do(0, "collect", collect=0)
    assert reward[0] == 1.0 and not terminated.any()
    _, reward, terminated, truncated, info = w.do(0, "collect", collect=1)
    assert reward[0] == 1.0 and terminated.tolist() == [True, False] and not truncated.any()
    assert info["resources_remaining"][0] == 0 and info["score"][0] == pytest.approx(100.0)


def test_termination_wins_over_truncation_on_the_same_tick(world):
    w = world(1, resources=1, max_ticks=1)
    w.resource(0, 0, 1.0, 0.0)
    _, _, terminated, truncated, _ = w.do(0, "collect", collect=0)
    assert terminated[0] and not truncated[0]


def test_agent_never_overlaps_an_obstacle_next_to_the_wall(world):
    """An obstacle reaching past the world's edge: sliding round it must not end inside it.

    Positions are clamped to ±(half_size − agent_radius) after the obstacle correction, so
    the clamp can move the agent back into the circle (random layouts place obstacles up
    to ±23 with radii up to 1.8, so this happens in ordinary worlds).
    """
    w = world(1)
    far_resource(w)
    w.obstacle(0, 0, 23.8, 0.0, 1.0)
    w.agent(0, 21.0, 0.3)
    w.move(0, 25.0, 0.3, 1.0)
    s = w.state
    for tick in range(30):
        clearance = np.hypot(s.x[0, 0] - s.obst_x[0], s.z[0, 0] - s.obst_z[0]) - (s.obst_r[0] + 0.5)
        assert clearance.min() >= -1e-4, (f"tick {tick}: agent at ({s.x[0, 0]:.3f}, {s.z[0, 0]:.3f}) "
                                          f"overlaps the obstacle by {-clearance.min():.3f}")
        w.do(0, "query_inventory")
