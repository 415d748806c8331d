"""Wrappers over the arena-envs core: tool calling, SB3 adapter, flat encodings."""
