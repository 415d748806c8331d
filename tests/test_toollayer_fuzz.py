"""Hostile tool calls, generated: whatever a model (or an attacker) sends, the tool layer
answers with a result, never an exception it does not document, always with an
observation that can be encoded, and never with an effect on another env (issue 16).

Entry points: ``parse_decision`` (raises ToolCallError only), ``ToolCallWrapper.step`` on
Foraging and Crafting (never raises), the parallel wrapper on Team Capture (raises only
ValueError, for a step that is not a dict of known agents). Examples are bounded so
the file runs in about half a minute; ``ARENA_FUZZ_EXAMPLES=20000`` makes it a soak.
"""

from __future__ import annotations

import json
import math
import os

import gymnasium as gym
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import arena_envs  # noqa: F401
from arena_envs import team_capture_v0
from arena_envs.tools import Decision, ToolCallError, parse_decision
from arena_envs.world import TOOL_NAMES
from arena_envs.wrappers import ToolCallWrapper

FUZZ = settings(max_examples=int(os.environ.get("ARENA_FUZZ_EXAMPLES", "100")), deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

PARAM_NAMES = ["target_x", "target_y", "target_z", "target", "speed", "target_name", "item_name",
               "station_name", "radius", "filter_type", "message", "target_agent"]
HUGE = "Berry" * 200_000  # a megabyte
ODD_TEXT = ["", " ", "\ud800", "a\udfffb", "\ud83d\ude00", "\x00", "Berry1", "Furnace1", "iron_ingot", "all",
            "blue_agent_2", "red_agent_1", "resource", "null", "[", "{", '"', "\\", "é" * 70, HUGE]


def deep(depth: int, leaf=None) -> list:
    value = [] if leaf is None else [leaf]
    for _ in range(depth - 1):
        value = [value]
    return value


scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -0.0, 1e-45, 1e-9, 0.002, 2.0, 3.0, 25.0, 1e30, 2**1100]),
    st.text(max_size=12), st.sampled_from(ODD_TEXT),
)
keys = st.one_of(st.sampled_from(PARAM_NAMES), st.text(max_size=8), st.sampled_from(["\ud800", "x" * 10_000]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(keys, inner, max_size=4)),
                      max_leaves=12)
deep_values = st.integers(min_value=20, max_value=5000).map(deep)
params = st.dictionaries(keys, st.one_of(values, deep_values), max_size=5)
tool_names = st.one_of(st.sampled_from(TOOL_NAMES), st.sampled_from(ODD_TEXT), st.text(max_size=10), scalars)


@st.composite
def structured_calls(draw):
    """A call as data, in one of the shapes the parser reads (or almost)."""
    name, args = draw(tool_names), draw(st.one_of(params, values))
    shape = draw(st.sampled_from(["plain", "openai", "arguments string", "flat", "tool_calls", "wrapped",
                                  "reasoning", "decision"]))
    if shape == "plain":
        return {"tool": name, "params": args}
    if shape == "openai":
        return {"type": "function", "function": {"name": name, "arguments": args}}
    if shape == "arguments string":
        return {"name": name, "arguments": _dumps(args)}
    if shape == "flat":
        return {"tool": name, **(args if isinstance(args, dict) else {"x": args})}
    if shape == "tool_calls":
        return {"role": "assistant", "tool_calls": draw(st.lists(st.just({"function": {"name": name,
                                                                                      "arguments": args}}),
                                                                  max_size=3))}
    if shape == "wrapped":
        return {"tool_call": {"tool": name, "params": args}, "thought": draw(values)}
    if shape == "reasoning":
        return {"tool": name, "params": args if isinstance(args, dict) else {}, "reasoning": draw(values)}
    reasoning = draw(st.one_of(st.none(), st.sampled_from(ODD_TEXT)))
    decision = Decision("idle", args if isinstance(args, dict) else {}, reasoning)
    # a caller's Decision with any name, even one its constructor refuses (set after it was
    # made): the tool layer must refuse that clearly too
    decision.tool = name
    return decision


def _dumps(value) -> str:
    try:
        return json.dumps(value)
    except (ValueError, TypeError, RecursionError, OverflowError):
        return "{"


@st.composite
def hostile_calls(draw):
    """Anything: structured calls, their JSON text (fenced, in prose, deep), bare words, junk."""
    kind = draw(st.sampled_from(["data", "text", "fenced", "prose", "deep text", "bare", "junk", "none"]))
    if kind == "data":
        return draw(structured_calls())
    if kind in ("text", "fenced", "prose"):
        text = _dumps(draw(structured_calls().filter(lambda c: not isinstance(c, Decision))))
        return {"text": text, "fenced": f"```json\n{text}\n```", "prose": f"I will do this: {text} ok"}[kind]
    if kind == "deep text":
        depth = draw(st.integers(min_value=30, max_value=5000))
        opener = draw(st.sampled_from(["[", '{"a":']))
        closer = "]" if opener == "[" else "}"
        return '{"tool": "idle", "thought": ' + opener * depth + "1" * (opener != "[") + closer * depth + "}"
    if kind == "bare":
        return draw(st.one_of(st.sampled_from(TOOL_NAMES), st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,80}",
                                                                         fullmatch=True)))
    if kind == "junk":
        return draw(st.one_of(scalars, st.binary(max_size=20), st.lists(scalars, max_size=3),
                              st.sampled_from([object(), b"\xff\xfe", bytearray(b'{"tool":"idle"}')])))
    return None


def _checked(obs) -> None:
    """The observation can be rendered and serialized whatever the call was."""
    obs.to_text().encode("utf-8")
    json.dumps(obs.to_dict(), default=str).encode("utf-8")
    result = obs.last_action_result
    if result is not None:
        for text in (result.error_message, result.tool, result.message):
            assert text is None or len(text) <= 1100
    assert all(math.isfinite(v) for v in obs.position)


# -- parse_decision ------------------------------------------------------------------------------


@FUZZ
@given(hostile_calls())
def test_parse_decision_raises_only_tool_call_errors(raw):
    try:
        decision = parse_decision(raw)
    except ToolCallError as err:
        assert err.code == "INVALID_PARAMS"
        err.message.encode("utf-8")
        assert len(err.message) <= 1000
    else:
        assert isinstance(decision, Decision) and isinstance(decision.tool, str)


# -- the single-agent wrapper ----------------------------------------------------------------------

SCRIPT = [{"tool": "move_to", "params": {"target": [3, 0, 4]}}, None, "query_inventory",
          {"tool": "query_world", "params": {"radius": 15}}, None, "idle"]


def _run_script(env: ToolCallWrapper, seed: int) -> list[dict]:
    env.reset(seed=seed)
    return [env.step(call)[0].to_dict() for call in SCRIPT]


ENVS = {env_id: (ToolCallWrapper(gym.make(env_id)), ToolCallWrapper(gym.make(env_id)))
        for env_id in ("arena_envs/Foraging-v0", "arena_envs/Crafting-v0")}
REFERENCE = {env_id: _run_script(ToolCallWrapper(gym.make(env_id)), 7) for env_id in ENVS}


def _fuzz_wrapper(env_id: str, calls: list) -> None:
    hostile, bystander = ENVS[env_id]
    hostile.reset(seed=3)
    bystander.reset(seed=7)
    seen = []
    for i, call in enumerate(calls):
        obs, reward, terminated, truncated, info = hostile.step(call)
        _checked(obs)
        assert math.isfinite(reward) and isinstance(terminated, bool) and isinstance(truncated, bool)
        if i < len(SCRIPT):  # another env stepping alongside goes exactly as it does alone
            seen.append(bystander.step(SCRIPT[i])[0].to_dict())
    assert seen == REFERENCE[env_id][:len(seen)]


@FUZZ
@given(st.lists(hostile_calls(), min_size=1, max_size=6))
def test_foraging_wrapper_never_raises(calls):
    _fuzz_wrapper("arena_envs/Foraging-v0", calls)


@FUZZ
@given(st.lists(hostile_calls(), min_size=1, max_size=6))
def test_crafting_wrapper_never_raises(calls):
    _fuzz_wrapper("arena_envs/Crafting-v0", calls)


# -- the parallel wrapper on Team Capture ----------------------------------------------------------

TEAM = ToolCallWrapper(team_capture_v0.parallel_env(message_drop_prob=0.0))
AGENTS = TEAM.possible_agents


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(AGENTS), hostile_calls()), min_size=1, max_size=5))
def test_team_capture_wrapper_isolates_each_agents_call(steps):
    TEAM.reset(seed=1)
    for agent, call in steps:
        honest = next(name for name in AGENTS if name != agent)
        observations, rewards, *_ = TEAM.step({agent: call, honest: "query_inventory"})
        assert set(observations) == set(AGENTS)
        for obs in observations.values():
            _checked(obs)
        # the honest agent's own call is carried out whatever its neighbour sent
        assert observations[honest].last_action_result.success
        assert observations[honest].inventory_details is not None
        assert all(math.isfinite(r) for r in rewards.values())


@FUZZ
@given(st.one_of(scalars, st.lists(scalars, max_size=2),
                 st.dictionaries(st.one_of(st.text(max_size=5), st.integers()), st.none(), min_size=1, max_size=2)))
def test_a_malformed_parallel_step_is_a_value_error_that_changes_nothing(calls):
    TEAM.reset(seed=1)
    before = TEAM.unwrapped.world.copy()
    try:
        TEAM.step(calls)
    except ValueError:
        after = TEAM.unwrapped.world
        for (name, a), (_, b) in zip(before.arrays(), after.arrays(), strict=True):
            assert (a == b).all(), name
    else:  # only a dict of known agents (or an empty one) is a step
        assert isinstance(calls, dict) and set(calls) <= set(AGENTS)
