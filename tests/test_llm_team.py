"""Mixed teams in Team Capture: chat agents beside scripted and RL-policy agents, free-text messages."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llm_helpers import PrefixChecker, validate_transcript, validated_sessions  # noqa: F401 (a fixture)

from arena_envs.llm import format_reply
from arena_envs.llm.scripted import policy_for
from arena_envs.llm.team import TeamChat, policy_controller, scripted_team

pytestmark = pytest.mark.usefixtures("validated_sessions")


def tick_of(text: str) -> int:
    return int(next(line for line in text.splitlines() if line.startswith("tick ")).split()[1])


def test_a_chat_agent_plays_a_whole_match_beside_scripted_agents():
    match = TeamChat(["blue_agent_1"], [scripted_team("blue"), scripted_team("red")], wait_ticks=40,
                     max_cycles=400)
    openings = match.reset(seed=3)
    messages, tools = openings["blue_agent_1"]
    assert messages[0]["content"].startswith("# Team Capture") and "blue_agent_1 of the blue team" in \
        messages[0]["content"]
    assert "send_message" in {t["function"]["name"] for t in tools}
    session = match.sessions["blue_agent_1"]
    checker = PrefixChecker(session.messages)
    while not match.done:
        steps = match.step({"blue_agent_1": format_reply(policy_for(session.messages)(session.messages), "hermes")})
        checker.check(session.messages, steps["blue_agent_1"].messages)
    validate_transcript(session.messages)
    info = session.last_info
    # the team reward is the change of (own score - other score): over the match it sums to the final gap
    assert session.episode_return == pytest.approx(info["blue_score"] - info["red_score"], abs=1e-4)
    assert session.ticks == 400 or info["blue_score"] >= 100 or info["red_score"] >= 100
    assert info["blue_score"] + info["red_score"] > 0  # points were taken


def test_free_text_messages_reach_teammates_and_never_the_other_team():
    match = TeamChat(["blue_agent_1", "blue_agent_2", "red_agent_1"], message_drop_prob=0.0, agents_per_team=2)
    match.reset(seed=0)
    say = format_reply([("send_message", {"message": "I take PointA, you go Center", "target_agent": "all"})],
                       "openai")
    steps = match.step({"blue_agent_1": say, "blue_agent_2": "idle", "red_agent_1": "idle"})
    assert json.loads(steps["blue_agent_1"].messages[0]["content"])["success"]
    match.step({"blue_agent_2": "idle", "red_agent_1": "idle"})
    heard = [m["content"] for m in match.sessions["blue_agent_2"].messages[2:] if m["role"] == "user"]
    assert sum("blue_agent_1: I take PointA, you go Center" in text for text in heard) == 1  # once, not lost
    assert "I take PointA" not in json.dumps(match.sessions["red_agent_1"].messages)


def test_chat_agents_stepping_together_share_ticks():
    match = TeamChat(["blue_agent_1", "blue_agent_2"], [scripted_team("red")])
    match.reset(seed=1)
    three = format_reply([("move_to", {"target": [0, 0, 0]}), ("idle", {}), ("query_inventory", {})], "openai")
    steps = match.step({"blue_agent_1": three, "blue_agent_2": format_reply([("idle", {})], "json")})
    assert steps["blue_agent_1"].info["ticks"] == 3 and steps["blue_agent_2"].info["ticks"] == 1
    assert tick_of(steps["blue_agent_1"].messages[-1]["content"]) == 3  # one world: 3 ticks, not 4
    assert tick_of(steps["blue_agent_2"].messages[-1]["content"]) == 1
    steps = match.step({"blue_agent_2": "idle"})
    assert tick_of(steps["blue_agent_2"].messages[-1]["content"]) == 4


def test_an_rl_policy_controls_the_other_agents():
    seen = []

    def policy(observation):
        seen.append(observation["agent"].shape)
        return {"tool": 0, "move_to": np.array([0.0, 0.0, 1.0], np.float32), "collect": 0,
                "craft": np.zeros(2, np.int64), "query_world": {"radius": np.array([20.0], np.float32), "filter": 0},
                "send_message": np.zeros(2, np.int64)}

    match = TeamChat(["blue_agent_1"], [policy_controller(["red_agent_1"], policy)], agents_per_team=1)
    match.reset(seed=2)
    world = match.world.env.world
    red_start = float(world.x[0, 1])
    match.step({"blue_agent_1": "idle"})
    for _ in range(5):
        match.step({"blue_agent_1": "query_inventory"})
    assert len(seen) == 6  # the policy acted on every tick
    assert abs(float(world.x[0, 1])) < abs(red_start) - 2.0  # and red walked toward the centre


def test_bad_team_setups_are_clear_errors():
    with pytest.raises(ValueError, match="unknown agents"):
        TeamChat(["green_agent_1"])
    match = TeamChat(["blue_agent_1"])
    match.reset(seed=0)
    with pytest.raises(ValueError, match="do not chat"):
        match.step({"red_agent_1": "idle"})


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3), st.integers(0, 3), st.integers(0, 3)),
                min_size=1, max_size=6))
def test_random_interleavings_keep_every_tick_and_reward_accounted(rounds):
    """Two chat teammates stepping at random moments with random numbers of calls: ticks seen only
    move forward, and no reward is lost or counted twice."""
    import asyncio

    async def play():
        match = TeamChat(["blue_agent_1", "blue_agent_2"], [scripted_team("red")], max_cycles=200)
        await match.areset(seed=5)

        async def turn(agent, calls, pause):
            for _ in range(pause):
                await asyncio.sleep(0)
            session = match.sessions[agent]
            if session.done:
                return
            reply = (format_reply([("move_to", {"target": [0, 0, 0]})] + [("idle", {})] * (calls - 1), "openai")
                     if calls else "thinking...")
            await match.astep({agent: reply})

        for calls_1, pause_1, calls_2, pause_2 in rounds:
            await asyncio.gather(turn("blue_agent_1", calls_1, pause_1), turn("blue_agent_2", calls_2, pause_2))
        return match

    match = asyncio.run(play())
    info = match.world.info
    gap = info["blue_score"] - info["red_score"]
    for agent, session in match.sessions.items():
        ticks = [tick_of(m["content"]) for m in session.messages[1:] if m["role"] == "user"]
        assert ticks == sorted(set(ticks)), (agent, ticks)
        assert session.episode_return + match.world._unclaimed[agent] == pytest.approx(gap, abs=1e-4)


def test_an_agent_that_sat_out_the_end_of_the_match_gets_its_reward_and_the_end_at_its_next_step():
    match = TeamChat(["blue_agent_1", "blue_agent_2"], [scripted_team("red")], wait_ticks=30, max_cycles=120,
                     capture_ticks=5)
    match.reset(seed=0)
    walker, sitter = match.sessions["blue_agent_1"], match.sessions["blue_agent_2"]
    match.step({"blue_agent_1": "idle", "blue_agent_2": "idle"})
    go = format_reply([("move_to", {"target": [-15, 0, -15], "speed": 2})], "openai")
    while not walker.done:  # the sitter does not step: its share of the team reward waits for it
        match.step({"blue_agent_1": go})
    assert not sitter.done and walker.episode_return != 0.0
    step = match.step({"blue_agent_2": "idle"})["blue_agent_2"]
    assert step.truncated or step.terminated
    assert json.loads(step.messages[0]["content"])["error_code"] == "NOT_RUN"
    assert sitter.episode_return == pytest.approx(walker.episode_return)  # one team, one reward
    assert match.done
