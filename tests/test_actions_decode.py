"""The single-env fast decode agrees with the general array path on every action it takes."""

import dataclasses

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arena_envs  # noqa: F401
from arena_envs.actions import _decode_arrays, _decode_single, decode_actions
from arena_envs.world import TOOL_NAMES

ENV_IDS = ["arena_envs/Foraging-v0", "arena_envs/Crafting-v0"]
INT_ODDITIES = [0, 1, -1, 2, 7, 99, 2**40]
FLOAT_ODDITIES = [0.0, -0.0, 0.5, -1.0, 50.0, 1e30, np.nan, np.inf, -np.inf]
ODD_DTYPES = [np.int8, np.int64, np.uint8, np.float16, np.float32, np.float64, np.bool_]


def _spaces(env_id):
    env = gym.make(env_id)
    return env.action_space, env.unwrapped.scenario.params


SPACES = {env_id: _spaces(env_id) for env_id in ENV_IDS}


@st.composite
def single_actions(draw, space):
    """A sampled action, then a few fields made odd: values, dtypes, shapes, Python scalars."""
    action = space.sample()
    tool = draw(st.integers(0, len(TOOL_NAMES) - 1))
    action["tool"] = np.int64(tool)
    # the chosen tool's own field is the one that matters, so it is made odd most often
    own = [TOOL_NAMES[tool]] * 4 if TOOL_NAMES[tool] in action else []
    for _ in range(draw(st.integers(0, 3))):
        key = draw(st.sampled_from(own + ["tool", "move_to", "collect", "craft", "send_message", "query_world"]))
        value = action[key] if key != "query_world" else action[key]["radius"]
        change = draw(st.sampled_from(["number", "dtype", "shape", "python", "none"]))
        if value is None:  # already made odd
            continue
        if change == "number":
            value = np.array(value, copy=True)
            flat = value.reshape(-1)
            odd = draw(st.sampled_from(FLOAT_ODDITIES if value.dtype.kind == "f" else INT_ODDITIES))
            with np.errstate(all="ignore"):  # an odd value in an odd dtype wraps, as it would for a user
                flat[draw(st.integers(0, flat.size - 1))] = np.array(odd).astype(value.dtype)
        elif change == "dtype":
            with np.errstate(all="ignore"):
                value = np.asarray(value).astype(draw(st.sampled_from(ODD_DTYPES)))
        elif change == "shape":
            value = np.asarray(value).reshape(-1)[:1] if np.size(value) > 1 else np.asarray(value).reshape(1, 1)
        elif change == "python":
            value = np.asarray(value).reshape(-1)[0].item() if np.size(value) else 0
        else:
            value = None
        if key == "query_world":
            action[key] = {**action[key], "radius": value}
        else:
            action[key] = value
    return action


def _decoded_or_error(decode, *args):
    try:
        return decode(*args)
    except ValueError as err:
        return str(err)


@pytest.mark.parametrize("env_id", ENV_IDS)
@settings(max_examples=800, deadline=None)
@given(data=st.data())
def test_fast_single_decode_equals_the_array_path(env_id, data):
    space, params = SPACES[env_id]
    action = data.draw(single_actions(space))
    general = _decoded_or_error(_decode_arrays, action, (1,), space, params, True)
    fast = _decode_single(action, space, params)
    if fast is not None:  # the fast path only takes actions the array path accepts
        assert not isinstance(general, str), general
        for field in dataclasses.fields(general):
            np.testing.assert_array_equal(getattr(fast, field.name), getattr(general, field.name), err_msg=field.name)
    public = _decoded_or_error(decode_actions, action, (1,), space, params, True)
    if isinstance(general, str):
        assert public == general
    else:
        assert not isinstance(public, str), public
        for field in dataclasses.fields(general):
            np.testing.assert_array_equal(getattr(public, field.name), getattr(general, field.name), err_msg=field.name)


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_the_fast_path_takes_plain_valid_actions(env_id):
    """Guards the speed path itself: sampled actions must not all fall back to the array path."""
    space, params = SPACES[env_id]
    space.seed(0)
    taken = sum(_decode_single(space.sample(), space, params) is not None for _ in range(200))
    assert taken >= 150
