"""Treasure Hunt: seeded filesystem puzzles explored through text tools, for LLM and RL agents.

    from arena_envs.treasure_hunt import generate_treasure_hunt, execute_tool

    hunt = generate_treasure_hunt(seed=7, difficulty="medium")       # in memory
    execute_tool({"tool": "cat", "file": "start.txt"}, hunt.root, hunt, hunt.config)

    hunt = generate_treasure_hunt("/tmp/hunt", seed=7)              # on disk
    execute_tool({"tool": "ls"}, hunt.root, hunt.root, hunt.config)

Modules: ``backends`` (where a hunt lives: memory or disk), ``tools`` (the tool calls over a
backend), ``game_tools`` (the seed's function API over paths), ``generator``, ``rules`` (the
batch-engine rules), ``env`` (the Gymnasium adapters).

The Gymnasium environment is ``gym.make("arena_envs/TreasureHunt-v0")`` and its batched
form ``gym.make_vec("arena_envs/TreasureHunt-v0", num_envs=N)``.
"""

from arena_envs.treasure_hunt.env import TreasureHuntEnv, TreasureHuntVectorEnv
from arena_envs.treasure_hunt.game_tools import (
    BOUNDARY_ERROR,
    HUNT_TOOLS,
    INCORRECT_KEY_ERROR,
    MAX_CAT_BYTES,
    MAX_PATH_LENGTH,
    NO_TREASURE_ERROR,
    TREASURE_HUNT_TOOL_SCHEMAS,
    DiskBackend,
    HuntBackend,
    MemoryBackend,
    ToolResult,
    execute_tool,
    is_path_safe,
    resolve_path,
    run_tool_call,
    tool_cat,
    tool_cd,
    tool_check_treasure,
    tool_ls,
    tool_pwd,
)
from arena_envs.treasure_hunt.generator import (
    CONFIG_FILE,
    PRESETS,
    HuntLayout,
    HuntParams,
    TreasureHunt,
    generate_treasure_hunt,
    hunt_params,
)
from arena_envs.treasure_hunt.oracle import OracleAgent
from arena_envs.treasure_hunt.rules import TreasureHuntRules

__all__ = [
    "BOUNDARY_ERROR",
    "CONFIG_FILE",
    "HUNT_TOOLS",
    "INCORRECT_KEY_ERROR",
    "MAX_CAT_BYTES",
    "MAX_PATH_LENGTH",
    "NO_TREASURE_ERROR",
    "PRESETS",
    "TREASURE_HUNT_TOOL_SCHEMAS",
    "DiskBackend",
    "HuntBackend",
    "HuntLayout",
    "HuntParams",
    "MemoryBackend",
    "OracleAgent",
    "ToolResult",
    "TreasureHunt",
    "TreasureHuntEnv",
    "TreasureHuntRules",
    "TreasureHuntVectorEnv",
    "execute_tool",
    "generate_treasure_hunt",
    "hunt_params",
    "is_path_safe",
    "resolve_path",
    "run_tool_call",
    "tool_cat",
    "tool_cd",
    "tool_check_treasure",
    "tool_ls",
    "tool_pwd",
]
