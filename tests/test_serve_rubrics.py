"""Each scenario's OpenEnv rubric (``arena_envs.serve.rubrics``) scores an episode exactly as the env
rewards it: 100 seeded episodes per scenario, played by sessions of the real hub stepping together."""

from __future__ import annotations

import asyncio
import random

import pytest
from openenv.core.rubrics import Gate, Rubric
from serve_helpers import ScriptedCaller

import arena_envs  # noqa: F401
from arena_envs.scripted import ScriptedCrafter, ScriptedForager
from arena_envs.serve.hubs import make_hub
from arena_envs.serve.models import ArenaAction
from arena_envs.serve.rubrics import hub_rubric, scenario_rubric
from arena_envs.treasure_hunt import OracleAgent

EPISODES = 100


def scripted(agent_class):
    """Odd seeds: the scripted agent; even seeds: random walks and collects (hazards, no plan)."""

    def make(hub, seed: int):
        space = hub.pool.scenario.observation_space
        caller = ScriptedCaller(agent_class(hub.params), hub.params, space)
        rng = random.Random(seed)

        def act(answer):
            served = {"arrays": answer.arrays, "observation": answer.observation}
            if seed % 2:
                return caller.act(served)
            nearby = [e["name"] for e in answer.observation["nearby_resources"]]
            if nearby and rng.random() < 0.5:
                return {"tool": "collect", "params": {"target_name": rng.choice(nearby)}}
            return {"tool": "move_to", "params": {"target": [rng.uniform(-20, 20), 0, rng.uniform(-20, 20)]}}

        return act

    return make


def hunter(hub, seed: int):
    """The oracle; seeds 1 mod 4 try a wrong key first, seeds 2 mod 4 give up at once."""
    oracle, turn = OracleAgent(), 0

    def act(answer):
        nonlocal turn
        turn += 1
        if seed % 4 == 1 and turn == 1:
            return {"tool": "check_treasure", "key": "WRONGWRONGWRONG1"}
        if seed % 4 == 2:
            return {"tool": "give_up"}
        return oracle.act(answer.text)

    return act


def team(hub, seed: int):
    """Both agents sent to seeded capture points, then left to carry on (the red team is scripted)."""
    points = [[-15, 0, -15], [15, 0, -15], [0, 0, 0], [-15, 0, 15], [15, 0, 15]]
    rng, sent = random.Random(seed), False

    def act(answer):
        nonlocal sent
        if sent:
            return {"calls": {}}
        sent = True
        return {"calls": {name: {"tool": "move_to", "params": {"target": rng.choice(points)}}
                          for name in ("blue_agent_1", "blue_agent_2")}}

    return act


PLAYERS = {"foraging": (scripted(ScriptedForager), {}), "crafting": (scripted(ScriptedCrafter), {}),
           "treasure_hunt": (hunter, {}), "team_capture": (team, {"max_cycles": 120})}


def play(scenario: str) -> list[tuple[float, float, dict]]:
    """(return, rubric score, last info) of each of EPISODES seeded episodes (seed ``s`` cut after 60 + 5 s
    steps), all sessions stepping together."""
    player, kwargs = PLAYERS[scenario]
    hub = make_hub(scenario, EPISODES, **kwargs)

    async def episode(seed: int):
        session, rubric, act = hub.factory()(), hub_rubric(hub), player(hub, seed)
        rubric.reset()
        answer = await session.reset_async(seed=seed, arrays=scenario in ("foraging", "crafting"))
        total = score = 0.0
        for _ in range(60 + 5 * seed):  # cut short at a seeded length: partial returns too (and a quick test)
            if answer.done:
                break
            action = act(answer)
            answer = await session.step_async(ArenaAction(**action))
            total += answer.reward
            score += rubric(action, answer)
        session.close()
        return total, score, answer.info

    async def main():
        try:
            return await asyncio.gather(*(episode(seed) for seed in range(EPISODES)))
        finally:
            await hub.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("scenario", list(PLAYERS))
def test_the_rubric_scores_100_seeded_episodes_as_the_env_rewards_them(scenario):
    played = play(scenario)
    for seed, (total, score, _) in enumerate(played):
        assert score == pytest.approx(total, abs=1e-4), (scenario, seed)
    returns = {round(total, 3) for total, _, _ in played}
    assert len(returns) >= 3  # the episodes differ: the rubric met several outcomes, not one
    if scenario == "treasure_hunt":
        found = [info["success"] for _, _, info in played]
        assert sum(found) == 3 * EPISODES // 4  # every seed but the give-ups (2 mod 4) finds it
    if scenario == "crafting":
        assert any(info["success"] for _, _, info in played)


def test_the_treasure_hunt_success_rubric_is_a_gate_on_the_key_check():
    rubric = scenario_rubric("treasure_hunt")
    parts = dict(rubric.named_rubrics())
    assert set(parts) == {"found", "found.rubric", "turns"} and isinstance(parts["found"], Gate)
    rubric.reset()
    wrong = {"info": {"success": False, "turns": 1}, "observation": {}}
    right = {"info": {"success": True, "turns": 2}, "observation": {}}
    assert rubric({"tool": "check_treasure", "key": "x"}, wrong) == pytest.approx(-0.01)
    assert parts["found"].last_score == 0.0
    assert rubric({"tool": "check_treasure", "key": "y"}, right) == pytest.approx(0.99)
    assert parts["found"].last_score == 1.0
    later = {"info": {"success": True, "turns": 3}, "observation": {}}
    assert rubric({"tool": "pwd"}, later) == pytest.approx(-0.01)  # found once: only that check scores


def test_every_scenario_has_a_rubric_and_an_unknown_one_is_refused():
    for scenario in PLAYERS:
        assert isinstance(scenario_rubric(scenario), Rubric)
    with pytest.raises(ValueError, match="unknown scenario 'chess'"):
        scenario_rubric("chess")


def test_the_crafting_rubric_pays_each_intermediate_once_as_the_env_does():
    rubric = scenario_rubric("crafting")
    rubric.reset()

    def answer(goal: int, **held: int) -> dict:
        return {"info": {"goal_crafted": goal},
                "observation": {"inventory": [{"name": name, "quantity": n} for name, n in held.items()]}}

    assert rubric(None, answer(0, iron_ore=1)) == 0.0  # collected: not crafted
    assert rubric(None, answer(0, iron_ingot=1)) == pytest.approx(0.1)
    assert rubric(None, answer(0)) == 0.0  # used up
    assert rubric(None, answer(0, iron_ingot=1)) == 0.0  # made again: the env pays the first one only
    assert rubric(None, answer(0, iron_rod=1, wooden_handle=1)) == pytest.approx(0.2)
    assert rubric(None, answer(1, iron_sword=1)) == pytest.approx(1.0)
