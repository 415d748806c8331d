"""Shared helpers for the Crafting-v0 tests: env makers, a crafting policy, hand-built worlds."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
from conftest import full_batch, with_call

import arena_envs  # noqa: F401  (registers the environments)
from arena_envs.scripted import ScriptedCrafter
from arena_envs.world import FAR

ENV_ID = "arena_envs/Crafting-v0"
ITEMS = ("iron_ore", "coal", "wood", "stone", "berry", "iron_ingot", "iron_rod", "wooden_handle", "iron_sword",
         "torch", "meal")
RECIPES = ("iron_ingot", "iron_rod", "wooden_handle", "iron_sword", "torch", "meal")
STATIONS = ("anvil", "furnace", "workbench")
OK, OUT_OF_RANGE, NOT_FOUND, MISSING_MATERIALS, INVALID_PARAMS, BUSY, INVENTORY_FULL = range(7)


def make_single(**kwargs) -> gym.Env:
    return gym.make(ENV_ID, **kwargs)


def make_vec(num_envs: int, **kwargs) -> gym.vector.VectorEnv:
    return gym.make_vec(ENV_ID, num_envs=num_envs, **kwargs)


class MixedPolicy:
    """The scripted crafter with a seeded share of random valid actions.

    The crafter alone makes the runs reach every crafting rule (materials consumed, busy
    ticks, outputs, the sword); the random share adds failures of every kind.
    """

    def __init__(self, env, seed: int, random_share: float = 0.25):
        self.crafter = ScriptedCrafter(env.unwrapped.scenario.params)
        self.space = env.action_space
        self.space.seed(seed)
        self.rng = np.random.default_rng(seed)
        self.share = random_share

    def __call__(self, obs: dict) -> dict:
        action = self.crafter.act(obs)
        noise = self.space.sample()
        if obs["agent"].ndim == 1:  # a single env
            return noise if self.rng.random() < self.share else action
        pick = self.rng.random(len(action["tool"])) < self.share
        for key, value in action.items():
            if isinstance(value, dict):
                for sub in value:
                    value[sub][pick] = noise[key][sub][pick]
            else:
                value[pick] = noise[key][pick]
        return action


class CraftWorld:
    """A vector env of classic worlds, emptied of resources, for placing things by hand.

    The stations stay where the classic layout puts them (rows: Anvil (5, −5), Furnace
    (5, 0), Workbench (5, 5)); every agent starts at the origin with an empty inventory.
    """

    def __init__(self, num_envs: int = 2, **kwargs):
        self.envs = make_vec(num_envs, **kwargs)
        self.envs.reset(seed=0)
        self.n = num_envs
        self.scenario = self.envs.unwrapped.scenario
        self.params = self.scenario.params
        self.state = self.envs.unwrapped.state
        self.slots = self.scenario.slots
        s = self.state
        s.ent_x[:, self.slots.res] = FAR
        s.ent_z[:, self.slots.res] = FAR
        s.ent_alive[:, self.slots.res] = False
        for b in range(num_envs):
            self.agent(b, 0.0, 0.0)

    def agent(self, b: int, x: float, z: float) -> None:
        s = self.state
        s.x[b, 0] = s.target_x[b, 0] = x
        s.z[b, 0] = s.target_z[b, 0] = z
        s.moving[b, 0] = False

    def beside(self, b: int, station: str, dx: float = 1.0, dz: float = 0.0) -> None:
        """Put agent ``b`` at an offset from the classic station of type ``station``."""
        col = self.slots.st.start + STATIONS.index(station)
        self.agent(b, float(self.state.ent_x[b, col]) + dx, float(self.state.ent_z[b, col]) + dz)

    def resource(self, b: int, row: int, x: float, z: float, kind: str) -> None:
        s = self.state
        s.ent_x[b, row], s.ent_z[b, row] = x, z
        s.ent_kind[b, row] = self.params.resource_types.index(kind)
        s.ent_alive[b, row] = True

    def give(self, b: int, **items: int) -> None:
        for name, n in items.items():
            self.state.inventory[b, 0, self.params.item_names.index(name)] = n

    def held(self, b: int, name: str) -> int:
        return int(self.state.inventory[b, 0, self.params.item_names.index(name)])

    def step(self, action: dict | None = None):
        return self.envs.step(full_batch(self.n) if action is None else action)

    def do(self, b: int, tool: str, **entries):
        """Step with env ``b`` using ``tool`` (entries override its parameters), the others idling."""
        return self.step(with_call(full_batch(self.n), b, tool, entries))

    def craft(self, b: int, recipe: str, station: str):
        """``recipe`` by name (of this world's recipes) at the classic station of type ``station``."""
        k = [r.name for r in self.params.recipes].index(recipe)
        return self.do(b, "craft", craft=(k, STATIONS.index(station)))

    def wait(self, ticks: int):
        out = None
        for _ in range(ticks):
            out = self.step()
        return out

