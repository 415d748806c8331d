"""Wrappers over the arena-envs core: the tool-calling layer for LLM agents, flat encodings and SB3."""

from arena_envs.tools.session import entity_names
from arena_envs.wrappers.flatten import FlatEncoding, FlatEnv, FlatVectorEnv
from arena_envs.wrappers.tool_call import ParallelToolCallWrapper, ToolCallWrapper

__all__ = ["ToolCallWrapper", "ParallelToolCallWrapper", "entity_names", "FlatEncoding", "FlatEnv", "FlatVectorEnv",
           "Sb3VecEnv"]


def __getattr__(name: str):
    if name == "Sb3VecEnv":  # imported on demand: it needs stable-baselines3 (the "train" extra)
        from arena_envs.wrappers.sb3 import Sb3VecEnv

        return Sb3VecEnv
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
