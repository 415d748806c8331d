"""The scripted agents of ``arena_envs.scripted`` playing through a server's tool calls.

The scripted agents act on the native observation arrays and return structured actions.
:class:`ScriptedCaller` gives them the arrays a served session sends (reset with
``arrays=True``) and turns each structured action into the tool call that means the same:
table rows become entity names, read from the same observation's named entities (matched
by position: entities do not move).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from arena_envs.world import QUERY_FILTERS, TOOL_NAMES

CATEGORIES = {"resources": ("resource", "nearby_resources"), "stations": ("station", "nearby_stations")}


class ScriptedCaller:
    def __init__(self, agent: Any, params: Any, observation_space: Any) -> None:
        self.agent, self.params, self.space = agent, params, observation_space
        self.names: dict[str, dict[int, str]] = {"resources": {}, "stations": {}}

    def arrays(self, served: dict[str, Any]) -> dict[str, np.ndarray]:
        return {key: np.asarray(value, dtype=self.space[key].dtype) for key, value in served["arrays"].items()}

    def act(self, served: dict[str, Any]) -> dict[str, Any]:
        arrays = self.arrays(served)
        if int(served["observation"]["tick"]) == 0:
            self.names = {"resources": {}, "stations": {}}
        self._learn_names(arrays, served["observation"])
        action = self.agent.act(arrays)
        tool = TOOL_NAMES[int(action["tool"])]
        if tool == "move_to":
            x, z, speed = (float(v) for v in action["move_to"])
            return {"tool": "move_to", "params": {"target_x": x, "target_y": 0.0, "target_z": z, "speed": speed}}
        if tool == "collect":
            return {"tool": "collect", "params": {"target_name": self.names["resources"][int(action["collect"])]}}
        if tool == "craft":
            recipe, station = (int(v) for v in action["craft"])
            return {"tool": "craft", "params": {"item_name": self.params.recipes[recipe].name,
                                                "station_name": self.names["stations"][station]}}
        if tool == "query_world":
            kind = QUERY_FILTERS[int(action["query_world"]["filter"])]
            return {"tool": "query_world", "params": {"radius": float(action["query_world"]["radius"][0]),
                                                      "filter_type": None if kind == "all" else kind}}
        if tool == "idle":
            return {"tool": "idle"}
        raise AssertionError(f"the scripted agent used {tool}, which this adapter does not translate")

    def _learn_names(self, arrays: dict[str, np.ndarray], observation: dict[str, Any]) -> None:
        x, z = float(arrays["agent"][0]), float(arrays["agent"][1])
        queried = (observation.get("query_result") or {}).get("entities", [])
        for key, (kind, nearby) in CATEGORIES.items():
            if key not in arrays:
                continue
            named = [(e["name"], e["position"]) for e in observation[nearby]]
            named += [(e["name"], e["position"]) for e in queried if e["type"] == kind]
            table = arrays[key]
            for row in np.flatnonzero((table[:, 0] > 0) | (table[:, 1] > 0)).tolist():
                px, pz = x + float(table[row, 2]), z + float(table[row, 3])
                for name, (ex, _, ez) in named:
                    if abs(ex - px) < 0.01 and abs(ez - pz) < 0.01:
                        self.names[key][row] = name
                        break


def scripted_foraging_episode(seed: int) -> tuple[Any, list[tuple[float, bool, bool]], dict[str, Any]]:
    """The scripted forager's episode of Foraging-v0 world ``seed``, played in-process: the env (its
    params and spaces), each step's (reward, terminated, truncated) and the last info. A served
    episode driven by :class:`ScriptedCaller` from the same seed must match it step for step."""
    import gymnasium as gym

    import arena_envs  # noqa: F401  (registers the environments)
    from arena_envs.scripted import ScriptedForager

    env = gym.make("arena_envs/Foraging-v0")
    obs, _ = env.reset(seed=seed)
    agent, steps = ScriptedForager(env.unwrapped.scenario.params), []
    while True:
        obs, reward, terminated, truncated, info = env.step(agent.act(obs))
        steps.append((float(reward), terminated, truncated))
        if terminated or truncated:
            return env, steps, info
