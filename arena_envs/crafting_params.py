"""Crafting-v0's numbers: recipes, the classic scene and :class:`CraftingParams`.

Data and its checks only; the rules that use them are in :mod:`arena_envs.crafting`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from arena_envs.world import RecipeTable, WorldParams

LAYOUTS = ("classic", "random")


@dataclass(frozen=True)
class Recipe:
    """``inputs`` (item -> count) become ``count`` × ``output`` at a ``station`` after ``ticks``.

    ``output`` defaults to the recipe's name.
    """

    name: str
    inputs: Mapping[str, int]
    station: str
    ticks: int
    output: str = ""
    count: int = 1

    def __post_init__(self):
        object.__setattr__(self, "inputs", dict(self.inputs))
        if not self.output:
            object.__setattr__(self, "output", self.name)

    def __hash__(self) -> int:  # the inputs are a dict: hash its items, so params stay hashable
        return hash((self.name, tuple(self.inputs.items()), self.station, self.ticks, self.output, self.count))


DEFAULT_RECIPES = (
    Recipe("iron_ingot", {"iron_ore": 1, "coal": 1}, "furnace", 30),
    Recipe("iron_rod", {"iron_ingot": 1}, "anvil", 20),
    Recipe("wooden_handle", {"wood": 2}, "workbench", 20),
    Recipe("iron_sword", {"iron_rod": 1, "wooden_handle": 1}, "anvil", 40),
    Recipe("torch", {"wood": 1, "stone": 1}, "workbench", 10),
    Recipe("meal", {"berry": 2}, "workbench", 10),
)

# The Agent Arena crafting scene (DESIGN §6): (x, z, type) rows; the resource spots are ours.
CLASSIC_STATIONS = ((5, -5, "anvil"), (5, 0, "furnace"), (5, 5, "workbench"))
CLASSIC_RESOURCES = (
    (-8, -6, "iron_ore"), (-12, -1, "iron_ore"), (-5, -12, "iron_ore"),
    (-10, 6, "coal"), (-3, -3, "coal"),
    (-4, 12, "wood"), (-9, 14, "wood"), (10, 13, "wood"),
)
CLASSIC_SPAWN = (0.0, 10.0)

CANDIDATES = 16  # placement tries per entity in the random layout
STATION_SPACING = 6.0  # random stations keep this far apart, so that each has its own spot


def _pairs(counts) -> tuple[tuple[str, int], ...]:
    items = counts.items() if isinstance(counts, Mapping) else counts
    return tuple((str(name), int(n)) for name, n in items)


@dataclass(frozen=True)
class CraftingParams(WorldParams):
    """The Crafting-v0 rules and numbers (DESIGN §6); every field is an argument of the envs."""

    half_size: float = 20.0
    max_ticks: int = 900
    resource_types: tuple[str, ...] = ("iron_ore", "coal", "wood", "stone", "berry")
    station_types: tuple[str, ...] = ("anvil", "furnace", "workbench")
    item_names: tuple[str, ...] = ()  # the inventory's columns; completed with the types and recipes' items
    layout: str = "classic"
    recipes: tuple[Recipe, ...] = DEFAULT_RECIPES
    goal: str = "iron_sword"
    goal_reward: float = 1.0
    intermediate_reward: float = 0.1
    resource_counts: tuple[tuple[str, int], ...] = (("iron_ore", 3), ("coal", 2), ("wood", 3))
    station_counts: tuple[tuple[str, int], ...] = (("anvil", 1), ("furnace", 1), ("workbench", 1))

    def __post_init__(self):
        def set_(name, value):  # the dataclass is frozen: normalise the user's containers once, here
            object.__setattr__(self, name, value)

        set_("recipes", tuple(r if isinstance(r, Recipe) else Recipe(*r) for r in self.recipes))
        set_("resource_counts", _pairs(self.resource_counts))
        set_("station_counts", _pairs(self.station_counts))
        items = list(self.item_names)  # what is given stays first, in its order
        for name in (*self.resource_types, *(i for r in self.recipes for i in (*r.inputs, r.output))):
            if name not in items:
                items.append(name)
        set_("item_names", tuple(items))
        if self.layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.max_ticks < 1:
            raise ValueError(f"max_ticks must be >= 1, got {self.max_ticks}")
        names = [r.name for r in self.recipes]
        if len(set(names)) != len(names):
            raise ValueError(f"recipe names must be unique, got {names}")
        for r in self.recipes:
            if r.station not in self.station_types:
                raise ValueError(f"recipe {r.name!r} needs station {r.station!r}, not one of {self.station_types}")
            if r.ticks < 1 or r.count < 1 or not r.inputs or min(r.inputs.values()) < 1:
                raise ValueError(f"recipe {r.name!r} needs ticks >= 1, count >= 1 and inputs of at least 1")
        if self.goal not in [r.output for r in self.recipes]:
            raise ValueError(f"goal {self.goal!r} is not the output of any recipe")
        for counts, types, label in ((self.resource_counts, self.resource_types, "resource"),
                                     (self.station_counts, self.station_types, "station")):
            for name, n in counts:
                if name not in types or n < 0:
                    raise ValueError(f"{label}_counts: {name!r} x{n} is not a known {label} type or a count >= 0")
        if self.layout == "random" and sum(n for _, n in self.resource_counts) < 1:
            raise ValueError("resource_counts must place at least one resource")
        if self.layout == "classic":
            missing = ({t for *_, t in CLASSIC_RESOURCES} - set(self.resource_types)
                       | {t for *_, t in CLASSIC_STATIONS} - set(self.station_types))
            if missing:
                raise ValueError(f"the classic layout needs the types {sorted(missing)}")

    @property
    def table_sizes(self) -> tuple[int, int]:
        """Resource and station slots."""
        if self.layout == "classic":
            return len(CLASSIC_RESOURCES), len(CLASSIC_STATIONS)
        return sum(n for _, n in self.resource_counts), sum(n for _, n in self.station_counts)


def recipe_table(params: CraftingParams) -> RecipeTable:
    """The recipes of ``params`` as the arrays the crafting rules read."""
    items, recipes = params.item_names, params.recipes
    inputs = np.zeros((len(recipes), len(items)), np.int32)
    for k, r in enumerate(recipes):
        for item, n in r.inputs.items():
            inputs[k, items.index(item)] = n
    return RecipeTable(
        inputs=inputs,
        station=np.array([params.station_types.index(r.station) for r in recipes], np.int8),
        ticks=np.array([r.ticks for r in recipes], np.int32),
        output=np.array([items.index(r.output) for r in recipes], np.intp),
        count=np.array([r.count for r in recipes], np.int32),
    )


def recipe_costs(params: CraftingParams) -> tuple[np.ndarray, np.ndarray]:
    """Per item: raw materials in one unit, and units that one goal item needs (its chain).

    Raw materials are items no recipe makes (or resource types); a made item holds what
    its first recipe consumes, shared over the recipe's ``count``.
    """
    items = params.item_names
    maker = {}
    for r in params.recipes:
        maker.setdefault(r.output, r)
    raw = np.zeros(len(items))
    need = np.zeros(len(items))

    def value(item: str, path: tuple[str, ...]) -> float:
        if item in path:
            raise ValueError(f"the recipes make {item!r} from itself: {' -> '.join((*path, item))}")
        r = maker.get(item)
        if r is None or item in params.resource_types:
            return 1.0
        return sum(n * value(i, (*path, item)) for i, n in r.inputs.items()) / r.count

    def require(item: str, units: float) -> None:
        need[items.index(item)] += units
        r = maker.get(item)
        if r is not None and item not in params.resource_types:
            for i, n in r.inputs.items():
                require(i, units * n / r.count)

    for i, item in enumerate(items):
        raw[i] = value(item, ())
    require(params.goal, 1.0)
    return raw, need


