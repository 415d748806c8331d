"""rgb_array frames for every 2D scenario: Crafting and Team Capture, PettingZoo's render
test, vector tiling, the drawing primitives, and Gymnasium's RecordVideo writing a video."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.wrappers import RecordVideo
from pettingzoo.test import render_test
from pettingzoo.utils.conversions import parallel_to_aec
from team_capture_helpers import POINT_XZ, POINTS, agent_action, random_actions

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs import team_capture_v0
from arena_envs.render import (
    MAP_PIXELS,
    NEUTRAL_COLOUR,
    STATION_TYPE_COLOURS,
    STATUS_HEIGHT,
    TEAM_COLOURS,
    Canvas,
    lighter,
    text_width,
)
from arena_envs.scenes import CRAFTING_COLOUR
from arena_envs.scripted import ScriptedCaptureTeam, ScriptedCrafter, ScriptedForager
from arena_envs.team_capture import BLUE, RED, join_teams, split_teams

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

MAP = MAP_PIXELS  # the map's rows; the status line and the legend strip follow


def footer_of(frame: np.ndarray) -> np.ndarray:
    """The status line of a frame (the rows between the map and the legend strip)."""
    return frame[MAP:MAP + STATUS_HEIGHT]
SCENARIOS = ("foraging", "crafting", "team_capture")


def play(scenario: str, ticks: int, seed: int = 0) -> list[np.ndarray]:
    """The frames of a seeded episode played by the scenario's scripted baseline: one after
    reset, then one per tick."""
    if scenario == "team_capture":
        env = team_capture_v0.vector_env(num_envs=1, render_mode="rgb_array")
        blue, red = ScriptedCaptureTeam(env.scenario.params), ScriptedCaptureTeam(env.scenario.params)

        def act(obs):
            blue_obs, red_obs = split_teams(obs, env.scenario.agents_per_team)
            return join_teams(blue.act(blue_obs), red.act(red_obs))
    else:
        env_id, baseline = {"foraging": ("Foraging-v0", ScriptedForager),
                            "crafting": ("Crafting-v0", ScriptedCrafter)}[scenario]
        env = gym.make(f"arena_envs/{env_id}", render_mode="rgb_array")
        act = baseline(env.unwrapped.scenario.params).act
    obs, _ = env.reset(seed=seed)
    frames = [env.render()]
    for _ in range(ticks):
        obs, *_ = env.step(act(obs))
        frames.append(env.render())
    return frames


def pixel(frame: np.ndarray, x: float, z: float, half_size: float) -> tuple[int, ...]:
    """The colour of the frame at world point (x, z)."""
    scale = MAP / (2 * half_size)
    return tuple(int(c) for c in frame[int((z + half_size) * scale), int((x + half_size) * scale)])


# -- every scenario --------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_frames_are_uint8_images_that_follow_the_world(scenario):
    frames = play(scenario, 20)
    for frame in frames:
        assert frame.shape[1:] == (MAP, 3) and frame.shape[0] > MAP + STATUS_HEIGHT and frame.dtype == np.uint8
        assert frame.shape == frames[0].shape
    assert not np.array_equal(frames[0], frames[10])  # the agents walked off
    assert not np.array_equal(footer_of(frames[0]), footer_of(frames[1]))  # the tick on the status line moved on


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_identical_states_give_identical_frames(scenario):
    for first, second in zip(play(scenario, 15, seed=4), play(scenario, 15, seed=4), strict=True):
        np.testing.assert_array_equal(first, second)


def test_check_env_passes_for_crafting_with_rgb_array():
    check_env(gym.make("arena_envs/Crafting-v0", render_mode="rgb_array").unwrapped)
    check_env(gym.make("arena_envs/Crafting-v0", layout="random", render_mode="rgb_array").unwrapped)


# -- crafting --------------------------------------------------------------------------------


def test_crafting_stations_show_their_type_and_the_craft_in_progress():
    env = gym.make("arena_envs/Crafting-v0", render_mode="rgb_array")
    obs, _ = env.reset(seed=0)
    state, scenario = env.unwrapped.state, env.unwrapped.scenario
    stations = scenario.slots.st
    first = env.render()
    for x, z, kind in zip(state.ent_x[0, stations], state.ent_z[0, stations], state.ent_kind[0, stations],
                          strict=True):
        assert pixel(first, x, z, 20.0) == STATION_TYPE_COLOURS[scenario.params.station_types[kind]]
    assert not (first[:MAP] == CRAFTING_COLOUR).all(-1).any()  # nothing is being made yet (the legend shows the colour)

    crafter = ScriptedCrafter(scenario.params)
    while state.craft_left[0, 0] == 0:
        obs, *_ = env.step(crafter.act(obs))
    frame = env.render()
    station = stations.start + state.craft_station[0, 0]
    x, z = state.ent_x[0, station], state.ent_z[0, station]
    assert pixel(frame, x + 1.4, z, 20.0) == CRAFTING_COLOUR  # the outline of the station in use
    assert (footer_of(frame) == CRAFTING_COLOUR).all(-1).any()  # the recipe and its progress on the status line
    obs, *_ = env.step(crafter.act(obs))
    assert not np.array_equal(footer_of(env.render()), footer_of(frame))  # one more tick of progress


# -- team capture ----------------------------------------------------------------------------


def test_capture_zones_show_the_owner_and_the_capture_progress():
    env = team_capture_v0.parallel_env(render_mode="rgb_array")
    env.reset(seed=0)
    params, extra = env.scenario.params, env.world.extra
    a = POINTS["A"]
    x, z = POINT_XZ[a]
    on_ring = (x + params.capture_radius - 0.2, z)
    upper_right = (x + 1.2, z - 1.2)  # an eighth of a turn clockwise from twelve o'clock
    lower_left = (x - 1.2, z + 1.2)  # five eighths of a turn
    assert pixel(env.render(), *on_ring, 30.0) == NEUTRAL_COLOUR

    extra["point_owner"][0, a] = RED
    assert pixel(env.render(), *on_ring, 30.0) == TEAM_COLOURS[RED]

    wedge = lighter(TEAM_COLOURS[BLUE], 0.3)
    extra["point_capturer"][0, a] = BLUE
    extra["point_progress"][0, a] = params.capture_ticks // 4
    frame = env.render()
    assert pixel(frame, *upper_right, 30.0) == wedge and pixel(frame, *lower_left, 30.0) != wedge
    extra["point_progress"][0, a] = params.capture_ticks * 3 // 4
    frame = env.render()
    assert pixel(frame, *upper_right, 30.0) == wedge and pixel(frame, *lower_left, 30.0) == wedge


def test_status_line_shows_each_team_score_in_its_colour():
    env = team_capture_v0.parallel_env(render_mode="rgb_array")
    env.reset(seed=0)
    status = footer_of(env.render())
    for colour in TEAM_COLOURS:
        assert (status == colour).all(-1).any()
    env.world.extra["score"][0] = (12.0, 3.0)
    assert not np.array_equal(footer_of(env.render()), status)


def test_pettingzoo_render_test_passes_for_the_parallel_and_both_aec_forms(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")  # render_test opens the "human" window: off screen here
    forms = {"env": team_capture_v0.env, "raw_env": team_capture_v0.raw_env,
             "parallel_env": lambda **kwargs: parallel_to_aec(team_capture_v0.parallel_env(**kwargs))}
    for make in forms.values():
        render_test(make)
        aec = make(render_mode="rgb_array")
        aec.reset(seed=0)
        assert aec.metadata["render_modes"] == ["human", "rgb_array", "ansi"] and aec.render().shape[1] == MAP


def test_vector_env_tiles_its_first_worlds_exactly_as_single_worlds_render_them():
    seed, worlds = 5, 3
    envs = team_capture_v0.vector_env(num_envs=worlds, render_mode="rgb_array")
    singles = [team_capture_v0.parallel_env(render_mode="rgb_array") for _ in range(worlds)]
    envs.reset(seed=seed)
    for i, single in enumerate(singles):
        single.reset(seed=seed + i)  # world i of the batch plays like a single env seeded seed + i
    rng = np.random.default_rng(0)
    for _ in range(10):
        actions = random_actions(rng, (worlds, 4), 2)
        envs.step(actions)
        for i, single in enumerate(singles):
            single.step({name: agent_action(actions, i, a) for a, name in enumerate(single.possible_agents)})
    grid = envs.render()
    h, w, _ = singles[0].render().shape
    assert grid.shape == (2 * h + 2, 2 * w + 2, 3) and grid.dtype == np.uint8
    for i, single in enumerate(singles):
        row, column = divmod(i, 2)
        np.testing.assert_array_equal(grid[row * (h + 2):row * (h + 2) + h, column * (w + 2):column * (w + 2) + w],
                                      single.render())


def test_render_modes_of_team_capture():
    plain = team_capture_v0.parallel_env()
    plain.reset(seed=0)
    assert plain.render() is None
    assert team_capture_v0.vector_env(num_envs=2).render() is None
    for make in (team_capture_v0.parallel_env, team_capture_v0.env, team_capture_v0.raw_env):
        with pytest.raises(ValueError, match="rgb_array"):
            make(render_mode="rgb")
    with pytest.raises(ValueError, match="ansi"):
        team_capture_v0.vector_env(num_envs=2, render_mode="text")


# -- drawing primitives ----------------------------------------------------------------------


def test_wedge_sweeps_clockwise_from_twelve_o_clock():
    canvas = Canvas(10.0, pixels=100)
    canvas.wedge(0.0, 0.0, 8.0, 0.25, (255, 0, 0))
    red = (canvas.image[:100] == (255, 0, 0)).all(-1)
    rows, columns = np.nonzero(red)
    assert red.any() and (rows < 50).all() and (columns >= 50).all()  # the upper-right quarter only
    assert red.sum() == pytest.approx(np.pi * (8.0 * canvas.scale) ** 2 / 4, rel=0.05)


def test_text_is_clipped_at_the_edges_and_map_labels_stay_on_the_map():
    canvas = Canvas(10.0, pixels=100)
    end = canvas.write("ABC", top=-4, left=95)  # mostly outside: drawn in part, no error
    assert end == 95 + text_width("ABC")
    assert (canvas.image[:6, 95:] == 20).all(-1).any()
    canvas.label(9.9, 9.9, "EDGE")  # a label at the bottom edge stays above the status line
    assert (canvas.image[100:] == 250).all()


# -- Gymnasium's RecordVideo -----------------------------------------------------------------


def test_record_video_writes_an_episode_video(tmp_path):
    env = RecordVideo(gym.make("arena_envs/Foraging-v0", render_mode="rgb_array", max_ticks=12), str(tmp_path),
                      episode_trigger=lambda episode: True, disable_logger=True)
    env.reset(seed=0)
    env.action_space.seed(0)
    done = False
    while not done:
        _, _, terminated, truncated, _ = env.step(env.action_space.sample())
        done = terminated or truncated
    env.close()
    (video,) = tmp_path.glob("*.mp4")
    assert video.stat().st_size > 1000
