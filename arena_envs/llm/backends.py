"""The worlds behind chat sessions: a :class:`Backend` per scenario, and the text they speak.

A :class:`~arena_envs.llm.chat.ChatSession` turns replies into calls and calls into messages;
what a call does is its backend's: :class:`PoolBackend` plays one id of a shared
:class:`~arena_envs.tools.ToolPool` (a 2D scenario, batched with the others), :class:`HuntBackend`
one Treasure Hunt through its Gymnasium env. Each tick gives back a :class:`Tick`. The helpers
here write what the model reads of a 2D world: :func:`observation_text`, :func:`recipes_text`,
:func:`universal_schemas`.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from typing import Any, Protocol

from arena_envs.names import resolve
from arena_envs.tools import ToolCallError
from arena_envs.treasure_hunt.rules import WELCOME

HUNT_OPENING = "You are in the hunt's root directory; start.txt is here."


@dataclasses.dataclass(slots=True)
class Tick:
    """What one tick of a backend gives back."""

    result: str  # the content of the call's tool message
    observation: str | Callable[[], str]  # the observation after the tick as text (or how to render it,
    # since only the last tick of a turn is shown)
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    error_code: str | None = None  # the call's error code; None: it succeeded (or there was no call)
    position: tuple[float, float, float] | None = None  # where the agent stands (2D scenarios)
    busy: bool = False  # a craft in progress: waiting is worthwhile even standing still


class Backend(Protocol):
    """The world behind one chat session."""

    scenario: str
    tools: list[dict[str, Any]]
    turn_limit: int | None  # the scenario's own limit on replies (None: it counts ticks instead)

    def prompt_facts(self) -> dict[str, Any]: ...

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]: ...

    async def tick(self, call: dict[str, Any] | None) -> Tick: ...

    async def close(self) -> None: ...


def scenario_name(env_id: str) -> str:
    """Any spelling of a scenario (``"arena_envs/Foraging-v0"``, ``"foraging"``) -> ``"Foraging"``."""
    return resolve(env_id).title


class PoolBackend:
    """One id of a shared :class:`~arena_envs.tools.ToolPool`: a 2D scenario, batched with the others."""

    def __init__(self, pool, id: Any):
        self.pool, self.id = pool, id
        self.scenario = scenario_name(pool.env_id)
        self.params = pool.scenario.params
        self.tools = universal_schemas(self.params)
        self.turn_limit = None  # the world counts ticks, not replies
        self.start_position: tuple[float, float, float] | None = None

    def prompt_facts(self) -> dict[str, Any]:
        p = self.params
        return {"half": p.half_size, "ticks": p.max_ticks, "speed": p.move_speed, "collect": p.collect_range,
                "craft": p.craft_range, "sight": p.perception_radius, "goal": getattr(p, "goal", ""),
                "recipes": recipes_text(getattr(p, "recipes", ()))}

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        observation = await self.pool.acquire(self.id, seed=seed)
        self.start_position = observation.position
        return observation_text(observation), dict(observation.custom)

    async def tick(self, call: dict[str, Any] | None) -> Tick:
        step = await self.pool.call(call, id=self.id)
        obs = step.observation
        info = {**step.info, **{k: v for k, v in obs.custom.items() if k in ("success", "score")}}
        busy = bool(obs.custom.get("crafting"))
        if call is None:  # carrying on: no tool message, and the text only if this tick is shown
            return Tick("", lambda: observation_text(obs), step.reward, step.terminated, step.truncated, info,
                        None, obs.position, busy)
        result = obs.last_action_result
        data: dict[str, Any] = {"tool": result.tool if result else None,
                                "success": bool(result and result.success)}
        if result is not None and not result.success:
            data["error_code"], data["error_message"] = result.error_code, result.error_message
        if obs.query_result is not None:
            data["query_result"] = obs.query_result
        if obs.inventory_details is not None:
            data["inventory_details"] = obs.inventory_details
        code = None if result is not None and result.success else \
            (result.error_code if result is not None else "INVALID_PARAMS")
        return Tick(json.dumps(_rounded(data)), lambda: observation_text(obs), step.reward, step.terminated,
                    step.truncated, info, code, obs.position, busy)

    async def close(self) -> None:
        await self.pool.release(self.id)


def recipes_text(recipes) -> str:
    """``iron_ingot: 1 iron_ore + 1 coal @ furnace (30 ticks); ...`` for a system message."""
    return "; ".join(f"{r.output}: " + " + ".join(f"{n} {item}" for item, n in r.inputs.items())
                     + f" @ {r.station} ({r.ticks} ticks)" + (f", makes {r.count}" if r.count != 1 else "")
                     for r in recipes)


def observation_text(observation) -> str:
    """The observation for the user message: results (and query answers) go in tool messages, so
    they are left out here."""
    return dataclasses.replace(observation, last_action_result=None, query_result=None,
                               inventory_details=None).to_text()


def _rounded(value: Any) -> Any:
    """Floats to 2 decimals, all the way down: positions to the centimetre are plenty, and tokens cost."""
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_rounded(item) for item in value]
    return value


def universal_schemas(params) -> list[dict[str, Any]]:
    """The seven universal tools' schemas, with the bounds of a world of ``params`` when the registry can."""
    from arena_envs.tools import registry

    if hasattr(registry, "universal_tools"):
        return registry.universal_tools(params).schemas()
    return registry.tool_schemas()


class HuntBackend:
    """One Treasure Hunt, played through its Gymnasium env (text in, text out)."""

    scenario = "TreasureHunt"

    def __init__(self, **env_kwargs: Any):
        from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS, TreasureHuntEnv

        self.env = TreasureHuntEnv(**env_kwargs)
        self.tools = TREASURE_HUNT_TOOL_SCHEMAS

    @property
    def turn_limit(self) -> int:
        return self.env.max_steps  # every reply costs at least one of the hunt's turns

    def prompt_facts(self) -> dict[str, Any]:
        return {"calls": self.env.max_steps}

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed)
        return hunt_opening(observation), info

    async def tick(self, call: dict[str, Any] | None) -> Tick:
        # no call still costs a turn (as the prompt says), so a model that never calls cannot play forever
        return hunt_tick(call, *self.env.step(call if call is not None else ""))

    async def close(self) -> None:
        self.env.close()


def hunt_opening(observation: str) -> str:
    """The hunt's first observation for the user message: the env's welcome shows its own call
    syntax, and the system prompt has the goal and the run's syntax instead."""
    return observation.replace(WELCOME, HUNT_OPENING)


def hunt_tick(call: dict[str, Any] | None, observation: str, reward: float, terminated: bool, truncated: bool,
              info: dict[str, Any]) -> Tick:
    """A Treasure Hunt step as a :class:`Tick`: the output is the tool message, the status line the observation."""
    from arena_envs.treasure_hunt import HUNT_TOOLS

    body, _, status = observation.rpartition("\n")
    code = None
    if call is not None and body.startswith("Error:"):
        # a call the tool declarations refuse is INVALID_PARAMS; a valid one that failed
        # (no such file, wrong key) is the hunt's own error
        code = "TOOL_ERROR"
        try:
            HUNT_TOOLS.validate(call["tool"], call["params"])
        except ToolCallError:
            code = "INVALID_PARAMS"
            body = "Error: INVALID_PARAMS: " + body.removeprefix("Error:").strip()
    info = {**info, "score": float(info.get("efficiency", 0.0)) * 100}
    return Tick(body, status, reward, terminated, truncated, info, code)


class RemoteHuntBackend:
    """One Treasure Hunt on a remote ``arena-serve treasure_hunt``, through OpenEnv's own client
    (the path TRL's OpenEnv integration takes). The server runs the same env, and the text is
    turned into messages as :class:`HuntBackend` does, so a session reads the same transcript
    whether its world is here or there."""

    scenario = "TreasureHunt"

    def __init__(self, base_url: str):
        from openenv.core import GenericEnvClient

        from arena_envs.treasure_hunt import TREASURE_HUNT_TOOL_SCHEMAS

        self.base_url = base_url
        self.client = GenericEnvClient(base_url=base_url)
        self.tools = TREASURE_HUNT_TOOL_SCHEMAS
        self.turn_limit: int | None = None  # the server's: read from the status line at reset

    def prompt_facts(self) -> dict[str, Any]:
        return {"calls": self.turn_limit}

    async def reset(self, seed: int | None) -> tuple[str, dict[str, Any]]:
        observation, _reward, _terminated, _truncated, info = await self._answer(self.client.reset(seed=seed))
        limit = _TURN_STATUS.search(observation)
        if limit is None:
            raise ConnectionError(f"{self.base_url} does not serve Treasure Hunt: its first observation has no "
                                  f"'[turn 0/N ...]' status line")
        self.turn_limit = int(limit.group(1))
        return hunt_opening(observation), info

    async def tick(self, call: dict[str, Any] | None) -> Tick:
        # no call is an empty message: the server's hunt answers it as the local one does, costing a turn
        action = call if call is not None else {"message": ""}
        return hunt_tick(call, *await self._answer(self.client.step(action)))

    @staticmethod
    async def _answer(request: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        result = await request
        observation = result.observation or {}
        return (str(observation.get("text", "")), float(result.reward or 0.0),
                bool(observation.get("terminated", result.done)), bool(observation.get("truncated", False)),
                dict(observation.get("info") or {}))

    async def close(self) -> None:
        await self.client.close()


_TURN_STATUS = re.compile(r"\[turn \d+/(\d+) \|")
