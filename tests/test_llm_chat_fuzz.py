"""Any reply a model server may hand back gets a clean observation (issue 34, item 10).

A reply whose ``tool_calls`` was ``5``, ``1.5`` or ``True`` raised ``TypeError`` in
``ChatSession._declare`` on 0408f98 and ended the episode (57 of 10,000 fuzzed replies).
Here whole reply messages, every field any JSON value (and the calls of every format, well
or badly written), are played on chat envs of every call format: each gets a ChatStep whose
transcript is valid. ``make soak`` runs it at 10,000 examples (``ARENA_FUZZ_EXAMPLES``).
"""

from __future__ import annotations

import json
import math
import os

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from llm_helpers import CHAT_MESSAGE_SCHEMA

import arena_envs  # noqa: F401
from arena_envs.llm import FORMATS, ChatEnv, format_reply, validate_messages
from arena_envs.llm.parsers import PARSE_STATUSES

HUNT = "arena_envs/TreasureHunt-v0"
FORAGING = "arena_envs/Foraging-v0"
TOOLS = ["pwd", "cd", "ls", "cat", "move_to", "collect", "idle", "query_world"]

SCALARS = (st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
           | st.text(max_size=30))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                          max_size=4), max_leaves=10)
ARGUMENTS = JSON | st.dictionaries(st.sampled_from(["file", "path", "target", "radius", "x"]), JSON, max_size=3)
FUNCTION = JSON | st.fixed_dictionaries({}, optional={
    "name": JSON | st.sampled_from(TOOLS), "arguments": ARGUMENTS | ARGUMENTS.map(lambda a: json.dumps(a))})
ENTRY = JSON | st.fixed_dictionaries({}, optional={"id": JSON | st.text(max_size=8), "type": JSON | st.just("function"),
                                                   "function": FUNCTION})
CALLS = st.lists(st.tuples(st.sampled_from(TOOLS), st.dictionaries(st.sampled_from(["file", "radius"]), JSON,
                                                                    max_size=2)), min_size=1, max_size=3)
# a call written in a format's own syntax (its text, or its tool_calls), whole or cut short
WRITTEN = st.tuples(st.sampled_from(FORMATS), CALLS, st.integers(0, 400)).map(
    lambda t: _written(*t))
CONTENT = JSON | WRITTEN | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": WRITTEN | JSON}),
                                    max_size=2)
REPLY = st.fixed_dictionaries({}, optional={
    "role": st.just("assistant"), "content": CONTENT, "tool_calls": JSON | st.lists(ENTRY, max_size=3),
    "reasoning_content": JSON, "name": JSON, "refusal": JSON, "audio": JSON})
# a reply as a server or a scripted model hands it over: a message, or the text alone
REPLIES = REPLY | WRITTEN.map(lambda w: w if isinstance(w, str) else {"role": "assistant", "tool_calls": w})


def _written(fmt: str, calls: list, cut: int) -> object:
    if fmt == "bare_name":  # a bare name carries no arguments
        calls = [(name, {}) for name, _ in calls]
    message = format_reply(calls, fmt)
    if fmt == "openai":
        return message["tool_calls"] if cut % 2 else json.dumps(message["tool_calls"])[:cut or None]
    return message["content"][:cut or None]


_ENVS: dict[tuple[str, str, bool], ChatEnv] = {}
MESSAGE = Draft202012Validator(CHAT_MESSAGE_SCHEMA)  # built once: 10,000 examples check their messages


def env_for(scenario: str, fmt: str, strict: bool) -> ChatEnv:
    """One env per scenario, format and parse mode, kept over the examples (reset when its episode ends)."""
    key = (scenario, fmt, strict)
    env = _ENVS.get(key)
    if env is None:
        env = _ENVS[key] = ChatEnv(scenario, call_format=fmt, strict_parse=strict, max_turns=12)
        env.reset(seed=len(_ENVS))
    return env


@pytest.fixture(scope="module", autouse=True)
def _close_envs():
    yield
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()


@settings(max_examples=int(os.environ.get("ARENA_FUZZ_EXAMPLES", "150")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(reply=REPLIES, scenario=st.sampled_from([HUNT, FORAGING]), fmt=st.sampled_from(FORMATS),
       strict=st.booleans())
@example(reply={"role": "assistant", "content": "", "tool_calls": 5}, scenario=HUNT, fmt="openai", strict=False)
@example(reply={"role": "assistant", "content": "", "tool_calls": 1.5}, scenario=FORAGING, fmt="openai", strict=True)
@example(reply={"role": "assistant", "content": None, "tool_calls": True}, scenario=HUNT, fmt="hermes", strict=False)
@example(reply={"tool_calls": {"function": {"name": "pwd"}}}, scenario=HUNT, fmt="openai", strict=False)
def test_any_reply_gets_a_clean_observation_and_a_valid_transcript(reply, scenario, fmt, strict):
    env = env_for(scenario, fmt, strict)
    if env.session.done:
        env.reset(seed=1)
    before = len(env.messages)
    step = env.step(reply)
    assert step.messages and step.messages[-1]["role"] in ("user", "tool")
    assert math.isfinite(step.reward)
    assert step.info["parse_status"] in PARSE_STATUSES
    messages = env.messages
    assert len(messages) == before + 1 + len(step.messages)  # the reply, then its answers
    validate_messages(messages)  # the whole transcript, by the project's validator
    for message in messages[before:]:  # and the new messages by the JSON schema of chat messages
        MESSAGE.validate(message)


@pytest.mark.parametrize("role", [5, None, ["assistant"], "user", {"a": 1}])
def test_a_reply_whose_role_is_not_assistant_is_refused_and_the_episode_goes_on(role):
    env = ChatEnv(HUNT)
    env.reset(seed=0)
    with pytest.raises(ValueError, match="assistant"):
        env.step({"role": role, "content": "pwd"})
    assert env.step("pwd").messages[0]["content"] == "/"
    env.close()
