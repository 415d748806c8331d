"""Wrappers over the arena-envs core: the tool-calling layer for LLM agents."""

from arena_envs.wrappers.tool_call import ToolCallWrapper, entity_names

__all__ = ["ToolCallWrapper", "entity_names"]
