"""Chat environments: messages in and out, ticks per call, prefix-stable transcripts, batched sessions."""

import asyncio
import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llm_helpers import PrefixChecker, validate_transcript, validated_sessions  # noqa: F401 (a fixture)

import arena_envs  # noqa: F401
from arena_envs.llm import FORMATS, ChatBatch, ChatEnv, ChatPool, format_reply
from arena_envs.llm.scripted import policy_for

pytestmark = pytest.mark.usefixtures("validated_sessions")

FORAGING = "arena_envs/Foraging-v0"
HUNT = "arena_envs/TreasureHunt-v0"
TEXT_FORMATS = [f for f in FORMATS if f != "bare_name"]


def tick_of(user_message: dict) -> int:
    """The tick of the observation in a user message (its line starting with "tick ")."""
    line = next(line for line in user_message["content"].splitlines() if line.startswith("tick "))
    return int(line.split()[1])


def test_opening_messages_and_tools():
    env = ChatEnv(HUNT)
    messages, tools = env.reset(seed=4)
    assert [m["role"] for m in messages] == ["system", "user"]
    assert "check_treasure" in messages[0]["content"] and "[turn 0/50" in messages[1]["content"]
    assert {t["function"]["name"] for t in tools} == {"pwd", "cd", "ls", "cat", "check_treasure", "give_up"}
    env = ChatEnv(FORAGING)
    messages, tools = env.reset(seed=4)
    assert messages[0]["content"].startswith("# Foraging") and "tick 0" in messages[1]["content"]
    assert "move_to" in {t["function"]["name"] for t in tools}
    env.close()


def test_treasure_hunt_played_in_every_format_is_prefix_stable_and_valid():
    rng = random.Random(0)
    env = ChatEnv(HUNT)
    messages, _ = env.reset(seed=11)
    checker = PrefixChecker(messages)
    while True:
        fmt = rng.choice(TEXT_FORMATS)  # a different format every turn
        step = env.step(format_reply(policy_for(env.messages)(env.messages), fmt))
        checker.check(env.messages, step.messages)
        assert step.info["format"] == fmt and step.info["calls_parsed"] == 1
        step.messages[0]["content"] = "changed by the caller"  # must not reach the transcript
        if step.terminated or step.truncated:
            break
    assert step.info["success"] and step.reward > 0.9
    assert env.messages[-2]["content"] != "changed by the caller"
    validate_transcript(env.messages)
    with pytest.raises(RuntimeError, match="reset"):
        env.step("pwd")


def test_several_calls_run_as_consecutive_ticks_each_with_its_tool_message():
    env = ChatEnv(FORAGING)
    env.reset(seed=2)
    reply = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "a1", "type": "function", "function": {"name": "move_to", "arguments": '{"target": [5, 0, 5]}'}},
        {"id": "a2", "type": "function", "function": {"name": "query_inventory", "arguments": "{}"}},
        {"id": "a3", "type": "function", "function": {"name": "query_world", "arguments": '{"radius": 5}'}}]}
    step = env.step(reply)
    assert [m["role"] for m in step.messages] == ["tool", "tool", "tool", "user"]
    assert [m["tool_call_id"] for m in step.messages[:3]] == ["a1", "a2", "a3"]
    results = [json.loads(m["content"]) for m in step.messages[:3]]
    assert [r["tool"] for r in results] == ["move_to", "query_inventory", "query_world"]
    assert "inventory_details" in results[1] and "query_result" in results[2]
    assert step.info["ticks"] == 3 and tick_of(step.messages[-1]) == 3
    validate_transcript(env.messages)


def test_tool_calls_without_ids_get_them_in_the_transcript_and_their_answers():
    env = ChatEnv(HUNT)
    env.reset(seed=1)
    reply = {"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "pwd", "arguments": "{}"}},
        {"id": None, "type": "function", "function": {"name": "ls", "arguments": "{}"}}]}
    step = env.step(reply)
    assert [c["id"] for c in env.messages[2]["tool_calls"]] == ["call_1_0", "call_1_1"]
    assert [m["tool_call_id"] for m in step.messages[:2]] == ["call_1_0", "call_1_1"]
    assert reply["tool_calls"][1]["id"] is None  # the caller's message is left alone
    validate_transcript(env.messages)


def test_calls_beyond_the_limit_are_answered_but_not_run():
    env = ChatEnv(FORAGING, max_calls=2)
    env.reset(seed=2)
    step = env.step(format_reply([("idle", {})] * 5, "hermes"))
    tool_messages = [m for m in step.messages if m["role"] == "tool"]
    assert len(tool_messages) == 5 and step.info["ticks"] == 2
    assert [json.loads(m["content"]).get("error_code") for m in tool_messages[2:]] == ["NOT_RUN"] * 3
    assert [m["tool_call_id"] for m in tool_messages] == [f"call_1_{k}" for k in range(5)]


def test_a_reply_without_a_call_is_one_tick_carrying_on_and_a_counted_parse_failure():
    env = ChatEnv(FORAGING)
    env.reset(seed=3)
    env.step(format_reply([("move_to", {"target": [20, 0, 20]})], "openai"))
    before = env.messages[-1]["content"]
    step = env.step("Let me keep walking for a while.")
    assert step.info["parse_failure"] and step.info["format"] == "none" and step.info["ticks"] == 1
    assert [m["role"] for m in step.messages] == ["user"] and "No tool call" in step.messages[0]["content"]
    assert tick_of(step.messages[0]) == tick_of({"content": before}) + 1
    assert step.messages[0]["content"].split("\n")[1].split(" at ")[1] != before.split(" at ")[1]  # it walked on
    assert not (step.terminated or step.truncated)


def test_a_reply_without_a_call_can_end_the_episode():
    env = ChatEnv(HUNT, on_no_call="end")
    env.reset(seed=0)
    step = env.step("I give up thinking.")
    assert step.truncated and step.info["ended_by"] == "no_tool_call" and step.info["parse_failure"]


def test_invalid_calls_get_invalid_params_tool_messages_and_play_goes_on():
    env = ChatEnv(FORAGING)
    env.reset(seed=5)
    reply = format_reply([("teleport", {"to": "home"}), ("move_to", {"target": "north"}), ("idle", {})], "hermes")
    reply["content"] += '\n<tool_call>{"name": "collect", "arguments": {broken</tool_call>'
    step = env.step(reply)
    results = [json.loads(m["content"]) for m in step.messages if m["role"] == "tool"]
    assert [r.get("error_code") for r in results] == ["INVALID_PARAMS", "INVALID_PARAMS", None]
    # the unreadable call cannot be declared as a tool call: its error is in the user message
    assert [c["function"]["name"] for c in env.messages[2]["tool_calls"]] == ["teleport", "move_to", "idle"]
    assert step.messages[-1]["role"] == "user" and "Result of call 4" in step.messages[-1]["content"]
    assert "could not be read" in step.messages[-1]["content"]
    assert step.info["calls_invalid"] == 3 and step.info["calls_unreadable"] == 1
    assert {entry["code"] for entry in step.info["invalid"]} == {"INVALID_PARAMS"}
    assert not (step.terminated or step.truncated)
    step = env.step(format_reply([("query_world", {"radius": 50})], "openai"))
    assert json.loads(step.messages[0]["content"])["success"]


def test_bad_replies_are_clear_errors():
    env = ChatEnv(HUNT)
    with pytest.raises(RuntimeError):
        env.step("pwd")  # before reset
    env.reset(seed=0)
    with pytest.raises(ValueError, match="assistant"):
        env.step({"role": "user", "content": "pwd"})
    with pytest.raises(ValueError):
        env.step(12)
    with pytest.raises(ValueError):
        ChatEnv(HUNT, on_no_call="sometimes")
    with pytest.raises(ValueError, match="TeamChat"):
        ChatEnv("arena_envs/TeamCapture-v0")
    step = env.step("pwd")  # the session is unharmed
    assert step.messages[0]["content"] == "/"


def test_max_turns_truncates():
    env = ChatEnv(HUNT, max_turns=2)
    env.reset(seed=0)
    assert not env.step("pwd").truncated
    step = env.step("pwd")
    assert step.truncated and step.info["ended_by"] == "max_turns"


def play_solo(seed: int, fmt: str, env_id: str = FORAGING, turns: int = 6) -> list[dict]:
    env = ChatEnv(env_id)
    env.reset(seed=seed)
    for _ in range(turns):
        step = env.step(format_reply(policy_for(env.messages)(env.messages), fmt))
        if step.terminated or step.truncated:
            break
    messages = env.messages
    env.close()
    return messages


def test_batched_sessions_share_one_engine_and_match_solo_runs():
    batch = ChatBatch(FORAGING, size=6)
    steps_taken = []
    scenario = batch.pool.tool_pool.scenario
    original = scenario.step

    def counted(state, actions, active=None):
        steps_taken.append(int(active.sum()) if active is not None else len(actions.tool))
        return original(state, actions, active)

    scenario.step = counted
    batch.reset(seed=[10 + i for i in range(6)])
    for _ in range(6):
        replies = [None if s.done else format_reply(policy_for(s.messages)(s.messages), "openai")
                   for s in batch.sessions]
        batch.step(replies)
    # one numpy step per tick for all sessions together, not one per session
    assert max(steps_taken) == 6 and len(steps_taken) < 6 * 6
    for i, session in enumerate(batch.sessions):
        assert session.messages == play_solo(10 + i, "openai"), f"session {i} differs from its solo run"
    batch.close()


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.lists(st.integers(0, 3), min_size=6, max_size=6), min_size=4, max_size=4))
def test_random_interleavings_of_async_sessions_never_change_a_transcript(delays):
    """Sessions on one pool, stepping at random moments: each transcript equals its solo run."""

    async def play(pool, seed, pauses):
        session = pool.session()
        await session.reset(seed)
        for pause in pauses:
            for _ in range(pause):
                await asyncio.sleep(0)
            if session.done:
                break
            await session.step(format_reply(policy_for(session.messages)(session.messages), "openai"))
        messages = list(session.messages)
        await session.close()
        return messages

    async def main():
        pool = ChatPool(FORAGING, size=2)  # fewer worlds than sessions: they wait and reuse worlds
        return await asyncio.gather(*(play(pool, 20 + i, pauses) for i, pauses in enumerate(delays)))

    transcripts = asyncio.run(main())
    for i, messages in enumerate(transcripts):
        assert messages == play_solo(20 + i, "openai"), f"session {i}"


def test_a_world_failing_mid_turn_ends_the_session_instead_of_leaving_a_broken_transcript():
    from arena_envs.llm.chat import ChatSession, HuntBackend

    class FailingHunt(HuntBackend):
        async def tick(self, call):
            raise OSError("disk gone")

    session = ChatSession(FailingHunt())

    async def play():
        await session.reset(seed=0)
        with pytest.raises(OSError):
            await session.step("pwd")
        with pytest.raises(RuntimeError, match="reset"):
            await session.step("pwd")

    asyncio.run(play())
    assert session.done
