"""Each scenario's reward as an OpenEnv rubric (``openenv.core.rubrics``, RFC 004).

The batched core computes the reward of every step in numpy; these rubrics say the same thing
in OpenEnv's terms, read off what a served step answers (its ``info`` and observation), so that
OpenEnv's tooling can show a reward's parts and a client can score its own trajectories:

    rubric = scenario_rubric("foraging")        # or hub_rubric(hub): the served scenario's, its own arguments
    rubric.reset()                               # at each episode's start
    reward = rubric(action, answer)              # each step: the step's reward, as the env gave it
    dict(rubric.named_rubrics())                 # {"collected": ..., "damage": ...}, each with last_score

| scenario        | rubric                                                                      |
|-----------------|-----------------------------------------------------------------------------|
| foraging        | ``collected`` (+1 a resource) + ``damage`` (-0.01 a damage point)            |
| crafting        | ``goal`` (+1 the goal item) + ``intermediates`` (+0.1 the first of each)     |
| treasure_hunt   | ``found``: a ``Gate`` on the key check (+1) + ``turns`` (-0.01 a step)        |
| team_capture    | ``blue`` (its score's change) + ``red`` (minus the other team's)             |

A rubric keeps what it needs between the steps of one episode: call ``reset()`` at each
episode's start. ``tests/test_serve_rubrics.py`` checks, on 100 seeded episodes of each
scenario, that the rubric's sum is the episode's return.
"""

from __future__ import annotations

from typing import Any

from openenv.core.rubrics import Gate, Rubric

SCENARIO_RUBRICS: dict[str, Any] = {}
"""Each scenario's rubric maker, by scenario name: ``maker(params) -> Rubric``."""


def _info(answer: Any) -> dict[str, Any]:
    """The ``info`` of a served answer: an :class:`~arena_envs.serve.models.ArenaObservation` or its JSON."""
    return answer["info"] if isinstance(answer, dict) else answer.info


def _observation(answer: Any) -> dict[str, Any]:
    return (answer["observation"] if isinstance(answer, dict) else answer.observation) or {}


class Sum(Rubric):
    """The sum of its named parts' scores (OpenEnv's ``WeightedSum`` asks for weights summing to 1)."""

    def __init__(self, **parts: Rubric) -> None:
        super().__init__()
        for name, part in parts.items():
            setattr(self, name, part)

    def forward(self, action: Any, observation: Any) -> float:
        return float(sum(part(action, observation) for part in self.children()))

    def reset(self) -> None:
        for part in self.children():
            part.reset()


class Counter(Rubric):
    """``weight`` times the change, since the previous step, of the episode counter ``info[key]``."""

    def __init__(self, key: str, weight: float) -> None:
        super().__init__()
        self.key, self.weight, self.previous = key, weight, 0.0

    def forward(self, action: Any, observation: Any) -> float:
        value = float(_info(observation)[self.key])
        change, self.previous = value - self.previous, value
        return self.weight * change

    def reset(self) -> None:
        self.previous = 0.0


class KeyCheck(Rubric):
    """``weight`` on the step whose key check found the treasure (``info["success"]`` turned true), else 0."""

    def __init__(self, weight: float) -> None:
        super().__init__()
        self.weight, self.found = weight, False

    def forward(self, action: Any, observation: Any) -> float:
        found = bool(_info(observation)["success"])
        turned, self.found = found and not self.found, found
        return self.weight if turned else 0.0

    def reset(self) -> None:
        self.found = False


class FirstMade(Rubric):
    """``weight`` for each of ``items`` the first time it appears in (grows in) the inventory: the
    first craft of each intermediate, since they come from crafting alone."""

    def __init__(self, items: list[str], weight: float) -> None:
        super().__init__()
        self.items, self.weight = list(items), weight
        self.reset()

    def forward(self, action: Any, observation: Any) -> float:
        held = {item["name"]: item["quantity"] for item in _observation(observation).get("inventory", [])}
        new = [item for item in self.items if held.get(item, 0) > self.held.get(item, 0) and item not in self.made]
        self.made.update(new)
        self.held = held
        return self.weight * len(new)

    def reset(self) -> None:
        self.made: set[str] = set()
        self.held: dict[str, int] = {}


def foraging_rubric(params: Any) -> Rubric:
    return Sum(collected=Counter("resources_collected", params.reward_per_resource),
               damage=Counter("damage_taken", -params.damage_penalty))


def crafting_rubric(params: Any) -> Rubric:
    from arena_envs.crafting import recipe_costs

    _, need = recipe_costs(params)
    intermediates = [r.output for r in params.recipes
                     if r.output != params.goal and need[params.item_names.index(r.output)] > 0]
    return Sum(goal=Counter("goal_crafted", params.goal_reward),
               intermediates=FirstMade(intermediates, params.intermediate_reward))


def treasure_hunt_rubric(params: Any = None) -> Rubric:
    from arena_envs.treasure_hunt.rules import STEP_REWARD, SUCCESS_REWARD

    # success is all or nothing: the gate passes only a key check that found the treasure
    return Sum(found=Gate(KeyCheck(SUCCESS_REWARD), threshold=SUCCESS_REWARD), turns=Counter("turns", STEP_REWARD))


def team_capture_rubric(params: Any = None) -> Rubric:
    return Sum(blue=Counter("blue_score", 1.0), red=Counter("red_score", -1.0))


SCENARIO_RUBRICS.update(foraging=foraging_rubric, crafting=crafting_rubric, treasure_hunt=treasure_hunt_rubric,
                        team_capture=team_capture_rubric)


def scenario_rubric(scenario: str, params: Any = None) -> Rubric:
    """The rubric of ``scenario`` (a served scenario's name) with its ``params`` (default: the scenario's defaults)."""
    if scenario not in SCENARIO_RUBRICS:
        raise ValueError(f"unknown scenario {scenario!r}: one of {', '.join(SCENARIO_RUBRICS)}")
    if params is None and scenario in ("foraging", "crafting"):
        params = _default_params(scenario)
    return SCENARIO_RUBRICS[scenario](params)


def _default_params(scenario: str) -> Any:
    import gymnasium as gym

    env = gym.make(f"arena_envs/{scenario.title()}-v0")
    params = env.unwrapped.scenario.params
    env.close()
    return params


def hub_rubric(hub: Any) -> Rubric:
    """The rubric of what ``hub`` (a :class:`~arena_envs.serve.sessions.SessionHub`) serves, its arguments included."""
    return scenario_rubric(hub.scenario, getattr(hub, "params", None))
