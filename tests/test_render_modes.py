"""render_mode "human" (a pygame window, off screen with SDL's dummy driver), "ansi" (text
maps) and "rgb_array" in every form: single, native vector, PettingZoo parallel and AEC, team vector."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pygame
import pytest
from gymnasium.utils.env_checker import check_env

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs import team_capture_v0
from arena_envs.render import RENDER_MODES, legend

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")

SINGLE_2D = ("arena_envs/Foraging-v0", "arena_envs/Crafting-v0")


@pytest.fixture(autouse=True)
def off_screen(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    yield
    pygame.display.quit()  # whatever a failing test left open


def shown() -> np.ndarray:
    """What the window shows now, as an (H, W, 3) image."""
    return pygame.surfarray.array3d(pygame.display.get_surface()).swapaxes(0, 1)


def sampled(space, seed: int = 0):
    space.seed(seed)
    return space.sample


BUILDERS = {
    "single": lambda mode: gym.make("arena_envs/Foraging-v0", render_mode=mode),
    "vector": lambda mode: gym.make_vec("arena_envs/Crafting-v0", num_envs=3, render_mode=mode),
    "parallel": lambda mode: team_capture_v0.parallel_env(render_mode=mode),
    "aec": lambda mode: team_capture_v0.env(render_mode=mode),
    "team vector": lambda mode: team_capture_v0.vector_env(num_envs=2, render_mode=mode),
}


def form(name: str, render_mode: str):
    """An env of one form, reset with seed 0, and a function that steps it once with random actions."""
    env = BUILDERS[name](render_mode)
    env.reset(seed=0)
    if name == "parallel":
        return env, lambda: env.step({a: env.action_space(a).sample() for a in env.agents})
    if name == "aec":
        return env, lambda: env.step(env.action_space(env.agent_selection).sample())
    sample = sampled(env.action_space)
    return env, lambda: env.step(sample())


@pytest.mark.parametrize("name", BUILDERS)
def test_the_human_window_shows_the_frame_of_every_form_and_closes_with_the_env(name):
    twin, _ = form(name, "rgb_array")
    env, step = form(name, "human")
    assert env.metadata["render_modes"] == RENDER_MODES and env.metadata["render_fps"] > 0
    assert pygame.display.get_init() and pygame.display.get_surface() is not None  # reset opened it
    np.testing.assert_array_equal(shown(), twin.render())  # the window shows exactly the rgb_array frame
    assert env.render() is None
    before = shown().copy()
    for _ in range(8):  # two rounds of the AEC form's four agents
        step()
    assert not np.array_equal(shown(), before)  # each step redraws it
    env.close()
    assert not pygame.display.get_init()  # closed cleanly


def test_closing_the_window_stops_the_drawing_but_not_the_env():
    env = gym.make("arena_envs/Foraging-v0", render_mode="human")
    env.reset(seed=0)
    pygame.event.post(pygame.event.Event(pygame.QUIT))
    env.step(env.action_space.sample())
    assert not pygame.display.get_init()
    env.step(env.action_space.sample())  # no window comes back, nothing raises
    assert not pygame.display.get_init()
    env.close()


@pytest.mark.parametrize("env_id", [*SINGLE_2D, "arena_envs/TreasureHunt-v0"])
def test_gymnasium_check_env_with_every_declared_render_mode(env_id):
    env = gym.make(env_id)
    check_env(env.unwrapped)  # renders with each mode in metadata["render_modes"], "human" included
    modes = env.metadata["render_modes"]
    assert modes == (["ansi"] if "Treasure" in env_id else RENDER_MODES)
    for mode in modes:
        env = gym.make(env_id, render_mode=mode)
        env.reset(seed=1)
        result = env.render()
        assert {"human": result is None, "ansi": isinstance(result, str),
                "rgb_array": isinstance(result, np.ndarray) and result.dtype == np.uint8}[mode]
        env.close()


def test_human_without_pygame_says_what_to_install(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "pygame", None)  # as if it were not installed
    for make in (lambda: gym.make("arena_envs/Foraging-v0", render_mode="human"),
                 lambda: team_capture_v0.parallel_env(render_mode="human")):
        with pytest.raises(ModuleNotFoundError, match=r"pip install -e '\.\[render\]'"):
            make()


def map_lines(text: str) -> list[str]:
    """The map's rows, without the frame around it."""
    lines = text.splitlines()
    end = lines.index(lines[0], 1)
    return [line[1:-1] for line in lines[1:end]]


def cell(text: str, x: float, z: float, half_size: float) -> str:
    rows = map_lines(text)
    row = int((z + half_size) / (2 * half_size) * len(rows))
    column = int((x + half_size) / (2 * half_size) * len(rows[0]))
    return rows[min(row, len(rows) - 1)][min(column, len(rows[0]) - 1)]


def test_the_text_map_shows_the_agent_resources_status_and_legend():
    env = gym.make("arena_envs/Foraging-v0", layout="classic", render_mode="ansi")
    env.reset(seed=0)
    state, scenario = env.unwrapped.state, env.unwrapped.scenario
    half = scenario.params.half_size
    text = env.render()
    assert cell(text, state.x[0, 0], state.z[0, 0], half) == "@"
    assert cell(text, -5.0, 3.0, half) == "*"  # Berry1 of the classic layout
    assert text.splitlines()[-2] == "tick 0 · score 0 · health 100"
    assert text.splitlines()[-1].startswith("@ agent  * berry")
    state.ent_alive[0, 0] = False  # Berry1 collected
    assert cell(env.render(), -5.0, 3.0, half) != "*"
    for _ in range(20):
        env.step({"tool": 0, "move_to": np.array([20.0, -20.0, 1.0], np.float32)})
    moved = env.render()
    assert cell(moved, state.x[0, 0], state.z[0, 0], half) == "@" and moved.count("@") == 2  # the map and legend
    assert "tick 20" in moved


def test_the_team_capture_text_map_shows_both_teams_and_the_points_owners():
    env = team_capture_v0.parallel_env(render_mode="ansi", agents_per_team=3)
    env.reset(seed=3)
    body = "".join(map_lines(env.render()))
    assert body.count("B") == 3 and body.count("R") == 3 and ":" in body and "b" not in body
    env.world.extra["point_owner"][0, 0] = 0  # the first point goes blue
    assert "b" in "".join(map_lines(env.render()))
    legend_line = env.render().splitlines()[-1]
    for entry in legend(env.scenario, env.scene):
        assert (f"{entry.char} {entry.label}" in legend_line) == (entry.char is not None)


def test_vector_ansi_shows_the_first_worlds():
    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=6, render_mode="ansi")
    envs.reset(seed=0)
    text = envs.render()
    assert [line for line in text.splitlines() if line.startswith("world ")] == [f"world {b}" for b in range(4)]
