"""Wrappers over the arena-envs core: the tool-calling layer for LLM agents."""

from arena_envs.tools.session import entity_names
from arena_envs.wrappers.tool_call import ToolCallWrapper

__all__ = ["ToolCallWrapper", "entity_names"]
