"""arena_envs.evaluate: seeded episodes of a tool-calling agent through the pool."""

import asyncio

import arena_envs
from arena_envs.tools import Decision


class Pursuer:
    """Stateful (one instance per episode): queries once, then walks to what it learned."""

    def __init__(self):
        self.known = {}

    def decide(self, obs):
        if obs.query_result:
            self.known = {e["name"]: e["position"] for e in obs.query_result["entities"]}
        for r in obs.nearby_resources:
            self.known[r.name] = r.position
        if obs.tick == 0:
            return Decision(tool="query_world", params={"radius": 50, "filter_type": "resource"})
        if obs.last_action_result and obs.last_action_result.success and obs.last_action_result.tool == "collect":
            self.known.pop(self.last, None)
        if not self.known:
            return Decision.idle()
        x, _, z = obs.position
        self.last = min(self.known, key=lambda n: (self.known[n][0] - x) ** 2 + (self.known[n][2] - z) ** 2)
        tx, _, tz = self.known[self.last]
        if ((tx - x) ** 2 + (tz - z) ** 2) ** 0.5 < 1.9:
            return Decision(tool="collect", params={"target_name": self.last})
        return Decision(tool="move_to", params={"target": [tx, 0, tz]})


def test_a_stateful_agent_class_clears_the_classic_layout():
    report = arena_envs.evaluate(Pursuer, episodes=4, concurrency=2, layout="classic")
    agg = report["aggregate"]
    assert agg["episodes"] == 4 and agg["success_rate"] == 1.0
    for e in report["episodes"]:  # all 7 collected: return = 7 - 0.01 * damage
        damage = (7 - e["return"]) / 0.01
        assert abs(e["score"] - max(0.0, 100 - min(damage, 100))) < 1e-2
    assert [e["seed"] for e in report["episodes"]] == [0, 1, 2, 3]


def test_async_agents_errors_by_code_and_reproducible_seeds():
    async def sloppy(obs):
        await asyncio.sleep(0)
        return '{"tool": "collect", "params": {"target_name": "Berry1"}}' if obs.tick % 2 else "no idea"

    first = arena_envs.evaluate(sloppy, episodes=3, seeds=[5, 6, 7], concurrency=3, max_ticks=20)
    again = arena_envs.evaluate(sloppy, episodes=3, seeds=[5, 6, 7], concurrency=1, max_ticks=20)
    assert first == again
    agg = first["aggregate"]
    assert agg["mean_steps"] == 20 and agg["success_rate"] == 0.0
    assert agg["errors"]["INVALID_PARAMS"] == 30
    assert set(agg["errors"]) <= {"INVALID_PARAMS", "OUT_OF_RANGE", "NOT_FOUND"}
    assert sum(agg["errors"].values()) == 60
