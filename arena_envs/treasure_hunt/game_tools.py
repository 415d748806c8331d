"""The game tools' function API, as the seed ``game_tools.py`` documents it, over ``Path`` objects.

``execute_tool(tool_call, current_dir, hunt_root, config)``, ``tool_pwd``, ``tool_cd``,
``tool_ls``, ``tool_cat``, ``tool_check_treasure``, ``is_path_safe`` and ``resolve_path``.
Results are ``{'success': True, 'output': ...}`` or ``{'success': False, 'output': '',
'error': ...}``; ``cd`` also returns the new directory. ``hunt_root`` is the hunt's root
``Path`` on disk, or the ``TreasureHunt`` (required for an in-memory hunt), or a backend.

Everything runs through ``run_tool_call`` (``tools.py``), the environments' own entry
point, over a backend (``backends.py``), so the two layers can't disagree. This module also
re-exports the names it held before it was split, so ``from arena_envs.treasure_hunt.game_tools
import ...`` keeps working.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path, PurePath
from typing import Any

from arena_envs.treasure_hunt.backends import (
    CONFIG_FILE,
    DIRECTORY,
    FILE,
    MAX_CAT_BYTES,
    MAX_PATH_LENGTH,
    OUTSIDE,
    DiskBackend,
    HuntBackend,
    MemoryBackend,
    OutsideHunt,
    is_hidden,
    locate,
)
from arena_envs.treasure_hunt.tools import (
    BOUNDARY_ERROR,
    GIVE_UP_OUTPUT,
    HUNT_TOOLS,
    INCORRECT_KEY_ERROR,
    NO_TREASURE_ERROR,
    TOOL_NAMES,
    TREASURE_FOUND_OUTPUT,
    TREASURE_HUNT_TOOL_SCHEMAS,
    ToolResult,
    run_tool_call,
)

__all__ = [
    "BOUNDARY_ERROR",
    "CONFIG_FILE",
    "DIRECTORY",
    "FILE",
    "GIVE_UP_OUTPUT",
    "HUNT_TOOLS",
    "INCORRECT_KEY_ERROR",
    "MAX_CAT_BYTES",
    "MAX_PATH_LENGTH",
    "NO_TREASURE_ERROR",
    "OUTSIDE",
    "TOOL_NAMES",
    "TREASURE_FOUND_OUTPUT",
    "TREASURE_HUNT_TOOL_SCHEMAS",
    "DiskBackend",
    "HuntBackend",
    "MemoryBackend",
    "OutsideHunt",
    "ToolResult",
    "backend_of",
    "execute_tool",
    "is_path_safe",
    "resolve_path",
    "run_tool_call",
    "tool_cat",
    "tool_cd",
    "tool_check_treasure",
    "tool_ls",
    "tool_pwd",
]


def backend_of(hunt_root: Any) -> HuntBackend:
    """The backend behind ``hunt_root``: a backend, a ``TreasureHunt``, or a directory on disk."""
    if isinstance(hunt_root, (MemoryBackend, DiskBackend)):
        return hunt_root
    backend = getattr(hunt_root, "backend", None)
    if backend is not None:
        return backend
    if isinstance(hunt_root, PurePath) and not isinstance(hunt_root, Path):
        raise TypeError("an in-memory hunt needs its TreasureHunt (or backend) as hunt_root, not a pure path")
    if isinstance(hunt_root, (str, os.PathLike)):
        return DiskBackend(hunt_root)
    raise TypeError(f"hunt_root must be a path, a TreasureHunt or a backend, got {type(hunt_root).__name__}")


def _lexical_cwd(backend: HuntBackend, current_dir: str | os.PathLike[str]) -> str | None:
    """``current_dir`` relative to the hunt root, by its name alone; ``None`` if it names no place in the hunt."""
    try:
        text = os.fspath(current_dir)
    except TypeError:
        return None
    if not isinstance(text, str):
        return None
    root = str(backend.root)
    prefix = root if root.endswith("/") else f"{root}/"
    if text == root:
        return ""
    if text.startswith(prefix):
        text = text[len(prefix) :]
    elif text.startswith("/"):
        return None
    return locate("", text)


def _relative_cwd(backend: HuntBackend, current_dir: str | os.PathLike[str]) -> str | None:
    """``current_dir`` relative to the hunt root, or ``None`` unless it is a visible directory of the hunt."""
    cwd = _lexical_cwd(backend, current_dir)
    if cwd is None or is_hidden(cwd) or backend.kind(cwd) != DIRECTORY:
        return None
    return cwd


def _path_of(backend: HuntBackend, path: str) -> PurePath:
    return backend.root / path if path else backend.root


def _as_dict(result: ToolResult) -> dict[str, Any]:
    if result.ok:
        return {"success": True, "output": result.text}
    return {"success": False, "output": "", "error": result.text}


def _call(
    name: str, current_dir: Any, hunt_root: Any, config: Mapping[str, Any] | None, arguments: dict[str, Any]
) -> tuple[ToolResult, HuntBackend]:
    backend = backend_of(hunt_root)
    return run_tool_call({"tool": name, **arguments}, _relative_cwd(backend, current_dir), backend, config), backend


def execute_tool(
    tool_call: Any, current_dir: PurePath, hunt_root: Any, config: Mapping[str, Any] | None
) -> dict[str, Any] | tuple[dict[str, Any], PurePath]:
    """Run an agent's tool call; ``cd`` returns ``(result, new_directory)``, every other tool the result.

    ``tool_call`` is a dict such as ``{"tool": "cat", "file": "start.txt"}`` or its JSON text
    (see ``run_tool_call`` for the other accepted forms); ``hunt_root`` is the hunt's
    root ``Path``, or the ``TreasureHunt`` (required for an in-memory hunt). A bad call is
    a failed result, never an exception.
    """
    backend = backend_of(hunt_root)
    result = run_tool_call(tool_call, _relative_cwd(backend, current_dir), backend, config)
    if result.tool == "cd":
        return _as_dict(result), _path_of(backend, result.cwd) if result.ok else current_dir
    return _as_dict(result)


def tool_pwd(current_dir: PurePath, hunt_root: Any) -> dict[str, Any]:
    """The current directory relative to the hunt root, such as ``/dir/subdir``."""
    return _as_dict(_call("pwd", current_dir, hunt_root, None, {})[0])


def tool_cd(current_dir: PurePath, hunt_root: Any, path: str) -> tuple[dict[str, Any], PurePath]:
    """Change directory; returns the result and the new directory (``current_dir`` on failure)."""
    result, backend = _call("cd", current_dir, hunt_root, None, {"path": path})
    return _as_dict(result), _path_of(backend, result.cwd) if result.ok else current_dir


def tool_ls(current_dir: PurePath, hunt_root: Any, path: str | None = None) -> dict[str, Any]:
    """List a directory (default: the current one): files, then directories ending in ``/``, one a line."""
    return _as_dict(_call("ls", current_dir, hunt_root, None, {"path": path})[0])


def tool_cat(current_dir: PurePath, hunt_root: Any, file: str) -> dict[str, Any]:
    """Read a file of at most ``MAX_CAT_BYTES`` bytes."""
    return _as_dict(_call("cat", current_dir, hunt_root, None, {"file": file})[0])


def tool_check_treasure(current_dir: PurePath, hunt_root: Any, config: Mapping[str, Any], key: str) -> dict[str, Any]:
    """Succeeds only in the treasure's directory, with the treasure file present and the right key.

    ``config`` needs only ``treasure_key``; with ``treasure_path`` too (as generated hunts
    have) only that file's directory wins, else any directory whose ``treasure.txt`` holds the key.
    """
    return _as_dict(_call("check_treasure", current_dir, hunt_root, config, {"key": key})[0])


def is_path_safe(base_path: str | os.PathLike[str], target_path: str | os.PathLike[str]) -> bool:
    """Whether ``target_path`` (relative ones count from ``base_path``) really lies inside ``base_path``,
    after resolving ``..`` and symlinks on both."""
    try:
        base = os.path.realpath(base_path)
        target = os.path.realpath(os.path.join(base_path, target_path))
    except (OSError, ValueError, TypeError):
        return False
    return target == base or target.startswith(base.rstrip(os.sep) + os.sep)


def resolve_path(current_dir: PurePath, hunt_root: Any, path: str) -> PurePath | None:
    """The path ``path`` names from ``current_dir``, or ``None`` if it would leave the hunt.

    Neither the path nor ``current_dir`` need exist: ``..`` is applied to the names, as the
    seed's example does. Absolute paths start at the hunt root. On disk, a path whose
    existing part leads out of the hunt through symlinks is refused too. Whether it is
    visible to the agent (dot-files are not) is the tools' business, not this function's.
    """
    backend = backend_of(hunt_root)
    cwd = _lexical_cwd(backend, current_dir)
    if cwd is None or not isinstance(path, str):
        return None
    target = locate(cwd, path)
    if target is None or backend.kind(target) == OUTSIDE:
        return None
    return _path_of(backend, target)
