"""Team Capture through the tool-calling layer: ``ToolCallWrapper(team_capture_v0.parallel_env())``.

The seed's Common Patterns (``coordinate_capture``, ``send_message``, ``find_other_agents``,
error handling) run unchanged as agents; messages carry text while the core decides who
receives them (range, drops, team isolation, next tick).
"""

from __future__ import annotations

import numpy as np
import pytest
from team_capture_helpers import TOOLS, agent_action, idle_actions

from arena_envs import team_capture_v0
from arena_envs.observations import EntityInfo, Message, Observation
from arena_envs.tools import Decision
from arena_envs.wrappers import ParallelToolCallWrapper, ToolCallWrapper

BLUE, RED = ("blue_agent_1", "blue_agent_2"), ("red_agent_1", "red_agent_2")


def make(**kwargs) -> ParallelToolCallWrapper:
    return ToolCallWrapper(team_capture_v0.parallel_env(**kwargs))


def points_of(obs: Observation) -> dict[str, dict]:
    return {point["name"]: point for point in obs.custom["capture_points"]}


class SeedCaptain:
    """An agent around the seed's ``coordinate_capture`` (body verbatim) and the helpers it needs."""

    def __init__(self):
        self.current_target = None
        self.claimed: set[str] = set()  # points teammates said they are capturing
        self.targets: list[tuple[int, str]] = []

    def coordinate_capture(self, obs):
        # Check for messages from teammates
        for msg in obs.messages:
            if "capturing" in msg.content:
                # Teammate is capturing, go to different point
                return self.find_unclaimed_point(obs)

        # Announce our intention
        if self.current_target:
            return Decision(
                tool="send_message",
                params={"message": f"Capturing {self.current_target}"}
            )

    def find_unclaimed_point(self, obs):
        for msg in obs.messages:
            words = msg.content.lower().replace("point ", "point").split()
            self.claimed |= {point["name"] for point in obs.custom["capture_points"]
                             if point["name"].lower() in words}
        team = obs.custom["team"]
        free = [p for p in obs.custom["capture_points"] if p["owner"] != team and p["name"] not in self.claimed]
        target = min(free, key=lambda p: p["distance"])
        if target["name"] != self.current_target:
            self.targets.append((obs.tick, target["name"]))
        self.current_target = target["name"]
        return Decision(tool="move_to", params={"target": target["position"]})

    def decide(self, obs):
        if self.current_target is None:
            return self.find_unclaimed_point(obs)
        return self.coordinate_capture(obs)  # keeps walking while it talks: move_to persists


def announce_point_a(obs):
    """Walk to point A, saying so every few ticks with the seed's send_message example."""
    if obs.tick % 4 == 1:  # move_to persists while the agent talks
        return Decision(tool="send_message", params={"message": "I'm capturing point A", "target_agent": "all"})
    return Decision(tool="move_to", params={"target": points_of(obs)["PointA"]["position"]})


def find_other_agents(obs):
    return [e for e in obs.visible_entities if e.type == "agent"]


def test_tool_call_wrapper_of_a_parallel_env_is_the_parallel_form():
    env = make()
    assert isinstance(env, ParallelToolCallWrapper)
    observations, infos = env.reset(seed=0)
    assert set(observations) == set(infos) == set(BLUE + RED) == set(env.agents)
    assert all(isinstance(obs, Observation) and obs.agent_id == name for name, obs in observations.items())
    assert all(obs.last_action_result is None and obs.messages == [] for obs in observations.values())


def test_the_seed_coordinate_capture_runs_unchanged_and_splits_the_points():
    env, captain = make(), SeedCaptain()
    observations, _ = env.reset(seed=3)
    heard, answers, red_heard = [], [], []
    for _ in range(220):
        calls = {"blue_agent_1": announce_point_a(observations["blue_agent_1"]),
                 "blue_agent_2": captain.decide(observations["blue_agent_2"])}
        observations, rewards, terminations, truncations, infos = env.step(calls)
        heard += [(observations["blue_agent_2"].tick, m) for m in observations["blue_agent_2"].messages]
        answers += [m.content for m in observations["blue_agent_1"].messages]
        red_heard += [m for name in RED for m in observations[name].messages]
    first_tick, first = heard[0]
    assert first == Message("blue_agent_1", "I'm capturing point A", first_tick - 1)  # sent the tick before
    # told that A is taken, the captain heads elsewhere and never back to A
    assert "PointA" in captain.claimed
    assert captain.targets and all(name != "PointA" for tick, name in captain.targets if tick >= first_tick)
    assert any(answer.startswith("Capturing Point") for answer in answers)  # it announces its own target
    owners = {name: point["owner"] for name, point in points_of(observations["blue_agent_1"]).items()}
    assert owners["PointA"] == "blue" and sum(owner == "blue" for owner in owners.values()) >= 2
    assert red_heard == []  # broadcasts never reach the other team
    assert infos["blue_agent_1"]["blue_score"] > 0 and rewards["blue_agent_1"] == rewards["blue_agent_2"]


def test_observation_shows_agents_in_sight_points_scores_and_names():
    env = make(agents_per_team=2)
    observations, _ = env.reset(seed=0)
    blue = observations["blue_agent_1"]
    others = find_other_agents(blue)
    assert [e.id for e in others] == ["blue_agent_2"]  # teammates spawn together; red is 50 units away
    assert others[0].metadata == {"team": "blue", "relation": "ally"}
    assert {e.id for e in blue.visible_entities if e.type == "capture_point"} == {
        "PointA", "PointB", "PointCenter", "PointD", "PointE"}
    assert blue.custom["team"] == "blue" and blue.custom["score"] == blue.custom["enemy_score"] == 0.0
    assert points_of(blue)["PointA"] == {"name": "PointA", "label": "A", "position": [-15.0, 0.0, -15.0],
                                         "distance": pytest.approx(np.hypot(blue.position[0] + 15,
                                                                            blue.position[2] + 15), abs=1e-4),
                                         "owner": None, "capturing": None, "progress": 0.0}
    # walk both teams to the centre: enemies come into sight within 20
    calls = {name: {"tool": "move_to", "params": {"target": [0, 0, 0]}} for name in BLUE + RED}
    for _ in range(30):
        observations, *_ = env.step(calls)  # the same order again: an agent left out would idle and stop
    blue = observations["blue_agent_1"]
    enemies = [e for e in find_other_agents(blue) if e.metadata["relation"] == "enemy"]
    assert {e.id for e in enemies} == set(RED)
    assert all(e.metadata["team"] == "red" and e.distance <= 20.0 for e in enemies)
    red = observations["red_agent_1"].position
    seen = next(e for e in enemies if e.id == "red_agent_1")
    assert seen.position == pytest.approx(red, abs=1e-4)
    text = blue.to_text()
    assert "agents: " in text and "red_agent_1 (enemy)" in text and "PointCenter" in text


def test_capture_progress_and_ownership_in_the_observation():
    env = make(capture_ticks=5)
    observations, _ = env.reset(seed=1)
    center = points_of(observations["blue_agent_1"])["PointCenter"]["position"]
    progress = []
    for _ in range(40):
        observations, *_ = env.step({"blue_agent_1": {"tool": "move_to", "params": {"target": center, "speed": 2.0}}})
        progress.append(points_of(observations["red_agent_2"])["PointCenter"])
    capturing = [p for p in progress if p["capturing"]]
    assert capturing and capturing[0]["capturing"] == "blue" and capturing[0]["progress"] == 0.2
    assert progress[-1]["owner"] == "blue" and progress[-1]["capturing"] is None
    assert observations["red_agent_2"].custom["enemy_score"] > 0 == observations["red_agent_2"].custom["score"]
    assert "PointCenter" in observations["blue_agent_1"].to_text() and "owner blue" in observations[
        "blue_agent_1"].to_text()


def test_messages_next_tick_direct_or_broadcast_never_to_the_enemy():
    env = make(agents_per_team=3, message_drop_prob=0.0)
    env.reset(seed=0)
    observations, *_ = env.step({
        "blue_agent_1": Decision(tool="send_message", params={"message": "Need backup!",
                                                              "target_agent": "blue_agent_2"}),
        "red_agent_3": {"tool": "send_message", "params": {"message": "go go go"}},
    })
    assert [m.content for m in observations["blue_agent_2"].messages] == ["Need backup!"]
    assert observations["blue_agent_3"].messages == []  # addressed to blue_agent_2 alone
    assert [(m.from_agent, m.content) for m in observations["red_agent_1"].messages] == [("red_agent_3", "go go go")]
    assert all(not observations[name].messages for name in ("blue_agent_1", "red_agent_3"))
    assert observations["blue_agent_2"].to_dict()["messages"] == [
        {"from": "blue_agent_1", "content": "Need backup!", "tick": 0}]
    observations, *_ = env.step({})
    assert all(obs.messages == [] for obs in observations.values())  # delivered once

    observations, *_ = env.step({"blue_agent_1": {"tool": "send_message",
                                                   "params": {"message": "hi", "target_agent": "red_agent_1"}}})
    result = observations["blue_agent_1"].last_action_result
    assert result.error_code == "NOT_FOUND" and "blue_agent_2" in result.error_message
    assert all(obs.messages == [] for obs in observations.values())


def test_out_of_range_and_dropped_messages_are_not_delivered():
    env = make(message_drop_prob=0.0)
    env.reset(seed=0)
    world = env.unwrapped.world
    world.x[0, 1] = world.target_x[0, 1] = world.x[0, 0] + 16.0  # blue_agent_2 beyond message range (15)
    observations, *_ = env.step({"blue_agent_1": {"tool": "send_message", "params": {"message": "far"}}})
    assert observations["blue_agent_1"].last_action_result.success
    assert observations["blue_agent_2"].messages == []

    env = make(message_drop_prob=1.0)
    env.reset(seed=0)
    observations, *_ = env.step({"blue_agent_1": {"tool": "send_message", "params": {"message": "lost"}}})
    assert observations["blue_agent_2"].messages == []


def test_the_core_decides_delivery_exactly_as_for_structured_actions():
    """Random talk through the tool layer delivers exactly what the same structured actions deliver."""
    n = 3
    tools, plain = make(agents_per_team=n), team_capture_v0.parallel_env(agents_per_team=n)
    names = plain.possible_agents
    tools.reset(seed=7)
    plain.reset(seed=7)
    rng = np.random.default_rng(0)
    delivered = 0
    for step in range(150):
        calls, actions = {}, {}
        for i, name in enumerate(names):
            action = agent_action(idle_actions((1, 2 * n)), 0, i)
            if rng.random() < 0.5:
                target = int(rng.integers(0, n + 1))
                team = names[i - i % n:i - i % n + n]
                calls[name] = {"tool": "send_message",
                               "params": {"message": f"{name} says {step}",
                                          "target_agent": "all" if target == 0 else team[target - 1]}}
                action["tool"] = np.int64(TOOLS["send_message"])
                action["send_message"] = np.array([0, target])
            else:
                xz = rng.uniform(-20, 20, 2)
                calls[name] = {"tool": "move_to", "params": {"target": [xz[0], 0, xz[1]]}}
                action["tool"] = np.int64(TOOLS["move_to"])
                action["move_to"] = np.array([xz[0], xz[1], 1.0], np.float32)
            actions[name] = action
        observations, *_ = tools.step(calls)
        arrays, *_ = plain.step(actions)
        for i, name in enumerate(names):
            inbox = arrays[name]["messages"]
            team = names[i - i % n:i - i % n + n]
            expected = [(team[j], f"{team[j]} says {step}") for j in range(n) if inbox[j, 0] > 0 and inbox[j, 2] == 0]
            got = [(m.from_agent, m.content) for m in observations[name].messages]
            assert sorted(got) == sorted(expected), (step, name)
            assert all(m.tick == step for m in observations[name].messages)
            delivered += len(got)
    assert delivered > 100  # the comparison saw plenty of deliveries (and, at 10%, drops)


def test_bad_calls_fail_for_that_agent_only_and_are_explained():
    env = make()
    env.reset(seed=0)
    observations, *_ = env.step({
        "blue_agent_1": "I will go north",
        "blue_agent_2": {"tool": "collect", "params": {"target_name": "Berry1"}},
        "red_agent_1": {"tool": "move_to", "params": {"target": [40, 0, 0]}},
        "red_agent_2": {"tool": "craft", "params": {"item_name": "iron_sword", "station_name": "Anvil1"}},
    })
    results = {name: obs.last_action_result for name, obs in observations.items()}
    assert results["blue_agent_1"].error_code == "INVALID_PARAMS" and "no JSON" in results["blue_agent_1"].error_message
    assert results["blue_agent_2"].error_code == "NOT_FOUND" and "Berry1" in results["blue_agent_2"].error_message
    assert results["red_agent_1"].success and "clamped to (29.5, 0.0)" in results["red_agent_1"].message
    assert results["red_agent_2"].error_code == "NOT_FOUND" and results["red_agent_2"].tool == "craft"
    with pytest.raises(ValueError, match="unknown or finished agents"):
        env.step({"green_agent_1": Decision.idle()})
    with pytest.raises(ValueError, match="dict from agent name"):
        env.step([Decision.idle()])


def test_the_seed_error_handling_and_queries():
    env = make()
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step({"blue_agent_1": {"tool": "query_world", "params": {"radius": 20}},
                                 "blue_agent_2": {"tool": "query_world", "params": {"filter_type": "agent"}},
                                 "red_agent_1": {"tool": "query_inventory", "params": {}}})
    found = observations["blue_agent_1"].query_result["entities"]
    assert [e["distance"] for e in found] == sorted(e["distance"] for e in found)
    assert {e["name"] for e in found} >= {"blue_agent_2", "PointA", "PointD"}
    assert all(e["distance"] <= 20 for e in found)
    assert {e["type"] for e in observations["blue_agent_2"].query_result["entities"]} == {"agent"}
    assert observations["red_agent_1"].inventory_details == {"items": [], "capacity": 50, "used": 0}
    assert observations["red_agent_2"].query_result is None

    # the seed's error handling: an OUT_OF_RANGE or NOT_FOUND is read from last_action_result
    observations, *_ = env.step({"blue_agent_1": {"tool": "collect", "params": {"target_name": "PointA"}}})
    obs = observations["blue_agent_1"]
    assert obs.last_action_result and not obs.last_action_result.success
    assert obs.last_action_result.error_code == "NOT_FOUND"


def test_episode_end_clears_the_agents():
    env = make(max_cycles=3)
    env.reset(seed=0)
    for _ in range(3):
        observations, rewards, terminations, truncations, infos = env.step({})
    assert all(truncations.values()) and set(truncations) == set(BLUE + RED)
    assert isinstance(observations["red_agent_2"], Observation) and observations["red_agent_2"].tick == 3
    assert env.agents == [] and env.step({}) == ({}, {}, {}, {}, {})
    observations, _ = env.reset(seed=1)
    assert env.agents and observations["blue_agent_1"].tick == 0


def test_a_replayed_episode_is_identical():
    def run():
        env, captain = make(), SeedCaptain()
        observations, _ = env.reset(seed=11)
        trace = []
        for _ in range(60):
            observations, rewards, *_ = env.step({"blue_agent_1": announce_point_a(observations["blue_agent_1"]),
                                                  "blue_agent_2": captain.decide(observations["blue_agent_2"])})
            trace.append({name: obs.to_dict() for name, obs in observations.items()})
        return trace

    assert run() == run()


def test_entity_info_types():
    env = make(num_obstacles=4)
    observations, _ = env.reset(seed=2)
    entities = observations["red_agent_1"].visible_entities
    assert all(isinstance(e, EntityInfo) for e in entities)
    assert {e.type for e in entities} >= {"agent", "capture_point", "obstacle"}
