"""arena-envs: the Agent Arena scenarios as fast, batched Gymnasium and PettingZoo environments.

Importing the package registers the Gymnasium environments::

    import gymnasium as gym
    import arena_envs  # noqa: F401

    env = gym.make("arena_envs/Foraging-v0")
    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=4096)
"""

from gymnasium.envs.registration import register, registry

from arena_envs.names import SCENARIOS

__version__ = "0.1.0"

# Every 2D scenario is registered through the same two factories of arena_envs.envs, under the
# ids of arena_envs.names; team capture's single-world forms are PettingZoo's, so its gym.make
# says so in one line (arena_envs.envs.make_env).
def _register_all() -> None:
    for scenario in SCENARIOS.values():
        if scenario.env_id in registry:
            continue
        if scenario.text:
            register(id=scenario.env_id, entry_point="arena_envs.treasure_hunt.env:TreasureHuntEnv",
                     vector_entry_point="arena_envs.treasure_hunt.env:TreasureHuntVectorEnv")
        else:
            register(id=scenario.env_id, entry_point="arena_envs.envs:make_env",
                     vector_entry_point="arena_envs.envs:make_vector_env", kwargs={"scenario": scenario.key})


_register_all()


def _register_pettingzoo() -> None:
    """``pettingzoo.make("parallel" | "aec", "arena_envs/team_capture_v0")`` where PettingZoo has a registry."""
    import pettingzoo

    if not hasattr(pettingzoo, "register"):  # PettingZoo before 1.27
        return
    env_id = "arena_envs/team_capture-v0"  # how PettingZoo spells team_capture_v0 in its registry
    for env_type, entry_point in (("parallel", "parallel_env"), ("aec", "env")):
        if env_id not in (pettingzoo.parallel_registry if env_type == "parallel" else pettingzoo.aec_registry):
            pettingzoo.register(env_type, env_id, f"arena_envs.team_capture_v0:{entry_point}")


_register_pettingzoo()


def __getattr__(name: str):
    # `arena_envs.evaluate` loads the tool layer only when asked for (imported by name so
    # that the package's root, which every layer imports to register the envs, points at no layer)
    if name in ("evaluate", "evaluate_async"):
        import importlib

        return getattr(importlib.import_module("arena_envs.evaluation"), name)
    raise AttributeError(f"module 'arena_envs' has no attribute {name!r}")
