"""One rubric object scores episode after episode, reset at each start (issue 43's audit: a ``reset()``
that did nothing lived, since every test made a fresh rubric per episode). Sessions of the real hub play
several seeded episodes in a row; the one rubric's sum over each must be that episode's return."""

from __future__ import annotations

import asyncio

import pytest
from serve_helpers import ScriptedCaller

import arena_envs  # noqa: F401
from arena_envs.scripted import ScriptedCrafter, ScriptedForager
from arena_envs.serve.hubs import make_hub
from arena_envs.serve.models import ArenaAction
from arena_envs.serve.rubrics import hub_rubric
from arena_envs.treasure_hunt import OracleAgent

STEPS = 400  # per episode at most: enough for the scripted agents to score (a partial return is scored too)


def scripted(agent_class):
    def make(hub):
        caller = ScriptedCaller(agent_class(hub.params), hub.params, hub.pool.scenario.observation_space)
        return lambda answer: caller.act({"arrays": answer.arrays, "observation": answer.observation})

    return make


def oracle(hub):
    agent = OracleAgent()
    return lambda answer: agent.act(answer.text)


PLAYERS = {"foraging": scripted(ScriptedForager), "crafting": scripted(ScriptedCrafter), "treasure_hunt": oracle}


@pytest.mark.parametrize("scenario", list(PLAYERS))
def test_one_rubric_reset_at_each_start_scores_every_episode_as_the_env_rewards_it(scenario):
    hub = make_hub(scenario, 1)

    async def episodes() -> list[tuple[float, float]]:
        session, rubric, played = hub.factory()(), hub_rubric(hub), []
        try:
            for seed in (1, 3, 5):
                rubric.reset()
                act = PLAYERS[scenario](hub)
                answer = await session.reset_async(seed=seed, arrays=scenario != "treasure_hunt")
                total = score = 0.0
                for _ in range(STEPS):
                    if answer.done:
                        break
                    action = act(answer)
                    answer = await session.step_async(ArenaAction(**action))
                    total += answer.reward
                    score += rubric(action, answer)
                played.append((total, score))
            session.close()
        finally:
            await hub.aclose()
        return played

    played = asyncio.run(episodes())
    for total, score in played:
        assert score == pytest.approx(total, abs=1e-4), (scenario, played)
    assert all(total > 0.5 for total, _ in played), played  # each episode scored: its rubric state had to be reset
