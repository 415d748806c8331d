"""Hostile tool calls at the edges (issue 16): deep JSON, huge and unencodable text, nulls
for optional parameters, booleans as indices and vanishing speeds. Each case failed
(raised, echoed, or was accepted) before."""

from __future__ import annotations

import json
import sys

import gymnasium as gym
import numpy as np
import pytest

import arena_envs  # noqa: F401
from arena_envs import team_capture_v0
from arena_envs.actions import decode_actions, min_speed
from arena_envs.observations import MAX_TEXT_CHARS, bounded_text
from arena_envs.tools import Decision, ToolCallError, parse_decision, validate_params
from arena_envs.tools.decision import MAX_JSON_DEPTH
from arena_envs.world import INVALID_PARAMS, MOVE_TO, OK
from arena_envs.wrappers import ToolCallWrapper

DEPTHS = [50, 100, 333, 985, 1000, 2000, 3500, 5000]


def foraging() -> ToolCallWrapper:
    return ToolCallWrapper(gym.make("arena_envs/Foraging-v0"))


def deep_payloads(depth: int) -> dict[str, object]:
    """The issue's payload and its relatives, ``depth`` levels deep."""
    nested: list = []
    inner = nested
    for _ in range(depth - 1):
        inner.append([])
        inner = inner[0]
    return {
        "thought as text": '{"tool":"idle","thought":' + "[" * depth + "]" * depth + "}",
        "params as text": '{"tool":"move_to","params":{"target":' + "[" * depth + "]" * depth + "}}",
        "arguments string": json.dumps({"name": "idle", "arguments": "[" * depth + "]" * depth}),
        "objects as text": '{"tool":"idle","reasoning":' + '{"a":' * depth + "1" + "}" * depth + "}",
        "thought as data": {"tool": "idle", "thought": nested},
        "params as data": {"tool": "collect", "params": {"target_name": nested}},
        "plain with data reasoning": {"tool": "idle", "params": {}, "reasoning": nested},
    }


def call_deep_in_the_stack(function, *args, spare: int = 150):
    """``function(*args)`` with the interpreter's stack all but full (``spare`` frames left)."""
    def descend(levels: int):
        return function(*args) if levels <= 0 else descend(levels - 1)

    here = len(_frames())
    return descend(sys.getrecursionlimit() - here - spare)


def _frames() -> list:
    frame, frames = sys._getframe(), []
    while frame is not None:
        frames.append(frame)
        frame = frame.f_back
    return frames


def _parsed_or_error(raw):
    try:
        return parse_decision(raw)
    except ToolCallError as err:
        return err


# -- item 2: nesting of any depth ---------------------------------------------------------------


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_nesting_is_a_clear_invalid_params_from_parse_decision(depth):
    for name, payload in deep_payloads(depth).items():
        result = _parsed_or_error(payload)
        if name == "params as data":  # the parser leaves parameters to validation, which refuses them
            assert isinstance(result, Decision)
            with pytest.raises(ToolCallError, match="must be a string"):
                validate_params(result.tool, result.params)
            continue
        assert isinstance(result, ToolCallError), name
        assert result.code == "INVALID_PARAMS" and "nested too deeply" in result.message, name
        assert f"more than {MAX_JSON_DEPTH} levels" in result.message


@pytest.mark.parametrize("depth", DEPTHS)
def test_deep_nesting_costs_a_tick_through_the_wrapper(depth):
    env = foraging()
    env.reset(seed=0)
    for payload in deep_payloads(depth).values():
        obs, *_ = env.step(payload)
        assert obs.last_action_result.error_code == "INVALID_PARAMS"
        obs.to_text().encode()


@pytest.mark.parametrize("depth", [50, 985, 5000])
def test_deep_nesting_under_a_deep_call_stack(depth):
    env = foraging()
    env.reset(seed=0)
    for payload in deep_payloads(depth).values():
        result = call_deep_in_the_stack(_parsed_or_error, payload)
        assert isinstance(result, (Decision, ToolCallError))
        obs, *_ = call_deep_in_the_stack(env.step, payload)
        assert obs.last_action_result.error_code == "INVALID_PARAMS"


def test_a_circular_thought_is_refused_not_raised():
    thought: list = []
    thought.append(thought)
    with pytest.raises(ToolCallError, match="nested too deeply"):
        parse_decision({"tool": "idle", "thought": thought})
    env = foraging()
    env.reset(seed=0)
    obs, *_ = env.step({"tool": "idle", "params": {}, "reasoning": thought})
    assert obs.last_action_result.error_code == "INVALID_PARAMS"


def test_shallow_calls_still_read_at_the_depth_limit():
    nested = "[" * (MAX_JSON_DEPTH - 2) + "]" * (MAX_JSON_DEPTH - 2)
    decision = parse_decision('{"tool": "idle", "thought": ' + nested + "}")
    assert decision.tool == "idle" and decision.reasoning.startswith("[[")
    # brackets inside strings are text, not nesting
    text = json.dumps({"tool": "send_message", "params": {"message": "[" * 5000}})
    assert parse_decision(text).tool == "send_message"


# -- item 7: text from a model is bounded and encodable -----------------------------------------


def test_a_huge_target_name_comes_back_truncated():
    env = foraging()
    env.reset(seed=0)
    name = "Berry" * 2_000_000  # 10 MB
    obs, *_ = env.step({"tool": "collect", "params": {"target_name": name}})
    message = obs.last_action_result.error_message
    assert obs.last_action_result.error_code == "NOT_FOUND"
    assert len(message) <= MAX_TEXT_CHARS and "more characters" in message
    obs, *_ = env.step({"tool": name, "params": {}})
    assert len(obs.last_action_result.error_message) <= MAX_TEXT_CHARS
    assert len(obs.last_action_result.tool) <= 64
    assert len(obs.to_text()) < 5000


@pytest.mark.parametrize("text", ["\ud800", "x\udfffy", "\ud83d", "a" * 70 + "\ud800"])
def test_unencodable_text_from_a_model_becomes_encodable(text):
    env = foraging()
    env.reset(seed=0)
    for call in ({"tool": text}, {"tool": "collect", "params": {"target_name": text}},
                 {"tool": "idle", "params": {text: 1}}, {"tool": "move_to", "params": {"target": text}}):
        obs, *_ = env.step(call)
        assert not obs.last_action_result.success
        obs.to_text().encode()
        json.dumps(obs.to_dict()).encode()


def test_messages_sent_are_bounded_and_encodable():
    env = ToolCallWrapper(team_capture_v0.parallel_env(message_drop_prob=0.0))
    env.reset(seed=0)
    text = "\ud800" + "m" * 100_000
    observations, *_ = env.step({"blue_agent_1": {"tool": "send_message", "params": {"message": text}}})
    received = [m.content for m in observations["blue_agent_2"].messages]
    assert received and all(len(content) <= MAX_TEXT_CHARS for content in received)
    observations["blue_agent_2"].to_text().encode()


def test_a_surrogate_pair_is_kept_as_its_character():
    assert bounded_text("go \ud83d\ude00") == "go \U0001F600"
    assert bounded_text("ok") == "ok" and bounded_text(bounded_text("é" * 5000)) == bounded_text("é" * 5000)


def test_reasoning_is_bounded():
    decision = parse_decision({"tool": "idle", "reasoning": "r" * 1_000_000})
    assert len(decision.reasoning) <= 4 * MAX_TEXT_CHARS


# -- item 12: null for an optional parameter means its default ----------------------------------


@pytest.mark.parametrize("tool, params, expected", [
    ("query_world", {"radius": None}, {"radius": 20.0, "filter_type": None}),
    ("query_world", {"radius": None, "filter_type": None}, {"radius": 20.0, "filter_type": None}),
    ("move_to", {"target": [1, 0, 2], "speed": None},
     {"target_x": 1.0, "target_y": 0.0, "target_z": 2.0, "speed": 1.0}),
    ("move_to", {"target": None, "target_x": 1, "target_y": 0, "target_z": 2},
     {"target_x": 1.0, "target_y": 0.0, "target_z": 2.0, "speed": 1.0}),
    ("send_message", {"message": "hi", "target_agent": None}, {"message": "hi", "target_agent": "all"}),
])
def test_null_means_the_default(tool, params, expected):
    assert validate_params(tool, params) == expected


def test_null_for_a_required_parameter_is_still_refused():
    with pytest.raises(ToolCallError, match="'target_name' must be a string, got null"):
        validate_params("collect", {"target_name": None})


def test_strict_mode_nulls_through_the_wrapper():
    env = foraging()
    env.reset(seed=0)
    obs, *_ = env.step('{"name": "query_world", "arguments": "{\\"radius\\": null, \\"filter_type\\": null}"}')
    assert obs.last_action_result.success and obs.query_result is not None


# -- also tighten: booleans as indices, vanishing speeds ----------------------------------------


def _space_and_params():
    env = gym.make("arena_envs/Foraging-v0")
    return env.action_space, env.unwrapped.scenario.params


@pytest.mark.parametrize("action", [
    {"tool": True},
    {"tool": np.bool_(False)},
    {"tool": np.int64(1), "collect": True},
    {"tool": np.int64(1), "collect": np.array(True)},
    {"tool": np.int64(0), "move_to": np.array([True, False, True])},
])
def test_booleans_are_not_indices(action):
    space, params = _space_and_params()
    with pytest.raises(ValueError, match="not boolean"):
        decode_actions(action, (1,), space, params, single=True)
    env = gym.make("arena_envs/Foraging-v0")
    env.reset(seed=0)
    with pytest.raises(ValueError, match="not boolean"):
        env.step(action)


@pytest.mark.parametrize("speed", [1e-45, 1e-30, 1e-9, 0.001])
def test_a_vanishing_speed_is_refused(speed):
    space, params = _space_and_params()
    assert min_speed(params) == 0.002
    move = {"tool": np.int64(MOVE_TO), "move_to": np.array([1.0, 1.0, speed], np.float32)}
    assert decode_actions(move, (1,), space, params, single=True).failure[0, 0] == INVALID_PARAMS
    batch = {"tool": np.full(3, MOVE_TO), "move_to": np.array([[1, 1, speed], [1, 1, 0.002], [1, 1, 2]], np.float32)}
    assert decode_actions(batch, (3,), space, params).failure[:, 0].tolist() == [INVALID_PARAMS, OK, OK]
    with pytest.raises(ToolCallError, match=r"'speed' must be >= 0\.002"):
        validate_params("move_to", {"target": [1, 0, 1], "speed": speed})


def test_the_speed_floor_follows_the_episode_length():
    _, params = _space_and_params()
    longer = type(params)(**{**params.__dict__, "max_ticks": 6000})
    assert min_speed(longer) == 0.001  # never below a thousandth
    shorter = type(params)(**{**params.__dict__, "max_ticks": 60})
    assert min_speed(shorter) == pytest.approx(0.017)
