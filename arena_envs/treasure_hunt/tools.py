"""The game tools over a backend: ``run_tool_call(tool_call, cwd, backend, config)``.

Directories are strings relative to the hunt root (``""`` is the root); the environments
call this on their hot path, and the seed's function API (``game_tools``) is built on it.

Tool calls are read by the shared tool-calling layer: ``arena_envs.tools.parse_decision``
takes them in any shape it knows, and ``HUNT_TOOLS``, the one declaration of the six tools,
gives both their schemas (``TREASURE_HUNT_TOOL_SCHEMAS``) and the checks of their parameters.

Path rules, identical for both backends:

* a path starting with ``/`` starts at the hunt root, any other at the current directory;
* a path the hunt can't contain is refused with "Path outside treasure hunt boundaries":
  ``..`` above the root, longer than ``MAX_PATH_LENGTH`` characters, anything but
  printable ASCII (NUL bytes, control characters, other unicode) or a backslash; on disk,
  also a path whose symlinks lead out of the hunt;
* invisible entries (dot-names such as the config, anything but regular files and
  directories, see ``backends``) are reported as not found;
* ``cat`` refuses files larger than ``MAX_CAT_BYTES``;
* the tools only ever read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from arena_envs.tools.decision import parse_decision
from arena_envs.tools.errors import ToolCallError
from arena_envs.tools.registry import Param, ToolRegistry, ToolSpec
from arena_envs.treasure_hunt.backends import (
    DIRECTORY,
    FILE,
    MAX_CAT_BYTES,
    OUTSIDE,
    HuntBackend,
    OutsideHunt,
    is_hidden,
    locate,
)
from arena_envs.treasure_hunt.generator import TREASURE_FILE

BOUNDARY_ERROR = "Path outside treasure hunt boundaries"
INCORRECT_KEY_ERROR = "Incorrect treasure key"
NO_TREASURE_ERROR = "No treasure in this directory"
TOO_DEEP_ERROR = "Invalid tool call: the call is nested too deeply to read"
TREASURE_FOUND_OUTPUT = "TREASURE FOUND! You win!"
GIVE_UP_OUTPUT = "You gave up the treasure hunt."


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


def printable(value: object, limit: int = 64) -> str:
    """``value`` as printable ASCII of at most ``limit`` characters, to echo user input safely."""
    text = value if isinstance(value, str) else repr(value)
    clipped = "".join(char if " " <= char <= "~" else "?" for char in text[:limit])
    return clipped + "..." if len(text) > limit else clipped


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
        return ToolResult("", False, f"Unknown tool: {printable(tool)}", cwd)
    return ToolResult(tool, False, f"Invalid tool call: {error.message}", cwd)


def _target(cwd: str, path: str, missing: str) -> str:
    """The hunt path ``path`` names from ``cwd``, refused if it can't be in the hunt or is hidden."""
    target = locate(cwd, path)
    if target is None:
        raise _Refusal(BOUNDARY_ERROR)
    if is_hidden(target):
        raise _Refusal(f"{missing}: {path}")
    return target


def _pwd(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    return ToolResult("pwd", True, f"/{cwd}", cwd)


def _cd(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    path = arguments["path"]
    target = _target(cwd, path, "Directory not found")
    kind = backend.kind(target)
    if kind == OUTSIDE:
        raise _Refusal(BOUNDARY_ERROR)
    if kind != DIRECTORY:
        raise _Refusal(f"Directory not found: {path}")
    return ToolResult("cd", True, f"Changed to /{target}", target, target)


def _ls(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    path = arguments["path"]
    target = _target(cwd, path, "Directory not found") if path else cwd
    try:
        listing = backend.listing(target)
    except OutsideHunt:
        raise _Refusal(BOUNDARY_ERROR) from None
    if listing is None:
        raise _Refusal(f"Directory not found: {path or '.'}")
    return ToolResult("ls", True, listing, cwd, target)


def _cat(backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]) -> ToolResult:
    file = arguments["file"]
    target = _target(cwd, file, "File not found")
    try:
        text = backend.read(target)
    except OutsideHunt:
        raise _Refusal(BOUNDARY_ERROR) from None
    except OSError:
        raise _Refusal(f"File not found: {file}") from None
    if text is None:
        raise _Refusal(f"File too large: {file} (the limit is {MAX_CAT_BYTES} bytes)")
    return ToolResult("cat", True, text, cwd, target)


def _check_treasure(
    backend: HuntBackend, config: Mapping[str, Any] | None, cwd: str, arguments: Mapping[str, Any]
) -> ToolResult:
    """The config must name the key (``treasure_key``); if it also names the treasure file
    (``treasure_path``, as generated hunts do), only that file's directory wins, else any
    directory whose ``treasure.txt`` holds the key."""
    key = arguments["key"]
    if not isinstance(config, Mapping) or not isinstance(config.get("treasure_key"), str):
        raise ValueError("config must be the hunt's configuration, with the 'treasure_key' string")
    treasure_key = config["treasure_key"]
    treasure_path = config.get("treasure_path")
    if treasure_path is not None:
        if not isinstance(treasure_path, str):
            raise ValueError(f"config['treasure_path'] must be a string, got {type(treasure_path).__name__}")
        if cwd != treasure_path.rpartition("/")[0] or backend.kind(treasure_path) != FILE:
            raise _Refusal(NO_TREASURE_ERROR)
    else:
        try:
            text = backend.read(f"{cwd}/{TREASURE_FILE}" if cwd else TREASURE_FILE)
        except OSError:
            text = None
        if text is None or treasure_key not in text:
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
    Never raises for anything the agent sends: every problem becomes a failed result, a
    call nested too deeply to read included.
    """
    try:
        return _run(tool_call, cwd, backend, config)
    except RecursionError:  # a call nested deeper than the parser can go, or a caller deep in its stack
        return ToolResult("", False, TOO_DEEP_ERROR, cwd)


def _run(tool_call: Any, cwd: str | None, backend: HuntBackend, config: Mapping[str, Any] | None) -> ToolResult:
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
