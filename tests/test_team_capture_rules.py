"""Team Capture rules, each in a hand-built situation on a real vector env.

Agents are placed directly in the state (see ``TeamWorld``); every step goes through
``VectorEnv.step``, so decoding, the tick, scoring and the observation are the real ones.
Blue agents are 0..N-1 on the agent axis, red agents N..2N-1.
"""

from __future__ import annotations

import numpy as np
import pytest
from team_capture_helpers import BLUE, NEUTRAL, NOT_FOUND, OK, POINTS, RED, TOOLS, TeamWorld, random_actions

from arena_envs.scripted import ScriptedCaptureTeam
from arena_envs.team_capture import join_teams, split_teams

A_, B_, CENTER = POINTS["A"], POINTS["B"], POINTS["Center"]


def capture(w: TeamWorld, agent: int, point: str, b: int = 0) -> None:
    """Let ``agent`` take ``point`` alone (50 ticks), then walk it back out of every zone."""
    w.to_point(b, agent, point)
    w.steps(50)
    assert w.owner[b, POINTS[point]] == (BLUE if agent < w.N else RED)
    w.place(b, agent, -28.0, 28.0)


# -- progress and flips ----------------------------------------------------------------------


def test_a_lone_agent_flips_a_neutral_point_after_50_ticks():
    w = TeamWorld()
    w.to_point(0, 0, "A", 1.0, -2.0)  # anywhere within 3.0 of the centre
    obs, reward, terminated, truncated, info = w.steps(49)
    assert w.owner[0, A_] == NEUTRAL and w.progress[0, A_] == 49
    assert obs["points"][0, 0, A_, 5] == pytest.approx(49 / 50)  # blue sees its own progress
    assert obs["points"][0, 2, A_, 6] == pytest.approx(49 / 50)  # red sees the enemy's
    assert obs["points"][0, 2, A_, 5] == 0.0 and w.score[0].tolist() == [0.0, 0.0]
    obs, reward, terminated, truncated, info = w.step()
    assert w.owner[0, A_] == BLUE and w.progress[0, A_] == 0
    assert obs["points"][0, 0, A_, 3:].tolist() == [1.0, 0.0, 0.0, 0.0]  # ours
    assert obs["points"][0, 3, A_, 3:].tolist() == [0.0, 1.0, 0.0, 0.0]  # theirs, for red
    # tick 50 is a whole second: +10 for the capture and +1 for holding it
    assert info["blue_score"][0] == 11.0 and info["red_score"][0] == 0.0 and info["blue_points"][0] == 1
    assert reward[0].tolist() == [11.0, 11.0, -11.0, -11.0]
    assert obs["score"][0, 0].tolist() == [11.0, 0.0] and obs["score"][0, 2].tolist() == [0.0, 11.0]
    assert not terminated.any() and not truncated.any()


def test_the_zone_is_a_disc_of_radius_3():
    w = TeamWorld(2)
    w.to_point(0, 0, "Center", 3.0, 0.0)
    w.to_point(1, 0, "Center", 2.13, 2.13)  # 3.012 away
    w.steps(50)
    assert w.owner[0, CENTER] == BLUE and w.owner[1, CENTER] == NEUTRAL and w.progress[1, CENTER] == 0


def test_strictly_more_agents_dominate():
    w = TeamWorld(agents_per_team=3)
    w.to_point(0, 0, "B")
    w.to_point(0, 1, "B", 1.0)
    w.to_point(0, 3, "B", -1.0)  # two blue against one red
    w.steps(50)
    assert w.owner[0, B_] == BLUE


@pytest.mark.parametrize("blue, red", [(1, 1), (2, 2), (3, 3)])
def test_a_tie_makes_no_progress(blue, red):
    w = TeamWorld(agents_per_team=3)
    for i in range(blue):
        w.to_point(0, i, "D", 0.5 * i)
    for i in range(red):
        w.to_point(0, 3 + i, "D", -0.5 * i)
    w.steps(120)
    assert w.owner[0, POINTS["D"]] == NEUTRAL and w.progress[0, POINTS["D"]] == 0


def test_a_tie_resets_progress():
    w = TeamWorld()
    w.to_point(0, 0, "A")
    w.steps(30)
    assert w.progress[0, A_] == 30
    w.to_point(0, 2, "A")  # red walks in: 1 v 1
    obs, *_ = w.step()
    assert w.progress[0, A_] == 0 and obs["points"][0, 0, A_, 5] == 0.0
    w.place(0, 2, -28.0, 28.0)  # red leaves: blue starts over
    w.steps(49)
    assert w.owner[0, A_] == NEUTRAL and w.progress[0, A_] == 49
    w.step()
    assert w.owner[0, A_] == BLUE


def test_an_empty_zone_resets_progress():
    w = TeamWorld()
    w.to_point(0, 0, "E")
    w.steps(45)
    w.place(0, 0, -28.0, 28.0)
    w.step()
    assert w.progress[0, POINTS["E"]] == 0 and w.state.extra["point_capturer"][0, POINTS["E"]] == NEUTRAL
    w.to_point(0, 0, "E")
    w.steps(49)
    assert w.owner[0, POINTS["E"]] == NEUTRAL


def test_the_owner_dominating_makes_no_progress_and_resets_the_enemy():
    w = TeamWorld()
    capture(w, 0, "A")
    score = w.score[0].copy()
    w.to_point(0, 0, "A")  # the owner alone: nothing to gain
    w.steps(5)
    assert w.progress[0, A_] == 0 and w.owner[0, A_] == BLUE
    w.place(0, 0, -28.0, 28.0)
    w.to_point(0, 2, "A")  # red alone: takes progress
    w.steps(30)
    assert w.progress[0, A_] == 30 and w.state.extra["point_capturer"][0, A_] == RED
    w.to_point(0, 0, "A")
    w.to_point(0, 1, "A", 1.0)  # two blue owners against one red: the owner dominates
    w.step()
    assert w.progress[0, A_] == 0 and w.owner[0, A_] == BLUE
    assert w.score[0, RED] == score[RED]  # red never captured


def test_an_enemy_point_flips_straight_to_the_dominating_team():
    w = TeamWorld()
    capture(w, 0, "B")
    w.to_point(0, 2, "B")
    w.steps(49)
    assert w.owner[0, B_] == BLUE
    red_before = w.score[0, RED]
    obs, reward, *_ = w.step()
    assert w.owner[0, B_] == RED  # never neutral in between
    assert w.score[0, RED] - red_before == 10.0 + 1.0  # tick 100: a whole second, red now holds B


def test_progress_starts_over_when_the_dominating_team_changes():
    w = TeamWorld()
    w.to_point(0, 0, "Center")
    w.steps(40)
    w.place(0, 0, -28.0, 28.0)
    w.to_point(0, 2, "Center")  # in the same tick: red dominates instead
    w.step()
    assert w.progress[0, CENTER] == 1 and w.state.extra["point_capturer"][0, CENTER] == RED


# -- scoring ----------------------------------------------------------------------------------


def test_points_score_one_per_second_each():
    w = TeamWorld()
    capture(w, 0, "A")  # ticks 1..50: blue 10 + 1
    assert w.score[0].tolist() == [11.0, 0.0]
    w.to_point(0, 1, "D")
    w.steps(50)  # ticks 51..100: D taken at tick 100
    assert w.score[0].tolist() == [11.0 + 4 + 10 + 2, 0.0]  # A held at 60..90, capture D, both at 100
    for tick in range(101, 111):
        obs, reward, *_ = w.step()
        assert reward[0, 0] == (2.0 if tick == 110 else 0.0)  # points held only count on whole seconds
    assert w.score[0, BLUE] == 29.0


def test_scoring_numbers_are_arguments():
    w = TeamWorld(capture_ticks=5, capture_score=3.0, hold_score=0.5)
    w.to_point(0, 2, "E")
    w.steps(4)
    assert w.owner[0, POINTS["E"]] == NEUTRAL
    obs, reward, *_ = w.step()
    assert w.owner[0, POINTS["E"]] == RED and w.score[0].tolist() == [0.0, 3.0]
    w.steps(5)  # tick 10
    assert w.score[0].tolist() == [0.0, 3.5]


def test_rewards_are_the_change_in_the_margin_shared_by_the_team_and_zero_sum():
    w = TeamWorld(agents_per_team=3)
    w.envs.reset(seed=0)  # from the spawns: both scripted teams take points
    blue, red = ScriptedCaptureTeam(w.scenario.params), ScriptedCaptureTeam(w.scenario.params)
    obs, margins = w.obs, []
    for _ in range(300):
        blue_obs, red_obs = split_teams(w.obs, 3)
        obs, reward, *_ = w.step(join_teams(blue.act(blue_obs), red.act(red_obs)))
        assert (reward[0, :3] == reward[0, 0]).all() and (reward[0, 3:] == -reward[0, 0]).all()
        margins.append(reward[0, 0])
    assert np.sum(margins) == w.score[0, BLUE] - w.score[0, RED]
    assert w.score[0, BLUE] > 0 and w.score[0, RED] > 0 and len(set(margins)) > 2


# -- episode end ------------------------------------------------------------------------------


def test_the_game_ends_when_a_team_reaches_100():
    w = TeamWorld(2)
    for b in range(2):
        capture(w, 2, "E", b)  # red holds E; score 11 at tick 50
    w.score[0, RED] = 98.0
    w.score[1, RED] = 97.0
    obs, reward, terminated, truncated, info = w.steps(10)  # tick 60: +1 each
    assert terminated[0].tolist() == [False] * 4 and info["red_score"].tolist() == [99.0, 98.0]
    obs, reward, terminated, truncated, info = w.steps(10)  # tick 70
    assert terminated.tolist() == [[True] * 4, [False] * 4] and not truncated.any()
    assert info["red_score"][0] == 100.0 and reward[0].tolist() == [-1.0, -1.0, 1.0, 1.0]
    obs, reward, terminated, truncated, info = w.step()  # NEXT_STEP autoreset of world 0 only
    assert info["red_score"].tolist() == [0.0, 99.0] and reward[0].tolist() == [0.0] * 4
    assert w.owner[0].tolist() == [NEUTRAL] * 5 and obs["time_left"][0, :, 0].tolist() == [1200.0] * 4


def test_every_agent_truncates_after_max_cycles():
    w = TeamWorld(max_cycles=30)
    for tick in range(1, 31):
        obs, reward, terminated, truncated, info = w.step()
        assert truncated[0].tolist() == [tick == 30] * 4 and not terminated.any()
        assert obs["time_left"][0, :, 0].tolist() == [30 - tick] * 4


# -- the tools in this world ------------------------------------------------------------------


def test_collect_and_craft_find_nothing_and_queries_succeed():
    w = TeamWorld()
    action = w.actions()
    action["tool"][0] = [TOOLS["collect"], TOOLS["craft"], TOOLS["query_world"], TOOLS["query_inventory"]]
    obs, *_ = w.step(action)
    assert obs["last_action"][0].tolist() == [[TOOLS["collect"], NOT_FOUND], [TOOLS["craft"], NOT_FOUND],
                                              [TOOLS["query_world"], OK], [TOOLS["query_inventory"], OK]]


def test_agents_walk_onto_points_with_move_to():
    w = TeamWorld()
    w.place(0, 1, -15.0, -5.2)
    action = w.actions()
    action["tool"][0, 1] = TOOLS["move_to"]
    action["move_to"][0, 1] = (-15.0, -15.0, 1.0)  # 9.8 units at 0.5 a tick: inside the zone after 14 ticks
    w.step(action)
    action["tool"][0, 1] = TOOLS["query_inventory"]  # anything but idle, which would stop it
    for _ in range(12):
        w.step(action)
    assert w.progress[0, A_] == 0
    w.step(action)
    assert w.progress[0, A_] == 1 and w.state.moving[0, 1]


# -- perception -------------------------------------------------------------------------------


def test_allies_within_15_and_enemies_within_20_and_never_beyond():
    w = TeamWorld(agents_per_team=3)
    w.place(0, 0, 0.0, 0.0)
    w.place(0, 1, 14.99, 0.0)  # ally in range
    w.place(0, 2, 0.0, 15.01)  # ally out of range
    w.place(0, 3, -19.99, 0.0)  # enemy in range
    w.place(0, 4, 0.0, -20.01)  # enemy out of range
    w.place(0, 5, 14.0, 14.0)  # enemy 19.8 away
    obs, *_ = w.step()
    allies, enemies = obs["allies"][0, 0], obs["enemies"][0, 0]
    assert allies[0].tolist() == [0.0] * 4  # itself
    np.testing.assert_allclose(allies[1], [1.0, 14.99, 0.0, 14.99], rtol=1e-6)
    assert allies[2].tolist() == [0.0] * 4
    np.testing.assert_allclose(enemies[0], [1.0, -19.99, 0.0, 19.99], rtol=1e-6)
    assert np.abs(enemies[1]).sum() == 0.0
    np.testing.assert_allclose(enemies[2], [1.0, 14.0, 14.0, np.hypot(14, 14)], rtol=1e-6)
    # the red agent 20.01 below sees no blue agent: all are beyond 20
    far_red = obs["enemies"][0, 4]
    assert far_red[:, 0].tolist() == [0.0, 0.0, 0.0]


def test_no_observation_ever_holds_an_agent_beyond_its_radius():
    w = TeamWorld(8, agents_per_team=4, seed=3)
    rng = np.random.default_rng(1)
    s = w.state
    N = 4
    for _ in range(150):
        obs, *_ = w.step(random_actions(rng, (8, 8), N))
        x, z = s.x, s.z
        dist = np.hypot(x[:, None, :] - x[:, :, None], z[:, None, :] - z[:, :, None])  # (B, observer, seen)
        for table, radius, other in (("allies", 15.0, False), ("enemies", 20.0, True)):
            seen_idx = np.concatenate([np.arange(N, 2 * N), np.arange(N)]) if other else np.arange(2 * N)
            true = np.stack([dist[:, a, (seen_idx[a] // N) * N + np.arange(N)] for a in range(2 * N)], 1)
            rows = obs[table]
            visible = rows[..., 0] > 0
            assert not (visible & (true > radius + 1e-4)).any(), table
            assert (rows[~visible] == 0).all(), table
            np.testing.assert_allclose(rows[..., 3][visible], true[visible], rtol=1e-5, atol=1e-4)
            expected = true <= radius
            if not other:
                expected[:, np.arange(8), np.arange(8) % N] = False  # never itself
            assert (visible == expected).all(), table


def test_obstacles_come_in_mirrored_pairs_clear_of_the_zones_and_block_sight():
    w = TeamWorld(6, agents_per_team=2, num_obstacles=6, seed=4)
    s = w.state
    present = s.obst_r > 0
    assert present.any(1).all()
    np.testing.assert_array_equal(s.obst_x[:, 3:], np.where(present[:, 3:], -s.obst_x[:, :3], s.obst_x[:, 3:]))
    for px, pz in ((-15, -15), (15, -15), (0, 0), (-15, 15), (15, 15)):
        assert (np.hypot(s.obst_x - px, s.obst_z - pz) - s.obst_r > 3.0)[present].all()
    obs, *_ = w.step()
    assert (obs["obstacles"][..., 0] == present[:, None, :]).all()
    # an obstacle between two enemies 10 apart hides them from each other
    w.place(0, 0, 0.0, 10.0)
    w.place(0, 2, 0.0, 20.0)
    s.obst_x[0], s.obst_z[0], s.obst_r[0] = 100.0, 100.0, 0.0
    obs, *_ = w.step()
    assert obs["enemies"][0, 0, 0, 0] == 1.0
    s.obst_x[0, 0], s.obst_z[0, 0], s.obst_r[0, 0] = 0.0, 15.0, 1.0
    obs, *_ = w.step()
    assert obs["enemies"][0, 0, 0].tolist() == [0.0] * 4 and obs["enemies"][0, 2, 0].tolist() == [0.0] * 4
    # and agents walking into it slide round
    action = w.actions()
    action["tool"][0, 0] = TOOLS["move_to"]
    action["move_to"][0, 0] = (0.0, 20.0, 1.0)
    for _ in range(40):
        w.step(action)
        assert np.hypot(s.x[0, 0], s.z[0, 0] - 15.0) >= 1.5 - 1e-3
        action["tool"][0, 0] = TOOLS["idle"] if not s.moving[0, 0] else TOOLS["send_message"]
