"""arena-envs: the Agent Arena scenarios as fast, batched Gymnasium and PettingZoo environments.

Importing the package registers the Gymnasium environments::

    import gymnasium as gym
    import arena_envs  # noqa: F401

    env = gym.make("arena_envs/Foraging-v0")
    envs = gym.make_vec("arena_envs/Foraging-v0", num_envs=4096)
"""

from gymnasium.envs.registration import register, registry

__version__ = "0.1.0"

_ENVS = {
    "arena_envs/Foraging-v0": "arena_envs.foraging:ForagingEnv",
    "arena_envs/Crafting-v0": "arena_envs.crafting:CraftingEnv",
    "arena_envs/TreasureHunt-v0": "arena_envs.treasure_hunt.env:TreasureHuntEnv",
}


def _register_all() -> None:
    for env_id, entry_point in _ENVS.items():
        if env_id in registry:
            continue
        module, cls = entry_point.split(":")
        register(
            id=env_id,
            entry_point=entry_point,
            vector_entry_point=f"{module}:{cls.removesuffix('Env')}VectorEnv",
        )


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
    # `arena_envs.evaluate` loads the tool layer only when asked for
    if name in ("evaluate", "evaluate_async"):
        from arena_envs import evaluation

        return getattr(evaluation, name)
    raise AttributeError(f"module 'arena_envs' has no attribute {name!r}")
