"""The game tools an agent uses to explore a treasure hunt: pwd, cd, ls, cat, check_treasure, give_up.

Two layers share one implementation, so they can't disagree:

* the seed API, over ``Path`` objects: ``execute_tool(tool_call, current_dir, hunt_root,
  config)``, ``tool_pwd``, ``tool_cd``, ``tool_ls``, ``tool_cat``, ``tool_check_treasure``,
  ``is_path_safe`` and ``resolve_path``. Results are ``{'success': True, 'output': ...}``
  or ``{'success': False, 'error': ...}``; ``cd`` also returns the new directory.
* ``run_tool_call(tool_call, cwd, backend, config)``, over directories named by strings
  relative to the hunt root (``""`` is the root), which the environments call on their
  hot path.

Tool calls are read by the shared tool-calling layer: ``arena_envs.tools.parse_decision``
takes them in any shape it knows, and ``HUNT_TOOLS``, the one declaration of the six tools,
gives both their schemas (``TREASURE_HUNT_TOOL_SCHEMAS``) and the checks of their parameters.

A backend holds the hunt: ``DiskBackend`` reads a directory on disk, ``MemoryBackend``
a tree in memory; both give the same answers for the same hunt.

Path rules, identical for both backends:

* a path starting with ``/`` starts at the hunt root, any other at the current directory;
* a path the hunt can't contain is refused with "Path outside treasure hunt boundaries":
  ``..`` above the root, longer than ``MAX_PATH_LENGTH`` characters, anything but
  printable ASCII (NUL bytes, control characters, other unicode) or a backslash; on disk,
  also a path whose symlinks lead out of the hunt;
* names starting with ``.`` (such as ``.treasure_hunt_config.json``) are invisible: never
  listed and reported as not found, even when reached through a symlink; so are broken
  symlinks, symlink loops and anything that is neither a regular file nor a directory;
* ``cat`` refuses files larger than ``MAX_CAT_BYTES``;
* the tools only ever read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePath, PurePosixPath
from typing import Any, NamedTuple, Protocol

from arena_envs.tools.decision import parse_decision
from arena_envs.tools.errors import ToolCallError
from arena_envs.tools.registry import Param, ToolRegistry, ToolSpec

BOUNDARY_ERROR = "Path outside treasure hunt boundaries"
INCORRECT_KEY_ERROR = "Incorrect treasure key"
NO_TREASURE_ERROR = "No treasure in this directory"
TREASURE_FOUND_OUTPUT = "TREASURE FOUND! You win!"
GIVE_UP_OUTPUT = "You gave up the treasure hunt."

MAX_PATH_LENGTH = 1024
MAX_CAT_BYTES = 8192

DIRECTORY = "directory"
FILE = "file"
OUTSIDE = "outside"

_READ_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


class HuntBackend(Protocol):
    """Where a hunt's directories and files live. Paths are relative to the root, ``""`` being the root."""

    root: PurePath

    def kind(self, path: str) -> str | None:
        """``DIRECTORY``, ``FILE``, ``OUTSIDE`` (symlinks lead out of the hunt) or ``None`` (nothing visible)."""

    def listing(self, path: str) -> str | None:
        """The directory's visible entries as ``ls`` prints them, or ``None`` if it can't be listed."""

    def read(self, path: str) -> str | None:
        """The file's text, or ``None`` if it exceeds ``MAX_CAT_BYTES``; raises ``OSError`` if unreadable."""


class ToolResult(NamedTuple):
    """What one tool call did. ``text`` is the output on success and the error message otherwise."""

    tool: str  # the tool that ran, "" when the call itself was malformed
    ok: bool
    text: str
    cwd: str | None  # the working directory afterwards, relative to the root
    target: str | None = None  # what a successful cd, ls or cat acted on, relative to the root


class _Refusal(Exception):
    def __init__(self, message: str) -> None:
        self.message = message


def _is_visible_name(name: str) -> bool:
    return not name.startswith(".") and name.isascii() and name.isprintable() and "\\" not in name


def _is_hidden(path: str) -> bool:
    return path.startswith(".") or "/." in path


def _format_listing(file_names: list[str], dir_names: list[str]) -> str:
    files = sorted(name for name in file_names if _is_visible_name(name))
    dirs = sorted(f"{name}/" for name in dir_names if _is_visible_name(name))
    return "\n".join(files + dirs)


def _printable(value: object, limit: int = 64) -> str:
    """``value`` as printable ASCII of at most ``limit`` characters, to echo user input safely."""
    text = value if isinstance(value, str) else repr(value)
    clipped = "".join(char if " " <= char <= "~" else "?" for char in text[:limit])
    return clipped + "..." if len(text) > limit else clipped


def _locate(cwd: str, path: str) -> str | None:
    """Resolve ``path`` lexically against ``cwd``; ``None`` if it leaves the hunt or can't be in it."""
    if len(path) > MAX_PATH_LENGTH or not path.isascii() or not path.isprintable() or "\\" in path:
        return None
    if path and "/" not in path and path != "." and path != "..":
        return f"{cwd}/{path}" if cwd else path
    parts = [] if path.startswith("/") or not cwd else cwd.split("/")
    for part in path.split("/"):
        if part == "..":
            if not parts:
                return None
            parts.pop()
        elif part and part != ".":
            parts.append(part)
    return "/".join(parts)


class MemoryBackend:
    """A hunt held in memory: ``directories`` maps each directory to the names of its files
    and of its subdirectories, ``files`` maps each file to its text (see ``HuntLayout``)."""

    root: PurePath = PurePosixPath("/")

    def __init__(self, directories: Mapping[str, tuple[list[str], list[str]]], files: Mapping[str, str]) -> None:
        self._directories = directories
        self._files = files
        self._listings: dict[str, str] = {}

    def kind(self, path: str) -> str | None:
        if path in self._files:
            return FILE
        if path in self._directories:
            return DIRECTORY
        return None

    def listing(self, path: str) -> str | None:
        text = self._listings.get(path)
        if text is None:
            names = self._directories.get(path)
            if names is None:
                return None
            text = self._listings[path] = _format_listing(*names)
        return text

    def read(self, path: str) -> str | None:
        text = self._files[path]
        if len(text) * 4 > MAX_CAT_BYTES and len(text.encode("utf-8", "replace")) > MAX_CAT_BYTES:
            return None
        return text


class DiskBackend:
    """A hunt in a directory on disk. Every access resolves symlinks and stays inside the root."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root: PurePath = Path(os.path.abspath(root))
        self._real_root = os.path.realpath(self.root)
        self._prefix = self._real_root.rstrip(os.sep) + os.sep

    def _real_path(self, path: str) -> str | None:
        """Where ``path`` really is, ``None`` when its symlinks lead out of the hunt."""
        try:
            real = os.path.realpath(os.path.join(self._real_root, path))
        except (OSError, ValueError):
            return None
        if real == self._real_root or real.startswith(self._prefix):
            return real
        return None

    def _visible_real_path(self, path: str) -> str:
        real = self._real_path(path)
        if real is None or _is_hidden(real[len(self._prefix) :]):
            raise FileNotFoundError(path)
        return real

    def kind(self, path: str) -> str | None:
        real = self._real_path(path)
        if real is None:
            return OUTSIDE
        if _is_hidden(real[len(self._prefix) :]):
            return None
        try:
            mode = os.stat(real).st_mode
        except (OSError, ValueError):
            return None
        if stat.S_ISDIR(mode):
            return DIRECTORY
        if stat.S_ISREG(mode):
            return FILE
        return None

    def listing(self, path: str) -> str | None:
        files: list[str] = []
        dirs: list[str] = []
        try:
            with os.scandir(self._visible_real_path(path)) as entries:
                for entry in entries:
                    name = entry.name
                    if not _is_visible_name(name):
                        continue
                    if entry.is_symlink():
                        kind = self.kind(f"{path}/{name}" if path else name)
                    elif entry.is_dir(follow_symlinks=False):
                        kind = DIRECTORY
                    elif entry.is_file(follow_symlinks=False):
                        kind = FILE
                    else:
                        kind = None
                    if kind == DIRECTORY:
                        dirs.append(name)
                    elif kind == FILE:
                        files.append(name)
        except OSError:
            return None
        return _format_listing(files, dirs)

    def read(self, path: str) -> str | None:
        descriptor = os.open(self._visible_real_path(path), _READ_FLAGS)
        try:
            info = os.fstat(descriptor)
            if not stat.S_ISREG(info.st_mode):
                raise FileNotFoundError(path)
            if info.st_size > MAX_CAT_BYTES:
                return None
            chunks = []
            remaining = MAX_CAT_BYTES + 1
            while remaining > 0:
                chunk = os.read(descriptor, remaining)
                if not chunk:
                    break
                chunks.append(chunk)
                remaining -= len(chunk)
        finally:
            os.close(descriptor)
        data = b"".join(chunks)
        if len(data) > MAX_CAT_BYTES:
            return None
        return data.decode("utf-8", "replace")


# ---------------------------------------------------------------------------------------
# Tool calls over a backend, with string paths


HUNT_TOOLS = ToolRegistry(
    [
        ToolSpec("pwd", "Print the current directory, relative to the hunt root (the root is /)."),
        ToolSpec(
            "cd",
            "Change the current directory.",
            (
                Param(
                    "path",
                    "string",
                    "Directory to enter: relative (./dir, ../dir, dir/sub) or from the hunt root (/dir/sub).",
                    required=True,
                ),
            ),
        ),
        ToolSpec(
            "ls",
            "List a directory: files, then directories ending in /, one per line.",
            (Param("path", "string", "Directory to list; the current directory if omitted."),),
        ),
        ToolSpec(
            "cat",
            "Read a text file.",
            (Param("file", "string", "File to read, relative or from the hunt root.", required=True, min_length=1),),
        ),
        ToolSpec(
            "check_treasure",
            "Claim the treasure: succeeds only in the treasure's directory with its key.",
            (Param("key", "string", "The treasure key read from the treasure file.", required=True),),
        ),
        ToolSpec("give_up", "Abandon the hunt; the episode ends without the treasure."),
    ]
)
"""The six game tools, declared once: their schemas and the checks of their parameters."""

TOOL_NAMES: tuple[str, ...] = HUNT_TOOLS.names
TREASURE_HUNT_TOOL_SCHEMAS: list[dict[str, Any]] = HUNT_TOOLS.schemas()

_PARAM_NAMES = {spec.name: frozenset(param.name for param in spec.params) for spec in HUNT_TOOLS.values()}


def _lenient(tool: str, params: Any) -> Any:
    """What the hunt forgives beyond its schemas: a null parameter counts as omitted, keys that
    are no parameter of the tool are ignored, and ``cat`` takes ``path`` for ``file``."""
    if not isinstance(params, (dict, Mapping)):
        return params  # for validation to refuse
    if tool == "cat" and params.get("file") is None:
        params = {**params, "file": params.get("path")}
    names = _PARAM_NAMES[tool]
    return {key: value for key, value in params.items() if value is not None and key in names}


def _refused(error: ToolCallError, tool: Any, cwd: str | None) -> ToolResult:
    """A call the shared layer refused, in the hunt's words: the seed's ``Unknown tool: X``
    for a tool the hunt lacks, else ``Invalid tool call: `` and the shared layer's reason.
    ``tool`` is the tool the call names, ``None`` if that much couldn't be read."""
    if tool is None:
        return ToolResult("", False, f"Invalid tool call: {error.message}", cwd)
    if not isinstance(tool, str) or tool not in HUNT_TOOLS:
        return ToolResult("", False, f"Unknown tool: {_printable(tool)}", cwd)
    return ToolResult(tool, False, f"Invalid tool call: {error.message}", cwd)


def _find(backend: HuntBackend, cwd: str, path: str, wanted: str, missing: str) -> str:
    """The hunt path of ``path`` if it is a ``wanted`` (DIRECTORY or FILE), else refuse."""
    target = _locate(cwd, path)
    if target is None:
        raise _Refusal(BOUNDARY_ERROR)
    if _is_hidden(target):
        raise _Refusal(f"{missing}: {path}")
    kind = backend.kind(target)
    if kind == wanted:
        return target
    if kind == OUTSIDE:
        raise _Refusal(BOUNDARY_ERROR)
    raise _Refusal(f"{missing}: {path}")


def _pwd(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    return ToolResult("pwd", True, f"/{cwd}", cwd)


def _cd(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    target = _find(backend, cwd, arguments["path"], DIRECTORY, "Directory not found")
    return ToolResult("cd", True, f"Changed to /{target}", target, target)


def _ls(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    path = arguments["path"]
    target = _find(backend, cwd, path, DIRECTORY, "Directory not found") if path else cwd
    listing = backend.listing(target)
    if listing is None:
        raise _Refusal(f"Directory not found: {path or '.'}")
    return ToolResult("ls", True, listing, cwd, target)


def _cat(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    file = arguments["file"]
    target = _find(backend, cwd, file, FILE, "File not found")
    try:
        text = backend.read(target)
    except OSError:
        raise _Refusal(f"File not found: {file}") from None
    if text is None:
        raise _Refusal(f"File too large: {file} (the limit is {MAX_CAT_BYTES} bytes)")
    return ToolResult("cat", True, text, cwd, target)


def _check_treasure(
    backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]
) -> ToolResult:
    key = arguments["key"]
    if not isinstance(config, Mapping) or "treasure_path" not in config or "treasure_key" not in config:
        raise ValueError("config must be the hunt's configuration, with 'treasure_path' and 'treasure_key'")
    treasure_path = config["treasure_path"]
    treasure_key = config["treasure_key"]
    if cwd != treasure_path.rpartition("/")[0] or backend.kind(treasure_path) != FILE:
        raise _Refusal(NO_TREASURE_ERROR)
    if key.strip() != treasure_key:
        raise _Refusal(INCORRECT_KEY_ERROR)
    return ToolResult("check_treasure", True, TREASURE_FOUND_OUTPUT, cwd)


def _give_up(
    backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]
) -> ToolResult:
    return ToolResult("give_up", True, GIVE_UP_OUTPUT, cwd)


_TOOLS = {
    "pwd": _pwd,
    "cd": _cd,
    "ls": _ls,
    "cat": _cat,
    "check_treasure": _check_treasure,
    "give_up": _give_up,
}


_MEMO_SIZE = 4096
_MEMO_TEXT_LENGTH = 256
_checked_texts: dict[str, tuple[str, dict[str, Any]]] = {}
"""Valid calls already read from short texts, and their checked arguments: agents repeat
themselves (``{"tool": "ls"}``), and reading a call costs more than running it."""


def _checked_call(tool_call: Any, cwd: str | None) -> tuple[str, dict[str, Any]] | ToolResult:
    """The hunt tool a call names and its checked arguments, or the failed result of a call that can't run."""
    try:
        decision = parse_decision(tool_call)
    except ToolCallError as error:
        return _refused(error, error.tool, cwd)
    name = decision.tool
    try:
        spec = HUNT_TOOLS.spec(name)
        if cwd is None and name != "give_up":
            return ToolResult(name, False, BOUNDARY_ERROR, cwd)
        arguments = spec.validate(_lenient(name, decision.params))
    except ToolCallError as error:
        return _refused(error, name, cwd)
    return name, arguments


def run_tool_call(
    tool_call: Any, cwd: str | None, backend: HuntBackend, config: Mapping[str, Any] | None
) -> ToolResult:
    """Run one tool call with the agent in ``cwd`` (relative to the root; ``None``: outside the hunt).

    ``tool_call`` is anything ``arena_envs.tools.parse_decision`` reads (a dict such as
    ``{"tool": "cd", "path": "x"}``, its JSON text, an OpenAI tool call, a ``Decision``...).
    Never raises for anything the agent sends: every problem becomes a failed result.
    """
    memo = type(tool_call) is str and len(tool_call) <= _MEMO_TEXT_LENGTH and cwd is not None
    checked = _checked_texts.get(tool_call) if memo else None
    if checked is None:
        checked = _checked_call(tool_call, cwd)
        if isinstance(checked, ToolResult):
            return checked
        if memo:
            if len(_checked_texts) >= _MEMO_SIZE:
                _checked_texts.clear()
            _checked_texts[tool_call] = checked
    name, arguments = checked
    try:
        return _TOOLS[name](backend, config, cwd, arguments)
    except _Refusal as refusal:
        return ToolResult(name, False, refusal.message, cwd)


# ---------------------------------------------------------------------------------------
# The seed API, over paths


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


def _relative_cwd(backend: HuntBackend, current_dir: str | os.PathLike[str]) -> str | None:
    """``current_dir`` relative to the hunt root, or ``None`` unless it is a visible directory of the hunt."""
    text = os.fspath(current_dir)
    root = str(backend.root)
    prefix = root if root.endswith("/") else f"{root}/"
    if text == root:
        return ""
    if text.startswith(prefix):
        text = text[len(prefix) :]
    elif text.startswith("/"):
        return None
    cwd = _locate("", text)
    if cwd is None or _is_hidden(cwd) or backend.kind(cwd) != DIRECTORY:
        return None
    return cwd


def _path_of(backend: HuntBackend, path: str) -> PurePath:
    return backend.root / path if path else backend.root


def _as_dict(result: ToolResult) -> dict[str, Any]:
    if result.ok:
        return {"success": True, "output": result.text}
    return {"success": False, "error": result.text}


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
    """Succeeds only in the treasure's directory, with the treasure file present and the right key."""
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

    It need not exist. Absolute paths start at the hunt root. Whether it is visible to the
    agent (dot-files are not) is the tools' business, not this function's.
    """
    backend = backend_of(hunt_root)
    cwd = _relative_cwd(backend, current_dir)
    if cwd is None or not isinstance(path, str):
        return None
    target = _locate(cwd, path)
    if target is None or backend.kind(target) == OUTSIDE:
        return None
    return _path_of(backend, target)
