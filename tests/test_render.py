"""rgb_array frames: shape, dtype, determinism, and that they follow the world."""

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import arena_envs  # noqa: F401
from arena_envs.render import MAP_PIXELS, STATUS_HEIGHT, Canvas, save_gif, tile

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def test_check_env_with_rgb_array():
    check_env(gym.make("arena_envs/Foraging-v0", render_mode="rgb_array").unwrapped)


def test_frames_have_the_documented_shape_and_follow_the_world():
    env = gym.make("arena_envs/Foraging-v0", layout="classic", render_mode="rgb_array")
    env.reset(seed=0)
    first = env.render()
    height, width, colours = first.shape
    assert (width, colours) == (MAP_PIXELS, 3) and height > MAP_PIXELS + STATUS_HEIGHT and first.dtype == np.uint8
    env.step({"tool": 0, "move_to": np.array([10.0, -10.0, 1.0], np.float32)})
    moved = env.render()
    assert not np.array_equal(first, moved)

    twin = gym.make("arena_envs/Foraging-v0", layout="classic", render_mode="rgb_array")
    twin.reset(seed=0)
    twin.step({"tool": 0, "move_to": np.array([10.0, -10.0, 1.0], np.float32)})
    np.testing.assert_array_equal(twin.render(), moved)


def test_collected_resources_disappear_from_the_frame():
    env = gym.make("arena_envs/Foraging-v0", layout="classic", render_mode="rgb_array")
    env.reset(seed=0)
    state = env.unwrapped.state
    before = env.render()
    state.ent_alive[0, 0] = False  # Berry1 at (-5, 3)
    after = env.render()
    canvas = Canvas(25.0)
    col, row = int((-5 + 25) * canvas.scale), int((3 + 25) * canvas.scale)
    assert tuple(before[row, col]) != tuple(after[row, col])


def test_vector_env_tiles_the_first_worlds_and_no_render_mode_renders_nothing(tmp_path):
    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=6, render_mode="rgb_array")
    envs.reset(seed=1)
    grid = envs.render()
    h, w, _ = envs.unwrapped.frame(0).shape
    assert grid.shape == (2 * h + 2, 2 * w + 2, 3)
    plain = gym.make("arena_envs/Foraging-v0")
    plain.reset(seed=0)
    assert plain.render() is None
    with pytest.raises(ValueError, match="render_mode"):
        gym.make("arena_envs/Foraging-v0", render_mode="rgb")
    path = save_gif([grid, grid[::-1].copy()], tmp_path / "a.gif")
    assert path.stat().st_size > 0
    assert tile([grid]).shape == grid.shape
